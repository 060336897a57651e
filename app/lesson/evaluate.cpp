// A lesson step on its finished runs: the prediction's measured metric, the
// gates, where the seek lands, and whether an answer was right; and the runs
// themselves, as threads here or as a launched group of processes.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "app/lesson/lesson.h"

#include "core/run/recording.h"

namespace shardlab::lesson {

bool StepResult::gates_pass() const {
  for (const GateResult& g : gates)
    if (!g.pass) return false;
  return true;
}

bool holds(const std::string& op, double l, double r) {
  if (op == "<") return l < r;
  if (op == "<=") return l <= r;
  if (op == ">") return l > r;
  if (op == ">=") return l >= r;
  if (op == "==") return l == r;
  return false;
}

std::string exact_bytes(double v) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%.0f", std::abs(v));
  const std::string d = digits;
  std::string out = v < 0 ? "-" : "";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0) out += ' ';
    out += d[i];
  }
  return out + " B";
}

std::string format_value(double v, const std::string& unit) {
  char buf[64];
  if (unit == "B") {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = v;
    int u = 0;
    while (std::abs(x) >= 1024 && u < 4) {
      x /= 1024;
      ++u;
    }
    if (u == 0 && x == std::floor(x))
      std::snprintf(buf, sizeof buf, "%.0f B", x);
    else if (u == 0)
      std::snprintf(buf, sizeof buf, "%.3g B", x);  // bytes per parameter: 5.33 B
    else
      std::snprintf(buf, sizeof buf, "%.2f %s", x, units[u]);
    // The exact count beside it, grouped as the lesson texts write it, so that
    // "436.50 KiB" can be read against the reveal's "446 976 B".
    if (u > 0 && v == std::floor(v) && std::abs(v) < 1e15)
      return std::string(buf) + " (" + exact_bytes(v) + ")";
  } else if (unit == "ms") {
    std::snprintf(buf, sizeof buf, "%.3g ms", v);
  } else if (unit == "us") {
    std::snprintf(buf, sizeof buf, std::abs(v) >= 100 ? "%.0f \xC2\xB5s" : "%.3g \xC2\xB5s", v);
  } else if (unit == "%") {
    std::snprintf(buf, sizeof buf, "%.1f %%", v);
  } else if (unit == "x") {
    std::snprintf(buf, sizeof buf, "%.3gx", v);
  } else if (unit == "count") {
    // Large counts grouped as the texts write them: Ψ = 194 176.
    if (v == std::floor(v) && std::abs(v) >= 10000 && std::abs(v) < 1e15) {
      const std::string b = exact_bytes(v);
      return b.substr(0, b.size() - 2);  // without " B"
    }
    if (v == std::floor(v) && std::abs(v) < 1e15)
      std::snprintf(buf, sizeof buf, "%.0f", v);
    else
      std::snprintf(buf, sizeof buf, "%.2f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

namespace {

MetricResult evaluate(const MetricRef& ref, MetricRuns& runs) {
  MetricResult m;
  m.ref = ref;
  try {
    m.value = evaluate_metric(ref, runs);
  } catch (const std::exception& e) {
    // ConfigError, RunError, or a failed reference run: shown, never hidden.
    m.error = e.what();
  }
  return m;
}

}  // namespace

SeekResult resolve_seek(const Seek& seek, const RunResult& r) {
  SeekResult out;
  if (!r.cfg.record || r.recorders.empty()) {
    out.description = "the run was not recorded";
    return out;
  }
  if (seek.kind == Seek::Kind::step) {
    int64_t first = INT64_MAX;
    for (const auto& rec : r.recorders)
      for (const Span& s : rec->snapshot().spans)
        if (s.step == seek.step) first = std::min(first, s.t_begin_ns);
    if (first == INT64_MAX) {
      out.description = "no span of step " + std::to_string(seek.step);
      return out;
    }
    out.found = true;
    out.t_ns = first - r.t0_ns;
    out.description = "step " + std::to_string(seek.step) + " starts";
    return out;
  }
  if (seek.rank < 0 || seek.rank >= static_cast<int>(r.recorders.size())) {
    out.description = "rank " + std::to_string(seek.rank) + " is not in the run";
    return out;
  }
  const Recorder::Snapshot snap = r.recorders[seek.rank]->snapshot();
  if (seek.kind == Seek::Kind::peak_memory) {
    std::vector<const AllocEvent*> ev;
    for (const AllocEvent& a : snap.allocs)
      if (a.pool == Pool::device) ev.push_back(&a);
    std::stable_sort(ev.begin(), ev.end(),
                     [](const AllocEvent* a, const AllocEvent* b) { return a->t_ns < b->t_ns; });
    int64_t cur = 0, peak = -1, at = 0;
    for (const AllocEvent* a : ev) {
      cur += a->delta_bytes;
      if (cur > peak) {
        peak = cur;
        at = a->t_ns;
      }
    }
    if (peak < 0) {
      out.description = "rank " + std::to_string(seek.rank) + " recorded no allocations";
      return out;
    }
    out.found = true;
    out.t_ns = at - r.t0_ns;
    out.description = "rank " + std::to_string(seek.rank) + "'s memory peaks at " +
                      format_value(static_cast<double>(peak), "B");
    return out;
  }
  std::vector<const Span*> match;
  for (const Span& s : snap.spans)
    if (s.kind == seek.event && (seek.layer < 0 || s.layer == seek.layer) &&
        (seek.micro_batch < 0 || s.micro_batch == seek.micro_batch) &&
        (seek.step < 0 || s.step == seek.step))
      match.push_back(&s);
  std::stable_sort(match.begin(), match.end(),
                   [](const Span* a, const Span* b) { return a->t_begin_ns < b->t_begin_ns; });
  std::string what = std::string(to_string(seek.event));
  if (seek.layer >= 0) what += " of layer " + std::to_string(seek.layer);
  if (seek.micro_batch >= 0) what += " of micro-batch " + std::to_string(seek.micro_batch);
  if (seek.step >= 0) what += " in step " + std::to_string(seek.step);
  what += " on rank " + std::to_string(seek.rank);
  if (static_cast<int>(match.size()) < seek.nth) {
    out.description = "no " + what + (seek.nth > 1 ? " number " + std::to_string(seek.nth) : "") +
                      " (found " + std::to_string(match.size()) + ")";
    return out;
  }
  const Span& s = *match[seek.nth - 1];
  out.found = true;
  out.t_ns = s.t_begin_ns - r.t0_ns;
  out.description = (seek.nth > 1 ? "number " + std::to_string(seek.nth) + " " : "") + what +
                    " (step " + std::to_string(s.step) + ")";
  return out;
}

StepResult evaluate_step(const Step& step, const RunResult& a, const RunResult* b) {
  MetricRuns runs(a, b);
  StepResult out;
  if (step.predict) {
    out.prediction = evaluate(step.predict->metric, runs);
    if (step.predict->is_choice() && out.prediction->value)
      for (size_t i = 0; i < step.predict->choices.size(); ++i) {
        const Choice& c = step.predict->choices[i];
        if (holds(c.op, out.prediction->value->measured, c.value)) {
          out.right_choice = static_cast<int>(i);
          break;
        }
      }
  }
  for (const Gate& g : step.gates) {
    GateResult gr;
    gr.gate = &g;
    gr.left = evaluate(g.metric, runs);
    bool ok = gr.left.value.has_value();
    if (g.right) {
      gr.right = evaluate(*g.right, runs);
      ok = ok && gr.right->value.has_value();
      if (gr.right->value) gr.right_value = gr.right->value->measured;
    } else {
      gr.right_value = *g.value;
    }
    gr.pass = ok && holds(g.op, gr.left.value->measured, gr.right_value);
    out.gates.push_back(std::move(gr));
  }
  if (step.look && step.look->seek) out.seek = resolve_seek(*step.look->seek, a);
  MetricRef psi;
  psi.name = "param_count";
  if (const MetricResult m = evaluate(psi, runs); m.value) out.psi = m.value->measured;
  return out;
}

namespace {

// Digit groups as the lessons print them, joined: "446 976" and "446,976" ->
// "446976" (a separator between digits with exactly three digits after it; a
// space, a no-break or thin space, or a comma), so "1,5" stays unreadable
// rather than becoming 15.
std::string join_digit_groups(const std::string& s) {
  const auto digit = [&](size_t i) {
    return i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]));
  };
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    if (s[i] == ' ' || s[i] == ',')
      len = 1;
    else if (s.compare(i, 2, "\xC2\xA0") == 0)
      len = 2;  // no-break space
    else if (s.compare(i, 3, "\xE2\x80\x89") == 0 || s.compare(i, 3, "\xE2\x80\xAF") == 0)
      len = 3;  // thin and narrow no-break space
    if (len && i > 0 && digit(i - 1) && digit(i + len) && digit(i + len + 1) &&
        digit(i + len + 2) && !digit(i + len + 3)) {
      i += len;
      continue;
    }
    out += s[i++];
  }
  return out;
}

