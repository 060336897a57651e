// `dp`: single-process DataParallel, the classic way (torch.nn.DataParallel).
// One controller drives W devices through memory, with no communicator at all.
//
// Every step, from device 0: broadcast the weights to fresh replicas on the
// other devices, scatter the batch, run forward in parallel, gather the
// outputs back, compute the loss on device 0, scatter the output gradients,
// run backward in parallel, reduce the gradients onto device 0, and update
// there only.
//
// What to notice: device 0 is the bottleneck. In the memory panel it carries
// the model states and optimizer, the whole batch, the gathered outputs and the
// gradients arriving from every replica, while the others hold a replica that
// lives for one step (`layers.3.weight[replica]`). In the timeline every copy
// goes to or from device 0 (comm lane: broadcast, scatter, gather, reduce), the
// other devices wait while device 0 computes the loss, and every step starts by
// copying the whole model again. That is why DDP — every rank a full peer that
// keeps its own replica and all-reduces gradients — replaced it.
//
// Mixed precision (--precision bf16|fp16): device 0's module is 2-byte params
// and grads with fp32 masters in its optimizer state; the replicas, the
// gathered outputs, the output gradients and the gradients sent back are all 2
// bytes a value, so every copy but the (fp32) batch rows halves. Device 0 alone
// checks fp16 gradients for overflow, so no vote is needed.
//
// Here the controller is the thread of rank 0 (which is also device 0); each
// other rank's thread is that device's worker. They meet at a PhaseBarrier
// (core/comm/phase_barrier.h) after each phase; what device 0 publishes between two
// barriers is in DpShared.
#include <atomic>
#include <chrono>

#include "core/comm/phase_barrier.h"
#include "core/model/layer_ops.h"
#include "core/model/model_family.h"
#include "core/model/optimizer.h"
#include "core/model/precision.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

// What device 0 publishes for the other devices; each pointer is written
// before a barrier and read by the others only after it.
struct DpShared {
  DpShared(int world, std::chrono::milliseconds timeout)
      : barrier_world(world), barrier("dp", world, timeout), grad_inbox(world, nullptr) {}
  int barrier_world;
  PhaseBarrier barrier;
  // Bytes each device has sent: device 0 sends weights, batch rows and output
  // gradients; the others send outputs and gradients back.
  std::vector<std::atomic<int64_t>> sent = std::vector<std::atomic<int64_t>>(barrier_world);
  // Below, every buffer but the batch is in the run's storage dtype (fp32, or 2 bytes).
  std::vector<const void*> params;  // device 0's parameters, in model order
  const char* x = nullptr;          // the global batch's inputs [B, act_numel(0)], 4 bytes each
  void* outputs = nullptr;          // [B, D]: every device's output, gathered
  const void* dout = nullptr;       // [B, D]: gradient of the loss w.r.t. the outputs
  std::vector<void*> grad_inbox;    // [k]: device k's gradients, flat in model order
};

class Dp final : public Strategy {
 public:
  // Also runs when this device's thread failed: the others must not wait for it.
  ~Dp() override {
    if (!shared_) return;
    shared_->barrier.leave(rank_);  // env_ may be gone by now
    // Device 0's tensors are about to be freed: not while another device copies them.
    if (rank_ == 0) shared_->barrier.drain(rank_);
  }

  void setup(RankEnv& env, const ParamSource& init) override {
    env_ = &env;
    rank_ = env.rank;
    shared_ = env.shared.get_or_create<DpShared>("dp", env.world,
                                                 std::chrono::milliseconds(env.cfg.timeout_ms));
    mp_ = std::make_unique<MixedPrecision>(env.cfg.precision);
    if (env.rank != 0) return;  // the other devices hold nothing between steps
    // Device 0 holds the module: the only persistent parameters, gradients and optimizer.
    const DType dt = mp_->dtype();
    for (const ParamInfo& p : env.layout.params()) {
      Tensor t = env.alloc.alloc(p.name, MemCategory::params, p.shape, dt);
      init.write_to(env.device, t, 0, p.offset, p.numel);
      params_.push_back(std::move(t));
      grads_.push_back(env.alloc.alloc(p.name + ".grad", MemCategory::grads, p.shape, dt));
    }
    std::vector<Optimizer::Range> ranges;
    for (const ParamInfo& p : env.layout.params()) ranges.push_back({p.name, p.numel});
    optimizer_ = std::make_unique<Optimizer>(env.cfg.optimizer, env.alloc, ranges, dt);
    if (optimizer_->mixed())
      for (size_t i = 0; i < ranges.size(); ++i)
        optimizer_->load_master(i, init, env.layout.params()[i].offset);
  }

