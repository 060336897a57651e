// `shardlab lesson list|show|run|check`: the lessons on the command line. `run`
// trains each step's real run headless and prints its text, the prediction, the
// formula beside the measured value, the reveal and every gate's PASS/FAIL.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>

#include "app/args.h"
#include "app/commands.h"
#include "app/gui/logic/lesson_progress.h"
#include "app/lesson/lesson.h"
#include "app/lesson/terminal.h"
#include "core/comm/cores.h"

namespace shardlab::app {

namespace {

using namespace shardlab::lesson;

const char* kLessonHelp = R"(usage: shardlab lesson <command> [options]

Lessons step through the strategies on real runs (lessons/FORMAT.md). Lesson
files are read from %s
(set SHARDLAB_LESSONS to use another folder); NAME is a lesson's id, its file
name or a path to a .toml file.

  list                         the lessons, in order
  show NAME                    a lesson's steps: texts, runs, predictions, gates (runs nothing)
  run NAME [--step K]          train each step's run and print the text, the prediction, the
          [--answer VALUE]     formula beside the measured value, the reveal and each gate
          [--schedule FILE]
  run --all                    every step of every lesson (exit 1 if any gate fails)
  check FILE...                validate lesson files; one line per bad file (exit 2)

options:
  --lang en|zh    language of the texts (default en)
  --width N       wrap texts at N columns (default 80)
  --step K        run only step K (1-based)
  --answer VALUE  your prediction: a number with an optional unit (1.5MiB, 12ms, 25%%),
                  or a choice's number or text
  --schedule FILE your own pipeline schedule (shardlab schedule --help) in place of the
                  schedule file the lesson's runs read (lesson schedule-exercise)
)";

struct Out {
  Lang lang = Lang::en;
  int width = 80;
  bool ansi = false;
};

std::string text_of(const Text& t, const Out& o, int indent) {
  return render_terminal(t.blocks(o.lang), o.width, o.ansi, indent);
}

// Text from a file (a lesson, its path, a run's arguments) on one line, its
// control characters shown rather than sent to the terminal.
std::string shown(const std::string& s) {
  return escape_controls(s, false);
}

std::string one_line(const Text& t, Lang l) {
  std::string s = t.source(l);
  for (char& c : s)
    if (c == '\n') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return shown(s);
}

std::string bold(const std::string& s, const Out& o) {
  return o.ansi ? "\033[1m" + s + "\033[0m" : s;
}

// The words around the numbers in the learner's language; metric names and
// command lines stay as they are.
const char* w(const Out& o, const char* en, const char* zh) {
  return o.lang == Lang::zh ? zh : en;
}

// "PASS" / "通过": the app's words for a gate (scripts read the exit code).
std::string verdict(bool pass, const Out& o) {
  const std::string word = pass ? w(o, "PASS", "通过") : w(o, "FAIL", "未通过");
  if (!o.ansi) return word;
  return (pass ? "\033[32m" : "\033[31m") + word + "\033[0m";
}

// The metric's name (as the lesson files write it) and its arguments in words.
std::string describe_metric(const MetricRef& m, const Out& o) {
  const MetricInfo* info = find_metric(m.name);
  const bool zh = o.lang == Lang::zh;
  std::string s = m.name;
  std::vector<std::string> args;
  if (m.run == 'b') args.push_back(w(o, "run b", "第二次运行"));
  if (info)
    for (MetricArg a : info->args) {
      if (a == MetricArg::rank) args.push_back("rank " + std::to_string(m.rank));
      if (a == MetricArg::category && m.category != "total") args.push_back(m.category);
      if (a == MetricArg::pool && m.pool != "device")
        args.push_back(zh ? m.pool + " 内存池" : m.pool + " pool");
      if (a == MetricArg::kind) args.push_back(m.kind);
      if (a == MetricArg::step)
        args.push_back(zh ? "第 " + std::to_string(m.step) + " 步"
                          : "step " + std::to_string(m.step));
      if (a == MetricArg::axis) args.push_back(zh ? m.axis + " 组" : m.axis + " group");
      if (a == MetricArg::link)
        args.push_back(zh ? "按由 " + m.link + " 连接的独立设备推算"
                          : "as on devices joined by " + m.link);
    }
  if (!args.empty()) {
    s += zh ? "（" : " (";
    for (size_t i = 0; i < args.size(); ++i) s += (i ? w(o, ", ", "，") : "") + args[i];
    s += zh ? "）" : ")";
  }
  return s;
}

std::string describe_seek(const Seek& s, const Out& o) {
  if (o.lang == Lang::zh) {
    switch (s.kind) {
      case Seek::Kind::step:
        return "第 " + std::to_string(s.step) + " 步开始处";
      case Seek::Kind::peak_memory:
        return "rank " + std::to_string(s.rank) + " 的内存峰值处";
      case Seek::Kind::event: {
        std::string d = "rank " + std::to_string(s.rank) + " 上";
        if (s.step >= 0) d += "第 " + std::to_string(s.step) + " 步中";
        if (s.micro_batch >= 0) d += "微批次 " + std::to_string(s.micro_batch) + " 的";
        if (s.layer >= 0) d += "第 " + std::to_string(s.layer) + " 层的";
        return d + "第 " + std::to_string(std::max(1, s.nth)) + " 次" +
               span_kind_words(s.event, Lang::zh);
      }
    }
    return "";
  }
  switch (s.kind) {
    case Seek::Kind::step:
      return "the start of step " + std::to_string(s.step);
    case Seek::Kind::peak_memory:
      return "where rank " + std::to_string(s.rank) + "'s memory peaks";
    case Seek::Kind::event: {
      std::string d = (s.nth > 1 ? "occurrence " + std::to_string(s.nth) + " of " : "the first ") +
                      std::string(to_string(s.event));
      if (s.layer >= 0) d += " of layer " + std::to_string(s.layer);
      if (s.micro_batch >= 0) d += ", micro-batch " + std::to_string(s.micro_batch);
      if (s.step >= 0) d += ", step " + std::to_string(s.step);
      return d + " on rank " + std::to_string(s.rank);
    }
  }
  return "";
}

std::string describe_highlight(const Highlight& h, const Out& o) {
  if (o.lang == Lang::zh) switch (h.kind) {
      case Highlight::Kind::rank:
        return "rank " + std::to_string(h.rank);
      case Highlight::Kind::area:
        return h.area + " 区域";
      case Highlight::Kind::category:
        return std::string(to_string(h.category)) + " 类别";
    }
  switch (h.kind) {
    case Highlight::Kind::rank:
      return "rank " + std::to_string(h.rank);
    case Highlight::Kind::area:
      return "the " + h.area + " area";
    case Highlight::Kind::category:
      return std::string("the ") + to_string(h.category) + " category";
  }
  return "";
}

void print_step_header(const Lesson& l, size_t k, const Out& o) {
  const Step& s = l.steps[k];
  const std::string n = std::to_string(k + 1) + "/" + std::to_string(l.steps.size());
  const std::string head = o.lang == Lang::zh ? "第 " + n + " 步：" : "Step " + n + ": ";
  std::printf("\n%s\n", bold(head + one_line(s.title, o.lang), o).c_str());
  std::printf("%s", text_of(s.text, o, 2).c_str());
  // The labels line up in each language: "run:      " / "运行：".
  if (s.run)
    std::printf("  %s%s\n", w(o, "run:      ", "运行："),
                shown(command_line(*s.run, s.run_processes)).c_str());
  if (s.compare)
    std::printf("  %s%s\n", w(o, "compare:  ", "对比："),
                shown(command_line(*s.compare, s.compare_processes)).c_str());
  if (!s.recording.empty())
    std::printf("  %s%s\n", w(o, "recording: ", "录制："), shown(s.recording).c_str());
  if (s.look) {
    const bool zh = o.lang == Lang::zh;
    std::string d = s.look->view.empty() ? "" : s.look->view + w(o, " view", " 视图");
    const char* sep = w(o, "; ", "；");
    if (s.look->seek)
      d += (d.empty() ? "" : sep) + std::string(w(o, "at ", "位置：")) +
           describe_seek(*s.look->seek, o);
    if (s.look->highlight)
      d += (d.empty() ? "" : sep) + std::string(w(o, "highlight ", "高亮：")) +
           describe_highlight(*s.look->highlight, o);
    std::printf("  %s%s\n", zh ? "请看：" : "look:     ", d.c_str());
  }
}

void print_prediction_question(const Prediction& p, const Out& o) {
  std::printf("  %s\n", bold(o.lang == Lang::zh ? "预测：" : "Predict:", o).c_str());
  std::printf("%s", text_of(p.question, o, 4).c_str());
  if (p.is_choice())
    for (size_t i = 0; i < p.choices.size(); ++i)
      std::printf("    %zu) %s\n", i + 1, one_line(p.choices[i].label, o.lang).c_str());
  else if (o.lang == Lang::zh)
    std::printf("    （%s；与实测相差 ±%g %% 以内算对；%s）\n",
                p.unit.empty()      ? "答一个数"
                : p.unit == "count" ? "答一个计数"
                                    : ("单位 " + p.unit).c_str(),
                100 * p.tolerance, describe_metric(p.metric, o).c_str());
  else
    std::printf("    (answer %s; right within ±%g %% of the measured value, %s)\n",
                p.unit.empty()      ? "a plain number"
                : p.unit == "count" ? "a count"
                                    : ("in " + p.unit).c_str(),
                100 * p.tolerance, describe_metric(p.metric, o).c_str());
}

void print_gate_line(const Gate& g, const Out& o) {
  std::string rhs = g.right ? describe_metric(*g.right, o)
                            : format_value(*g.value, find_metric(g.metric.name)->unit);
  std::printf("    %s %s %s — %s\n", describe_metric(g.metric, o).c_str(), g.op.c_str(),
              rhs.c_str(), one_line(g.text, o.lang).c_str());
}

int cmd_list(const Out& o) {
  const std::string dir = lessons_dir();
  const std::vector<Lesson> all = load_all_lessons(dir);
  if (all.empty()) {
    std::printf("no lessons in %s\n", dir.c_str());
    return 0;
  }
  // One column for the ids, as wide as the longest ("mixed-precision").
  int w = 12;
  for (const Lesson& l : all) w = std::max(w, static_cast<int>(l.id.size()));
  // The app's saved progress (read only: an unreadable file is the app's to set aside).
  gui::ProgressStore progress;
  if (const std::string path = gui::default_progress_path(); !path.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (in) try {
        progress = gui::progress_from_json(std::string(std::istreambuf_iterator<char>(in), {}));
      } catch (const std::exception&) {
      }
  }
  for (const Lesson& l : all) {
    std::printf(o.lang == Lang::zh ? "%-*s %2zu 步  %s" : "%-*s %2zu steps  %s", w, l.id.c_str(),
                l.steps.size(), one_line(l.title, o.lang).c_str());
    if (auto it = progress.lessons.find(l.id); it != progress.lessons.end()) {
      int seen = 0;
      for (const auto& [k, r] : it->second.revealed)
        seen += r && k >= 0 && k < static_cast<int>(l.steps.size());
      if (seen > 0)
        std::printf(o.lang == Lang::zh ? "  [已揭晓 %d/%zu 步]" : "  [%d/%zu steps revealed]", seen,
                    l.steps.size());
    }
    std::printf("\n%*s%s\n", w + 3, "", one_line(l.summary, o.lang).c_str());
  }
  std::printf("\n%s\n", o.lang == Lang::zh ? "即将推出（源文章中尚无课程的主题）："
                                           : "Still to come (topics of the source articles):");
  for (const UpcomingTopic& t : topics_to_come())
    std::printf("  - %s\n", o.lang == Lang::zh ? t.zh : t.en);
  return 0;
}

int cmd_show(const Lesson& l, const Out& o) {
  std::printf("%s  (%s)\n", bold(one_line(l.title, o.lang), o).c_str(), shown(l.path).c_str());
  std::printf("%s", text_of(l.summary, o, 0).c_str());
  for (size_t k = 0; k < l.steps.size(); ++k) {
    const Step& s = l.steps[k];
    print_step_header(l, k, o);
    if (s.predict) print_prediction_question(*s.predict, o);
    if (s.reveal) {
      std::printf("  %s\n", bold(o.lang == Lang::zh ? "揭晓：" : "Reveal:", o).c_str());
      std::printf("%s", text_of(*s.reveal, o, 4).c_str());
    }
    if (!s.gates.empty())
      std::printf("  %s\n", bold(o.lang == Lang::zh ? "检查：" : "Gates:", o).c_str());
    for (const Gate& g : s.gates) print_gate_line(g, o);
  }
  return 0;
}

// Runs the steps of one lesson; returns false when a gate, a seek or a metric failed.
bool run_lesson(const Lesson& l, int only_step, const std::optional<std::string>& answer,
                const Out& o) {
  std::printf("%s  (%s)\n", bold(one_line(l.title, o.lang), o).c_str(), shown(l.path).c_str());
  bool ok = true;
  for (size_t k = 0; k < l.steps.size(); ++k) {
    if (only_step > 0 && static_cast<int>(k) + 1 != only_step) continue;
    const Step& s = l.steps[k];
    print_step_header(l, k, o);
    if (s.predict) print_prediction_question(*s.predict, o);
    std::fflush(stdout);
    const StepRuns runs = run_step(s);
    const StepResult r = evaluate_step(s, runs.a, runs.b ? &*runs.b : nullptr);
    if (!s.recording.empty())
      std::printf(w(o, "  recorded run: %s (recorded on %s)\n", "  录制的运行：%s（录制于 %s）\n"),
                  shown(s.recording).c_str(), s.recorded_where.c_str());
    // Where the time comes from: measured here, with ranks per core when they outnumber them.
    const int cores = cores_available();
    std::string crowded = oversubscription_short(runs.a.cfg.world, cores);
    if (!crowded.empty() && o.lang == Lang::zh)
      crowded = std::to_string(runs.a.cfg.world) + " 个 rank 共用 " + std::to_string(cores) +
                " 个核：时间被拉长";
    std::printf(w(o, "  %s: %d steps, final loss %.6g, median step %s measured here%s\n",
                  "  %s：%d 步，最终损失 %.6g，本机实测每步耗时中位数 %s%s\n"),
                s.recording.empty() ? w(o, "trained", "已训练") : w(o, "replayed", "已回放"),
                runs.a.cfg.steps, runs.a.losses.empty() ? 0.0 : runs.a.losses.back(),
                format_value(runs.a.median_step_ms, "ms").c_str(),
                crowded.empty() ? "" : (" (" + crowded + ")").c_str());
    if (s.predict) {
      const Prediction& p = *s.predict;
      const MetricResult& m = *r.prediction;
      if (answer) {
        const AnswerCheck c = check_answer(p, r, *answer);
        if (!c.error.empty())
          std::printf("    %s%s (%s)\n", w(o, "your answer: ", "你的答案："), answer->c_str(),
                      c.error.c_str());
        else if (p.is_choice())
          std::printf("    %s%d) %s — %s\n", w(o, "your answer: ", "你的答案："), c.choice + 1,
                      one_line(p.choices[c.choice].label, o.lang).c_str(),
                      c.correct ? w(o, "right", "正确") : w(o, "not right", "不对"));
        else
          std::printf("    %s%s — %s\n", w(o, "your answer: ", "你的答案："),
                      format_value(c.value, p.unit).c_str(),
                      c.correct ? w(o, "right (within the tolerance)", "正确（在容差之内）")
                                : w(o, "not right", "不对"));
      } else {
        std::printf("    %s\n", w(o, "your answer: none given (--answer VALUE)",
                                  "你的答案：未作答（--answer 值）"));
      }
      if (!m.value) {
        std::printf(w(o, "    measured: could not be evaluated: %s\n", "    实测：无法求值：%s\n"),
                    m.error.c_str());
        ok = false;
      } else {
        if (m.value->formula)
          std::printf("    %s %s: %s\n", w(o, "formula", "公式"), m.value->formula_text.c_str(),
                      format_value(*m.value->formula, m.value->unit).c_str());
        else if (!m.value->formula_text.empty())
          std::printf("    %s %s\n", w(o, "formula:", "公式："), m.value->formula_text.c_str());
        std::printf("    %s%s\n", w(o, "measured: ", "实测："),
                    format_value(m.value->measured, m.value->unit).c_str());
        if (p.is_choice()) {
          if (r.right_choice >= 0)
            std::printf("    %s%d) %s\n", w(o, "right choice: ", "正确选项："), r.right_choice + 1,
                        one_line(p.choices[r.right_choice].label, o.lang).c_str());
          else {
            std::printf("%s",
                        w(o, "    right choice: none of the choices holds for the measured value\n",
                          "    正确选项：没有一个选项符合实测值\n"));
            ok = false;
          }
        }
      }
    }
    if (s.reveal) {
      std::printf("  %s\n", bold(o.lang == Lang::zh ? "揭晓：" : "Reveal:", o).c_str());
      std::printf("%s", text_of(*s.reveal, o, 4).c_str());
    }
    if (r.seek) {
      std::printf("  %s%s %s\n", w(o, "seek:     ", "定位："),
                  r.seek->found ? w(o, "found", "找到") : w(o, "NOT FOUND:", "未找到："),
                  r.seek->found ? (r.seek->description + w(o, " at ", "，时间 ") +
                                   format_value(static_cast<double>(r.seek->t_ns) / 1e6, "ms"))
                                      .c_str()
                                : r.seek->description.c_str());
      ok = ok && r.seek->found;
    }
    for (const GateResult& g : r.gates) {
      const std::string unit = find_metric(g.gate->metric.name)->unit;
      std::string detail;
      if (!g.left.value)
        detail = g.left.error;
      else if (g.right && !g.right->value)
        detail = g.right->error;
      else
        detail = describe_metric(g.gate->metric, o) + " " +
                 format_value(g.left.value->measured, unit) + " " + g.gate->op + " " +
                 format_value(g.right_value, unit);
      std::printf(w(o, "  gate %s  %s  (%s)\n", "  检验 %s  %s（%s）\n"),
                  verdict(g.pass, o).c_str(), one_line(g.gate->text, o.lang).c_str(),
                  detail.c_str());
      ok = ok && g.pass;
    }
  }
  return ok;
}

Out out_from(const Args& a) {
  Out o;
  o.lang = parse_lang(a.str("lang", "en"));
  o.width = a.integer("width", 80);
  if (o.width < 20 || o.width > 1000)
    throw ConfigError("--width " + std::to_string(o.width) + " is out of range (valid: 20..1000)");
  const char* no_color = std::getenv("NO_COLOR");
  o.ansi = isatty(STDOUT_FILENO) && !(no_color && *no_color);
  return o;
}

}  // namespace