// "1.5 MiB", "12ms", "25%", "3", "1.5×", "446 976", "16Ψ/3" -> value in the
// metric's unit. False if unreadable (or Ψ without a known Ψ).
bool parse_number(const std::string& raw, const std::string& unit, double psi, double& value) {
  std::string text = join_digit_groups(raw);
  text.erase(0, text.find_first_not_of(' '));
  text.erase(text.find_last_not_of(' ') + 1);
  // A multiple of Ψ: [k]Ψ[/d].
  if (const size_t at = text.find("\xCE\xA8"); at != std::string::npos) {
    if (psi <= 0 || (unit != "B" && unit != "count")) return false;
    std::string k = text.substr(0, at), d = text.substr(at + 2);
    while (!k.empty() && (k.back() == ' ' || k.back() == '*')) k.pop_back();
    double coef = 1, div = 1;
    char* end = nullptr;
    if (!k.empty()) {
      coef = std::strtod(k.c_str(), &end);
      if (*end != '\0' || !std::isfinite(coef)) return false;
    }
    d.erase(0, d.find_first_not_of(' '));
    if (!d.empty()) {
      if (d[0] != '/') return false;
      div = std::strtod(d.c_str() + 1, &end);
      if (end == d.c_str() + 1 || *end != '\0' || !(div > 0)) return false;
    }
    value = coef * psi / div;
    return true;
  }
  const char* s = text.c_str();
  char* end = nullptr;
  const double x = std::strtod(s, &end);
  if (end == s || !std::isfinite(x)) return false;
  std::string suffix(end);
  suffix.erase(0, suffix.find_first_not_of(' '));
  suffix.erase(suffix.find_last_not_of(' ') + 1);
  if (suffix == "\xC3\x97") suffix = "x";  // ×, as ratios are printed
  std::string lower;
  for (char c : suffix) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 1;
  if (lower.empty()) {
  } else if (unit == "B") {
    // Binary multiples throughout, as the byte values are printed.
    const std::map<std::string, double> m = {
        {"b", 1},        {"k", 1024.0},    {"kb", 1024.0}, {"kib", 1024.0}, {"m", 1 << 20},
        {"mb", 1 << 20}, {"mib", 1 << 20}, {"g", 1 << 30}, {"gb", 1 << 30}, {"gib", 1 << 30}};
    auto it = m.find(lower);
    if (it == m.end()) return false;
    scale = it->second;
  } else if (lower != unit && !(unit == "count" && lower == "x")) {
    return false;
  }
  value = x * scale;
  return true;
}

