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
#include <map>

#include "core/model/layer_ops.h"
#include "core/model/optimizer.h"
#include "core/model/precision.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

class Zero2 final : public Strategy {
 public:
  void setup(RankEnv& env, const ParamSource& init) override {
    env_ = &env;
    mp_ = std::make_unique<MixedPrecision>(env.cfg.precision);
    // One flat group per layer, padded to N. The stage-2 saving: the gradient
    // a rank keeps is its shard only; the parameters stay whole.
    states_ = std::make_unique<ShardedStates>(
        env, init, *mp_,
        ShardedStatesSpec{.params = Keep::whole, .grads = Keep::shard, .nvme_dir = {}});
  }

  LossShare step(int step) override {
    RankEnv& env = *env_;
    ShardedStates& st = *states_;
    const int L = env.layout.num_layers();
    Batch batch = load_rank_slice(env, step);  // this rank's slice of the global batch

    // Phase 1 — forward on the local slice with the full (replicated) parameters.
    const DType dt = mp_->dtype();
    LayerTape tape(env.layout, env.alloc, env.rec, dt, env.tp);
    tape.begin(batch.x.raw(), batch.rows);
    for (int l = 0; l < L; ++l) tape.forward(l, states_->params(l).raw());
    Loss loss = compute_loss(env, *mp_, tape.output(), batch);

    // Phase 2 — backward, one layer at a time: compute the layer's full local
    // gradient into a fresh buffer, start its reduce-scatter into this rank's
    // shard, and free every earlier buffer whose reduce-scatter has finished
    // (at most two in flight, so memory stays bounded).
    tape.begin_backward(loss.grad.raw());
    // (A tied weight's copy, gpt's lm_head, waits for its home's gradient: data_parallel.h.)
    ReduceScatterQueue reduces;
    const TiedGradients tied(env.layout, st.groups());
    std::map<int, Tensor> held;
    for (int l = L - 1; l >= 0; --l) {
      const FlatGroup& g = st.groups()[l];
      Tensor full = env.alloc.alloc(g.name + kUnreduced + ".grad", MemCategory::comm_buffers,
                                    g.plan.padded(), dt);
      tape.backward(l, states_->params(l).raw(), full.raw());
      tied.sum(
          l, [&](int k) { return k == l ? full.raw() : held.at(k).raw(); }, env.device, dt);
      if (tied.holds_back(l)) {
        held[l] = std::move(full);
        continue;
      }
      reduces.start(*env.comm, g, std::move(full), st.grad_shard(l), dt);
      for (int h : tied.released_by(l)) {
        reduces.start(*env.comm, st.groups()[h], std::move(held.at(h)), st.grad_shard(h), dt);
        held.erase(h);
      }
      reduces.retire(/*keep_at_most=*/2);
    }
    reduces.retire(0);

    // Phase 3 — update this rank's shard of every layer with the reduced sum
    // (already the full batch's gradient: data_parallel.h) and the optimizer
    // state it alone holds (fp16: every rank skips a step whose gradients
    // overflowed anywhere, by a vote).
    st.update_shards(*mp_);

    // Phase 4 — all-gather the updated shards (in place) so every rank has the
    // full new parameters for the next forward.
    st.all_gather_params();
    return {loss.sum(), batch.rows};
  }

  std::vector<float> export_params() override { return states_->export_params(); }
  RankState rank_state() override { return states_->rank_state(mp_.get()); }

 private:
  RankEnv* env_ = nullptr;
  std::unique_ptr<MixedPrecision> mp_;
  // layers.L.flat, full and padded, on every rank; layers.L.flat[shard r/N].grad;
  // the optimizer holds the fp32 masters in mixed precision.
  std::unique_ptr<ShardedStates> states_;
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
      .reads = {StrategyOption::precision, StrategyOption::mesh, StrategyOption::mesh_order,
                StrategyOption::sequence_parallel},
      .zero_stage = 2,
      .moves = sharded_update_moves,
      .comm_buffers = "each layer's unreduced gradient until it is reduce-scattered",
      .make = [] { return std::make_unique<Zero2>(); },
      .validate = [](const RunConfig& cfg) { require_batch_divisible(cfg); },
  };
}

}  // namespace shardlab