  LossShare step(int step) override {
    RankEnv& env = *env_;
    DpShared& sh = *shared_;
    const ModelLayout& layout = env.layout;
    const int W = env.world, L = layout.num_layers(), B = env.cfg.batch;
    const int b = B / W, k = env.rank;
    const bool device0 = k == 0;
    const auto in_row = static_cast<int64_t>(layout.act_numel(0));   // input values per row
    const auto out_row = static_cast<int64_t>(layout.act_numel(L));  // output values per row
    const size_t in_slice = static_cast<size_t>(b) * in_row;         // values in one device's rows
    const size_t slice = static_cast<size_t>(b) * out_row;
    const DType dt = mp_->dtype();
    const size_t es = mp_->bytes();  // bytes per stored value

    // Phase 0 — device 0 holds the whole batch, as a DataParallel user's loop
    // does, and prepares what the others will copy from or into.
    Batch batch;
    Tensor outputs;
    if (device0) {
      batch = load_batch(env, step, 0, B);
      outputs = env.alloc.alloc("output[gathered]", MemCategory::activations, {B, out_row}, dt);
      for (Tensor& g : grads_) env.device.fill_zero(g.raw(), g.bytes());
      sh.params.clear();
      for (Tensor& p : params_) sh.params.push_back(p.raw());
      sh.x = static_cast<const char*>(batch.x.raw());
      sh.outputs = outputs.raw();
    }
    meet("broadcast");

    // Phase 1 — replicate: every other device copies the current weights from
    // device 0 into a fresh replica (and makes room for its gradients).
    std::vector<Tensor> replica, replica_grads;
    std::vector<void*> w, dw;  // this device's parameters and gradients, in model order
    if (device0) {
      for (Tensor& p : params_) w.push_back(p.raw());
      for (Tensor& g : grads_) dw.push_back(g.raw());
    } else {
      for (const ParamInfo& p : layout.params()) {
        replica.push_back(env.alloc.alloc(p.name + kReplica, MemCategory::params, p.shape, dt));
        replica_grads.push_back(
            env.alloc.alloc(p.name + kReplica + ".grad", MemCategory::grads, p.shape, dt));
        w.push_back(replica.back().raw());
        dw.push_back(replica_grads.back().raw());
      }
      for (int l = 0; l < L; ++l)
        for (int i = layout.first_param(l); i < layout.first_param(l) + layout.param_count(l); ++i)
          copy(w[i], sh.params[i], layout.params()[i].numel * es, SpanKind::broadcast, l);
    }

    // Phase 2 — scatter: device k takes rows [k·b, (k+1)·b) of the batch.
    // Device 0's own slice needs no copy.
    Tensor my_x;
    const void* in = sh.x;
    if (!device0) {
      my_x = env.alloc.alloc("batch.x", MemCategory::activations, {b, in_row});
      copy(my_x.raw(), sh.x + k * in_slice * 4, in_slice * 4, SpanKind::scatter, -1);
      in = my_x.raw();
    }

    // Phase 3 — forward on every device at once, each on its own rows.
    LayerTape tape(layout, env.alloc, env.rec, dt);
    tape.begin(in, b);
    for (int l = 0; l < L; ++l) tape.forward(l, of_layer(w, l));

    // Phase 4 — gather the outputs onto device 0, in rank order.
    char* outputs_at = static_cast<char*>(sh.outputs) + k * slice * es;
    if (device0)  // within device 0: not a transfer, no span
      env.device.copy(outputs_at, tape.output(), slice * es, CopyKind::device_to_device);
    else
      copy(outputs_at, tape.output(), slice * es, SpanKind::gather, L - 1);
    meet("gather");

    // Phase 5 — the loss, on device 0 only, over the whole batch; the other
    // devices wait. Device 0 also makes room for the gradients coming back.
    Loss loss;
    std::vector<Tensor> inbox;
    if (device0) {
      loss = compute_loss(env, *mp_, sh.outputs, batch);
      sh.dout = loss.grad.raw();
      for (int j = 1; j < W; ++j) {
        inbox.push_back(env.alloc.alloc("grads[from device " + std::to_string(j) + "]",
                                        MemCategory::comm_buffers, layout.total(), dt));
        sh.grad_inbox[j] = inbox.back().raw();
      }
    }
    meet("scatter");

    // Phase 6 — scatter the output gradients, then backward on every device at
    // once. The loss was the mean over the whole batch, so the replicas'
    // gradients only need summing, not averaging.
    Tensor my_dout;
    const void* g = sh.dout;
    if (!device0) {
      my_dout = env.alloc.alloc("loss.grad", MemCategory::temporary, {b, out_row}, dt);
      copy(my_dout.raw(), static_cast<const char*>(sh.dout) + k * slice * es, slice * es,
           SpanKind::scatter, L - 1);
      g = my_dout.raw();
    }
    tape.begin_backward(g);
    for (int l = L - 1; l >= 0; --l) {
      tape.backward(l, of_layer(w, l), of_layer(dw, l));
      // Phase 7 — reduce onto device 0: each replica sends its layer's
      // gradients to device 0's inbox as soon as backward has produced them.
      if (!device0)
        for (int i = layout.first_param(l) + layout.param_count(l) - 1; i >= layout.first_param(l);
             --i) {
          const ParamInfo& p = layout.params()[i];
          copy(static_cast<char*>(sh.grad_inbox[k]) + p.offset * es, dw[i], p.numel * es,
               SpanKind::reduce, l);
        }
    }
    replica.clear();  // the replica dies with the step
    replica_grads.clear();
    meet("reduce", /*then_busy=*/false);
    if (!device0) return {0, 0};

    // Phase 8 — device 0 adds up what arrived and updates the only real copy
    // of the model. Next step starts by broadcasting it again.
    {
      ScopedSpan span(env.rec, Lane::compute, SpanKind::reduce);
      // bf16/fp16 are summed in fp32 and rounded once per addition, as a 2-byte reduce does.
      for (const Tensor& from : inbox)
        for (size_t i = 0; i < grads_.size(); ++i) {
          const ParamInfo& p = layout.params()[i];
          env.device.add(grads_[i].raw(), at(from, p.offset), dt, p.numel);
        }
    }
    inbox.clear();
    // A tied weight's two gradients (gpt's lm_head and token embedding) are summed.
    sum_tied_grads(layout, env.device, dt, [&](int i) { return grads_[i].raw(); });
    {
      ScopedSpan span(env.rec, Lane::compute, SpanKind::optimizer);
      std::vector<void*> params, grads;
      for (Tensor& p : params_) params.push_back(p.raw());
      for (Tensor& gr : grads_) grads.push_back(gr.raw());
      mp_->step(*optimizer_, params, grads, nullptr);  // only device 0 updates: no vote
    }
    return {loss.sum(), B};
  }

