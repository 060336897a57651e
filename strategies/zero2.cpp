// `zero2`: ZeRO stage 2, optimizer state and gradient partitioning (P_os+g).
// Every rank keeps the full parameters, but gradients and AdamW's state only
// for its own 1/N.
//
// The camping trip: the tent (parameters) is still carried by everyone, but
// now both the cooking gear (optimizer state) and the maps (gradients) are
// split: each hiker only keeps the page of the map for the trail it plans.
//
// What to notice: during backward, each layer's full gradient appears in the
// memory panel (`layers.5.flat[unreduced].grad`, a comm buffer), is
// reduce-scattered into this rank's shard (`layers.5.flat[shard 1/4].grad`)
// and freed as soon as that reduce-scatter is done, layer by layer: at no time
// does a rank hold the whole model's gradient. Bytes sent per step equal
// stage 1's and ddp's; only memory went down.
//
// Mixed precision (--precision bf16|fp16): the replicated params, the gradient
// shards and all traffic are 2 bytes a value; the fp32 master of this rank's
// shard joins its optimizer state (K = 12): 2Ψ + 14Ψ/N.
#include <deque>

#include "core/layer_ops.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/sharding.h"
#include "core/strategy.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

// Unreduced gradients whose reduce-scatter has been started, oldest first: the
// buffer is the collective's workspace until its Work completes.
struct PendingReduce {
  Tensor unreduced;
  Work work;
};

class Zero2 final : public Strategy {
 public:
  void setup(RankEnv& env, const std::vector<float>& init) override {
    env_ = &env;
    groups_ = make_flat_groups(env.layout, 1, env.world);  // one per layer, padded to N
    mp_ = std::make_unique<MixedPrecision>(env.cfg.precision);
    const DType dt = mp_->dtype();
    std::vector<Optimizer::Range> shards;
    for (const FlatGroup& g : groups_) {
      Tensor p = env.alloc.alloc(g.name, MemCategory::params, g.plan.padded(), dt);
      std::vector<float> values(g.plan.padded());
      read_group_values(values.data(), g, init, 0, values.size());
      env.device.upload(p.raw(), dt, values.data(), values.size());
      params_.push_back(std::move(p));
      // The stage-2 saving: the gradient a rank keeps is its shard only.
      grad_shards_.push_back(
          env.alloc.alloc(g.shard_name(env.rank) + ".grad", MemCategory::grads, g.plan.shard, dt));
      shards.push_back({g.shard_name(env.rank), g.plan.shard});
    }
    optimizer_ = std::make_unique<Optimizer>(env.cfg.optimizer, env.alloc, shards, dt);
    if (optimizer_->mixed())
      for (const FlatGroup& g : groups_) {
        std::vector<float> master(g.plan.shard);
        read_group_values(master.data(), g, init, g.plan.begin(env.rank), g.plan.shard);
        optimizer_->load_master(g.index, master.data());
      }
  }