std::string lowered(const std::string& s) {
  std::string o;
  for (char c : s) o += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

}  // namespace

AnswerCheck check_answer(const Prediction& p, const StepResult& result, const std::string& answer) {
  AnswerCheck c;
  if (!result.prediction || !result.prediction->value) {
    c.error = "the measured value is missing" +
              (result.prediction ? ": " + result.prediction->error : std::string());
    return c;
  }
  const double measured = result.prediction->value->measured;
  if (p.is_choice()) {
    char* end = nullptr;
    const long k = std::strtol(answer.c_str(), &end, 10);
    if (!answer.empty() && *end == '\0' && k >= 1 && k <= static_cast<long>(p.choices.size())) {
      c.choice = static_cast<int>(k - 1);
    } else {
      for (size_t i = 0; i < p.choices.size(); ++i) {
        auto trimmed = [](std::string s) {
          s.erase(0, s.find_first_not_of(" \n"));
          s.erase(s.find_last_not_of(" \n") + 1);
          return s;
        };
        if (lowered(trimmed(p.choices[i].label.en)) == lowered(answer) ||
            trimmed(p.choices[i].label.zh) == answer)
          c.choice = static_cast<int>(i);
      }
    }
    if (c.choice < 0) {
      c.error = "'" + answer + "' is not one of the choices (valid: 1.." +
                std::to_string(p.choices.size()) + " or a choice's text)";
      return c;
    }
    c.correct = c.choice == result.right_choice;
    return c;
  }
  if (!parse_number(answer, p.unit, result.psi, c.value)) {
    c.error = "'" + answer + "' is not a number" +
              (p.unit.empty() ? std::string() : " in " + p.unit) +
              (p.unit == "B"   ? " (e.g. 1.5 MiB, 446 976, 16\xCE\xA8, 3G)"
               : p.unit == "x" ? " (e.g. 1.5, 1.5\xC3\x97)"
                               : "");
    return c;
  }
  const double tol = p.tolerance * std::abs(measured);
  c.correct = std::abs(c.value - measured) <= (measured == 0 ? p.tolerance : tol);
  return c;
}

