// A data-parallel strategy over the dp axis of a dp × tp mesh (see
// data_parallel_mesh.h): the rank's view, the checks and the export.
#include "core/parallel/data_parallel_mesh.h"

#include <algorithm>

#include "core/model/model_family.h"
#include "core/model/param_source.h"
#include "core/parallel/pipeline.h"

namespace shardlab {

void validate_data_parallel_mesh(const RunConfig& cfg) {
  const Mesh mesh = run_mesh(cfg);  // parses, has --world ranks; no --mesh-order alone
  check_sequence_parallel(cfg, mesh, "dp=2,tp=2");
  if (cfg.mesh.empty()) return;
  const std::string given = "--mesh " + cfg.mesh;
  const int dp = mesh.size(MeshAxis::dp), tp = mesh.size(MeshAxis::tp);
  if (mesh.size(MeshAxis::pp) > 1)
    throw ConfigError(given + ": " + cfg.strategy +
                      " has no pipeline stages for its pp axis (valid: a mesh of dp and tp, e.g. "
                      "--mesh dp=2,tp=2; pipelines on a mesh: gpipe or 1f1b, with --dp-zero1 for "
                      "ZeRO-1 over their dp axis)");
  if (dp < 2)
    throw ConfigError(given + ": " + cfg.strategy +
                      " runs over the dp axis, and it has 1 rank (valid: dp=2 or more, e.g. "
                      "--mesh dp=2,tp=2; tensor parallelism alone: --strategy 1f1b " +
                      given + ")");
  const ModelLayout layout = make_layout(cfg);
  layout.family().check_tensor_parallel(layout.spec(), tp, given);
  if (cfg.batch % dp != 0)
    throw ConfigError("--batch " + std::to_string(cfg.batch) +
                      " does not split over dp=" + std::to_string(dp) + " of " + given +
                      " (valid: a multiple of " + std::to_string(dp) + ")");
}

ModelLayout data_parallel_rank_layout(const RunConfig& cfg) {
  ModelLayout whole = make_layout(cfg);
  const int tp = tensor_parallel_degree(cfg);
  if (tp < 2) return whole;
  return ModelLayout(whole.spec(), TensorSlice{tp, 0});
}

std::vector<float> gather_tensor_slices(Comm& tp, Allocator& alloc, const ModelLayout& slice,
                                        const float* mine) {
  const size_t n = slice.state_total();
  if (tp.rank() != 0) {
    tp.send(mine, n * sizeof(float), 0, kGatherParamsTag);  // (a meta device's null is never read)
    return {};
  }
  ExportBuffer full(alloc, slice.full_state_total());
  ExportBuffer theirs(alloc, n);
  const int T = slice.slice().size;
  for (int r = T - 1; r >= 0; --r) {  // slice 0 last: a replicated tensor is its copy
    const float* src = mine;
    if (r > 0) {
      float* buf = theirs.at(0, n);
      tp.recv(buf, n * sizeof(float), r, kGatherParamsTag);
      src = buf;
    }
    if (!full.keeps() || !src) continue;
    // Slice r's layout says where its values go.
    const ModelLayout theirs_layout(slice.spec(), TensorSlice{T, r});
    for_each_slice_run(theirs_layout, [&](size_t at, size_t full_at, size_t count) {
      std::copy_n(src + at, count, full.at(full_at, count));
    });
  }
  return full.take();
}

namespace {

// The data-parallel strategy `inner` on this rank's view of a dp × tp mesh.
// What the learner should notice: nothing in ddp or ZeRO changes. The world
// they shard over is the dp group (each tp slice is sharded among the ranks
// holding the same slice), the model they hold is 1/tp of every split layer,
// and the rows of a dp rank's batch are the same on every rank of its tp group.
class OnDataAxis final : public Strategy {
 public:
  explicit OnDataAxis(std::unique_ptr<Strategy> inner) : inner_(std::move(inner)) {}

  void setup(RankEnv& env, const ParamSource& init) override {
    alloc_ = &env.alloc;
    const Mesh& mesh = *env.mesh;
    tp_ = env.comm_on(MeshAxis::tp);
    tp_rank_ = mesh.coord(env.rank, MeshAxis::tp);
    dp_rank_ = mesh.coord(env.rank, MeshAxis::dp);
    // The view's configuration: a world of the dp group, without the mesh
    // (the slice's spec already carries --sequence-parallel).
    cfg_ = env.cfg;
    cfg_.world = mesh.size(MeshAxis::dp);
    cfg_.mesh.clear();
    cfg_.mesh_order.clear();
    cfg_.sequence_parallel = false;
    // This rank's slice, initialised from the whole model's seeded values: the
    // tp ranks together hold exactly `single`'s weights.
    slice_ = std::make_unique<ModelLayout>(env.layout.spec(),
                                           TensorSlice{mesh.size(MeshAxis::tp), tp_rank_});
    init_ = std::make_unique<SlicedParams>(init, *slice_);
    view_.reset(new RankEnv{dp_rank_, cfg_.world, cfg_, *slice_, env.data, env.device, env.alloc,
                            env.rec, env.comm_on(MeshAxis::dp), env.shared});
    view_->tp = tp_;
    inner_->setup(*view_, *init_);
  }

  LossShare step(int step) override {
    const LossShare share = inner_->step(step);
    // Every rank of a tp group computed the same loss on the same rows: the
    // first reports it.
    return tp_rank_ == 0 ? share : LossShare{};
  }

  // The dp group's first rank holds its slice (the inner strategy's export,
  // within each tp coordinate); the tp group of dp coordinate 0 then puts the
  // slices together on global rank 0.
  std::vector<float> export_params() override {
    std::vector<float> mine = inner_->export_params();
    if (dp_rank_ != 0) return {};
    return gather_tensor_slices(*tp_, *alloc_, *slice_, mine.empty() ? nullptr : mine.data());
  }

  RankState rank_state() override {
    RankState st = inner_->rank_state();
    if (!st.empty()) st.slice = slice_.get();  // its ranges are in the slice's coordinates
    return st;
  }

  int64_t bytes_sent_outside_comm() const override { return inner_->bytes_sent_outside_comm(); }

 private:
  std::unique_ptr<Strategy> inner_;
  Allocator* alloc_ = nullptr;
  Comm* tp_ = nullptr;
  int tp_rank_ = 0, dp_rank_ = 0;
  RunConfig cfg_;
  std::unique_ptr<ModelLayout> slice_;
  std::unique_ptr<SlicedParams> init_;
  std::unique_ptr<RankEnv> view_;
};

}  // namespace

std::unique_ptr<Strategy> make_rank_strategy(const StrategyInfo& info, const RunConfig& cfg) {
  std::unique_ptr<Strategy> s = info.make();
  if (!info.is_data_parallel() || tensor_parallel_degree(cfg) < 2)
    return s;  // a mesh of dp alone: the world is dp
  return std::make_unique<OnDataAxis>(std::move(s));
}

}  // namespace shardlab
