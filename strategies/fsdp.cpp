// `fsdp`: Fully Sharded Data Parallel, PyTorch's form of ZeRO stage 3. The
// model is wrapped in units of --fsdp-unit layers, each with ONE flat
// parameter sharded 1/N across ranks; a unit is gathered before use.
//
// What to notice, compared with zero3: the unit of communication is a unit,
// not a layer — with --fsdp-unit 2 there are half as many all-gathers, each
// twice as big, and twice as much is gathered at once (`layers.2-3.flat[gathered]`).
// - Reshard after forward (default): a unit's gathered parameters are freed
//   right after its forward and gathered again for backward: 3Ψ of traffic.
//   With --no-reshard they stay from forward until backward: the memory panel
//   shows every unit gathered at the end of forward, and traffic drops to 2Ψ.
// - Backward prefetch (like FSDP's BACKWARD_PRE): the previous unit's
//   all-gather starts before this unit's gradient is computed. Forward does not
//   prefetch (FSDP's forward_prefetch=False default), so forward waits on every
//   gather; --no-prefetch makes backward wait too.
// - --offload (ZeRO-Offload / FSDP CPUOffload): parameters, gradients and
//   optimizer state live in the host pool. Each shard is copied to the device
//   before its all-gather (copy_h2d), each reduced gradient shard is copied back
//   (copy_d2h), and the optimizer steps on the host. The device pool then holds
//   no model state at all, only what is in flight; the lesson is the traffic.
// - --offload nvme:DIR (ZeRO-Infinity): the same, and the optimizer state (with
//   the fp32 masters) lives in a file under DIR instead of host memory. In
//   the update each unit's state is read from disk, stepped and written back,
//   the next unit's read overlapping this one's step: the disk lane of the
//   timeline, and the host pool now holds only the unit being stepped. With
//   --offload-params the parameter shards live in the file too (DeepSpeed's
//   offload_param to nvme): NVMe → host → device before each all-gather, the
//   next unit's read overlapping this unit's gather and compute.
// - Mixed precision (--precision bf16|fp16): the flat parameter shards, their
//   gradients, every gather, reduce-scatter and host copy are 2 bytes a value;
//   the fp32 master shard is optimizer state (K = 12) and, with --offload, is
//   updated on the host, whose rounded result is what goes back up.
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

// A unit being assembled: valid once `work` has completed.
struct Gathered {
  int unit = -1;
  Tensor from_disk;  // --offload-params: this rank's shard, read from the file
  Tensor staged;     // --offload: the device copy of this rank's shard, input of the all-gather
  Tensor params;     // the whole unit, padded
  Work work;
  bool valid() const { return !params.empty(); }
};

class Fsdp final : public Strategy {
 public:
  void setup(RankEnv& env, const ParamSource& init) override {
    env_ = &env;
    offload_ = env.cfg.offload;
    mp_ = std::make_unique<MixedPrecision>(env.cfg.precision);
    // Units of --fsdp-unit layers, each one flat parameter of which every rank
    // keeps only its shard. With --offload the shards, their gradients and the
    // optimizer (ZeRO-Offload's CPU optimizer: its state and the fp32 masters)
    // live in the host pool, next to the shards it updates.
    states_ = std::make_unique<ShardedStates>(
        env, init, *mp_,
        ShardedStatesSpec{.layers_per_group = env.cfg.fsdp_unit,
                          .params = Keep::shard,
                          .grads = Keep::shard,
                          .pool = offload_ ? Pool::host : Pool::device,
                          .nvme_dir = nvme_offload_dir(env.cfg),
                          .params_on_disk = env.cfg.offload_params,
                          .read_ahead = env.cfg.prefetch});
  }

