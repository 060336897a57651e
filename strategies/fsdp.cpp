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
// - Mixed precision (--precision bf16|fp16): the flat parameter shards, their
//   gradients, every gather, reduce-scatter and host copy are 2 bytes a value;
//   the fp32 master shard is optimizer state (K = 12) and, with --offload, is
//   updated on the host, whose rounded result is what goes back up.
#include <deque>

#include "core/layer_ops.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/sharding.h"
#include "core/strategy.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

// A unit being assembled: valid once `work` has completed.
struct Gathered {
  int unit = -1;
  Tensor staged;  // --offload: the device copy of this rank's shard, input of the all-gather
  Tensor params;  // the whole unit, padded
  Work work;
  bool valid() const { return !params.empty(); }
};

struct PendingReduce {
  int unit = -1;
  Tensor unreduced;  // the collective's workspace until `work` completes
  Tensor staged;     // --offload: the reduced shard on the device, before its copy to the host
  Work work;
};

class Fsdp final : public Strategy {
 public:
  void setup(RankEnv& env, const std::vector<float>& init) override {
    env_ = &env;
    offload_ = env.cfg.offload;
    const Pool pool = offload_ ? Pool::host : Pool::device;
    units_ = make_flat_groups(env.layout, env.cfg.fsdp_unit, env.world);
    mp_ = std::make_unique<MixedPrecision>(env.cfg.precision);
    const DType dt = mp_->dtype();
    std::vector<Optimizer::Range> shards;
    std::vector<std::vector<float>> init_shards;
    for (const FlatGroup& u : units_) {
      // Every rank was handed the same initial weights; it keeps only its slice.
      std::vector<float>& values = init_shards.emplace_back(u.plan.shard);
      read_group_values(values.data(), u, init, u.plan.begin(env.rank), u.plan.shard);
      Tensor p =
          env.alloc.alloc(u.shard_name(env.rank), MemCategory::params, u.plan.shard, dt, pool);
      write_from_host(env.device, p, 0, values.data(), values.size());  // either pool
      param_shards_.push_back(std::move(p));
      grad_shards_.push_back(env.alloc.alloc(u.shard_name(env.rank) + ".grad", MemCategory::grads,
                                             u.plan.shard, dt, pool));
      shards.push_back({u.shard_name(env.rank), u.plan.shard});
    }
    // With --offload this is ZeRO-Offload's CPU optimizer: its state (and the
    // fp32 masters) in the host pool, next to the shards it updates.
    optimizer_ = std::make_unique<Optimizer>(env.cfg.optimizer, env.alloc, shards, dt, pool);
    if (optimizer_->mixed())
      for (const FlatGroup& u : units_)
        optimizer_->load_master(u.index, init_shards[u.index].data());
  }