namespace {

// A fresh private directory for one launched run (its recording, its
// checkpoints, the launcher's output), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/shardlab-lesson-XXXXXX";
    if (!::mkdtemp(tmpl.data()))
      throw RunError("cannot make a temporary directory for the processes: " +
                     std::string(std::strerror(errno)));
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The binary to launch: $SHARDLAB_BIN (tests run from their own binary), else this one.
std::string shardlab_binary() {
  if (const char* bin = std::getenv("SHARDLAB_BIN"); bin && *bin) return bin;
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0)
    throw RunError("cannot find this program (/proc/self/exe): " +
                   std::string(std::strerror(errno)));
  return std::string(buf.data(), static_cast<size_t>(n));
}

// What went wrong, in one line, from the launcher's output: the lines that
// name an error or a failed rank (the last two), else the last line.
std::string failure_line(const std::string& output) {
  std::vector<std::string> lines, errors;
  std::istringstream in(output);
  for (std::string l; std::getline(in, l);) {
    l.erase(l.find_last_not_of(" \r\t") + 1);
    if (l.empty()) continue;
    lines.push_back(l);
    const std::string low = [&] {
      std::string o;
      for (char c : l) o += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return o;
    }();
    if (low.find("error") != std::string::npos || low.find("failed") != std::string::npos ||
        low.find("killed") != std::string::npos)
      errors.push_back(l);
  }
  if (errors.empty()) return lines.empty() ? "no output" : lines.back();
  std::string out;
  for (size_t i = errors.size() > 2 ? errors.size() - 2 : 0; i < errors.size(); ++i)
    out += (out.empty() ? "" : "; ") + errors[i];
  return out;
}

extern "C" char** environ;

}  // namespace

class LaunchedGroup::TempDirHolder : public TempDir {};