  LossShare step(int step) override {
    RankEnv& env = *env_;
    const int W = env.world, D = env.layout.dim(), L = env.layout.num_layers();
    const int b = env.cfg.batch / W;  // this rank's slice of the global batch, in rank order
    Tensor x = env.alloc.alloc("batch.x", MemCategory::activations, {b, D});
    Tensor y = env.alloc.alloc("batch.y", MemCategory::activations, {b, D});
    load_rows(env.device, env.data, step, env.rank * b, b, x.data<float>(), y.data<float>());

    // Phase 1 — forward on the local slice with the full (replicated) parameters.
    const DType dt = mp_->dtype();
    LayerTape tape(env.layout, env.alloc, env.rec, dt);
    tape.begin(x.data<float>(), b);
    for (int l = 0; l < L; ++l) tape.forward(l, weight(l), bias(l));
    Tensor dpred = env.alloc.alloc("loss.grad", MemCategory::temporary, {b, D}, dt);
    double loss;
    {
      ScopedSpan span(env.rec, Lane::compute, SpanKind::loss);
      const size_t n = static_cast<size_t>(b) * D;
      loss = mp_->mse_loss(env.alloc, dpred.raw(), tape.output(), y.data<float>(), n, n);
    }

    // Phase 2 — backward, one layer at a time: compute the layer's full local
    // gradient into a fresh buffer, start its reduce-scatter into this rank's
    // shard, and free every earlier buffer whose reduce-scatter has finished.
    tape.begin_backward(dpred.raw());
    std::deque<PendingReduce> pending;
    for (int l = L - 1; l >= 0; --l) {
      const FlatGroup& g = groups_[l];
      Tensor full = env.alloc.alloc(g.name + kUnreduced + ".grad", MemCategory::comm_buffers,
                                    g.plan.padded(), dt);
      tape.backward(l, weight(l), full.raw(), at(full, g.bias_offset(env.layout, l)));
      Work w = env.comm->reduce_scatter_async(full.raw(), grad_shards_[l].raw(), g.plan.counts(),
                                              dt, CommMeta{l, -1});
      pending.push_back({std::move(full), std::move(w)});
      free_reduced(pending, /*keep_at_most=*/2);
    }
    free_reduced(pending, 0);

    // Phase 3 — update this rank's shard of every layer with the average
    // gradient (sum / N) and the optimizer state it alone holds (fp16: every
    // rank skips a step whose gradients overflowed anywhere, by a vote).
    std::vector<void*> param_shards, grads;
    for (const FlatGroup& g : groups_) {
      param_shards.push_back(at(params_[g.index], g.plan.begin(env.rank)));
      grads.push_back(grad_shards_[g.index].raw());
    }
    {
      ScopedSpan span(env.rec, Lane::compute, SpanKind::optimizer);
      mp_->step(*optimizer_, param_shards, grads, 1.0f / static_cast<float>(W), env.comm);
    }

    // Phase 4 — all-gather the updated shards (in place) so every rank has the
    // full new parameters for the next forward.
    std::vector<Work> gathers;
    for (const FlatGroup& g : groups_) {
      Tensor& full = params_[g.index];
      gathers.push_back(env.comm->all_gather_async(at(full, g.plan.begin(env.rank)), full.raw(),
                                                   g.plan.counts(), dt, CommMeta{g.first, -1}));
    }
    for (Work& w : gathers) w.wait();
    return {loss * b, b};
  }

  std::vector<float> export_params() override {
    if (optimizer_->mixed())
      return gather_master_params(*env_->comm, env_->alloc, env_->layout.total(), groups_,
                                  *optimizer_, false);
    if (env_->rank != 0) return {};
    std::vector<float> flat(env_->layout.total());
    for (const FlatGroup& g : groups_)
      env_->device.download(flat.data() + g.offset, params_[g.index].raw(), DType::f32, g.numel());
    return flat;
  }

 private:
  // Frees unreduced gradients whose reduce-scatter is done; waits for the
  // oldest while more than `keep_at_most` are in flight, so memory stays
  // bounded even when the comm thread falls behind backward.
  static void free_reduced(std::deque<PendingReduce>& pending, size_t keep_at_most) {
    while (!pending.empty() && (pending.size() > keep_at_most || pending.front().work.done())) {
      pending.front().work.wait();  // rethrows a failed collective
      pending.pop_front();          // frees the full gradient
    }
  }

  void* weight(int l) { return params_[l].raw(); }
  void* bias(int l) { return at(params_[l], groups_[l].bias_offset(env_->layout, l)); }

  RankEnv* env_ = nullptr;
  std::vector<FlatGroup> groups_;    // one per layer
  std::vector<Tensor> params_;       // layers.L.flat, full and padded, on every rank
  std::vector<Tensor> grad_shards_;  // layers.L.flat[shard r/N].grad
  std::unique_ptr<MixedPrecision> mp_;
  std::unique_ptr<Optimizer> optimizer_;  // holds the fp32 masters in mixed precision
};

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo zero2_strategy() {
  return {
      .name = "zero2",
      .summary =
          "ZeRO stage 2: optimizer state and gradients sharded 1/N; per-layer reduce-scatter frees "
          "each full gradient",
      .family = StrategyFamily::data_parallel,
      .reads = {StrategyOption::precision},
      .zero_stage = 2,
      .traffic = Traffic::all_reduce,
      .comm_buffers = "each layer's unreduced gradient until it is reduce-scattered",
      .make = [] { return std::make_unique<Zero2>(); },
      .validate = [](const RunConfig& cfg) { require_batch_divisible(cfg); },
  };
}

}  // namespace shardlab
