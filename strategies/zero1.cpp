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
//
// Mixed precision (--precision bf16|fp16): the replicated params and grads are
// 2 bytes each, so both halves of the traffic halve; the sharded optimizer
// state now also holds the fp32 master of this rank's shard (K = 12), which
// is updated and rounded to 2 bytes before the all-gather: 4Ψ + 12Ψ/N.
#include <deque>

#include "core/layer_ops.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/sharding.h"
#include "core/strategy.h"
#include "strategies/registry.h"

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
    mp_ = std::make_unique<MixedPrecision>(env.cfg.precision);
    const DType dt = mp_->dtype();
    std::vector<Optimizer::Range> shards;
    for (const FlatGroup& g : groups_) {
      Tensor p = env.alloc.alloc(g.name, MemCategory::params, g.plan.padded(), dt);
      std::vector<float> values(g.plan.padded());
      read_group_values(values.data(), g, init, 0, values.size());
      env.device.upload(p.raw(), dt, values.data(), values.size());
      params_.push_back(std::move(p));
      grads_.push_back(env.alloc.alloc(g.name + ".grad", MemCategory::grads, g.plan.padded(), dt));
      shards.push_back({g.shard_name(env.rank), g.plan.shard});
    }
    // The stage-1 saving: state (and in mixed precision the fp32 master) for
    // this rank's shard of each layer only.
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
    for (Tensor& g : grads_) env.device.fill_zero(g.raw(), g.bytes());
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

    // Phase 2 — backward; each layer's gradient is reduce-scattered the moment
    // it is complete. A rank only needs the summed gradient of the shard it
    // updates, so a reduce-scatter (half an all-reduce) is enough. It runs in
    // place: this rank's chunk of the full gradient buffer receives the sum;
    // the other chunks are left as workspace (stage 1 keeps them allocated).
    tape.begin_backward(dpred.raw());
    std::deque<Work> reduces;
    for (int l = L - 1; l >= 0; --l) {
      tape.backward(l, weight(l), weight_grad(l), bias_grad(l));
      const FlatGroup& g = groups_[l];
      reduces.push_back(env.comm->reduce_scatter_async(grads_[l].raw(),
                                                       at(grads_[l], g.plan.begin(env.rank)),
                                                       g.plan.counts(), dt, CommMeta{l, -1}));
    }
    for (Work& w : reduces) w.wait();

    // Phase 3 — each rank updates only its own shard of every layer: the
    // average gradient (sum / N: each rank's loss was the mean over its slice)
    // with the optimizer state it alone holds. (fp16: a step whose gradients
    // overflowed is skipped on every rank, by a vote.)
    std::vector<void*> param_shards, grad_shards;
    for (const FlatGroup& g : groups_) {
      param_shards.push_back(at(params_[g.index], g.plan.begin(env.rank)));
      grad_shards.push_back(at(grads_[g.index], g.plan.begin(env.rank)));
    }
    {
      ScopedSpan span(env.rec, Lane::compute, SpanKind::optimizer);
      mp_->step(*optimizer_, param_shards, grad_shards, 1.0f / static_cast<float>(W), env.comm);
    }

    // Phase 4 — share the updated shards round the campfire: an in-place
    // all-gather per layer gives every rank the full new parameters.
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
  void* weight(int l) { return params_[l].raw(); }
  void* bias(int l) { return at(params_[l], groups_[l].bias_offset(env_->layout, l)); }
  void* weight_grad(int l) { return grads_[l].raw(); }
  void* bias_grad(int l) { return at(grads_[l], groups_[l].bias_offset(env_->layout, l)); }

  RankEnv* env_ = nullptr;
  std::vector<FlatGroup> groups_;  // one per layer
  std::vector<Tensor> params_;     // layers.L.flat, full and padded, on every rank
  std::vector<Tensor> grads_;      // layers.L.flat.grad, full and padded, on every rank
  std::unique_ptr<MixedPrecision> mp_;
  std::unique_ptr<Optimizer> optimizer_;  // holds the fp32 masters in mixed precision
};

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo zero1_strategy() {
  return {
      .name = "zero1",
      .summary =
          "ZeRO stage 1: optimizer state sharded 1/N; reduce-scatter grads, update own shard, "
          "all-gather params",
      .family = StrategyFamily::data_parallel,
      .reads = {StrategyOption::precision},
      .zero_stage = 1,
      .traffic = Traffic::all_reduce,
      .comm_buffers = "reduce-scatter scratch",
      .make = [] { return std::make_unique<Zero1>(); },
      .validate = [](const RunConfig& cfg) { require_batch_divisible(cfg); },
  };
}

}  // namespace shardlab