int cmd_lesson(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::printf(kLessonHelp, lessons_dir().c_str());
    return argc < 2 ? 2 : 0;
  }
  // `lesson run --help` and the like: the one help text covers every lesson command.
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::printf(kLessonHelp, lessons_dir().c_str());
      return 0;
    }
  const std::string sub = argv[1];
  const std::string name = "lesson " + sub;
  if (sub == "list") {
    const Args a(argc - 1, argv + 1, name, {"lang", "width"}, {});
    return cmd_list(out_from(a));
  }
  if (sub == "show") {
    const Args a(argc - 1, argv + 1, name, {"lang", "width"}, {}, Args::Positionals::allowed);
    if (a.positional().size() != 1)
      throw ConfigError(
          "'shardlab lesson show' takes one lesson NAME (see 'shardlab lesson list')");
    return cmd_show(find_lesson(a.positional()[0], lessons_dir()), out_from(a));
  }
  if (sub == "run") {
    const Args a(argc - 1, argv + 1, name, {"lang", "width", "step", "answer", "schedule"}, {"all"},
                 Args::Positionals::allowed);
    const Out o = out_from(a);
    std::vector<Lesson> lessons;
    if (a.has("all")) {
      if (!a.positional().empty() || a.has("step") || a.has("answer"))
        throw ConfigError(
            "--all runs every step of every lesson: it takes no NAME, --step or --answer");
      lessons = load_all_lessons(lessons_dir());
      if (lessons.empty()) {
        std::printf("no lessons in %s\n", lessons_dir().c_str());
        return 0;
      }
    } else {
      if (a.positional().size() != 1)
        throw ConfigError(
            "'shardlab lesson run' takes one lesson NAME, or --all (see 'shardlab lesson list')");
      lessons.push_back(find_lesson(a.positional()[0], lessons_dir()));
    }
    if (auto file = a.get("schedule")) {
      if (a.has("all"))
        throw ConfigError("--schedule " + *file + " goes with one lesson NAME, not --all");
      use_schedule(lessons.front(), *file);
    }
    const int only = a.integer("step", 0);
    const Lesson& first = lessons.front();
    if (a.has("step") && (only < 1 || only > static_cast<int>(first.steps.size())))
      throw ConfigError("--step " + std::to_string(only) + " is not a step of '" + first.id +
                        "' (valid: 1.." + std::to_string(first.steps.size()) + ")");
    const auto answer = a.get("answer");
    if (answer) {
      // Which prediction the answer is for, and that it can be read, before training.
      std::vector<int> asking;
      for (size_t k = 0; k < first.steps.size(); ++k)
        if (first.steps[k].predict && (only == 0 || only == static_cast<int>(k) + 1))
          asking.push_back(static_cast<int>(k));
      if (asking.empty())
        throw ConfigError(
            "--answer: " + (only ? "step " + std::to_string(only) : "'" + first.id + "'") +
            " asks no prediction");
      if (asking.size() > 1)
        throw ConfigError("--answer: '" + first.id + "' asks " + std::to_string(asking.size()) +
                          " predictions; choose one with --step K");
      StepResult probe;
      probe.prediction = MetricResult{};
      probe.prediction->value = MetricValue{};
      const AnswerCheck c = check_answer(*first.steps[asking[0]].predict, probe, *answer);
      if (!c.error.empty()) throw ConfigError("--answer " + c.error);
    }
    bool ok = true;
    for (const Lesson& l : lessons) {
      ok = run_lesson(l, only, answer, o) && ok;
      std::printf("\n");
    }
    if (!ok) std::printf("some gates, seeks or metrics FAILED (see above)\n");
    return ok ? 0 : 1;
  }
  if (sub == "check") {
    const Args a(argc - 1, argv + 1, name, {}, {}, Args::Positionals::allowed);
    if (a.positional().empty())
      throw ConfigError("'shardlab lesson check' takes lesson FILEs (e.g. lessons/*.toml)");
    int bad = 0;
    std::map<std::string, std::string> ids;
    for (const std::string& f : a.positional()) {
      try {
        const Lesson l = load_lesson(f);
        if (auto it = ids.find(l.id); it != ids.end())
          throw LessonError(f, 1, "id", "id: '" + l.id + "' is also the id of " + it->second);
        ids[l.id] = f;
        std::printf("ok: %s (%s, %zu step%s)\n", shown(f).c_str(), l.id.c_str(), l.steps.size(),
                    l.steps.size() == 1 ? "" : "s");
      } catch (const ConfigError& e) {
        std::fprintf(stderr, "%s\n", shown(e.what()).c_str());
        ++bad;
      }
    }
    return bad ? 2 : 0;
  }
  throw ConfigError("unknown lesson command '" + sub + "' (valid: list, show, run, check)");
}

}  // namespace shardlab::app
