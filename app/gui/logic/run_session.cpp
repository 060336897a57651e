// Worker threads behind the GUI's Run and Compare buttons (see run_session.h).
#include "app/gui/logic/run_session.h"

#include <algorithm>
#include <chrono>

#include "app/lesson/lesson.h"
#include "core/parallel/strategy.h"
#include "core/predict/projection.h"
#include "core/record/live_stream.h"

namespace shardlab::gui {

// Names for logs and tests; the run bar words its states itself.
const char* to_string(RunState s) {  // i18n: not shown
  switch (s) {
    case RunState::idle:
      return "idle";  // i18n: not shown
    case RunState::starting:
      return "starting";  // i18n: not shown
    case RunState::running:
      return "running";  // i18n: not shown
    case RunState::paused:
      return "paused";  // i18n: not shown
    case RunState::finished:
      return "finished";  // i18n: not shown
    case RunState::failed:
      return "failed";  // i18n: not shown
    case RunState::cancelled:
      return "cancelled";  // i18n: not shown
  }
  return "?";
}

RunSession::~RunSession() {
  stop_worker();
}

void RunSession::stop_worker() {
  s_->control.cancel();
  s_->cancel_processes = true;
  if (!worker_.joinable()) return;
  // Wait for the worker, unless a rank thread turns out to be stuck for good
  // (a failure, then 2 s of grace): that thread never returns, nor does the
  // run that waits for it, so the worker is left behind with its own block.
  bool stuck;
  {
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->changed.wait(lock, [&] { return s_->done || s_->stuck; });
    stuck = !s_->done;
  }
  if (stuck) {
    worker_.detach();
    left_behind_.push_back(s_);
  } else {
    worker_.join();
  }
}

namespace {

// Marks the worker's end however it ends, so stop_worker() knows it may join.
struct WorkerDone {
  std::function<void()> mark;
  ~WorkerDone() { mark(); }
};

}  // namespace

void RunSession::start(const RunConfig& cfg, bool paused) {
  reset();
  std::shared_ptr<Shared> s = s_;
  if (paused) s->control.step_once();  // paused, with exactly step 0 allowed
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->state = RunState::starting;
    s->cfg = cfg;
  }
  worker_ = std::thread([s, cfg, before_step = before_step_] {
    const WorkerDone done{[s] {
      std::lock_guard<std::mutex> lock(s->mu);
      s->done = true;
      s->changed.notify_all();
    }};
    RunCallbacks cb;
    cb.control = &s->control;
    cb.before_step = before_step;
    cb.on_recorders = [s](const std::vector<std::shared_ptr<Recorder>>& recs, int64_t t0) {
      std::lock_guard<std::mutex> lock(s->mu);
      s->recorders = recs;
      s->t0_ns = t0;
      s->state = RunState::running;
    };
    cb.on_step = [s](int step, double loss) {
      std::lock_guard<std::mutex> lock(s->mu);
      if (static_cast<size_t>(step) >= s->losses.size()) s->losses.resize(step + 1, 0.0);
      s->losses[step] = loss;
    };
    // The run has failed, but a rank thread will not come back: the UI shows
    // the failure now and may start another run while this one still waits.
    cb.on_stuck = [s](const std::string& message) {
      std::lock_guard<std::mutex> lock(s->mu);
      // i18n: error (appended to the core's, which is English in both languages)
      s->error = message +
                 "; the app leaves that thread behind (a thread cannot be stopped from outside; "
                 "tick \"processes\" for ranks that can be killed)";
      s->state = RunState::failed;
      s->stuck = true;
      s->changed.notify_all();
    };
    try {
      auto r = std::make_unique<RunResult>(run_training(cfg, nullptr, cb));
      std::lock_guard<std::mutex> lock(s->mu);
      s->losses = r->losses;
      s->finished = std::move(r);
      s->state = RunState::finished;
    } catch (const RunCancelled&) {
      std::lock_guard<std::mutex> lock(s->mu);
      s->state = RunState::cancelled;
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->stuck) return;  // already told; the stuck thread's late end changes nothing
      s->error = e.what();
      s->state = RunState::failed;
    }
  });
}

