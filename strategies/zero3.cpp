// `zero3`: ZeRO stage 3, partitioning of optimizer state, gradients and
// parameters (P_os+g+p). Each rank owns 1/N of every layer and nothing else;
// a layer exists in full only while it computes.
//
// The camping trip: now even the tent is split. Each hiker carries 1/N of
// every piece of gear; when the group needs a piece (a layer), everyone hands
// over their part, they put it together (all-gather), use it, and take it
// apart again (free). At night each mends only its own part (update its shard).
//
// What to notice: in the memory panel, params, grads and optimizer_state are
// all 1/N (`layers.3.flat[shard 1/4]`), and `layers.3.flat[gathered]` appears
// for exactly one layer's forward and again for its backward. In the
// timeline, an all-gather precedes every layer's forward and backward and a
// reduce-scatter follows every layer's backward: 3Ψ of traffic per step where
// ddp needs 2Ψ, the price of the memory. With prefetch (the default) the
// next layer's all-gather runs on the comm lane while this layer computes;
// with --no-prefetch compute waits for every gather, and the step is longer.
//
// Mixed precision (--precision bf16|fp16): the shards that are gathered and the
// gradients that are reduce-scattered are 2 bytes a value, so every collective
// moves half the bytes; the fp32 master of the shard sits in the optimizer
// state (K = 12): 16Ψ/N in all, like fp32 AdamW, but a third of it is traffic-free.
#include <deque>

#include "core/layer_ops.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/sharding.h"
#include "core/strategy.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

// A full layer being assembled: valid once `work` has completed.
struct Gathered {
  int layer = -1;
  Tensor params;
  Work work;
};

struct PendingReduce {
  Tensor unreduced;  // the collective's workspace until `work` completes
  Work work;
};

class Zero3 final : public Strategy {
 public:
  void setup(RankEnv& env, const std::vector<float>& init) override {
    env_ = &env;
    groups_ = make_flat_groups(env.layout, 1, env.world);  // one per layer, padded to N
    mp_ = std::make_unique<MixedPrecision>(env.cfg.precision);
    const DType dt = mp_->dtype();
    std::vector<Optimizer::Range> shards;
    std::vector<std::vector<float>> init_shards;
    for (const FlatGroup& g : groups_) {
      // Every rank was handed the same initial weights; it keeps only its slice.
      std::vector<float>& values = init_shards.emplace_back(g.plan.shard);
      read_group_values(values.data(), g, init, g.plan.begin(env.rank), g.plan.shard);
      Tensor p = env.alloc.alloc(g.shard_name(env.rank), MemCategory::params, g.plan.shard, dt);
      env.device.upload(p.raw(), dt, values.data(), values.size());
      param_shards_.push_back(std::move(p));
      grad_shards_.push_back(
          env.alloc.alloc(g.shard_name(env.rank) + ".grad", MemCategory::grads, g.plan.shard, dt));
      shards.push_back({g.shard_name(env.rank), g.plan.shard});
    }
    optimizer_ = std::make_unique<Optimizer>(env.cfg.optimizer, env.alloc, shards, dt);
    if (optimizer_->mixed())
      for (const FlatGroup& g : groups_)
        optimizer_->load_master(g.index, init_shards[g.index].data());
  }

