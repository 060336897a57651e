// The meta run (see meta_memory.h): the embedded runner's rank body (runner.cpp's
// rank_main) without data loader, recorder, checkpoints or loss checks, each
// rank on a meta device standing for the one the placement gives it.
#include "core/predict/meta_memory.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <thread>

#include "core/comm/meta_comm.h"
#include "core/comm/placement.h"
#include "core/comm/staging_comm.h"
#include "core/device/meta_backend.h"
#include "core/model/model.h"
#include "core/model/model_family.h"
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
  MetaMemory out;
  out.device = place.kind;
  out.steps = std::min(cfg.steps, 2);
  out.ranks.resize(world);
  // Gloo keeps its scratch where the host can read it (see ScratchPlacement).
  const ScratchPlacement scratch = place.kind == DeviceKind::cuda ? ScratchPlacement::host
                                   : place.guarded ? ScratchPlacement::device_then_host
                                                   : ScratchPlacement::device;
  RunShared shared;
  std::vector<std::exception_ptr> errors(world);

  auto rank_main = [&](int rank) {
    try {
      const Device stands_for = place.kind == DeviceKind::cuda
                                    ? Device{DeviceKind::cuda, place.gpu_of_rank[rank]}
                                    : Device{DeviceKind::cpu, 0};
      // Declared in the runner's order, so they die in its teardown's order:
      // the strategy's tensors, then the comm's scratch, then the allocator.
      std::unique_ptr<Recorder> counter;
      if (options.count_records || options.keep_ops)
        counter = std::make_unique<Recorder>(rank, Recorder::CountOnly{});
      Recorder* rec = counter.get();
      const std::unique_ptr<DeviceBackend> device = make_meta_backend(stands_for);
      OpLog log;
      OpLog* ops = options.keep_ops ? &log : nullptr;
      std::unique_ptr<DeviceClock> clock;
      if (ops) {
        clock = make_meta_flop_clock(*device, *rec, log);
        rec->set_device_clock(clock.get());
      }
      Allocator alloc(*device, rec, rank);
      std::unique_ptr<Comm> comm = make_meta_comm(rank, world, &alloc, scratch, rec, ops);
      if (place.comm == CommKind::gloo_staged)
        comm = make_staging_comm(std::move(comm), *device, &alloc, rec);
      RankEnv env{rank, world, cfg, layout, data, *device, alloc, rec, comm.get(), shared};
      std::unique_ptr<Strategy> strategy = info.make();
      strategy->setup(env, init);
      auto sent_so_far = [&] {
        return comm->stats().bytes_sent + strategy->bytes_sent_outside_comm();
      };
      const int64_t sent_before = sent_so_far();
      MetaRankMemory& r = out.ranks[rank];
      for (int s = 0; s < out.steps; ++s) {
        // As the runner steps: its step mark, and the step every record carries.
        if (rec) rec->set_step(s);
        const Recorder::Counts before = rec ? rec->counts() : Recorder::Counts{};
        {
          ScopedMark step_mark(rec, MarkKind::step, static_cast<uint64_t>(s));
          strategy->step(s);
        }
        if (rec && s == 0) {
          const Recorder::Counts after = rec->counts();
          r.records_per_step = {after.spans - before.spans, after.allocs - before.allocs,
                                after.marks - before.marks};
        }
      }
      r.rank = rank;
      if (out.steps > 0)
        r.bytes_sent_per_step = static_cast<double>(sent_so_far() - sent_before) / out.steps;
      r.at_report = alloc.stats();
      if (rec) rec->set_step(-1);  // as the runner: the export belongs to no step
      strategy->export_params();
      r.at_end = alloc.stats();
      r.comm = comm->stats();
      r.outside_peak = alloc.outside_peak();
      if (ops) r.ops = log.take();
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
