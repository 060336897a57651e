// Runs on worker threads for the GUI: one live run (Run, Pause, Step, Reset)
// and a compare batch (several configurations, one after the other). The UI
// thread never blocks on them: it calls poll() once per frame and gets a
// consistent snapshot of what is new.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "app/gui/logic/compare_logic.h"
#include "app/gui/logic/run_data.h"
#include "core/runner.h"

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
  void reset();  // cancel, wait for the ranks to stop, forget the run
  // Shows a run that already finished elsewhere (a lesson step's worker, a
  // recording) exactly as if this session had run it: poll() ingests it.
  void adopt(std::unique_ptr<RunResult> finished);

  RunState state() const;
  std::string error() const;
  int steps_done() const;

  // UI thread, once per frame: brings `data` and `losses` up to date. Returns
  // true when anything changed.
  bool poll(RunData& data, std::vector<double>& losses);
  // The finished run (after poll() saw it finish), or null.
  const RunResult* result() const { return result_.get(); }

 private:
  void stop_worker();

  std::thread worker_;
  std::unique_ptr<RunControl> control_;
  std::atomic<bool> cancel_processes_{false};
  bool processes_ = false;
  mutable std::mutex mu_;
  RunState state_ = RunState::idle;
  bool pause_requested_ = false;
  std::string error_;
  RunConfig cfg_;
  std::vector<std::shared_ptr<Recorder>> recorders_;
  int64_t t0_ns_ = 0;
  std::vector<double> losses_;
  std::unique_ptr<RunResult> finished_;  // handed from the worker to the UI
  std::unique_ptr<RunResult> result_;    // UI side
  bool data_reset_ = false;              // the UI's RunData belongs to this run
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