  LossShare step(int step) override {
    RankEnv& env = *env_;
    const std::vector<FlatGroup>& units = states_->groups();
    const int U = static_cast<int>(units.size());
    const bool reshard = env.cfg.reshard_after_forward, prefetch = env.cfg.prefetch;
    Batch batch = load_rank_slice(env, step);  // this rank's slice of the global batch
    // (--offload-params: the shards are read from disk in this order, one ahead.)
    states_->plan_gathers(gather_order(U, reshard));

    // Phase 1 — forward, unit by unit: gather the unit's flat parameter, run
    // its layers, then reshard (free it) or, with --no-reshard, keep it.
    const DType dt = mp_->dtype();
    LayerTape tape(env.layout, env.alloc, env.rec, dt, env.tp);
    tape.begin(batch.x.raw(), batch.rows);
    std::vector<Gathered> kept(U);
    for (int u = 0; u < U; ++u) {
      Gathered cur = gather(u);
      wait(cur);
      for (int l = units[u].first; l < units[u].last; ++l) tape.forward(l, layer_params(cur, l));
      if (!reshard) kept[u] = std::move(cur);
    }  // a resharded unit's gathered buffer is freed here, at the end of its iteration
    Loss loss = compute_loss(env, *mp_, tape.output(), batch);

    // Phase 2 — backward, last unit first. The unit must be whole again
    // (kept, or gathered anew); with prefetch the previous unit's all-gather is
    // started before this unit's gradient is computed. The unit's gradient is
    // reduce-scattered into this rank's shard, and the full gradient freed as
    // soon as that is done.
    tape.begin_backward(loss.grad.raw());
    auto whole = [&](int u) { return kept[u].valid() ? std::move(kept[u]) : gather(u); };
    // (A tied weight's copy, gpt's lm_head, waits for its home's gradient: data_parallel.h.)
    ReduceScatterQueue reduces;
    const TiedGradients tied(env.layout, units);
    std::map<int, Tensor> held;
    Gathered next = whole(U - 1);
    for (int u = U - 1; u >= 0; --u) {
      Gathered cur = std::move(next);
      if (prefetch && u > 0) next = whole(u - 1);
      wait(cur);
      const FlatGroup& g = units[u];
      Tensor full = env.alloc.alloc(g.name + kUnreduced + ".grad", MemCategory::comm_buffers,
                                    g.plan.padded(), dt);
      for (int l = g.last - 1; l >= g.first; --l)
        tape.backward(l, layer_params(cur, l), at(full, g.layer_offset(env.layout, l)));
      cur.params.reset();
      tied.sum(
          u, [&](int k) { return k == u ? full.raw() : held.at(k).raw(); }, env.device, dt);
      if (tied.holds_back(u)) {
        held[u] = std::move(full);
      } else {
        reduce(u, std::move(full), reduces);
        for (int h : tied.released_by(u)) {
          reduce(h, std::move(held.at(h)), reduces);
          held.erase(h);
        }
        free_reduced(reduces, /*keep_at_most=*/2);
      }
      if (!prefetch && u > 0) next = whole(u - 1);
    }
    free_reduced(reduces, 0);

    // Phase 3 — each rank updates its own shard of every unit (on the host
    // with --offload) with the reduced sum, already the full batch's gradient
    // (data_parallel.h). (fp16: a step whose gradients overflowed on any rank
    // is skipped on all, by a vote.)
    states_->update_shards(*mp_);
    return {loss.sum(), batch.rows};
  }

  std::vector<float> export_params() override { return states_->export_params(); }
  RankState rank_state() override { return states_->rank_state(mp_.get()); }

 private:
  // Starts assembling unit u from every rank's shard (staging it on the device first with
  // --offload).
  Gathered gather(int u) {
    const FlatGroup& g = states_->groups()[u];
    Gathered out;
    out.unit = u;
    ShardedStates::GatherInput in = states_->shard_for_gather(u);
    const void* shard = in.data;
    out.from_disk = std::move(in.copy);
    if (offload_) {
      out.staged = env_->alloc.alloc(g.shard_name(env_->rank), MemCategory::comm_buffers,
                                     g.plan.shard, mp_->dtype());
      copy(out.staged.raw(), shard, out.staged.bytes(), CopyKind::host_to_device, g.first);
      shard = out.staged.raw();
      out.from_disk.reset();  // the host copy has done its part
    }
    out.params = env_->alloc.alloc(g.name + kGathered, MemCategory::comm_buffers, g.plan.padded(),
                                   mp_->dtype());
    out.work = env_->comm->all_gather_async(shard, out.params.raw(), g.plan.counts(), mp_->dtype(),
                                            CommMeta{g.first, -1});
    return out;
  }

