// `ps`: a parameter server (Li et al., OSDI 2014; TensorFlow's and MXNet's
// first architecture). The first --servers S ranks are servers: each owns one
// contiguous shard of the flat parameters and that shard's optimizer state,
// and computes nothing. The other W = world − S ranks are workers: each keeps
// the whole model, trains on its own 1/W of the batch, pushes each shard of
// its gradient to the server that owns it, and pulls the updated shards back.
// Every byte is a point-to-point send or receive, so every wait shows.
//
// What to notice, beside ddp (the decentralised answer, all-reduce between peers):
// - The bottleneck. A server receives its shard's gradient from every worker
//   and sends its parameters back to every worker: 2·W·Ψ/S bytes a step
//   through one rank, growing with the workers, while an all-reduce moves
//   2(N−1)/N·Ψ through each rank whatever N is. The timeline shows the
//   server's comm lane full and the workers waiting on it.
// - Memory is not alike either: a server holds 1/S of the parameters and all
//   of their optimizer state, plus an inbox per worker; a worker holds the
//   parameters and gradients but no optimizer state at all.
// - Staleness (--staleness K, asynchronous training). With K = 0 a worker
//   waits for update t before it computes step t: synchronous, the same
//   weights as `single`. With K > 0 it may compute step t with parameters
//   as old as update t − K, using the freshest that have arrived: fast
//   workers stop waiting for slow ones, and each gradient is applied to
//   weights that have moved since it was computed. The timeline shows each
//   worker's staleness on its spans; the loss still falls, but no longer
//   equals `single` — this is the one strategy held to a loss bound instead.
//
// Mixed precision (--precision bf16): workers compute, push and pull 2-byte
// values; each server keeps the fp32 master of its shard with its optimizer
// state. fp16 is refused: its loss scale would have to be agreed between
// servers and workers, which this build does not do.
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

// Point-to-point tags: gradients up, parameters down, the final export.
constexpr int kPushTag = 1, kPullTag = 2, kExportTag = 3;
// The most updates a worker may lag: each one it may is K + 1 more inboxes on every server.
constexpr int kMaxStaleness = 1000;

int servers_of(const RunConfig& cfg) {
  return cfg.servers;
}

class ParameterServer final : public Strategy {
 public:
  void setup(RankEnv& env, const ParamSource& init) override {
    env_ = &env;
    S_ = servers_of(env.cfg);
    W_ = env.world - S_;
    K_ = env.cfg.staleness;
    mp_ = std::make_unique<MixedPrecision>(env.cfg.precision);
    // The whole model as one flat buffer cut into S contiguous shards: server s owns shard s.
    model_ = make_flat_groups(env.layout, env.layout.num_layers(), S_).front();
    if (env.rank < S_)
      setup_server(init);
    else
      setup_worker(init);
  }

  LossShare step(int step) override {
    if (env_->rank < S_) {
      serve(step);
      return {};
    }
    return work(step);
  }

  // Server 0 collects the other servers' shards (fp32 masters in mixed precision).
  std::vector<float> export_params() override {
    RankEnv& env = *env_;
    if (env.rank >= S_) return {};
    const ShardPlan& plan = model_.plan;
    Tensor mine = env.alloc.alloc(model_.shard_name(env.rank) + "[export]",
                                  MemCategory::comm_buffers, plan.shard, DType::f32);
    if (optimizer_->mixed())
      env.device.copy(mine.raw(), optimizer_->master(0), mine.bytes(), CopyKind::device_to_device);
    else
      env.device.copy(mine.raw(), shard_.raw(), mine.bytes(), CopyKind::device_to_device);
    if (env.rank != 0) {
      env.comm->send(mine.raw(), mine.bytes(), 0, kExportTag);
      return {};
    }
    ExportBuffer flat(env.alloc, plan.numel);
    Tensor other = env.alloc.alloc("ps.export", MemCategory::comm_buffers, plan.shard, DType::f32);
    for (int s = 0; s < S_; ++s) {
      if (s > 0) env.comm->recv(other.raw(), other.bytes(), s, kExportTag);
      const size_t real = plan.real(s);
      if (real > 0 && flat.keeps())
        env.device.download(flat.at(plan.begin(s), real), s == 0 ? mine.raw() : other.raw(),
                            DType::f32, real);
    }
    return flat.keeps() ? flat.take() : std::vector<float>{};
  }