  std::vector<float> export_params() override {
    if (env_->rank != 0) return {};
    ExportBuffer flat(env_->alloc, env_->layout.total());
    if (!flat.keeps()) return {};
    for (size_t i = 0; i < params_.size(); ++i) {
      float* dst = flat.at(env_->layout.params()[i].offset, params_[i].numel());
      // The model's weights: the fp32 masters in mixed precision.
      if (optimizer_->mixed())
        optimizer_->read_master(i, dst);
      else
        env_->device.download(dst, params_[i].raw(), DType::f32, params_[i].numel());
    }
    return flat.take();
  }

 private:
  // Layer l's entries of a per-parameter list (model order).
  std::vector<void*> of_layer(const std::vector<void*>& all, int l) const {
    const int first = env_->layout.first_param(l);
    return {all.begin() + first, all.begin() + first + env_->layout.param_count(l)};
  }

  // The devices meet after a phase. Marked (MarkKind::sync) so that a
  // projection onto dedicated devices knows every device waited here for all.
  void meet(const char* phase, bool then_busy = true) {
    ScopedMark mark(env_->rec, MarkKind::sync, syncs_++);
    shared_->barrier.arrive_and_wait(rank_, phase, then_busy);
  }

  // A copy between this device and device 0, on this device's comm lane: a
  // real memcpy here, a peer-to-peer copy between GPUs.
  void copy(void* dst, const void* src, size_t bytes, SpanKind kind, int layer) {
    Span s;
    s.t_begin_ns = now_ns();
    s.cpu_begin_ns = thread_cpu_ns();
    env_->device.copy(dst, src, bytes, CopyKind::device_to_device);
    s.t_end_ns = now_ns();
    s.cpu_end_ns = thread_cpu_ns();
    s.lane = Lane::comm;
    s.kind = kind;
    s.layer = layer;
    s.bytes = static_cast<int64_t>(bytes);
    s.peer = 0;
    if (env_->rec) env_->rec->add_span(s);
    const bool from_device0 = kind == SpanKind::broadcast || kind == SpanKind::scatter;
    shared_->sent[from_device0 ? 0 : rank_] += static_cast<int64_t>(bytes);
  }

