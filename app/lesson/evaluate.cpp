// A lesson step on its finished runs: the prediction's measured metric, the
// gates, where the seek lands, and whether an answer was right.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "app/lesson/lesson.h"

#include "core/recording.h"

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
  } else if (unit == "ms") {
    std::snprintf(buf, sizeof buf, "%.3g ms", v);
  } else if (unit == "%") {
    std::snprintf(buf, sizeof buf, "%.1f %%", v);
  } else if (unit == "x") {
    std::snprintf(buf, sizeof buf, "%.3gx", v);
  } else if (unit == "count") {
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
  return out;
}

namespace {

// "1.5 MiB", "12ms", "25%", "3" -> value in the metric's unit. False if unreadable.
bool parse_number(const std::string& text, const std::string& unit, double& value) {
  const char* s = text.c_str();
  char* end = nullptr;
  const double x = std::strtod(s, &end);
  if (end == s || !std::isfinite(x)) return false;
  std::string suffix(end);
  suffix.erase(0, suffix.find_first_not_of(' '));
  suffix.erase(suffix.find_last_not_of(' ') + 1);
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
  if (!parse_number(answer, p.unit, c.value)) {
    c.error = "'" + answer + "' is not a number" +
              (p.unit.empty() ? std::string() : " in " + p.unit) +
              (p.unit == "B" ? " (e.g. 1.5 MiB, 2048, 3G)" : "");
    return c;
  }
  const double tol = p.tolerance * std::abs(measured);
  c.correct = std::abs(c.value - measured) <= (measured == 0 ? p.tolerance : tol);
  return c;
}

StepRuns run_step(const Step& step, const RunCallbacks& callbacks) {
  if (!step.run) return StepRuns{load_recording(step.recording).run, std::nullopt};
  StepRuns out{run_training(*step.run, nullptr, callbacks), std::nullopt};
  if (step.compare) out.b = run_training(*step.compare, nullptr, callbacks);
  return out;
}

}  // namespace shardlab::lesson
