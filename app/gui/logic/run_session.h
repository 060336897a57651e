// Runs on worker threads for the GUI: one live run (Run, Pause, Step, Reset)
// and a compare batch (several configurations, one after the other). The UI
// thread never blocks on them: it calls poll() once per frame and gets a
// consistent snapshot of what is new.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "app/gui/logic/compare_logic.h"
#include "app/gui/logic/run_data.h"
#include "core/run/runner.h"

namespace shardlab::gui {

enum class RunState { idle, starting, running, paused, finished, failed, cancelled };
const char* to_string(RunState s);

class RunSession {
 public:
  RunSession() = default;
  ~RunSession();
  RunSession(const RunSession&) = delete;
  RunSession& operator=(const RunSession&) = delete;

  // Ends any previous run, then starts `cfg` (validated by the caller). With
  // `paused`, ranks set up and wait before step 0 (the Step button's first press).
  void start(const RunConfig& cfg, bool paused);
  // Starts `cfg` with one process per rank (`shardlab launch`), watched live
  // through the ranks' live files; when the group ends, the run is its
  // recording, exactly. No pause or single step: the processes do not wait on
  // this one. Reset stops the group.
  void start_processes(const RunConfig& cfg);
  bool processes() const { return processes_; }
  void pause();
  void resume();
  void step_once();
  // Cancel, wait for the ranks to stop, forget the run. A run whose rank
  // thread is stuck for good (failed, "stuck outside any communication") is
  // not waited for: its worker is left behind with its own state.
  void reset();
  // Shows a run that already finished elsewhere (a lesson step's worker, a
  // recording) exactly as if this session had run it: poll() ingests it.
  void adopt(std::unique_ptr<RunResult> finished);
  // Tests: called by every rank thread before each step of the runs start()
  // begins (RunCallbacks::before_step), to make a rank misbehave.
  void set_before_step(std::function<void(int rank, int step)> hook) {
    before_step_ = std::move(hook);
  }

  // Workers left behind by reset() whose stuck rank thread has still not
  // returned (each holds its run's memory until it does).
  int left_behind() const;

  RunState state() const;
  std::string error() const;
  int steps_done() const;

  // UI thread, once per frame: brings `data` and `losses` up to date. Returns
  // true when anything changed.
  bool poll(RunData& data, std::vector<double>& losses);
  // The finished run (after poll() saw it finish), or null.
  const RunResult* result() const { return result_.get(); }

 private:
  // What one run's worker shares with the session, held by both: a worker
  // left behind writes into its own block, never into the next run's.
  struct Shared {
    std::mutex mu;
    RunControl control;
    std::atomic<bool> cancel_processes{false};
    RunState state = RunState::idle;
    std::condition_variable changed;  // `done` or `stuck` became true
    bool done = false;                // the worker has returned
    bool stuck = false;               // a rank thread will not return: nobody waits for the worker
    std::string error;
    RunConfig cfg;
    std::vector<std::shared_ptr<Recorder>> recorders;
    int64_t t0_ns = 0;
    std::vector<double> losses;
    std::unique_ptr<RunResult> finished;  // handed from the worker to the UI
    bool data_reset = false;              // the UI's RunData belongs to this run
  };
  void stop_worker();

  std::thread worker_;
  std::shared_ptr<Shared> s_ = std::make_shared<Shared>();
  bool processes_ = false;
  std::function<void(int, int)> before_step_;
  std::vector<std::weak_ptr<Shared>> left_behind_;
  std::unique_ptr<RunResult> result_;  // UI side
};

// One configuration of a comparison and, once it ran, its data.
struct CompareEntry {
  RunConfig cfg;
  std::string error;  // invalid settings or a failed run
  bool done = false;
  std::unique_ptr<RunResult> result;
  RunData data;
  CompareRow row;
  std::vector<int64_t> bounds;  // step_bounds(data), for memory over time by step
};

// Fills `e` from a finished run: its result, data, table row and step bounds
// (every way into the compare view goes through here, so none lacks the
// bounds that the timelines' "from step" and memory over time need).
void fill_compare_entry(CompareEntry& e, std::unique_ptr<RunResult> r);
// What each finished row takes from the others: its weight_diff_to_single,
// against the first finished `single` row of the same training (-1 where
// there is none; 0 for that row), and its projection with op costs pooled over
// the finished rows of the same work (same_work).
void fill_cross_row_columns(std::vector<CompareEntry>& entries);

class CompareSession {
 public:
  CompareSession() = default;
  ~CompareSession();
  CompareSession(const CompareSession&) = delete;
  CompareSession& operator=(const CompareSession&) = delete;

  // Runs every valid configuration in order on one worker thread; invalid ones
  // are reported with the CLI's message and skipped.
  void start(std::vector<RunConfig> cfgs);
  void cancel();
  bool busy() const;
  int running_index() const;       // -1 when none
  int running_steps_done() const;  // training steps the running configuration has finished
  // UI thread: moves each finished run into `entries` (resized to the batch) as
  // soon as it finishes, so the table fills in row by row.
  bool poll(std::vector<CompareEntry>& entries);

 private:
  std::thread worker_;
  std::unique_ptr<RunControl> control_;
  mutable std::mutex mu_;
  bool busy_ = false;
  int running_ = -1;
  int running_steps_ = 0;
  std::vector<RunConfig> cfgs_;
  std::vector<std::string> errors_;
  std::vector<std::unique_ptr<RunResult>> results_;
  std::vector<bool> delivered_;
  uint64_t batch_ = 0, seen_batch_ = 0;
};

}  // namespace shardlab::gui
