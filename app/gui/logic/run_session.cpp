// Worker threads behind the GUI's Run and Compare buttons (see run_session.h).
#include "app/gui/logic/run_session.h"

#include <sstream>

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
  if (worker_.joinable()) worker_.join();
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
  std::lock_guard<std::mutex> lock(mu_);
  state_ = RunState::idle;
  error_.clear();
  recorders_.clear();
  losses_.clear();
  finished_.reset();
  result_.reset();
  data_reset_ = false;
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
      }
      std::string error;
      std::unique_ptr<RunResult> result;
      try {
        validate(cfgs[i]);
        RunCallbacks cb;
        cb.control = control;
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
      e.result = std::move(results_[i]);
      const RunResult& r = *e.result;
      reset_run_data(e.data, r.cfg, r.cfg.world, r.t0_ns);
      ingest(e.data, r.recorders);
      e.row = compare_row(r);
    }
    delivered_[i] = true;
    changed = true;
  }
  return changed;
}

std::vector<RunConfig> default_compare_configs(const RunConfig& base) {
  std::vector<RunConfig> out;
  for (const StrategyInfo& s : all_strategies()) {
    // Only the options this strategy reads: --micro-batches 4 is for the
    // pipelines in the list, not a reason to leave ddp out.
    const RunConfig c = for_strategy(base, s.name);
    try {
      validate(c);
      out.push_back(c);
    } catch (const ConfigError&) {
      // A strategy that cannot run these settings is simply not compared.
    }
  }
  return out;
}

std::vector<RunConfig> parse_compare_list(const std::string& list, const RunConfig& base) {
  std::vector<RunConfig> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    const std::string name = item.substr(0, colon);
    if (!find_strategy(name))
      throw ConfigError("--compare: unknown strategy '" + name + "' (valid: " + strategy_names() +
                        ")");
    RunConfig c = for_strategy(base, name);  // the options it reads, as in the default list
    if (colon != std::string::npos) {
      const std::string w = item.substr(colon + 1);
      char* end = nullptr;
      const long v = std::strtol(w.c_str(), &end, 10);
      if (w.empty() || *end != '\0' || v < 1 || v > 64)
        throw ConfigError("--compare: world '" + w + "' in '" + item +
                          "' is invalid (valid: 1 to 64, e.g. ddp:4)");
      c.world = static_cast<int>(v);
    }
    out.push_back(c);
  }
  if (out.empty() || out.size() > 4)
    throw ConfigError("--compare '" + list +
                      "' must name 1 to 4 strategies (valid: e.g. ddp,single:1)");
  return out;
}

}  // namespace shardlab::gui
