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

#include "core/model/layer_ops.h"
#include "core/model/optimizer.h"
#include "core/model/precision.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

class Zero1 final : public Strategy {
 public:
  void setup(RankEnv& env, const ParamSource& init) override {
    env_ = &env;
    mp_ = std::make_unique<MixedPrecision>(env.cfg.precision);
    // One flat group per layer (weight then bias), padded to a multiple of N,
    // so each layer's gradient can be reduce-scattered as soon as backward has
    // produced it, and every rank owns 1/N of every layer. The stage-1 saving:
    // params and grads stay whole; optimizer state (and in mixed precision the
    // fp32 master) exists for this rank's shard of each layer only.
    states_ = std::make_unique<ShardedStates>(
        env, init, *mp_,
        ShardedStatesSpec{.params = Keep::whole, .grads = Keep::whole, .nvme_dir = {}});
  }

  LossShare step(int step) override {
    RankEnv& env = *env_;
    ShardedStates& st = *states_;
    const int L = env.layout.num_layers();
    Batch batch = load_rank_slice(env, step);  // this rank's slice of the global batch

    // Phase 1 — forward on the local slice with the full (replicated) parameters.
    for (int l = 0; l < L; ++l) env.device.fill_zero(st.grads(l).raw(), st.grads(l).bytes());
    const DType dt = mp_->dtype();
    LayerTape tape(env.layout, env.alloc, env.rec, dt, env.tp);
    tape.begin(batch.x.raw(), batch.rows);
    for (int l = 0; l < L; ++l) tape.forward(l, states_->params(l).raw());
    Loss loss = compute_loss(env, *mp_, tape.output(), batch);

    // Phase 2 — backward; each layer's gradient is reduce-scattered the moment
    // it is complete. A rank only needs the summed gradient of the shard it
    // updates, so a reduce-scatter (half an all-reduce) is enough. It runs in
    // place: this rank's chunk of the full gradient buffer receives the sum;
    // the other chunks are left as workspace (stage 1 keeps them allocated).
    tape.begin_backward(loss.grad.raw());
    // (A tied weight's copy, gpt's lm_head, waits for its home's gradient: data_parallel.h.)
    std::deque<Work> reduces;
    const TiedGradients tied(env.layout, st.groups());
    auto reduce = [&](int l) {
      reduces.push_back(env.comm->reduce_scatter_async(
          st.grads(l).raw(), st.grad_shard(l), st.groups()[l].plan.counts(), dt, CommMeta{l, -1}));
    };
    for (int l = L - 1; l >= 0; --l) {
      tape.backward(l, states_->params(l).raw(), states_->grads(l).raw());
      tied.sum(
          l, [&](int g) { return st.grads(g).raw(); }, env.device, dt);
      if (tied.holds_back(l)) continue;
      reduce(l);
      for (int h : tied.released_by(l)) reduce(h);
    }
    for (Work& w : reduces) w.wait();

    // Phase 3 — each rank updates only its own shard of every layer: the
    // reduced sum is already the full batch's gradient (each rank's loss was
    // divided by the global batch: data_parallel.h), with the optimizer state
    // it alone holds. (fp16: a step whose gradients overflowed is skipped on
    // every rank, by a vote.)
    st.update_shards(*mp_);

    // Phase 4 — share the updated shards round the campfire: an in-place
    // all-gather per layer gives every rank the full new parameters.
    st.all_gather_params();
    return {loss.sum(), batch.rows};
  }

  std::vector<float> export_params() override { return states_->export_params(); }
  RankState rank_state() override { return states_->rank_state(mp_.get()); }

 private:
  RankEnv* env_ = nullptr;
  std::unique_ptr<MixedPrecision> mp_;
  // layers.L.flat and layers.L.flat.grad, full and padded, on every rank; the
  // optimizer holds the fp32 masters in mixed precision.
  std::unique_ptr<ShardedStates> states_;
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
      .reads = {StrategyOption::precision, StrategyOption::mesh, StrategyOption::mesh_order,
                StrategyOption::sequence_parallel},
      .zero_stage = 1,
      .moves = sharded_update_moves,
      .comm_buffers = "reduce-scatter scratch",
      .make = [] { return std::make_unique<Zero1>(); },
      .validate = [](const RunConfig& cfg) { require_batch_divisible(cfg); },
  };
}

}  // namespace shardlab
