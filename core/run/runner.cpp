// The embedded launcher: ranks are threads of this process, each with its own
// device backend (CPU, guarded CPU, or a GPU), allocator, recorder and
// communicator (Gloo, Gloo with host staging, or NCCL: see placement.h). Nothing
// is shared between ranks but the group and the result slots each rank writes alone.
#include "core/run/runner.h"

#include "core/model/model_family.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>

#include "core/comm/cores.h"
#include "core/comm/mesh_comms.h"
#include "core/comm/nccl_group.h"
#include "core/comm/staging_comm.h"
#include "core/device/gpu.h"
#include "core/launch/process_link.h"
#include "core/model/data_loader.h"
#include "core/model/layer_stack.h"
#include "core/model/precision.h"
#include "core/parallel/data_parallel_mesh.h"
#include "core/parallel/rank_body.h"
#include "core/parallel/strategy.h"
#include "core/predict/memory_estimate.h"
#include "core/run/train_checkpoint.h"
#include "kernels/cpu.h"

namespace shardlab {

void RunControl::pause() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = true;
  // A step some rank has already entered must be let in for every rank: the
  // others would otherwise leave it waiting in a collective while paused.
  allowed_until_ = highest_admitted_ + 1;
}

void RunControl::resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
  }
  cv_.notify_all();
}

void RunControl::step_once() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = true;
    allowed_until_ = std::max(allowed_until_, highest_admitted_ + 1) + 1;
  }
  cv_.notify_all();
}

void RunControl::cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The same rule as pause: every rank finishes the steps any rank has
    // entered, and all of them stop at the same boundary, none in a collective.
    cancel_from_ = std::min(cancel_from_, highest_admitted_ + 1);
  }
  cv_.notify_all();
}

bool RunControl::paused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return paused_;
}

void RunControl::gate(int step) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return step >= cancel_from_ || !paused_ || step < allowed_until_; });
  if (step >= cancel_from_) throw RunCancelled();
  highest_admitted_ = std::max(highest_admitted_, step);
}

namespace {

// "loss became nan at step 2 on rank 0; try a smaller --lr (now 1e+30)"
std::string divergence_message(const RunConfig& cfg, double loss, int step, int rank) {
  char lr[32];
  std::snprintf(lr, sizeof lr, "%g", static_cast<double>(cfg.optimizer.lr));
  std::string m = std::string("loss became ") +
                  (std::isnan(loss) ? "nan"
                   : loss > 0       ? "inf"
                                    : "-inf") +
                  " at step " + std::to_string(step + 1) +
                  (rank >= 0 ? " on rank " + std::to_string(rank) : " (summed over the ranks)") +
                  "; try a smaller --lr (now " + lr + ")";
  // fp16's range ends at 65504: activations beyond it are inf whatever the scale.
  if (cfg.precision == "fp16") m += " or --precision bf16";
  return m;
}

}  // namespace

namespace {

void check_process_run(const RunConfig& cfg, const ProcessContext& process) {
  if (!process.store) throw ConfigError("one process per rank needs a rendezvous store");
  if (process.rank < 0 || process.rank >= cfg.world)
    throw ConfigError("rank " + std::to_string(process.rank) + " is not a rank of a world of " +
                      std::to_string(cfg.world) + " (valid: 0 to " + std::to_string(cfg.world - 1) +
                      ")");
  check_process_config(cfg);
}

}  // namespace

void check_process_config(const RunConfig& cfg) {
  if (is_controller(cfg.strategy))
    throw ConfigError(
        "dp cannot run one process per rank: its controller thread hands the devices their "
        "work through shared memory, so it is one process by nature (use ddp, its "
        "one-process-per-device form)");
}