LaunchedGroup::LaunchedGroup(const RunConfig& cfg, const ProcessOptions& p, bool live)
    : dir_(std::make_unique<TempDirHolder>()), world_(cfg.world) {
  const std::string dir = dir_->path();
  record_ = dir + "/run.shardrec";
  log_ = dir + "/launch.log";
  std::vector<std::string> args = {shardlab_binary(), "launch", "--nproc-per-node",
                                   std::to_string(cfg.world)};
  if (p.max_restarts > 0) {
    args.push_back("--max-restarts");
    args.push_back(std::to_string(p.max_restarts));
  }
  args.push_back("--");
  args.push_back("run");
  for (const std::string& a : command_args(cfg)) args.push_back(a);
  if (!cfg.record) args.push_back("--no-record");
  args.push_back("--record");
  args.push_back(record_);
  if (live) {
    args.push_back("--live");
    args.push_back(dir);
  }
  if (p.checkpoint_every > 0) {
    args.push_back("--checkpoint-every");
    args.push_back(std::to_string(p.checkpoint_every));
    args.push_back("--checkpoint-dir");
    args.push_back(dir + "/checkpoints");
  }

  // This process's environment, less what would make the launch another one's
  // (a launcher's variables, a fault meant for someone else), plus the fault.
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    const std::string name = v.substr(0, v.find('='));
    if (name == "SHARDLAB_FAULT" || name == "RANK" || name == "WORLD_SIZE" ||
        name == "LOCAL_RANK" || name == "LOCAL_WORLD_SIZE" || name == "MASTER_ADDR" ||
        name == "MASTER_PORT" || name.rfind("OMPI_COMM_WORLD_", 0) == 0 ||
        name.rfind("SLURM_", 0) == 0)
      continue;
    env.push_back(v);
  }
  if (!p.fault.empty()) env.push_back("SHARDLAB_FAULT=" + p.fault);

  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  const int rc = ::posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    throw RunError("cannot start " + args[0] + " launch: " + std::string(std::strerror(rc)));
}

LaunchedGroup::~LaunchedGroup() {
  stop();
}

const std::string& LaunchedGroup::dir() const {
  return dir_->path();
}

bool LaunchedGroup::finished() {
  if (pid_ <= 0) return true;
  const pid_t got = ::waitpid(pid_, &status_, WNOHANG);
  if (got == pid_ || (got < 0 && errno != EINTR)) pid_ = 0;
  return pid_ <= 0;
}

void LaunchedGroup::wait() {
  while (pid_ > 0) {
    if (::waitpid(pid_, &status_, 0) == pid_)
      pid_ = 0;
    else if (errno != EINTR)
      pid_ = 0;
  }
}

void LaunchedGroup::stop() {
  if (pid_ <= 0) return;
  // The launcher stops its group on SIGTERM (SIGKILL to what is left after 5 s).
  ::kill(pid_, SIGTERM);
  wait();
}

RunResult LaunchedGroup::result() {
  wait();
  std::ifstream in(log_, std::ios::binary);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!WIFEXITED(status_) || WEXITSTATUS(status_) != 0) {
    const std::string how = WIFEXITED(status_) ? "exit " + std::to_string(WEXITSTATUS(status_))
                                               : "signal " + std::to_string(WTERMSIG(status_));
    throw RunError("shardlab launch --nproc-per-node " + std::to_string(world_) + " failed (" +
                   how + "): " + failure_line(output));
  }
  try {
    return load_recording(record_).run;
  } catch (const std::exception& e) {
    throw RunError(std::string("the processes' recording: ") + e.what());
  }
}

static RunResult run_processes(const RunConfig& cfg, const ProcessOptions& p) {
  LaunchedGroup group(cfg, p, false);
  return group.result();
}

RunResult run_one(const RunConfig& cfg, const ProcessOptions& processes,
                  const RunCallbacks& callbacks) {
  if (processes.on) return run_processes(cfg, processes);
  return run_training(cfg, nullptr, callbacks);
}

StepRuns run_step(const Step& step, const RunCallbacks& callbacks) {
  if (!step.run) return StepRuns{load_recording(step.recording).run, std::nullopt};
  StepRuns out{run_one(*step.run, step.run_processes, callbacks), std::nullopt};
  if (step.compare) out.b = run_one(*step.compare, step.compare_processes, callbacks);
  return out;
}

}  // namespace shardlab::lesson