 private:
  // ---- Servers ----------------------------------------------------------

  void setup_server(const ParamSource& init) {
    RankEnv& env = *env_;
    const DType dt = mp_->dtype();
    const size_t n = model_.plan.shard, begin = model_.plan.begin(env.rank);
    const std::string name = model_.shard_name(env.rank);
    shard_ = env.alloc.alloc(name, MemCategory::params, n, dt);
    write_group_values(env.device, shard_, model_, init, begin, n);
    grad_ = env.alloc.alloc(name + ".grad", MemCategory::grads, n, dt);
    optimizer_ = std::make_unique<Optimizer>(env.cfg.optimizer, env.alloc,
                                             std::vector<Optimizer::Range>{{name, n}}, dt);
    if (optimizer_->mixed())
      write_group_values(optimizer_->backend(), optimizer_->master_tensor(0), model_, init, begin,
                         n);
    // An inbox per worker for each step a worker may be ahead (K + 1): the
    // receives are posted before the workers send, so a push never waits for
    // the server to be ready, only for the wire.
    for (int ahead = 0; ahead <= K_ && ahead < env.cfg.steps; ++ahead) post_inboxes();
  }

  // Posts the receives of every worker's gradient for the next step not yet posted.
  void post_inboxes() {
    RankEnv& env = *env_;
    std::vector<Inbox> box;
    for (int w = 0; w < W_; ++w) {
      Inbox in;
      in.grad = env.alloc.alloc(
          model_.shard_name(env.rank) + ".grad[from rank " + std::to_string(S_ + w) + "]",
          MemCategory::comm_buffers, model_.plan.shard, mp_->dtype());
      in.work = env.comm->recv_async(in.grad.raw(), in.grad.bytes(), S_ + w, kPushTag);
      box.push_back(std::move(in));
    }
    inboxes_.push_back(std::move(box));
  }

  void serve(int step) {
    RankEnv& env = *env_;
    const DType dt = mp_->dtype();
    const size_t n = model_.plan.shard;

    // Phase 1 — sum: wait for every worker's gradient of this step, in
    // worker order (the sum is the same whichever arrives first), and add it
    // to the shard's gradient. Each worker divided its loss by the global
    // batch, so the sum is the full batch's gradient.
    std::vector<Inbox> box = std::move(inboxes_.front());
    inboxes_.pop_front();
    env.device.fill_zero(grad_.raw(), grad_.bytes());
    for (Inbox& in : box) {
      in.work.wait();
      env.device.add(grad_.raw(), in.grad.raw(), dt, n);
      in.grad.reset();
    }
    // Every worker that pushed this step's gradient held update step − K or
    // newer: the copies of those updates have been taken, and are freed now
    // (at a point the run decides, not the wire, so memory is the same every run).
    while (!outboxes_.empty() && outboxes_.front().version <= step - K_) {
      for (Work& w : outboxes_.front().sends) w.wait();
      outboxes_.pop_front();
    }
    if (step + K_ + 1 < env.cfg.steps) post_inboxes();  // step + K + 1's

    // Phase 2 — update this shard, the only place its optimizer state lives.
    {
      ScopedSpan span(env.rec, Lane::compute, SpanKind::optimizer);
      mp_->step(*optimizer_, {shard_.raw()}, {grad_.raw()}, nullptr);
    }

    // Phase 3 — send update step + 1 of this shard to every worker. The copy
    // lets the next update go on while a worker that is ahead has not taken
    // this one yet.
    Outbox out;
    out.version = step + 1;
    out.params =
        env.alloc.alloc(model_.shard_name(env.rank) + "[update " + std::to_string(step + 1) + "]",
                        MemCategory::comm_buffers, n, dt);
    env.device.copy(out.params.raw(), shard_.raw(), shard_.bytes(), CopyKind::device_to_device);
    for (int w = 0; w < W_; ++w)
      out.sends.push_back(
          env.comm->send_async(out.params.raw(), out.params.bytes(), S_ + w, kPullTag));
    outboxes_.push_back(std::move(out));
    if (step + 1 == env.cfg.steps)  // the last update: every worker takes it before it ends
      for (; !outboxes_.empty(); outboxes_.pop_front())
        for (Work& w : outboxes_.front().sends) w.wait();
  }