namespace {

// Ranks as threads: once a rank has failed, every other rank's collective
// fails within the timeout and its thread returns; one that has not returned
// a grace period later is stuck outside any communication, and no thread can
// be unwound from outside. The caller hears of it once, in one line naming it
// (RunCallbacks::on_stuck), and this keeps watching until every thread is back.
void watch_threads(const FailureBoard& failures, const std::vector<std::atomic<bool>>& done,
                   const std::vector<std::atomic<int>>& step,
                   const std::function<void(const std::string&)>& on_stuck) {
  using clock = std::chrono::steady_clock;
  constexpr auto kGrace = std::chrono::seconds(2);
  clock::time_point failed_at{};
  bool told = false;
  for (;;) {
    bool all = true;
    for (const auto& d : done) all &= d.load();
    if (all) return;
    if (failed_at == clock::time_point{} && failures.any()) failed_at = clock::now();
    if (!told && failed_at != clock::time_point{} && clock::now() - failed_at > kGrace) {
      std::string stuck;
      for (size_t r = 0; r < done.size(); ++r)
        if (!done[r].load())
          stuck += (stuck.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) +
                   (step[r].load() < 0 ? std::string(" (before step 1)")
                                       : " (step " + std::to_string(step[r].load() + 1) + ")");
      on_stuck(
          failures.summary() + "; " + stuck + " did not return within " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(kGrace).count()) +
          " ms of it: stuck outside any communication");
      told = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// One process per rank: rank 0 draws the checkpoints' run id and the others
// read it from the store, so every rank's files name the same run.
std::string shared_run_id(const ProcessContext& p, std::chrono::milliseconds timeout) {
  if (!p.store) throw std::logic_error("shared_run_id: a process run without a store");
  const std::string key = "checkpoint-run-id";
  if (p.rank == 0) {
    const std::string id = new_run_id();
    p.store->set(key, std::vector<char>(id.begin(), id.end()));
    return id;
  }
  try {
    p.store->wait({key}, timeout);
    const std::vector<char> v = p.store->get(key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    throw RunError("rank " + std::to_string(p.rank) +
                   " did not receive rank 0's checkpoint run id " + "within " +
                   std::to_string(timeout.count()) + " ms: " + e.what());
  }
}

// Where the ranks run: the plan for this machine, and with one process per rank
// this process's GPU (its place on its host, LOCAL_RANK, not its global rank)
// and a summary saying which rank this is.
Placement run_placement(const RunConfig& cfg, const ProcessContext* process) {
  Placement p = plan_placement(cfg);
  if (!process) return p;
  if (p.kind == DeviceKind::cuda)
    p.gpu_of_rank[process->rank] = process->local_rank % std::max(1, cuda_device_count());
  p.summary =
      std::to_string(cfg.world) + " rank(s), one process each, " +
      (p.kind == DeviceKind::cuda ? "on GPU " + std::to_string(p.gpu_of_rank[process->rank]) +
                                        " here, Gloo with host staging"
                                  : std::string("Gloo over TCP")) +
      " (this is rank " + std::to_string(process->rank) + ", listening on " + process->bind_host +
      ")";
  return p;
}

// Every rank's share of each step's loss, and how many ranks have reported it
// (a --force run can ask for more steps than these fit in).
class LossHistory {
 public:
  LossHistory(int steps, int world) : world_(world) {
    try {
      shares_.resize(static_cast<size_t>(steps) * world);
      reported_ = std::vector<std::atomic<int>>(steps);
    } catch (const std::bad_alloc&) {
      throw RunError("could not allocate the loss history of " + std::to_string(steps) +
                     " steps x " + std::to_string(world) + " ranks (" +
                     bytes_string(static_cast<double>(steps) * (sizeof(LossShare) * world + 4)) +
                     "): out of memory; use fewer --steps");
    }
  }
  // Step `s`'s shares, one per rank.
  LossShare* step(int s) { return shares_.data() + static_cast<size_t>(s) * world_; }
  const LossShare& share(int s, int rank) const {
    return shares_[static_cast<size_t>(s) * world_ + rank];
  }
  // Step `s`'s global loss from every rank's share: Σsum / Σcount.
  double loss(int s) const {
    double sum = 0;
    int64_t count = 0;
    for (int r = 0; r < world_; ++r) {
      sum += share(s, r).sum;
      count += share(s, r).count;
    }
    return count ? sum / count : 0.0;
  }
  // Counts `n` more ranks as reported for step `s`; true for the call that
  // completes it (that rank then sees every share).
  bool report(int s, int n = 1) { return reported_[s].fetch_add(n) + n == world_; }

 private:
  int world_;
  std::vector<LossShare> shares_;
  std::vector<std::atomic<int>> reported_;
};

// The run's communication, made before any rank starts: the failure board
// every rank reports to (every communicator, Gloo's and NCCL's, fails fast on
// it, the process link publishes it to the other processes, and the watchdog
// reads it), the process link (one process per rank), the Gloo group, NCCL's
// where the placement asks for it, and the guard of a guarded CPU.
struct RunComms {
  FailureBoard failures;
  std::unique_ptr<ProcessLink> link;
  std::unique_ptr<GlooGroup> group;
  std::unique_ptr<NcclGroup> nccl;
  std::unique_ptr<MeshGlooGroups> mesh;  // a mesh's groups smaller than the world
  std::shared_ptr<MemoryGuard> guard;

  RunComms(const RunConfig& cfg, const Placement& place, const ProcessContext* process,
           const Mesh& run_mesh) {
    const std::chrono::milliseconds timeout(cfg.timeout_ms);
    const GlooGroupOptions gloo{timeout, process ? process->bind_host : "127.0.0.1", &failures};
    if (process) link = std::make_unique<ProcessLink>(*process, cfg.world, gloo);
    group = link ? std::make_unique<GlooGroup>(cfg.world, gloo, link->store(), "train")
                 : std::make_unique<GlooGroup>(cfg.world, gloo);
    if (link) link->attach(failures);
    if (place.comm == CommKind::nccl)
      nccl = link ? make_nccl_group(cfg.world, timeout, failures, link->store(), process->rank)
                  : make_nccl_group(cfg.world, timeout, failures);
    if (place.guarded) guard = make_memory_guard();
    if (run_mesh.groups().size() > 1) {
      // The axes' groups talk through Gloo (NCCL's would be split from the
      // world's communicator: not in this build).
      if (place.comm == CommKind::nccl)
        throw ConfigError("--mesh " + run_mesh.text() +
                          " runs its axes' groups on Gloo in this build, not NCCL (valid: "
                          "--backend gloo)");
      mesh = link ? std::make_unique<MeshGlooGroups>(run_mesh, gloo, &link->store(), "train-mesh",
                                                     process->rank)
                  : std::make_unique<MeshGlooGroups>(run_mesh, gloo);
    }
  }
};

// This rank's device as the placement says (a GPU, a guarded CPU or a CPU),
// and its allocator over it.
void make_rank_device(RankResources& res, const RunConfig& cfg, const Placement& place,
                      const RunComms& comms, int rank, Recorder* rec) {
  if (place.kind == DeviceKind::cuda)
    res.device = make_cuda_backend(place.gpu_of_rank[rank], rec, cfg.tf32);
  else if (place.guarded)
    res.device = make_guarded_cpu_backend(comms.guard);
  else
    res.device = make_cpu_backend();
  res.alloc = std::make_unique<Allocator>(*res.device, rec, rank);
}

// This rank's communicator as the placement says: NCCL, Gloo with host staging
// (a GPU's buffers go through host memory), or Gloo.
void connect_rank(RankResources& res, const Placement& place, RunComms& comms, int rank,
                  Recorder* rec) {
  if (place.comm == CommKind::nccl)
    res.comm = comms.nccl->connect(rank, *res.device, rec, res.alloc.get());
  else if (place.comm == CommKind::gloo_staged)
    res.comm = make_staging_comm(comms.group->connect(rank, rec, res.alloc.get()), *res.device,
                                 res.alloc.get(), rec);
  else
    res.comm = comms.group->connect(rank, rec, res.alloc.get());
  // Then every rank joins its group on each axis, in the same axis order.
  if (comms.mesh)
    for (MeshAxis axis : kMeshAxes) {
      std::unique_ptr<Comm> c = comms.mesh->connect(rank, axis, rec, res.alloc.get());
      if (c && place.comm == CommKind::gloo_staged)
        c = make_staging_comm(std::move(c), *res.device, res.alloc.get(), rec);
      res.axis_comms[static_cast<size_t>(axis)] = std::move(c);
    }
}

// A failed rank's connections close now: peers blocked on it fail at once, and
// a receive it posted ahead and never waited for (a pipeline's next gradient)
// fails at once too, instead of holding the rank's teardown until the timeout.
void close_rank_connections(RankResources& res) {
  if (res.comm) res.comm->close_connections();
  for (auto& c : res.axis_comms)
    if (c) c->close_connections();
}

// One process per rank, failed: this process ends in a moment. Gloo's device
// thread may still be signalling the failed ops' buffers (and writing into
// their memory), so nothing is freed under it: the communicator, the
// strategy's tensors and the allocator are left to the process's exit. Its
// connections close now, so peers blocked on this rank fail at once.
void abandon_rank(RankResources& res, std::unique_ptr<Strategy>& strategy) {
  close_rank_connections(res);
  for (auto& c : res.axis_comms) (void)c.release();
  (void)strategy.release();
  (void)res.comm.release();
  (void)res.alloc.release();
  (void)res.device.release();
}

// The checkpoints' run id: the caller's, or a new one (with one process per
// rank, rank 0's, shared through the store); none without checkpoints.
std::string checkpoint_run_id(const Checkpointing& ckpt, const RunConfig& cfg,
                              const ProcessContext* process) {
  if (ckpt.every <= 0 || !ckpt.run_id.empty()) return ckpt.run_id;
  return process ? shared_run_id(*process, std::chrono::milliseconds(cfg.timeout_ms))
                 : new_run_id();
}

// After step `s`, every `ckpt.every` steps: every rank saves its state, then
// rank 0 commits the checkpoint with the losses so far (a resumed run's
// earlier losses from its checkpoint).
void checkpoint_after_step(const Checkpointing& ckpt, const RunConfig& cfg, int s, RankEnv& env,
                           Strategy& strategy, const std::string& run_id,
                           const LossHistory& history, int first_step) {
  save_rank_checkpoint(ckpt.dir, s + 1, cfg, env.rank, env.world, strategy.rank_state(), env.device,
                       run_id);
  // Every rank has saved (and written its loss share) before rank 0 makes the
  // checkpoint count.
  env.comm->barrier();
  if (env.rank != 0) return;
  std::vector<double> losses(static_cast<size_t>(s) + 1);
  for (int k = 0; k <= s; ++k)
    losses[k] = k < first_step ? ckpt.resume->losses[k] : history.loss(k);
  commit_checkpoint(ckpt.dir, s + 1, cfg, env.world, losses, run_id);
}

// The run's losses and step times once every rank is back. A resumed run: the
// steps before the checkpoint have its losses and no times.
void finish_result(RunResult& result, const LossHistory& history, const ResumeState* resume,
                   int first_step) {
  const int steps = result.cfg.steps;
  result.losses.resize(steps);
  result.resumed_after_step = first_step;
  for (int s = 0; s < first_step; ++s) result.losses[s] = resume->losses[s];
  for (int s = first_step; s < steps; ++s) {
    result.losses[s] = history.loss(s);
    // The run's step takes as long as its slowest rank's.
    double slowest = 0;
    for (const RankReport& r : result.ranks) slowest = std::max(slowest, r.step_ms[s - first_step]);
    result.step_ms.push_back(slowest);
  }
  result.median_step_ms = steady_median(result.step_ms);
}

RunResult run_impl(const RunConfig& given, const std::vector<float>* initial,
                   const RunCallbacks& callbacks, const ProcessContext* process,
                   const Checkpointing& ckpt) {
  // Defaults that depend on the machine (a gpt's --attention) are settled once, here:
  // the result, recordings and checkpoints then say what ran.
  const RunConfig cfg = resolve_defaults(given);
  validate(cfg);
  if (process) check_process_run(cfg, *process);
  const ResumeState* resume = ckpt.resume;
  if (ckpt.every > 0 || resume) check_checkpointable(cfg);
  if (resume) {
    check_resume(cfg, *resume);
    initial = &resume->weights;
  }
  if (ckpt.every > 0) check_checkpoint_dir(ckpt.dir, resume);
  // Every checkpoint file of this run names it (core/run/train_checkpoint.h).
  const std::string run_id = checkpoint_run_id(ckpt, cfg, process);
  const int first_step = resume ? resume->steps_done : 0;
  // Before anything is allocated: a run that cannot fit is refused in one line
  // now, rather than failing minutes later (the caller holds `initial` already).
  check_memory(cfg, RunOutputs{.caller_holds_init = initial != nullptr});
  const StrategyInfo& info = *find_strategy(cfg.strategy);
  const ModelLayout layout = make_layout(cfg);
  const std::unique_ptr<Dataset> dataset = layout.family().dataset(layout, cfg.seed, cfg);
  const Dataset& data = *dataset;
  const std::vector<float> seeded = initial ? std::vector<float>{} : init_params(layout, cfg.seed);
  const std::vector<float>& init = initial ? *initial : seeded;
  if (init.size() != layout.state_total())
    throw ConfigError("initial parameters have " + std::to_string(init.size()) + " values, model " +
                      cfg.model + " needs " + std::to_string(layout.state_total()));
  const FlatParams init_source(init);

  const int world = cfg.world;
  RunResult result;
  result.cfg = cfg;
  result.placement = run_placement(cfg, process);
  const Placement& place = result.placement;
  if (process) result.process_rank = process->rank;
  result.ranks.resize(world);
  // One process per rank: only this process's rank records (the others' are
  // empty placeholders, so a recorder's index is still its rank).
  for (int r = 0; r < world; ++r)
    result.recorders.push_back(
        std::make_shared<Recorder>(r, cfg.record && (!process || r == process->rank)));

  const Mesh mesh = run_mesh(cfg);
  RunComms comms(cfg, place, process, mesh);
  ProcessLink* link = comms.link.get();
  LossHistory history(cfg.steps, world);
  std::vector<std::string> errors(world);
  // Set once, by the rank that finds a step's loss non-finite; the others stop
  // at their next step boundary, or fail fast in a collective with it.
  std::atomic<bool> diverged{false};
  std::string diverged_message;  // written before `diverged` is set
  RunShared shared;
  result.t0_ns = now_ns();
  if (callbacks.on_recorders) callbacks.on_recorders(result.recorders, result.t0_ns);

  // Which ranks have returned, and the step each last began (the watchdog's view).
  std::vector<std::atomic<bool>> rank_done(world);
  std::vector<std::atomic<int>> rank_step(world);
  for (int r = 0; r < world; ++r) rank_step[r].store(-1);
  // One rank: its resources from the placement, then the shared body (setup,
  // steps, export: core/parallel/rank_body.h) with this run's checks, losses
  // and checkpoints around the steps.
  auto rank_main = [&](int rank) {
    kernels::set_single_threaded_blas();
    Recorder* rec = result.recorders[rank].get();
    RankResources res;
    std::unique_ptr<Strategy> strategy;
    // The strategy's tensors go back to this rank's allocator before it dies.
    auto teardown = [&] {
      strategy.reset();
      res.release();
    };
    std::string phase = "the start of the rank";  // for an allocation failure outside the allocator
    try {
      make_rank_device(res, cfg, place, comms, rank, rec);
      if (callbacks.on_rank_start) callbacks.on_rank_start(rank);
      if (callbacks.on_allocator) callbacks.on_allocator(rank, *res.alloc);
      // One process per rank: the control group first, then the clocks: every
      // process's trace starts at rank 0's t0, seen through its own clock.
      if (link) result.t0_ns = link->connect_and_align(result);
      connect_rank(res, place, comms, rank, rec);
      // Where the host makes the batches (a plain CPU device), a data loader
      // makes the next one beside the step; a GPU makes its own on the device.
      // Only with a core to spare: where the ranks already fill the cores, a
      // loader thread would take its time from them (the batch is made no
      // sooner, and the ranks' clocks get noisier), so the batch is made in
      // the step as before, its span not marked made_ahead.
      std::unique_ptr<DataLoader> loader;
      if (place.kind != DeviceKind::cuda && !place.guarded && world < cores_available())
        loader = std::make_unique<DataLoader>(data, layout.act_numel(0), layout.target_numel(),
                                              cfg.steps);
      const Dataset& rank_data = loader ? static_cast<const Dataset&>(*loader) : data;
      RankEnv env{rank,           world,       cfg,        layout,
                  rank_data,      *res.device, *res.alloc, rec,
                  res.comm.get(), shared,      &mesh,      res.axis_comm_ptrs()};
      strategy = make_rank_strategy(info, cfg);
      RankReport& report = result.ranks[rank];
      // fp16: the loss scaler's count of skipped steps on rank 0, to name the
      // steps it skipped (every rank skips alike: precision.h).
      auto skipped_count = [&]() -> int64_t {
        if (rank != 0 || cfg.precision != "fp16") return 0;
        const RankState state = strategy->rank_state();
        return state.precision ? state.precision->scaler().skipped_steps() : 0;
      };
      int64_t skipped_before = 0;

      RankSteps steps;
      steps.first = first_step;
      steps.end = cfg.steps;
      steps.after_setup = [&] {
        if (resume) {
          const RankState state = strategy->rank_state();
          if (state.empty()) throw RunError(cfg.strategy + " cannot resume from a checkpoint");
          restore_rank_state(state, *resume);
        }
        skipped_before = skipped_count();
      };
      steps.before = [&](int s) {
        if (diverged.load()) throw RunError("stopped: another rank's loss was not finite");
        if (callbacks.control) callbacks.control->gate(s);
        if (link) link->note_step(s);
        rank_step[rank].store(s);
        if (callbacks.before_step) callbacks.before_step(rank, s);
      };
      steps.after = [&](int s, const LossShare& share, double ms) {
        history.step(s)[rank] = share;
        report.step_ms.push_back(ms);
        if (const int64_t skipped = skipped_count(); skipped != skipped_before) {
          result.skipped_steps.push_back(s);
          skipped_before = skipped;
        }
        // The other ranks' shares arrive as a message; every process then
        // computes the same global loss and stops alike when it is not finite.
        if (link) link->gather_shares(history.step(s), rank);
        // The last rank to finish a step sees every share: it reports the global
        // loss, or stops the run when it is not finite. (The fp16 loss scaler's
        // skipped steps are not stopped: their loss is computed in fp32 before
        // scaling and is finite; what overflowed were the scaled gradients.)
        if (history.report(s, link ? world : 1)) {
          const double loss = history.loss(s);
          if (!std::isfinite(loss)) {
            int bad_rank = -1;  // the lowest rank whose own share is not finite
            for (int r = 0; r < world && bad_rank < 0; ++r)
              if (!std::isfinite(history.share(s, r).sum)) bad_rank = r;
            diverged_message = divergence_message(cfg, loss, s, bad_rank);
            diverged.store(true);
            throw LossDiverged(diverged_message);
          }
          if (callbacks.on_step) callbacks.on_step(s, loss);
        }
        if (ckpt.every > 0 && (s + 1) % ckpt.every == 0) {
          phase = "the checkpoint after step " + std::to_string(s + 1);
          checkpoint_after_step(ckpt, cfg, s, env, *strategy, run_id, history, first_step);
        }
      };
      RankTotals totals = run_rank_body(env, *strategy, init_source, steps, phase);
      report.bytes_sent_per_step = totals.bytes_sent_per_step;
      report.sent_by_axis_per_step = totals.sent_by_axis_per_step;
      report.memory = totals.at_report;
      if (rank == 0) result.final_params = std::move(totals.params);
      if (link) {
        // Teardown before the exchange, so the records every process receives
        // hold this rank's frees too (its memory returns to zero at the end,
        // in rank 0's whole-run trace as in this process's own).
        teardown();
        phase = "the exchange of the ranks' reports";
        link->gather_reports(result.ranks, rank, cfg.steps - first_step);
        if (cfg.record) {
          phase = "the exchange of the ranks' records";
          link->gather_records(result, rank);
        }
      }
    } catch (const OutOfMemory& e) {
      // The allocator names the buffer and its size; the board names the rank.
      errors[rank] = e.what();
      comms.failures.report(rank, e.detail());
    } catch (const std::bad_alloc&) {
      // Host memory outside the allocator (a strategy's staging vectors, the records).
      const std::string what = "ran out of host memory (std::bad_alloc) in " + phase;
      errors[rank] = what;
      comms.failures.report(rank, what);
    } catch (const std::exception& e) {
      errors[rank] = e.what();
      comms.failures.report(rank, e.what());
    }
    if (link && !errors[rank].empty()) {
      abandon_rank(res, strategy);
    } else {
      if (!errors[rank].empty()) close_rank_connections(res);
      teardown();  // already done on a process's successful path (before the exchange)
    }
    rank_done[rank].store(true);
  };

  std::vector<std::thread> threads;
  if (link) {
    link->start_watchdog();
    threads.emplace_back(rank_main, process->rank);
  } else {
    for (int r = 0; r < world; ++r) threads.emplace_back(rank_main, r);
  }
  if (!link && callbacks.on_stuck)
    watch_threads(comms.failures, rank_done, rank_step, callbacks.on_stuck);
  for (std::thread& t : threads) t.join();
  if (link) link->stop_watchdog();

  // The cause, not its echoes (the peers' closed connections).
  if (diverged.load()) throw LossDiverged(diverged_message);

  if (callbacks.control && comms.failures.any()) {
    bool all_cancelled = true;
    for (const std::string& e : errors) all_cancelled &= e.empty() || e == RunCancelled().what();
    if (all_cancelled) throw RunCancelled();
  }
  if (comms.failures.any()) throw RunError(comms.failures.summary());
  finish_result(result, history, resume, first_step);
  return result;
}

}  // namespace

RunResult run_training(const RunConfig& cfg, const std::vector<float>* initial,
                       const RunCallbacks& callbacks) {
  return run_impl(cfg, initial, callbacks, nullptr, {});
}

RunResult run_training(const RunConfig& cfg, const std::vector<float>* initial,
                       const RunCallbacks& callbacks, const ProcessContext& process) {
  return run_impl(cfg, initial, callbacks, &process, {});
}

RunResult run_training(const RunConfig& cfg, const std::vector<float>* initial,
                       const RunCallbacks& callbacks, const ProcessContext* process,
                       const Checkpointing& checkpoints) {
  return run_impl(cfg, initial, callbacks, process, checkpoints);
}

}  // namespace shardlab
