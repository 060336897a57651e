// The meta run (see meta_memory.h): the embedded runner's rank body
// (core/parallel/rank_body.h) without data loader, recorder, checkpoints or loss
// checks, each rank on a meta device standing for the one the placement gives it.
#include "core/predict/meta_memory.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <thread>

#include "core/comm/mesh_comms.h"
#include "core/comm/meta_comm.h"
#include "core/comm/placement.h"
#include "core/comm/staging_comm.h"
#include "core/device/meta_backend.h"
#include "core/model/model.h"
#include "core/model/model_family.h"
#include "core/parallel/data_parallel_mesh.h"
#include "core/parallel/rank_body.h"
#include "core/parallel/strategy.h"

namespace shardlab {

namespace {

// Batches that are never made: a meta device holds no values, so the inputs
// and targets it is asked to load are left as they are (the real dataset's
// generator alone is D x D floats: 1 GB for mlp:16x16384).
class MetaDataset final : public Dataset {
 public:
  explicit MetaDataset(bool tokens) : tokens_(tokens) {}
  bool load(DeviceBackend&, int, int, int, void*, void*) const override { return false; }
  void rows(int, int, int, void*, void*) const override {}
  bool tokens() const override { return tokens_; }
  std::string describe() const override { return "meta (no values)"; }

 private:
  bool tokens_;
};

}  // namespace

MetaMemory predict_memory_meta(const RunConfig& cfg, const MetaOptions& options) {
  validate(cfg, {}, kMaxPredictWorld);
  const StrategyInfo& info = *find_strategy(cfg.strategy);
  const Placement place = plan_placement(cfg);
  const ModelLayout layout = make_layout(cfg);
  const MetaDataset data(layout.input_is_tokens());
  // A state vector that exists nowhere: meta tensors hold no values, so no
  // weight is made (a model far larger than memory is predicted all the same).
  const MetaParams init(layout.state_total());

  const int world = cfg.world;
  const Mesh mesh = run_mesh(cfg);
  MetaMemory out;
  out.device = place.kind;
  // Two steps, or as many as the strategy needs to reach its steady state, and one more.
  out.steps =
      std::min(cfg.steps, std::max(2, info.filling_steps ? info.filling_steps(cfg) + 1 : 2));
  out.ranks.resize(world);
  // Gloo keeps its scratch where the host can read it (see ScratchPlacement).
  const ScratchPlacement scratch = place.kind == DeviceKind::cuda ? ScratchPlacement::host
                                   : place.guarded ? ScratchPlacement::device_then_host
                                                   : ScratchPlacement::device;
  RunShared shared;
  std::vector<std::exception_ptr> errors(world);

  // One rank: meta resources standing for the placement's, then the runner's
  // own rank body (core/parallel/rank_body.h), counting records around step 0.
  auto rank_main = [&](int rank) {
    try {
      const Device stands_for = place.kind == DeviceKind::cuda
                                    ? Device{DeviceKind::cuda, place.gpu_of_rank[rank]}
                                    : Device{DeviceKind::cpu, 0};
      // Declared before the resources, so it outlives them as the runner's does.
      std::unique_ptr<Recorder> counter;
      if (options.count_records || options.keep_ops)
        counter = std::make_unique<Recorder>(rank, Recorder::CountOnly{});
      Recorder* rec = counter.get();
      OpLog log;
      OpLog* ops = options.keep_ops ? &log : nullptr;
      std::unique_ptr<DeviceClock> clock;
      RankResources res;
      res.device = make_meta_backend(stands_for);
      if (ops) {
        clock = make_meta_flop_clock(*res.device, *rec, log);
        rec->set_device_clock(clock.get());
      }
      res.alloc = std::make_unique<Allocator>(*res.device, rec, rank);
      res.comm = make_meta_comm(rank, world, res.alloc.get(), scratch, rec, ops);
      if (place.comm == CommKind::gloo_staged)
        res.comm = make_staging_comm(std::move(res.comm), *res.device, res.alloc.get(), rec);
      // A mesh's axes: a meta communicator per group smaller than the world.
      for (MeshAxis axis : kMeshAxes) {
        const CommGroup g = mesh_comm_group(mesh, rank, axis);
        if (g.id <= 0) continue;
        std::unique_ptr<Comm> c = make_meta_comm(mesh.coord(rank, axis), mesh.size(axis),
                                                 res.alloc.get(), scratch, rec, ops, g);
        if (place.comm == CommKind::gloo_staged)
          c = make_staging_comm(std::move(c), *res.device, res.alloc.get(), rec);
        res.axis_comms[static_cast<size_t>(axis)] = std::move(c);
      }
      RankEnv env{rank,           world,       cfg,        layout,
                  data,           *res.device, *res.alloc, rec,
                  res.comm.get(), shared,      &mesh,      res.axis_comm_ptrs()};
      std::unique_ptr<Strategy> strategy = make_rank_strategy(info, cfg);
      MetaRankMemory& r = out.ranks[rank];
      Recorder::Counts before{};
      RankSteps steps;
      steps.end = out.steps;
      steps.before = [&](int) {
        if (rec) before = rec->counts();
      };
      steps.after = [&](int s, const LossShare&, double) {
        if (!rec || s != 0) return;
        const Recorder::Counts after = rec->counts();
        r.records_per_step = {after.spans - before.spans, after.allocs - before.allocs,
                              after.marks - before.marks};
      };
      std::string phase;
      const RankTotals totals = run_rank_body(env, *strategy, init, steps, phase);
      r.rank = rank;
      r.bytes_sent_per_step = totals.bytes_sent_per_step;
      r.sent_by_axis_per_step = totals.sent_by_axis_per_step;
      r.at_report = totals.at_report;
      r.at_end = res.alloc->stats();
      r.comm = res.comm_stats();
      r.outside_peak = res.alloc->outside_peak();
      if (ops) r.ops = log.take();
      strategy.reset();  // its tensors back to the allocator before it goes
    } catch (...) {
      errors[rank] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(rank_main, r);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace shardlab