void RunSession::start_processes(const RunConfig& cfg) {
  reset();
  processes_ = true;
  std::shared_ptr<Shared> s = s_;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->state = RunState::starting;
    s->cfg = cfg;
  }
  worker_ = std::thread([s, cfg] {
    const WorkerDone done{[s] {
      std::lock_guard<std::mutex> lock(s->mu);
      s->done = true;
      s->changed.notify_all();
    }};
    try {
      lesson::LaunchedGroup group(cfg, {}, true);
      LiveReader live(group.dir(), cfg.world);
      {
        // The live files' times count from the run's start: the clock's zero is 0.
        std::lock_guard<std::mutex> lock(s->mu);
        s->recorders = live.recorders();
        s->t0_ns = 0;
        s->state = RunState::running;
      }
      std::vector<double> losses;
      for (;;) {
        const bool ended = group.finished();  // before the last read: nothing is missed
        if (live.poll(losses)) {
          std::lock_guard<std::mutex> lock(s->mu);
          s->losses = losses;
        }
        if (ended) break;
        if (s->cancel_processes) {
          group.stop();
          std::lock_guard<std::mutex> lock(s->mu);
          s->state = RunState::cancelled;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      auto r = std::make_unique<RunResult>(group.result());
      std::lock_guard<std::mutex> lock(s->mu);
      // The views start again from the recording: every rank's records, exactly.
      s->losses = r->losses;
      s->recorders = r->recorders;
      s->t0_ns = r->t0_ns;
      s->data_reset = false;
      s->finished = std::move(r);
      s->state = RunState::finished;
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(s->mu);
      s->error = e.what();
      s->state = RunState::failed;
    }
  });
}

void RunSession::pause() {
  s_->control.pause();
}
void RunSession::resume() {
  s_->control.resume();
}
void RunSession::step_once() {
  s_->control.step_once();
}

void RunSession::reset() {
  stop_worker();
  processes_ = false;
  s_ = std::make_shared<Shared>();  // idle, nothing recorded
  result_.reset();
}

void RunSession::adopt(std::unique_ptr<RunResult> finished) {
  reset();
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->cfg = finished->cfg;
  s_->recorders = finished->recorders;
  s_->t0_ns = finished->t0_ns;
  s_->losses = finished->losses;
  s_->finished = std::move(finished);
  s_->state = RunState::finished;
}

int RunSession::left_behind() const {
  int n = 0;
  for (const std::weak_ptr<Shared>& w : left_behind_) n += !w.expired();
  return n;
}

RunState RunSession::state() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (s_->state == RunState::running && s_->control.paused()) return RunState::paused;
  return s_->state;
}

std::string RunSession::error() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->error;
}

int RunSession::steps_done() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return static_cast<int>(s_->losses.size());
}

bool RunSession::poll(RunData& data, std::vector<double>& losses) {
  std::vector<std::shared_ptr<Recorder>> recs;
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->recorders.empty()) return false;
    if (!s_->data_reset) {
      reset_run_data(data, s_->cfg, s_->cfg.world, s_->t0_ns);
      s_->data_reset = true;
      changed = true;
    }
    recs = s_->recorders;
    if (losses != s_->losses) {
      losses = s_->losses;
      changed = true;
    }
    if (s_->finished) result_ = std::move(s_->finished);
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

void fill_cross_row_columns(std::vector<CompareEntry>& entries) {
  for (CompareEntry& e : entries) {
    if (!e.result) continue;
    e.row.weight_diff_to_single = -1;
    for (const CompareEntry& s : entries) {
      if (!s.result || !is_reference_strategy(s.result->cfg.strategy)) continue;
      const double d = weight_diff_to(*e.result, *s.result);
      if (d < 0) continue;
      e.row.weight_diff_to_single = d;
      break;
    }
    // Rows of the same work share one table of op costs, so that what their
    // projections differ by is the schedule, not this machine's drift between runs.
    std::vector<const RunResult*> pool;
    for (const CompareEntry& s : entries)
      if (&s != &e && s.result && s.result->cfg.record && same_work(e.result->cfg, s.result->cfg))
        pool.push_back(s.result.get());
    if (static_cast<int>(pool.size()) != e.row.projected_pooled)
      set_projection(e.row, *e.result, pool);
  }
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
  if (changed) fill_cross_row_columns(entries);
  return changed;
}

}  // namespace shardlab::gui
