// Worker threads behind the GUI's Run and Compare buttons (see run_session.h).
#include "app/gui/logic/run_session.h"

#include <algorithm>
#include <chrono>

#include "app/lesson/lesson.h"
#include "core/live_stream.h"
#include "core/strategy.h"

namespace shardlab::gui {

const char* to_string(RunState s) {
  switch (s) {
    case RunState::idle:
      return "idle";
    case RunState::starting:
      return "starting";
    case RunState::running:
      return "running";
    case RunState::paused:
      return "paused";
    case RunState::finished:
      return "finished";
    case RunState::failed:
      return "failed";
    case RunState::cancelled:
      return "cancelled";
  }
  return "?";
}

RunSession::~RunSession() {
  stop_worker();
}

void RunSession::stop_worker() {
  if (control_) control_->cancel();
  cancel_processes_ = true;
  if (worker_.joinable()) worker_.join();
  cancel_processes_ = false;
}

void RunSession::start(const RunConfig& cfg, bool paused) {
  reset();
  control_ = std::make_unique<RunControl>();
  if (paused) control_->step_once();  // paused, with exactly step 0 allowed
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = RunState::starting;
    cfg_ = cfg;
    pause_requested_ = paused;
  }
  RunControl* control = control_.get();
  worker_ = std::thread([this, cfg, control] {
    RunCallbacks cb;
    cb.control = control;
    cb.on_recorders = [this](const std::vector<std::shared_ptr<Recorder>>& recs, int64_t t0) {
      std::lock_guard<std::mutex> lock(mu_);
      recorders_ = recs;
      t0_ns_ = t0;
      state_ = RunState::running;
    };
    cb.on_step = [this](int step, double loss) {
      std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<size_t>(step) >= losses_.size()) losses_.resize(step + 1, 0.0);
      losses_[step] = loss;
    };
    try {
      auto r = std::make_unique<RunResult>(run_training(cfg, nullptr, cb));
      std::lock_guard<std::mutex> lock(mu_);
      losses_ = r->losses;
      finished_ = std::move(r);
      state_ = RunState::finished;
    } catch (const RunCancelled&) {
      std::lock_guard<std::mutex> lock(mu_);
      state_ = RunState::cancelled;
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = e.what();
      state_ = RunState::failed;
    }
  });
}

void RunSession::start_processes(const RunConfig& cfg) {
  reset();
  processes_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = RunState::starting;
    cfg_ = cfg;
    pause_requested_ = false;
  }
  worker_ = std::thread([this, cfg] {
    try {
      lesson::LaunchedGroup group(cfg, {}, true);
      LiveReader live(group.dir(), cfg.world);
      {
        // The live files' times count from the run's start: the clock's zero is 0.
        std::lock_guard<std::mutex> lock(mu_);
        recorders_ = live.recorders();
        t0_ns_ = 0;
        state_ = RunState::running;
      }
      std::vector<double> losses;
      for (;;) {
        const bool ended = group.finished();  // before the last read: nothing is missed
        if (live.poll(losses)) {
          std::lock_guard<std::mutex> lock(mu_);
          losses_ = losses;
        }
        if (ended) break;
        if (cancel_processes_) {
          group.stop();
          std::lock_guard<std::mutex> lock(mu_);
          state_ = RunState::cancelled;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      auto r = std::make_unique<RunResult>(group.result());
      std::lock_guard<std::mutex> lock(mu_);
      // The views start again from the recording: every rank's records, exactly.
      losses_ = r->losses;
      recorders_ = r->recorders;
      t0_ns_ = r->t0_ns;
      data_reset_ = false;
      finished_ = std::move(r);
      state_ = RunState::finished;
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = e.what();
      state_ = RunState::failed;
    }
  });
}

void RunSession::pause() {
  if (control_) control_->pause();
}
void RunSession::resume() {
  if (control_) control_->resume();
}
void RunSession::step_once() {
  if (control_) control_->step_once();
}

void RunSession::reset() {
  stop_worker();
  control_.reset();
  processes_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  state_ = RunState::idle;
  error_.clear();
  recorders_.clear();
  losses_.clear();
  finished_.reset();
  result_.reset();
  data_reset_ = false;
}

void RunSession::adopt(std::unique_ptr<RunResult> finished) {
  reset();
  std::lock_guard<std::mutex> lock(mu_);
  cfg_ = finished->cfg;
  recorders_ = finished->recorders;
  t0_ns_ = finished->t0_ns;
  losses_ = finished->losses;
  finished_ = std::move(finished);
  state_ = RunState::finished;
}

RunState RunSession::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == RunState::running && control_ && control_->paused()) return RunState::paused;
  return state_;
}

