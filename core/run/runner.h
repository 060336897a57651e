// Runs a configuration: one thread per rank, real Gloo between them, every
// rank with its own allocator and recorder. Returns losses, timings, memory,
// traffic and the final weights.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/comm/placement.h"
#include "core/config.h"
#include "core/device/memory.h"
#include "core/launch/process_link.h"
#include "core/parallel/run_result.h"
#include "core/record/recorder.h"

namespace shardlab {

// Pause / single-step / cancel for a running job (the GUI's Run, Pause, Step,
// Reset). Every rank waits at the same step boundary, so ranks never stop in
// the middle of a collective and no timeout fires while paused.
class RunControl {
 public:
  void pause();
  void resume();
  void step_once();  // while paused: let exactly one more step run
  void cancel();     // ranks stop at the next boundary; run_training throws RunCancelled
  bool paused() const;
  // Called by every rank before step `step`; blocks while paused.
  void gate(int step);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool paused_ = false;
  int cancel_from_ = std::numeric_limits<int>::max();  // ranks stop at this step
  int allowed_until_ = 0;                              // while paused, steps below this may run
  int highest_admitted_ = -1;                          // the latest step any rank has entered
};

class RunCancelled : public std::runtime_error {
 public:
  RunCancelled() : std::runtime_error("run cancelled") {}
};

struct RunCallbacks {
  RunControl* control = nullptr;
  std::function<void(int step, double loss)> on_step;  // from a rank thread, after each step
  // Rank threads call this at their start: a test can make a rank fail.
  std::function<void(int rank)> on_rank_start;
  // With each rank's allocator, before the strategy allocates anything: a test
  // can limit it (Allocator::set_limit) to see what a failed allocation reports.
  std::function<void(int rank, Allocator& alloc)> on_allocator;
  // Ranks as threads: when a rank has failed and another's thread has not
  // returned 2 s later (stuck outside any communication, where no timeout
  // reaches it), this is called once, from the run's own thread, with one line
  // naming it. No thread can be unwound from outside, so the run still waits
  // for that thread afterwards; the caller decides what to do meanwhile: the
  // command line ends the process, the GUI leaves the run behind (its state
  // stays alive with the waiting call) and is free to start another.
  std::function<void(const std::string& message)> on_stuck;
  // Rank threads call this before each step (tests: a rank that fails or stalls mid-run).
  std::function<void(int rank, int step)> before_step;
  // Called once, before the rank threads start, with the run's recorders and its
  // clock zero: a viewer (the GUI) reads spans and allocations while the run goes on.
  std::function<void(const std::vector<std::shared_ptr<Recorder>>& recorders, int64_t t0_ns)>
      on_recorders;
};

struct ResumeState;  // core/run/train_checkpoint.h

// Periodic checkpoints and resuming from one (core/run/train_checkpoint.h).
struct Checkpointing {
  int every = 0;    // save after every `every` steps (0: never)
  std::string dir;  // where (--checkpoint-dir)
  // Start from this checkpoint instead of step 0: its weights are the initial
  // values, its optimizer state is restored after setup.
  const ResumeState* resume = nullptr;
  // Names the run in every checkpoint file; empty: a new one (one process per
  // rank: rank 0's, handed to the others through the store).
  std::string run_id;
};

// Validates, checks the run fits in memory (check_memory, memory_estimate.h:
// MemoryRefused unless cfg.force), then runs. init_params (flat, model order)
// replaces the seeded init when given. Throws ConfigError for bad settings,
// RunError on failure (LossDiverged for a non-finite loss; a failed allocation
// names the rank, buffer and size).
RunResult run_training(const RunConfig& cfg, const std::vector<float>* initial = nullptr,
                       const RunCallbacks& callbacks = {});
// The same, as rank `process.rank` of cfg.world processes. `dp` refuses (its
// controller hands the devices work through memory: one process by nature).
RunResult run_training(const RunConfig& cfg, const std::vector<float>* initial,
                       const RunCallbacks& callbacks, const ProcessContext& process);
// What one process per rank cannot run (dp; NCCL, not built yet), refused in
// one line before any rendezvous.
void check_process_config(const RunConfig& cfg);
// Either form (`process` null: threads), with checkpoints.
RunResult run_training(const RunConfig& cfg, const std::vector<float>* initial,
                       const RunCallbacks& callbacks, const ProcessContext* process,
                       const Checkpointing& checkpoints);

}  // namespace shardlab