  void wait(Gathered& g) {
    g.work.wait();
    g.staged.reset();
    g.from_disk.reset();
  }

  // Starts reduce-scattering unit u's full gradient into this rank's shard
  // (into a device staging buffer with --offload; see free_reduced).
  void reduce(int u, Tensor full, ReduceScatterQueue& reduces) {
    const FlatGroup& g = states_->groups()[u];
    void* out = states_->grad_shard(u);
    Tensor staged;
    if (offload_) {
      staged = env_->alloc.alloc(g.shard_name(env_->rank) + ".grad", MemCategory::comm_buffers,
                                 g.plan.shard, mp_->dtype());
      out = staged.raw();
    }
    reduces.start(*env_->comm, g, std::move(full), out, mp_->dtype(), std::move(staged));
  }

  // Retires reduce-scatters that are done (the oldest first, waiting while
  // more than `keep_at_most` are in flight): frees the full gradient and, with
  // --offload, copies the reduced shard to its home in host memory.
  void free_reduced(ReduceScatterQueue& reduces, size_t keep_at_most) {
    reduces.retire(keep_at_most, [&](ReduceScatterQueue::Pending& p) {
      if (offload_)
        copy(states_->grad_shard(p.group), p.staged.raw(), p.staged.bytes(),
             CopyKind::device_to_host, states_->groups()[p.group].first);
    });
  }

  // A host↔device copy, recorded with its bytes: a real cudaMemcpy on a GPU.
  void copy(void* dst, const void* src, size_t bytes, CopyKind kind, int layer) {
    ScopedSpan span(env_->rec, Lane::comm,
                    kind == CopyKind::host_to_device ? SpanKind::copy_h2d : SpanKind::copy_d2h,
                    layer, -1, static_cast<int64_t>(bytes));
    env_->device.copy(dst, src, bytes, kind);
  }

  // Layer l's parameters inside its unit's gathered flat buffer.
  const void* layer_params(Gathered& g, int l) {
    return at(g.params, states_->groups()[g.unit].layer_offset(env_->layout, l));
  }

  RankEnv* env_ = nullptr;
  bool offload_ = false;
  std::unique_ptr<MixedPrecision> mp_;
  // Per unit layers.A-B.flat[shard r/N] and its .grad (host pool with
  // --offload); the optimizer is on the host with --offload, with the fp32
  // masters when mixed.
  std::unique_ptr<ShardedStates> states_;
};

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo fsdp_strategy() {
  return {
      .name = "fsdp",
      .summary =
          "FullyShardedDataParallel: units of --fsdp-unit layers with one flat sharded parameter; "
          "reshard after forward, backward prefetch, optional offload to CPU or NVMe",
      .family = StrategyFamily::data_parallel,
      .reads = {StrategyOption::precision, StrategyOption::no_prefetch, StrategyOption::fsdp_unit,
                StrategyOption::no_reshard, StrategyOption::offload, StrategyOption::offload_params,
                StrategyOption::mesh, StrategyOption::mesh_order,
                StrategyOption::sequence_parallel},
      .zero_stage = 3,
      .moves = sharded_params_moves,
      .comm_buffers = "gathered parameters and unreduced gradients of the units in flight",
      .offload_to_host = true,
      .make = [] { return std::make_unique<Fsdp>(); },
      .validate =
          [](const RunConfig& cfg) {
            require_batch_divisible(cfg);
            const int layers = make_layout(cfg).num_layers();
            if (cfg.fsdp_unit < 1 || cfg.fsdp_unit > layers)
              throw ConfigError("--fsdp-unit " + std::to_string(cfg.fsdp_unit) +
                                " is invalid for model " + cfg.model + " (valid: 1 to " +
                                std::to_string(layers) + " layers per unit)");
          },
  };
}

}  // namespace shardlab