std::string RunSession::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

int RunSession::steps_done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(losses_.size());
}

bool RunSession::poll(RunData& data, std::vector<double>& losses) {
  std::vector<std::shared_ptr<Recorder>> recs;
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (recorders_.empty()) return false;
    if (!data_reset_) {
      reset_run_data(data, cfg_, cfg_.world, t0_ns_);
      data_reset_ = true;
      changed = true;
    }
    recs = recorders_;
    if (losses != losses_) {
      losses = losses_;
      changed = true;
    }
    if (finished_) result_ = std::move(finished_);
  }
  // Recorder reads take each recorder's own lock, not ours: ranks never wait on the UI.
  changed |= ingest(data, recs);
  return changed;
}

CompareSession::~CompareSession() {
  cancel();
}

void CompareSession::cancel() {
  if (control_) control_->cancel();
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = false;
  running_ = -1;
}

bool CompareSession::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

int CompareSession::running_index() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int CompareSession::running_steps_done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_steps_;
}

void CompareSession::start(std::vector<RunConfig> cfgs) {
  cancel();
  control_ = std::make_unique<RunControl>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    cfgs_ = cfgs;
    errors_.assign(cfgs.size(), "");
    results_.clear();
    results_.resize(cfgs.size());
    delivered_.assign(cfgs.size(), false);
    busy_ = true;
    ++batch_;
  }
  RunControl* control = control_.get();
  worker_ = std::thread([this, cfgs, control] {
    for (size_t i = 0; i < cfgs.size(); ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        running_ = static_cast<int>(i);
        running_steps_ = 0;
      }
      std::string error;
      std::unique_ptr<RunResult> result;
      try {
        validate(cfgs[i]);
        RunCallbacks cb;
        cb.control = control;
        cb.on_step = [this](int step, double) {
          std::lock_guard<std::mutex> lock(mu_);
          running_steps_ = std::max(running_steps_, step + 1);
        };
        result = std::make_unique<RunResult>(run_training(cfgs[i], nullptr, cb));
      } catch (const RunCancelled&) {
        break;
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::lock_guard<std::mutex> lock(mu_);
      errors_[i] = error;
      results_[i] = std::move(result);
    }
    std::lock_guard<std::mutex> lock(mu_);
    running_ = -1;
    busy_ = false;
  });
}

void fill_compare_entry(CompareEntry& e, std::unique_ptr<RunResult> r) {
  e.cfg = r->cfg;
  e.done = true;
  ingest_result(e.data, *r);
  e.row = compare_row(*r);
  e.bounds = step_bounds(e.data);
  e.result = std::move(r);
}

bool CompareSession::poll(std::vector<CompareEntry>& entries) {
  std::lock_guard<std::mutex> lock(mu_);
  bool changed = false;
  if (seen_batch_ != batch_) {
    seen_batch_ = batch_;
    entries.clear();
    entries.resize(cfgs_.size());
    for (size_t i = 0; i < cfgs_.size(); ++i) entries[i].cfg = cfgs_[i];
    changed = true;
  }
  for (size_t i = 0; i < cfgs_.size() && i < entries.size(); ++i) {
    if (delivered_[i]) continue;
    if (!results_[i] && errors_[i].empty()) continue;
    CompareEntry& e = entries[i];
    e.error = errors_[i];
    e.done = true;
    if (results_[i]) {
      fill_compare_entry(e, std::move(results_[i]));
    }
    delivered_[i] = true;
    changed = true;
  }
  return changed;
}

}  // namespace shardlab::gui