  LossShare step(int step) override {
    RankEnv& env = *env_;
    const int W = env.world, D = env.layout.dim();
    const int U = static_cast<int>(units_.size());
    const bool reshard = env.cfg.reshard_after_forward, prefetch = env.cfg.prefetch;
    const int b = env.cfg.batch / W;  // this rank's slice of the global batch, in rank order
    Tensor x = env.alloc.alloc("batch.x", MemCategory::activations, {b, D});
    Tensor y = env.alloc.alloc("batch.y", MemCategory::activations, {b, D});
    load_rows(env.device, env.data, step, env.rank * b, b, x.data<float>(), y.data<float>());

    // Phase 1 — forward, unit by unit: gather the unit's flat parameter, run
    // its layers, then reshard (free it) or, with --no-reshard, keep it.
    const DType dt = mp_->dtype();
    LayerTape tape(env.layout, env.alloc, env.rec, dt);
    tape.begin(x.data<float>(), b);
    std::vector<Gathered> kept(U);
    for (int u = 0; u < U; ++u) {
      Gathered cur = gather(u);
      wait(cur);
      for (int l = units_[u].first; l < units_[u].last; ++l)
        tape.forward(l, weight(cur, l), bias(cur, l));
      if (!reshard) kept[u] = std::move(cur);
    }  // a resharded unit's gathered buffer is freed here, at the end of its iteration
    Tensor dpred = env.alloc.alloc("loss.grad", MemCategory::temporary, {b, D}, dt);
    double loss;
    {
      ScopedSpan span(env.rec, Lane::compute, SpanKind::loss);
      const size_t n = static_cast<size_t>(b) * D;
      loss = mp_->mse_loss(env.alloc, dpred.raw(), tape.output(), y.data<float>(), n, n);
    }

    // Phase 2 — backward, last unit first. The unit must be whole again
    // (kept, or gathered anew); with prefetch the previous unit's all-gather is
    // started before this unit's gradient is computed. The unit's gradient is
    // reduce-scattered into this rank's shard, and the full gradient freed as
    // soon as that is done.
    tape.begin_backward(dpred.raw());
    auto whole = [&](int u) { return kept[u].valid() ? std::move(kept[u]) : gather(u); };
    std::deque<PendingReduce> pending;
    Gathered next = whole(U - 1);
    for (int u = U - 1; u >= 0; --u) {
      Gathered cur = std::move(next);
      if (prefetch && u > 0) next = whole(u - 1);
      wait(cur);
      const FlatGroup& g = units_[u];
      Tensor full = env.alloc.alloc(g.name + kUnreduced + ".grad", MemCategory::comm_buffers,
                                    g.plan.padded(), dt);
      for (int l = g.last - 1; l >= g.first; --l)
        tape.backward(l, weight(cur, l), at(full, g.weight_offset(env.layout, l)),
                      at(full, g.bias_offset(env.layout, l)));
      cur.params.reset();
      reduce(u, std::move(full), pending);
      free_reduced(pending, /*keep_at_most=*/2);
      if (!prefetch && u > 0) next = whole(u - 1);
    }
    free_reduced(pending, 0);

    // Phase 3 — each rank updates its own shard of every unit (on the host
    // with --offload) with the average gradient, sum / N. (fp16: a step whose
    // gradients overflowed on any rank is skipped on all, by a vote.)
    std::vector<void*> params, grads;
    for (const FlatGroup& g : units_) {
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
      return gather_master_params(*env_->comm, env_->alloc, env_->layout.total(), units_,
                                  *optimizer_, offload_);
    std::vector<const float*> shards;
    for (const Tensor& t : param_shards_) shards.push_back(static_cast<const float*>(t.raw()));
    return gather_model_params(*env_->comm, env_->alloc, env_->layout.total(), units_, shards,
                               offload_);
  }

 private:
  // Starts assembling unit u from every rank's shard (staging it on the device first with
  // --offload).
  Gathered gather(int u) {
    const FlatGroup& g = units_[u];
    Gathered out;
    out.unit = u;
    const void* shard = param_shards_[u].raw();
    if (offload_) {
      out.staged = env_->alloc.alloc(g.shard_name(env_->rank), MemCategory::comm_buffers,
                                     g.plan.shard, mp_->dtype());
      copy(out.staged.raw(), shard, out.staged.bytes(), CopyKind::host_to_device, g.first);
      shard = out.staged.raw();
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
  }

  // Starts reduce-scattering unit u's full gradient into this rank's shard
  // (into a device staging buffer with --offload; see free_reduced).
  void reduce(int u, Tensor full, std::deque<PendingReduce>& pending) {
    const FlatGroup& g = units_[u];
    PendingReduce p;
    p.unit = u;
    void* out = grad_shards_[u].raw();
    if (offload_) {
      p.staged = env_->alloc.alloc(g.shard_name(env_->rank) + ".grad", MemCategory::comm_buffers,
                                   g.plan.shard, mp_->dtype());
      out = p.staged.raw();
    }
    p.work = env_->comm->reduce_scatter_async(full.raw(), out, g.plan.counts(), mp_->dtype(),
                                              CommMeta{g.first, -1});
    p.unreduced = std::move(full);
    pending.push_back(std::move(p));
  }

  // Retires reduce-scatters that are done (the oldest first, waiting while
  // more than `keep_at_most` are in flight): frees the full gradient and, with
  // --offload, copies the reduced shard to its home in host memory.
  void free_reduced(std::deque<PendingReduce>& pending, size_t keep_at_most) {
    while (!pending.empty() && (pending.size() > keep_at_most || pending.front().work.done())) {
      PendingReduce& p = pending.front();
      p.work.wait();  // rethrows a failed collective
      if (offload_)
        copy(grad_shards_[p.unit].raw(), p.staged.raw(), p.staged.bytes(), CopyKind::device_to_host,
             units_[p.unit].first);
      pending.pop_front();
    }
  }

  // A host↔device copy, recorded with its bytes: a real cudaMemcpy on a GPU.
  void copy(void* dst, const void* src, size_t bytes, CopyKind kind, int layer) {
    ScopedSpan span(env_->rec, Lane::comm,
                    kind == CopyKind::host_to_device ? SpanKind::copy_h2d : SpanKind::copy_d2h,
                    layer, -1, static_cast<int64_t>(bytes));
    env_->device.copy(dst, src, bytes, kind);
  }

  const void* weight(Gathered& g, int l) {
    return at(g.params, units_[g.unit].weight_offset(env_->layout, l));
  }
  const void* bias(Gathered& g, int l) {
    return at(g.params, units_[g.unit].bias_offset(env_->layout, l));
  }

  RankEnv* env_ = nullptr;
  bool offload_ = false;
  std::vector<FlatGroup> units_;
  std::vector<Tensor> param_shards_;  // layers.A-B.flat[shard r/N] (host pool with --offload)
  std::vector<Tensor> grad_shards_;   // layers.A-B.flat[shard r/N].grad
  std::unique_ptr<MixedPrecision> mp_;
  std::unique_ptr<Optimizer> optimizer_;  // on the host with --offload; fp32 masters when mixed
};

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo fsdp_strategy() {
  return {
      .name = "fsdp",
      .summary =
          "FullyShardedDataParallel: units of --fsdp-unit layers with one flat sharded parameter; "
          "reshard after forward, backward prefetch, optional CPU offload",
      .family = StrategyFamily::data_parallel,
      .reads = {StrategyOption::precision, StrategyOption::no_prefetch, StrategyOption::fsdp_unit,
                StrategyOption::no_reshard, StrategyOption::offload},
      .zero_stage = 3,
      .traffic = Traffic::gather_per_pass,
      .comm_buffers = "gathered parameters and unreduced gradients of the units in flight",
      .make = [] { return std::make_unique<Fsdp>(); },
      .validate =
          [](const RunConfig& cfg) {
            require_batch_divisible(cfg);
            const int layers = ModelSpec::parse(cfg.model).layers;
            if (cfg.fsdp_unit < 1 || cfg.fsdp_unit > layers)
              throw ConfigError("--fsdp-unit " + std::to_string(cfg.fsdp_unit) +
                                " is invalid for model " + cfg.model + " (valid: 1 to " +
                                std::to_string(layers) + " layers per unit)");
          },
  };
}

}  // namespace shardlab