  LossShare step(int step) override {
    RankEnv& env = *env_;
    const int W = env.world, D = env.layout.dim(), L = env.layout.num_layers();
    const bool prefetch = env.cfg.prefetch;
    const int b = env.cfg.batch / W;  // this rank's slice of the global batch, in rank order
    Tensor x = env.alloc.alloc("batch.x", MemCategory::activations, {b, D});
    Tensor y = env.alloc.alloc("batch.y", MemCategory::activations, {b, D});
    load_rows(env.device, env.data, step, env.rank * b, b, x.data<float>(), y.data<float>());

    // Phase 1 — forward, layer by layer: gather, compute, free. The
    // activations stay (backward needs them); the parameters do not.
    const DType dt = mp_->dtype();
    LayerTape tape(env.layout, env.alloc, env.rec, dt);
    tape.begin(x.data<float>(), b);
    Gathered next = gather(0);
    for (int l = 0; l < L; ++l) {
      Gathered cur = std::move(next);
      if (prefetch && l + 1 < L) next = gather(l + 1);  // overlaps this layer's compute
      cur.work.wait();
      tape.forward(l, weight(cur), bias(cur));
      cur.params.reset();  // reshard: only the 1/N shard remains
      if (!prefetch && l + 1 < L) next = gather(l + 1);
    }
    Tensor dpred = env.alloc.alloc("loss.grad", MemCategory::temporary, {b, D}, dt);
    double loss;
    {
      ScopedSpan span(env.rec, Lane::compute, SpanKind::loss);
      const size_t n = static_cast<size_t>(b) * D;
      loss = mp_->mse_loss(env.alloc, dpred.raw(), tape.output(), y.data<float>(), n, n);
    }

    // Phase 2 — backward, last layer first: gather the layer again, compute
    // its gradient into a full-size buffer, free the gathered parameters,
    // and reduce-scatter the gradient into this rank's shard; each full
    // gradient is freed as soon as its reduce-scatter has finished.
    tape.begin_backward(dpred.raw());
    std::deque<PendingReduce> pending;
    next = gather(L - 1);
    for (int l = L - 1; l >= 0; --l) {
      Gathered cur = std::move(next);
      if (prefetch && l > 0) next = gather(l - 1);
      cur.work.wait();
      const FlatGroup& g = groups_[l];
      Tensor full = env.alloc.alloc(g.name + kUnreduced + ".grad", MemCategory::comm_buffers,
                                    g.plan.padded(), dt);
      tape.backward(l, weight(cur), full.raw(), at(full, g.bias_offset(env.layout, l)));
      cur.params.reset();
      Work w = env.comm->reduce_scatter_async(full.raw(), grad_shards_[l].raw(), g.plan.counts(),
                                              dt, CommMeta{l, -1});
      pending.push_back({std::move(full), std::move(w)});
      free_reduced(pending, /*keep_at_most=*/2);
      if (!prefetch && l > 0) next = gather(l - 1);
    }
    free_reduced(pending, 0);

    // Phase 3 — each rank updates its own shard of every layer. No all-gather
    // follows: the next forward gathers each layer when it needs it. (fp16:
    // an overflow on any rank's shard skips the step on all, by a vote.)
    std::vector<void*> params, grads;
    for (const FlatGroup& g : groups_) {
      params.push_back(param_shards_[g.index].raw());
      grads.push_back(grad_shards_[g.index].raw());
    }
    {
      ScopedSpan span(env.rec, Lane::compute, SpanKind::optimizer);
      mp_->step(*optimizer_, params, grads, 1.0f / static_cast<float>(W), env.comm);
    }
    return {loss * b, b};
  }

  std::vector<float> export_params() override {
    if (optimizer_->mixed())
      return gather_master_params(*env_->comm, env_->alloc, env_->layout.total(), groups_,
                                  *optimizer_, false);
    std::vector<const float*> shards;
    for (const Tensor& t : param_shards_) shards.push_back(static_cast<const float*>(t.raw()));
    return gather_model_params(*env_->comm, env_->alloc, env_->layout.total(), groups_, shards,
                               false);
  }

 private:
  // Starts assembling layer l from every rank's shard.
  Gathered gather(int l) {
    const FlatGroup& g = groups_[l];
    Gathered out;
    out.layer = l;
    out.params = env_->alloc.alloc(g.name + kGathered, MemCategory::comm_buffers, g.plan.padded(),
                                   mp_->dtype());
    out.work = env_->comm->all_gather_async(param_shards_[l].raw(), out.params.raw(),
                                            g.plan.counts(), mp_->dtype(), CommMeta{l, -1});
    return out;
  }

  static void free_reduced(std::deque<PendingReduce>& pending, size_t keep_at_most) {
    while (!pending.empty() && (pending.size() > keep_at_most || pending.front().work.done())) {
      pending.front().work.wait();  // rethrows a failed collective
      pending.pop_front();          // frees the full gradient
    }
  }

  const void* weight(Gathered& g) { return g.params.raw(); }
  const void* bias(Gathered& g) {
    return at(g.params, groups_[g.layer].bias_offset(env_->layout, g.layer));
  }

  RankEnv* env_ = nullptr;
  std::vector<FlatGroup> groups_;     // one per layer
  std::vector<Tensor> param_shards_;  // layers.L.flat[shard r/N]
  std::vector<Tensor> grad_shards_;   // layers.L.flat[shard r/N].grad
  std::unique_ptr<MixedPrecision> mp_;
  std::unique_ptr<Optimizer> optimizer_;  // holds the fp32 masters in mixed precision
};

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo zero3_strategy() {
  return {
      .name = "zero3",
      .summary =
          "ZeRO stage 3: params, grads and optimizer state sharded 1/N; all-gather each layer "
          "before forward and backward, reduce-scatter its gradient",
      .family = StrategyFamily::data_parallel,
      .reads = {StrategyOption::precision, StrategyOption::no_prefetch},
      .zero_stage = 3,
      .traffic = Traffic::gather_per_pass,
      .comm_buffers = "gathered parameters and unreduced gradients of the layers in flight",
      .make = [] { return std::make_unique<Zero3>(); },
      .validate = [](const RunConfig& cfg) { require_batch_divisible(cfg); },
  };
}

}  // namespace shardlab
