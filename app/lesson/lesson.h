// Lessons: files in lessons/ (TOML structure, Markdown texts, English and
// Chinese side by side; lessons/FORMAT.md) loaded into plain values the command
// line and the GUI's lesson player share. No ImGui, Gloo or CUDA in here.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/record/recorder.h"
#include "core/run/metrics.h"
#include "core/run/runner.h"

namespace shardlab::lesson {

// A lesson file that cannot be used. what() is one line:
// "lessons/04-zero.toml:37: step 3: predict.metric.name 'peak' is unknown (valid: …)".
class LessonError : public ConfigError {
 public:
  LessonError(std::string file, int line, std::string key, const std::string& message);
  const std::string& file() const { return file_; }
  int line() const { return line_; }  // 1-based; 0 when the file has no line (unreadable)
  const std::string& key() const { return key_; }  // dotted, e.g. "step[3].predict.metric.name"

 private:
  std::string file_;
  int line_;
  std::string key_;
};

enum class Lang { en, zh };
const char* to_string(Lang l);
Lang parse_lang(const std::string& s);  // "en" | "zh"; throws ConfigError
// A span kind as the lesson texts name it: "all-gather" / "全收集".
const char* span_kind_words(SpanKind k, Lang l);

// Markdown, parsed by md4c into blocks of styled runs.
struct TextRun {
  std::string text;  // UTF-8
  bool emphasis = false;
  bool strong = false;
  bool code = false;
};
enum class BlockKind { paragraph, list_item, heading, code };
struct Block {
  BlockKind kind = BlockKind::paragraph;
  int depth = 0;              // list_item: 1 for a top-level item, 2 inside it, …
  bool ordered = false;       // list_item: numbered
  int number = 0;             // list_item in an ordered list: its number
  int level = 0;              // heading: 1..6
  std::vector<TextRun> runs;  // code blocks: one run holding the block's text
};
using Markdown = std::vector<Block>;
// Throws ConfigError naming a construct lessons do not use (links, images, HTML,
// tables, quotes, rules).
Markdown parse_markdown(const std::string& source);

// One text in both languages: its source and its parsed blocks.
struct Text {
  std::string en, zh;  // Markdown source
  Markdown en_blocks, zh_blocks;
  const std::string& source(Lang l) const { return l == Lang::zh ? zh : en; }
  const Markdown& blocks(Lang l) const { return l == Lang::zh ? zh_blocks : en_blocks; }
};

// Where to look (applied by the GUI; checked here).
struct Seek {
  enum class Kind { step, event, peak_memory };
  Kind kind = Kind::step;
  int step = -1;  // Kind::step: the step; Kind::event: only spans of this step (-1: any)
  SpanKind event = SpanKind::other;
  int layer = -1;        // -1: any
  int micro_batch = -1;  // -1: any
  int rank = 0;          // the rank whose spans (or memory) are searched
  int nth = 1;           // the nth match, in time order, 1-based
};
struct Highlight {
  enum class Kind { rank, area, category };
  Kind kind = Kind::rank;
  int rank = -1;
  std::string area;  // breakdown | bubble (timeline), table | memory (compare)
  MemCategory category = MemCategory::params;
};
struct Look {
  std::string view;  // timeline | memory | cluster | camping | compare | loss
  std::optional<Seek> seek;
  std::optional<Highlight> highlight;
};

struct Choice {
  Text label;
  std::string op;  // < <= > >= ==
  double value = 0;
};
struct Prediction {
  Text question;
  MetricRef metric;
  std::string unit;             // the metric's unit
  double tolerance = 0.1;       // relative; numeric predictions only
  std::vector<Choice> choices;  // empty: a number is asked for
  bool is_choice() const { return !choices.empty(); }
};

struct Gate {
  MetricRef metric;
  std::string op;  // < <= > >= ==
  std::optional<double> value;
  std::optional<MetricRef> right;  // compared with another metric instead of a value
  Text text;
  int line = 0;
};

// A run whose ranks are separate processes (run key `processes = true`):
// `shardlab launch --nproc-per-node <world> -- run …`, its recording read back.
struct ProcessOptions {
  bool on = false;
  std::string fault;         // SHARDLAB_FAULT for the launch ("2:7:kill"); empty: none
  int max_restarts = 0;      // launch --max-restarts
  int checkpoint_every = 0;  // run --checkpoint-every into a fresh temporary directory; 0: none
};

// A run of one process per rank that this process started: `shardlab launch
// --nproc-per-node <world> -- run …` with its recording (and, with `live`, each
// rank's live file: core/record/live_stream.h) in a private directory, removed with it.
class LaunchedGroup {
 public:
  // Starts it; throws RunError when it cannot.
  LaunchedGroup(const RunConfig& cfg, const ProcessOptions& p, bool live);
  ~LaunchedGroup();  // stops the group if it still runs
  LaunchedGroup(const LaunchedGroup&) = delete;
  LaunchedGroup& operator=(const LaunchedGroup&) = delete;

