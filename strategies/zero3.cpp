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
//
// --offload nvme:DIR (ZeRO-Infinity's offload_optimizer to NVMe): the
// optimizer state of this rank's shards lives in a file under DIR. The update
// reads each layer's state in, steps it and writes it back, reading the next
// layer's while this one steps: a disk lane on the timeline, and the memory
// panel's optimizer_state is one layer's at a time instead of every layer's.
// With --offload-params the parameter shards live in that file too: each is
// read from disk before its all-gather (one layer ahead), twice a step, and
// read, stepped and written back in the update; params in memory are only
// the shards in flight.
#include <map>

#include "core/model/layer_ops.h"
#include "core/model/optimizer.h"
#include "core/model/precision.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"
#include "core/run_options.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

// A full layer being assembled: valid once `work` has completed.
struct Gathered {
  int layer = -1;
  Tensor from_disk;  // --offload-params: this rank's shard, read from the file for the gather
  Tensor params;
  Work work;
  void wait() {
    work.wait();
    from_disk.reset();
  }
};

class Zero3 final : public Strategy {
 public:
  void setup(RankEnv& env, const ParamSource& init) override {
    env_ = &env;
    mp_ = std::make_unique<MixedPrecision>(env.cfg.precision);
    // One flat group per layer, padded to N; every rank was handed the same
    // initial weights and keeps only its slice of each: params, grads and
    // optimizer state are all shards.
    states_ =
        std::make_unique<ShardedStates>(env, init, *mp_,
                                        ShardedStatesSpec{.params = Keep::shard,
                                                          .grads = Keep::shard,
                                                          .nvme_dir = nvme_offload_dir(env.cfg),
                                                          .params_on_disk = env.cfg.offload_params,
                                                          .read_ahead = env.cfg.prefetch});
  }

  LossShare step(int step) override {
    RankEnv& env = *env_;
    ShardedStates& st = *states_;
    const int L = env.layout.num_layers();
    const bool prefetch = env.cfg.prefetch;
    Batch batch = load_rank_slice(env, step);  // this rank's slice of the global batch
    // (--offload-params: the shards are read from disk in this order, one ahead.)
    st.plan_gathers(gather_order(L, /*again_for_backward=*/true));

    // Phase 1 — forward, layer by layer: gather, compute, free. The
    // activations stay (backward needs them); the parameters do not.
    const DType dt = mp_->dtype();
    LayerTape tape(env.layout, env.alloc, env.rec, dt, env.tp);
    tape.begin(batch.x.raw(), batch.rows);
    Gathered next = gather(0);
    for (int l = 0; l < L; ++l) {
      Gathered cur = std::move(next);
      if (prefetch && l + 1 < L) next = gather(l + 1);  // overlaps this layer's compute
      cur.wait();
      tape.forward(l, cur.params.raw());
      cur.params.reset();  // reshard: only the 1/N shard remains
      if (!prefetch && l + 1 < L) next = gather(l + 1);
    }
    Loss loss = compute_loss(env, *mp_, tape.output(), batch);

    // Phase 2 — backward, last layer first: gather the layer again, compute
    // its gradient into a full-size buffer, free the gathered parameters,
    // and reduce-scatter the gradient into this rank's shard; each full
    // gradient is freed as soon as its reduce-scatter has finished.
    tape.begin_backward(loss.grad.raw());
    // (A tied weight's copy, gpt's lm_head, waits for its home's gradient: data_parallel.h.)
    ReduceScatterQueue reduces;
    const TiedGradients tied(env.layout, st.groups());
    std::map<int, Tensor> held;
    next = gather(L - 1);
    for (int l = L - 1; l >= 0; --l) {
      Gathered cur = std::move(next);
      if (prefetch && l > 0) next = gather(l - 1);
      cur.wait();
      const FlatGroup& g = st.groups()[l];
      Tensor full = env.alloc.alloc(g.name + kUnreduced + ".grad", MemCategory::comm_buffers,
                                    g.plan.padded(), dt);
      tape.backward(l, cur.params.raw(), full.raw());
      cur.params.reset();
      tied.sum(
          l, [&](int k) { return k == l ? full.raw() : held.at(k).raw(); }, env.device, dt);
      if (tied.holds_back(l)) {
        held[l] = std::move(full);
      } else {
        reduces.start(*env.comm, g, std::move(full), st.grad_shard(l), dt);
        for (int h : tied.released_by(l)) {
          reduces.start(*env.comm, st.groups()[h], std::move(held.at(h)), st.grad_shard(h), dt);
          held.erase(h);
        }
        reduces.retire(/*keep_at_most=*/2);
      }
      if (!prefetch && l > 0) next = gather(l - 1);
    }
    reduces.retire(0);

    // Phase 3 — each rank updates its own shard of every layer. No all-gather
    // follows: the next forward gathers each layer when it needs it. (fp16:
    // an overflow on any rank's shard skips the step on all, by a vote.)
    st.update_shards(*mp_);
    return {loss.sum(), batch.rows};
  }

  std::vector<float> export_params() override { return states_->export_params(); }
  RankState rank_state() override { return states_->rank_state(mp_.get()); }

 private:
  // Starts assembling layer l from every rank's shard.
  Gathered gather(int l) {
    const FlatGroup& g = states_->groups()[l];
    Gathered out;
    out.layer = l;
    ShardedStates::GatherInput in = states_->shard_for_gather(l);
    out.from_disk = std::move(in.copy);
    out.params = env_->alloc.alloc(g.name + kGathered, MemCategory::comm_buffers, g.plan.padded(),
                                   mp_->dtype());
    out.work = env_->comm->all_gather_async(in.data, out.params.raw(), g.plan.counts(),
                                            mp_->dtype(), CommMeta{l, -1});
    return out;
  }

  RankEnv* env_ = nullptr;
  std::unique_ptr<MixedPrecision> mp_;
  // layers.L.flat[shard r/N] and its .grad; the optimizer holds the fp32
  // masters in mixed precision.
  std::unique_ptr<ShardedStates> states_;
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
      .reads = {StrategyOption::precision, StrategyOption::no_prefetch, StrategyOption::mesh,
                StrategyOption::mesh_order, StrategyOption::sequence_parallel,
                StrategyOption::offload, StrategyOption::offload_params},
      .zero_stage = 3,
      .moves = sharded_params_moves,
      .comm_buffers = "gathered parameters and unreduced gradients of the layers in flight",
      .make = [] { return std::make_unique<Zero3>(); },
      .validate = [](const RunConfig& cfg) { require_batch_divisible(cfg); },
  };
}

}  // namespace shardlab