  // ---- Workers ----------------------------------------------------------

  void setup_worker(const ParamSource& init) {
    RankEnv& env = *env_;
    const DType dt = mp_->dtype();
    // Every worker is handed the same initial weights (update 0).
    params_ = env.alloc.alloc(model_.name, MemCategory::params, model_.plan.padded(), dt);
    write_group_values(env.device, params_, model_, init, 0, model_.plan.padded());
    grads_ = env.alloc.alloc(model_.name + ".grad", MemCategory::grads, model_.plan.padded(), dt);
    tied_ = std::make_unique<TiedGradients>(env.layout, std::vector<FlatGroup>{model_});
    version_.assign(S_, 0);
    pulls_.resize(S_);
    for (int s = 0; s < S_; ++s) post_pull(s);
  }

  // Posts the receive of server s's next update. Synchronous (K = 0) it lands
  // in the parameters themselves, which nothing reads until it has; with
  // staleness it lands beside them, to be taken at the start of a step.
  void post_pull(int s) {
    RankEnv& env = *env_;
    if (version_[s] >= env.cfg.steps) return;
    Pull& p = pulls_[s];
    void* dst = at(params_, model_.plan.begin(s));
    if (K_ > 0) {
      p.staged = env.alloc.alloc(model_.shard_name(s) + "[pulled]", MemCategory::comm_buffers,
                                 model_.plan.shard, mp_->dtype());
      dst = p.staged.raw();
    }
    p.work = env.comm->recv_async(dst, model_.plan.shard * mp_->bytes(), s, kPullTag);
  }

  // Takes every update up to `most` that has arrived from each server,
  // waiting for those older than `need`: a worker never computes with
  // parameters older than that. (No update past `most` can have been sent:
  // update t + 1 needs this worker's gradient of step t. The bound keeps a
  // meta run, whose receives are done at once, to the same order.)
  void take_pulls(int need, int most) {
    RankEnv& env = *env_;
    for (int s = 0; s < S_; ++s) {
      Pull& p = pulls_[s];
      while (p.work.valid() && version_[s] < most && (version_[s] < need || p.work.done())) {
        p.work.wait();
        p.work = Work();
        if (!p.staged.empty())
          env.device.copy(at(params_, model_.plan.begin(s)), p.staged.raw(), p.staged.bytes(),
                          CopyKind::device_to_device);
        p.staged.reset();
        ++version_[s];
        post_pull(s);
      }
    }
  }

  LossShare work(int step) {
    RankEnv& env = *env_;
    const DType dt = mp_->dtype();

    // Phase 1 — pull: the parameters this step computes with are at least
    // update step − K (every shard), the freshest that have arrived.
    take_pulls(step - K_, step);
    int oldest = version_[0];
    for (int v : version_) oldest = std::min(oldest, v);
    staleness_ = step - oldest;
    if (env.rec) env.rec->set_staleness(staleness_);

    // Phase 2 — forward, loss and backward on this worker's rows, with the
    // loss divided by the global batch (data_parallel.h).
    const int rows = env.cfg.batch / W_;
    Batch batch = load_batch(env, step, (env.rank - S_) * rows, rows);
    env.device.fill_zero(grads_.raw(), grads_.bytes());
    LayerTape tape(env.layout, env.alloc, env.rec, dt, env.tp);
    tape.begin(batch.x.raw(), batch.rows);
    const int L = env.layout.num_layers();
    for (int l = 0; l < L; ++l) tape.forward(l, at(params_, model_.layer_offset(env.layout, l)));
    Loss loss = compute_loss(env, *mp_, tape.output(), batch);
    tape.begin_backward(loss.grad.raw());
    for (int l = L - 1; l >= 0; --l) {
      const size_t off = model_.layer_offset(env.layout, l);
      tape.backward(l, at(params_, off), at(grads_, off));
    }
    // gpt's lm_head is a copy of the embedding: both halves of its gradient
    // add up before the push, so both copies take the same update.
    tied_->sum(
        0, [&](int) { return grads_.raw(); }, env.device, dt);

    // Phase 3 — push: shard s of the gradient to server s. The server posted
    // its receive already, so this waits only for the wire.
    std::vector<Work> pushes;
    for (int s = 0; s < S_; ++s)
      pushes.push_back(env.comm->send_async(at(grads_, model_.plan.begin(s)),
                                            model_.plan.shard * mp_->bytes(), s, kPushTag));
    for (Work& w : pushes) w.wait();

    // The last step waits for the last update, so every worker ends with the servers' weights.
    if (step + 1 == env.cfg.steps) take_pulls(env.cfg.steps, env.cfg.steps);
    if (env.rec) env.rec->set_staleness(-1);
    return {loss.sum(), batch.rows};
  }