 public:
  // Device 0 holds the whole module and its optimizer; the other devices get
  // their replicas anew each step, so they save nothing.
  RankState rank_state() override {
    RankState st;
    if (rank_ != 0) {
      st.holds_nothing = true;
      return st;
    }
    st.optimizer = optimizer_.get();
    st.precision = mp_.get();
    for (size_t i = 0; i < params_.size(); ++i) {
      const ParamInfo& p = env_->layout.params()[i];
      st.offset.push_back(p.offset);
      st.count.push_back(p.numel);
      st.weight.push_back(&params_[i]);
      st.weight_at.push_back(0);
    }
    return st;
  }

  int64_t bytes_sent_outside_comm() const override {
    return shared_ ? shared_->sent[rank_].load() : 0;
  }

 private:
  RankEnv* env_ = nullptr;
  int rank_ = 0;
  std::shared_ptr<DpShared> shared_;
  std::vector<Tensor> params_, grads_;  // device 0 only
  std::unique_ptr<MixedPrecision> mp_;
  std::unique_ptr<Optimizer> optimizer_;  // device 0 only; fp32 masters in mixed precision
  uint64_t syncs_ = 0;                    // barriers met so far: the n-th meets the n-th
};

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo dp_strategy() {
  return {
      .name = "dp",
      .summary =
          "DataParallel (single process): device 0 broadcasts weights, scatters the batch, gathers "
          "outputs, reduces gradients and updates",
      .family = StrategyFamily::data_parallel,
      .reads = {StrategyOption::precision},
      .controller = true,
      // Device 0 copies the weights to each of the N−1 replicas; each copies its
      // gradients back.
      .moves =
          [](const MoveQuery& q) {
            if (q.world == 1) return std::vector<StateMove>{};
            if (q.rank == 0)
              return std::vector<StateMove>{
                  {StateOp::copy, ModelStatePart::params, -1, 1, "to every replica"}};
            return std::vector<StateMove>{
                {StateOp::copy, ModelStatePart::grads, 1, 0, "to device 0"}};
          },
      .comm_buffers = "device 0's inboxes for every replica's gradients",
      .make = [] { return std::make_unique<Dp>(); },
      .validate = [](const RunConfig& cfg) { require_batch_divisible(cfg); },
  };
}

}  // namespace shardlab