  const std::string& dir() const;  // where the live files are
  bool finished();                 // without blocking
  void stop();                     // SIGTERM to the launcher, which stops its group; waits
  // Waits for the end; the run read back from its recording, or RunError with
  // the launcher's error line.
  RunResult result();

 private:
  void wait();
  class TempDirHolder;
  std::unique_ptr<TempDirHolder> dir_;
  int world_ = 0;
  std::string record_, log_;
  pid_t pid_ = 0;
  int status_ = 0;
};

struct Step {
  int line = 0;  // of its [[step]] header
  Text title;
  Text text;
  // The run this step needs, validated as `shardlab run` validates it; none
  // when the step shows a recording.
  std::optional<RunConfig> run;
  std::optional<RunConfig> compare;                 // second run, beside the first
  ProcessOptions run_processes, compare_processes;  // how each run is made
  std::string recording;              // path (resolved against the lesson file's folder)
  std::optional<RunConfig> recorded;  // the recording's settings (read when the lesson loads)
  std::string recorded_where;         // "cpu (…), world 3, 2026-11-23 16:40 UTC"
  std::optional<Look> look;
  std::optional<Prediction> predict;
  std::optional<Text> reveal;
  std::vector<Gate> gates;
};

struct Lesson {
  std::string path;  // the file it was read from
  int format = 1;
  std::string id;
  Text title;
  Text summary;
  std::vector<Step> steps;
};

// Reads and checks one file: every key, run, metric, seek and text, in both
// languages. Throws LessonError (one line, file:line: key) on the first problem.
Lesson load_lesson(const std::string& path);
// The same from text already read; `path` is what errors name (and where
// recordings are looked for).
Lesson parse_lesson(const std::string& content, const std::string& path);

// Topics of the source articles that have no lesson yet: `lesson list` and the
// app's lesson list name them, so a learner knows they are coming, not missing.
struct UpcomingTopic {
  const char* en;
  const char* zh;
};
const std::vector<UpcomingTopic>& topics_to_come();

// The lessons directory: $SHARDLAB_LESSONS, else lessons/ next to the source.
std::string lessons_dir();
// Every *.toml in `dir`, by file name (the NN- prefix orders them). Throws the
// first file's LessonError, or LessonError for two lessons with one id. With
// `errors`, bad files are left out instead and their one-line errors collected
// (a player can then list the good lessons and show what is wrong with the rest).
std::vector<Lesson> load_all_lessons(const std::string& dir,
                                     std::vector<std::string>* errors = nullptr);
std::vector<std::string> lesson_files(const std::string& dir);  // *.toml, sorted
// A lesson by id ("zero"), file name ("04-zero") or path to a .toml file.
Lesson find_lesson(const std::string& name, const std::string& dir);
// `--schedule FILE` with a lesson: FILE (a learner's own order) in place of
// the schedule file its runs read, checked at once. Throws ConfigError, one
// line, when FILE is not a valid schedule for those runs, or when the lesson
// runs none.
void use_schedule(Lesson& l, const std::string& file);

// ----- Evaluating a step on its finished run(s) -----

struct MetricResult {
  MetricRef ref;
  std::optional<MetricValue> value;  // empty when it could not be evaluated
  std::string error;                 // why not
};

struct GateResult {
  const Gate* gate = nullptr;  // into the Step given to evaluate_step
  MetricResult left;
  std::optional<MetricResult> right;  // when the gate compares two metrics
  double right_value = 0;
  bool pass = false;  // false also when a metric could not be evaluated
};

struct SeekResult {
  bool found = false;
  int64_t t_ns = 0;         // relative to the run's t0 (its trace's zero)
  std::string description;  // what was found, or why nothing was
};

struct StepResult {
  std::optional<MetricResult> prediction;  // the measured value that answers the prediction
  int right_choice = -1;                   // multiple choice: index of the choice that holds
  std::vector<GateResult> gates;
  std::optional<SeekResult> seek;
  double psi = 0;  // Ψ, run a's parameter count: an answer may be written "16Ψ" or "16Ψ/3"
  bool gates_pass() const;
};

// Metrics, prediction and gates of `step` on its run `a` (and `b` for its
// compare run). The GUI runs the step with its own session, then calls this;
// off the UI thread, since weight_diff_to_single trains the `single` reference.
StepResult evaluate_step(const Step& step, const RunResult& a, const RunResult* b);

// Where a seek lands in a finished run.
SeekResult resolve_seek(const Seek& seek, const RunResult& r);

struct AnswerCheck {
  bool correct = false;
  double value = 0;   // numeric answer as understood (B suffixes KiB/MiB/GiB applied)
  int choice = -1;    // multiple choice: the index picked
  std::string error;  // the answer could not be read
};
// `answer`: a number (with an optional unit suffix) or, for a choice, its
// 1-based index or its label in either language. Numbers may be written as the
// lessons print them: digits grouped by spaces or commas ("446 976", "446,976"),
// a multiple of Ψ ("16Ψ", "16Ψ/3", "Ψ"), a ratio with "×" ("1.5×").
AnswerCheck check_answer(const Prediction& p, const StepResult& result, const std::string& answer);

// Runs a step headless (its run, then its compare run), or loads its recording;
// throws ConfigError for a recording that cannot be read.
struct StepRuns {
  RunResult a;
  std::optional<RunResult> b;
};
// A run with `processes.on` is launched as separate processes and read back
// from its recording (throws RunError with the launcher's last error line).
StepRuns run_step(const Step& step, const RunCallbacks& callbacks = {});
// One run of a step: threads in this process, or a launched group.
RunResult run_one(const RunConfig& cfg, const ProcessOptions& processes,
                  const RunCallbacks& callbacks = {});

// The `shardlab run` command line that makes this run (options that differ from the defaults).
std::string command_line(const RunConfig& c);
std::vector<std::string> command_args(const RunConfig& c);  // the same, after "shardlab run"
// A launched run: "[SHARDLAB_FAULT=…] shardlab launch --nproc-per-node N … -- run …".
std::string command_line(const RunConfig& c, const ProcessOptions& p);

// "1.50 MiB", "12.3 ms", "25.0 %", "1.32x", "4", "0.0123": a value as a learner reads it.
std::string format_value(double v, const std::string& unit);
// True when s[i] is the space inside a number grouped by thousands ("27 936"):
// a line is not broken there, in the panel or in a terminal.
bool thousands_space(const std::string& s, size_t i);
// True when s[i] is a space inside a short parenthesised formula ("(M + P − 1)",
// closed within 24 bytes) or beside an '=' ("V = 719"): a formula is not broken
// across lines either.
bool formula_space(const std::string& s, size_t i);
// Whole bytes grouped by thousands as the lesson texts write them: "446 976 B".
std::string exact_bytes(double v);
// "<= 1e-05": a gate's or choice's condition; holds(op, left, right) evaluates it.
bool holds(const std::string& op, double left, double right);

}  // namespace shardlab::lesson