  struct Inbox {
    Tensor grad;
    Work work;
  };
  struct Outbox {
    int version = 0;  // the update it carries
    Tensor params;
    std::vector<Work> sends;
  };
  struct Pull {
    Tensor staged;  // with staleness: where the update lands before it is taken
    Work work;
  };

  RankEnv* env_ = nullptr;
  int S_ = 1, W_ = 1, K_ = 0;
  std::unique_ptr<MixedPrecision> mp_;
  FlatGroup model_;  // the whole model, one flat group cut into S shards
  // A server's: its shard, the shard's summed gradient, its optimizer, the
  // inboxes posted for the next K + 1 steps and the updates not yet taken.
  Tensor shard_, grad_;
  std::unique_ptr<Optimizer> optimizer_;
  std::deque<std::vector<Inbox>> inboxes_;
  std::deque<Outbox> outboxes_;
  // A worker's: the whole model's parameters and gradients, which update of
  // each server's shard they hold, and the pending receive of the next.
  Tensor params_, grads_;
  std::unique_ptr<TiedGradients> tied_;  // gpt's lm_head and wte, both in the one group
  std::vector<int> version_;
  std::vector<Pull> pulls_;
  int staleness_ = 0;
};

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo ps_strategy() {
  return {
      .name = "ps",
      .summary =
          "parameter server: --servers ranks own the parameter shards and the optimizer, "
          "the other ranks compute gradients, push them and pull the parameters; "
          "--staleness K lets workers run K updates ahead",
      .family = StrategyFamily::parameter_server,
      .reads = {StrategyOption::precision, StrategyOption::servers, StrategyOption::staleness},
      .comm_buffers =
          "a server's inbox per worker, the updates not yet pulled; a worker's pulls "
          "in flight",
      .servers = servers_of,
      .converges_only = [](const RunConfig& cfg) { return cfg.staleness > 0; },
      // Step K holds K + 1 steps of inboxes and K + 1 updates not yet taken.
      .filling_steps = [](const RunConfig& cfg) { return cfg.staleness + 1; },
      // Its in-flight updates and staleness have no checkpoint format yet.
      .checkpoints = false,
      .make = [] { return std::make_unique<ParameterServer>(); },
      .validate =
          [](const RunConfig& cfg) {
            if (cfg.servers < 1)
              throw ConfigError("--servers " + std::to_string(cfg.servers) +
                                " is invalid (valid: 1 to --world minus 1)");
            if (cfg.staleness < 0 || cfg.staleness > kMaxStaleness)
              throw ConfigError("--staleness " + std::to_string(cfg.staleness) +
                                " is invalid (valid: 0 for synchronous updates, up to " +
                                std::to_string(kMaxStaleness) + " updates a worker may lag)");
            const int S = servers_of(cfg);
            if (S >= cfg.world)
              throw ConfigError("--servers " + std::to_string(S) + " is invalid for --world " +
                                std::to_string(cfg.world) + " (valid: 1 to " +
                                std::to_string(cfg.world - 1) + ", leaving at least one worker)");
            const int W = cfg.world - S;
            if (cfg.batch % W != 0)
              throw ConfigError("--batch " + std::to_string(cfg.batch) +
                                " is invalid for ps with " + std::to_string(W) +
                                " workers (--world " + std::to_string(cfg.world) + " − --servers " +
                                std::to_string(S) + "; valid: a multiple of " + std::to_string(W) +
                                ")");
            if (cfg.precision == "fp16")
              throw ConfigError(
                  "--precision fp16 is invalid for ps (valid: fp32, bf16): its loss scale would "
                  "have to be agreed between servers and workers");
          },
  };
}

}  // namespace shardlab
