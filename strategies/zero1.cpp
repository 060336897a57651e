// `zero1`: ZeRO stage 1, optimizer state partitioning (P_os). Every rank keeps
// the full parameters and gradients, but AdamW's state only for its own 1/N.
//
// The camping trip: every hiker still carries the whole tent (parameters) and
// a full set of maps (gradients), but the heavy cooking gear (optimizer state)
// is split between them; at night each cooks its own share of the meal
// (updates its shard) and passes it round the campfire (all-gather).
//
// What to notice: in the memory panel, optimizer_state is 1/N of ddp's on every
// rank (`layers.3.flat[shard 1/4].exp_avg`), while params and grads stay full.
// In the timeline, ddp's all-reduce has become a reduce-scatter per layer
// (during backward) and an all-gather per layer (after the update): the same
// two halves an all-reduce is made of, so bytes sent per step equal ddp's.
#include <cstring>
#include <deque>

#include "core/layer_ops.h"
#include "core/optimizer.h"
#include "core/sharding.h"
#include "core/strategy.h"
#include "kernels/cpu.h"

namespace shardlab {
namespace {

class Zero1 final : public Strategy {
 public:
  void setup(RankEnv& env, const std::vector<float>& init) override {
    env_ = &env;
    // One flat group per layer (weight then bias), padded to a multiple of N,
    // so each layer's gradient can be reduce-scattered as soon as backward has
    // produced it, and every rank owns 1/N of every layer.
    groups_ = make_flat_groups(env.layout, 1, env.world);
    std::vector<Optimizer::Range> shards;
    for (const FlatGroup& g : groups_) {
      Tensor p = env.alloc.alloc(g.name, MemCategory::params, g.plan.padded());
      read_group_values(p.data<float>(), g, init, 0, g.plan.padded());
      params_.push_back(std::move(p));
      grads_.push_back(env.alloc.alloc(g.name + ".grad", MemCategory::grads, g.plan.padded()));
      shards.push_back({g.shard_name(env.rank), g.plan.shard});
    }
    // The stage-1 saving: state for this rank's shard of each layer only.
    optimizer_ = std::make_unique<Optimizer>(env.cfg.optimizer, env.alloc, shards);
  }

  LossShare step(int step) override {
    RankEnv& env = *env_;
    const int W = env.world, D = env.layout.dim(), L = env.layout.num_layers();
    const int b = env.cfg.batch / W;  // this rank's slice of the global batch, in rank order
    Tensor x = env.alloc.alloc("batch.x", MemCategory::activations, {b, D});
    Tensor y = env.alloc.alloc("batch.y", MemCategory::activations, {b, D});
    env.data.rows(step, env.rank * b, b, x.data<float>(), y.data<float>());

    // Phase 1 — forward on the local slice with the full (replicated) parameters.
    for (Tensor& g : grads_) std::memset(g.raw(), 0, g.bytes());
    LayerTape tape(env.layout, env.alloc, env.rec);
    tape.begin(x.data<float>(), b);
    for (int l = 0; l < L; ++l) tape.forward(l, weight(l), bias(l));
    Tensor dpred = env.alloc.alloc("loss.grad", MemCategory::temporary, {b, D});
    double loss;
    {
      ScopedSpan span(env.rec, Lane::compute, SpanKind::loss);
      const size_t n = static_cast<size_t>(b) * D;
      loss =
          kernels::mse_forward_backward(dpred.data<float>(), tape.output(), y.data<float>(), n, n);
    }

    // Phase 2 — backward; each layer's gradient is reduce-scattered the moment
    // it is complete. A rank only needs the summed gradient of the shard it
    // updates, so a reduce-scatter (half an all-reduce) is enough. It runs in
    // place: this rank's chunk of the full gradient buffer receives the sum;
    // the other chunks are left as workspace (stage 1 keeps them allocated).
    tape.begin_backward(dpred.data<float>());
    std::deque<Work> reduces;
    for (int l = L - 1; l >= 0; --l) {
      tape.backward(l, weight(l), weight_grad(l), bias_grad(l));
      const FlatGroup& g = groups_[l];
      float* full = grads_[l].data<float>();
      reduces.push_back(env.comm->reduce_scatter_async(
          full, full + g.plan.begin(env.rank), g.plan.counts(), DType::f32, CommMeta{l, -1}));
    }
    for (Work& w : reduces) w.wait();

    // Phase 3 — each rank updates only its own shard of every layer: the
    // average gradient (sum / N: each rank's loss was the mean over its slice)
    // with the optimizer state it alone holds.
    std::vector<float*> param_shards;
    std::vector<const float*> grad_shards;
    for (const FlatGroup& g : groups_) {
      float* grad = grads_[g.index].data<float>() + g.plan.begin(env.rank);
      kernels::scale(grad, g.plan.shard, 1.0f / static_cast<float>(W));
      param_shards.push_back(params_[g.index].data<float>() + g.plan.begin(env.rank));
      grad_shards.push_back(grad);
    }
    {
      ScopedSpan span(env.rec, Lane::compute, SpanKind::optimizer);
      optimizer_->step(param_shards, grad_shards);
    }

    // Phase 4 — share the updated shards round the campfire: an in-place
    // all-gather per layer gives every rank the full new parameters.
    std::vector<Work> gathers;
    for (const FlatGroup& g : groups_) {
      float* full = params_[g.index].data<float>();
      gathers.push_back(env.comm->all_gather_async(
          full + g.plan.begin(env.rank), full, g.plan.counts(), DType::f32, CommMeta{g.first, -1}));
    }
    for (Work& w : gathers) w.wait();
    return {loss * b, b};
  }

  std::vector<float> export_params() override {
    if (env_->rank != 0) return {};
    std::vector<float> flat(env_->layout.total());
    for (const FlatGroup& g : groups_)
      std::memcpy(flat.data() + g.offset, params_[g.index].data<float>(),
                  g.numel() * sizeof(float));
    return flat;
  }

 private:
  float* weight(int l) { return params_[l].data<float>(); }
  float* bias(int l) { return params_[l].data<float>() + groups_[l].bias_offset(env_->layout, l); }
  float* weight_grad(int l) { return grads_[l].data<float>(); }
  float* bias_grad(int l) {
    return grads_[l].data<float>() + groups_[l].bias_offset(env_->layout, l);
  }

  RankEnv* env_ = nullptr;
  std::vector<FlatGroup> groups_;  // one per layer
  std::vector<Tensor> params_;     // layers.L.flat, full and padded, on every rank
  std::vector<Tensor> grads_;      // layers.L.flat.grad, full and padded, on every rank
  std::unique_ptr<Optimizer> optimizer_;
};

const bool registered = register_strategy({
    "zero1",
    "ZeRO stage 1: optimizer state sharded 1/N; reduce-scatter grads, update own shard, "
    "all-gather params",
    [] { return std::make_unique<Zero1>(); },
    [](const RunConfig& cfg) {
      require_fp32(cfg);
      require_batch_divisible(cfg);
      if (cfg.offload) throw ConfigError("--offload is only supported by strategy fsdp");
    },
});

}  // namespace
}  // namespace shardlab
