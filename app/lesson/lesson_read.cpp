// Reading and checking lesson files (lessons/FORMAT.md): toml++ for the
// structure, md4c for the texts, `shardlab run`'s own option parsing for the
// runs. Every problem is one LessonError naming the file, the line and the key.
// What a lesson is, once read, is lesson.h; finding and listing them, lesson.cpp.
#include "app/lesson/lesson.h"

#include "core/run/recording.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "app/args.h"
#include "app/config_args.h"
#include "app/lesson/lesson_file.h"
#include "app/lesson/terminal.h"
#include "core/model/model.h"
#include "core/parallel/strategy.h"
#include "core/predict/pipeline_analysis.h"
#include "core/run_options.h"

#ifndef SHARDLAB_LESSONS_DIR
#define SHARDLAB_LESSONS_DIR "lessons"
#endif

namespace shardlab::lesson {

namespace fs = std::filesystem;
using app::Args;
using app::config_from;
using app::run_flags;
using app::run_options;

namespace {

const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a number";
    case toml::node_type::boolean:
      return "a boolean";
    default:
      return "a date or time";
  }
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Where in the file we are: the step (1-based, 0 outside steps) and the key path.
struct Ctx {
  std::string file;
  int step = 0;

  std::string label(const std::string& key) const {
    return step > 0 ? "step " + std::to_string(step) + ": " + key : key;
  }
  std::string dotted(const std::string& key) const {
    return step > 0 ? "step[" + std::to_string(step) + "]." + key : key;
  }
  [[noreturn]] void fail(int line, const std::string& key, const std::string& message) const {
    throw LessonError(file, std::max(line, 1), dotted(key), label(key) + ": " + message);
  }
};

int line_of(const toml::node& n, int fallback) {
  const int l = static_cast<int>(n.source().begin.line);
  return l > 0 ? l : fallback;
}

// A table with a fixed set of keys: unknown keys are errors at their own line.
struct Table {
  const Ctx& ctx;
  const toml::table& t;
  std::string path;  // "" at the root, else "predict." etc.
  int line;

  // `refused`: keys that pass here so that the reader can say why they are refused.
  Table(const Ctx& c, const toml::table& tbl, std::string p, int fallback_line,
        const std::vector<std::string>& allowed, const std::set<std::string>& refused = {})
      : ctx(c), t(tbl), path(std::move(p)), line(line_of(tbl, fallback_line)) {
    for (auto&& [k, v] : t) {
      const std::string name(k.str());
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end() && !refused.count(name))
        ctx.fail(line_of_key(k, v), path + name,
                 "unknown key '" + name + "' (valid: " + join(allowed) + ")");
    }
  }
  int line_of_key(const toml::key& k, const toml::node& v) const {
    const int l = static_cast<int>(k.source().begin.line);
    return l > 0 ? l : line_of(v, line);
  }
  const toml::node* get(const std::string& key) const { return t.get(key); }
  int line_at(const std::string& key) const {
    const toml::node* n = get(key);
    return n ? line_of(*n, line) : line;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    ctx.fail(line_at(key), path + key, message);
  }
  const toml::node& need(const std::string& key) const {
    const toml::node* n = get(key);
    if (!n) ctx.fail(line, path + key, "missing (this key is required)");
    return *n;
  }
  std::string string(const std::string& key) const {
    const toml::node& n = need(key);
    if (!n.is_string()) fail(key, std::string("must be a string, not ") + type_name(n));
    return checked_text(key, n.as_string()->get());
  }
  // Lesson strings reach terminals (lesson show/run): a control character there
  // (an escape clearing the screen, an OSC 52 clipboard write) would act, not show.
  const std::string& checked_text(const std::string& key, const std::string& s) const {
    if (const std::string bad = find_control_character(s); !bad.empty())
      fail(key, "holds control character " + bad +
                    " (valid: text without control characters; newlines and tabs are fine)");
    return s;
  }
  std::optional<std::string> opt_string(const std::string& key) const {
    if (!get(key)) return std::nullopt;
    return string(key);
  }
  int64_t integer(const std::string& key) const {
    const toml::node& n = need(key);
    if (!n.is_integer()) fail(key, std::string("must be an integer, not ") + type_name(n));
    return n.as_integer()->get();
  }
  int small_int(const std::string& key, int lo, int hi) const {
    const int64_t v = integer(key);
    if (v < lo || v > hi)
      fail(key, std::to_string(v) + " is out of range (valid: " + std::to_string(lo) + ".." +
                    std::to_string(hi) + ")");
    return static_cast<int>(v);
  }
  double number(const std::string& key) const {
    const toml::node& n = need(key);
    double v;
    if (n.is_integer())
      v = static_cast<double>(n.as_integer()->get());
    else if (n.is_floating_point())
      v = n.as_floating_point()->get();
    else
      fail(key, std::string("must be a number, not ") + type_name(n));
    if (!std::isfinite(v)) fail(key, "must be a finite number");
    return v;
  }
  const toml::table& table(const std::string& key) const {
    const toml::node& n = need(key);
    if (!n.is_table()) fail(key, std::string("must be a table, not ") + type_name(n));
    return *n.as_table();
  }
};

// A text in both languages: { en = "…", zh = "…" }, Markdown in each.
Text read_text(const Table& parent, const std::string& key) {
  const toml::table& t = parent.table(key);
  const Table tt(parent.ctx, t, parent.path + key + ".", parent.line_at(key), {"en", "zh"});
  Text out;
  for (const char* lang : {"en", "zh"}) {
    if (!tt.get(lang))
      parent.ctx.fail(tt.line, tt.path + lang,
                      std::string("missing: every text needs both en and zh (") +
                          (std::string(lang) == "zh" ? "the Chinese" : "the English") +
                          " is missing)");
    std::string src = tt.string(lang);
    if (src.find_first_not_of(" \t\r\n") == std::string::npos) tt.fail(lang, "is empty");
    Markdown blocks;
    try {
      blocks = parse_markdown(src);
    } catch (const ConfigError& e) {
      tt.fail(lang, e.what());
    }
    if (std::string(lang) == "en") {
      out.en = std::move(src);
      out.en_blocks = std::move(blocks);
    } else {
      out.zh = std::move(src);
      out.zh_blocks = std::move(blocks);
    }
  }
  // The languages line up: the same list items and code blocks in each
  // (paragraphs may be split differently in translation).
  for (const BlockKind kind : {BlockKind::list_item, BlockKind::code}) {
    auto count = [kind](const Markdown& m) {
      return std::count_if(m.begin(), m.end(), [kind](const Block& b) { return b.kind == kind; });
    };
    const auto en = count(out.en_blocks), zh = count(out.zh_blocks);
    if (en != zh) {
      const std::string what = kind == BlockKind::code ? "code blocks" : "list items";
      tt.fail("zh", "has " + std::to_string(zh) + " " + what + " and en has " + std::to_string(en) +
                        " (the two languages must line up)");
    }
  }
  return out;
}

// Output options of `shardlab run` that a lesson's run has no use for.
const std::set<std::string> kNotInLessons = {
    "trace", "save-init", "save-final", "save-data",       "init-from",
    "json",  "no-record", "record",     "allow-nonfinite", "force"};

std::string format_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  // Keep it a float on the command line: world = 2.0 must not pass as 2.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// One key of a run table as `shardlab run` would see it: "--world=3", "--no-overlap",
// or nothing for a flag set to false.
std::optional<std::string> run_argument(const Table& rt, const std::string& key,
                                        const toml::node& v) {
  if (run_flags().count(key)) {
    // A flag that may take a value: offload = "nvme:/var/tmp" is --offload=nvme:/var/tmp.
    const OptionRow* row = find_option(key);
    if (row && row->flag_value && v.is_string())
      return "--" + key + "=" + rt.checked_text(key, v.as_string()->get());
    if (!v.is_boolean())
      rt.fail(key, std::string("is a flag: true or false") +
                       (row && row->flag_value ? " or its value as a string" : "") + ", not " +
                       type_name(v));
    if (!v.as_boolean()->get()) return std::nullopt;
    return "--" + key;
  }
  std::string text;
  if (v.is_string())
    text = rt.checked_text(key, v.as_string()->get());
  else if (v.is_integer())
    text = std::to_string(v.as_integer()->get());
  else if (v.is_floating_point())
    text = format_double(v.as_floating_point()->get());
  else if (v.is_array()) {
    for (const toml::node& e : *v.as_array()) {
      if (!e.is_integer())
        rt.fail(key, std::string("must be a list of integers, not one holding ") + type_name(e));
      text += (text.empty() ? "" : ",") + std::to_string(e.as_integer()->get());
    }
    if (text.empty()) rt.fail(key, "must not be empty (valid: e.g. [3, 2, 2, 1])");
  } else {
    rt.fail(key, std::string("must be a string or a number, not ") + type_name(v));
  }
  // A schedule file ships beside the lesson, as a recording does.
  if (key == "schedule" && !text.empty() && fs::path(text).is_relative())
    text = (fs::path(rt.ctx.file).parent_path() / text).string();
  return "--" + key + "=" + text;
}

RunConfig config_of(const std::vector<std::string>& args) {
  std::vector<std::string> storage = {"run"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  const Args a(static_cast<int>(argv.size()), argv.data(), "run", run_options(), run_flags());
  return config_from(a);
}

// Keys of a lesson's run that are not `shardlab run` options: how the run is
// made (as separate processes under `shardlab launch`), read by read_processes.
const std::set<std::string> kProcessKeys = {"processes", "fault", "max-restarts",
                                            "checkpoint-every"};

std::vector<std::string> allowed_run_keys() {
  std::vector<std::string> keys(kProcessKeys.begin(), kProcessKeys.end());
  for (const auto& k : run_options())
    if (!kNotInLessons.count(k)) keys.push_back(k);
  for (const auto& k : run_flags())
    if (!kNotInLessons.count(k)) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Reads a run table's arguments, each checked on its own (so an error names its line).
std::map<std::string, std::string> read_run_args(const Table& rt) {
  std::map<std::string, std::string> out;
  for (auto&& [k, v] : rt.t) {
    const std::string key(k.str());
    if (kProcessKeys.count(key)) continue;
    if (kNotInLessons.count(key))
      rt.fail(key, "'" + key +
                       "' is an output option of `shardlab run`, not used in lessons (a "
                       "lesson's runs write no files and are always recorded)");
    const auto arg = run_argument(rt, key, v);
    if (!arg) continue;
    try {
      config_of({*arg});
    } catch (const ConfigError& e) {
      rt.fail(key, e.what());
    }
    out[key] = *arg;
  }
  return out;
}

// The key of the run table a message from validate() is about: the first whose
// option ("--batch") or value ("'zero9'") it names; empty when none.
std::string key_named_in(const Table& rt, const std::map<std::string, std::string>& args,
                         const std::string& message) {
  for (const auto& [key, arg] : args)
    if (rt.get(key) && message.find("--" + key + " ") != std::string::npos) return key;
  for (const auto& [key, arg] : args) {
    const size_t eq = arg.find('=');
    if (rt.get(key) && eq != std::string::npos &&
        message.find("'" + arg.substr(eq + 1) + "'") != std::string::npos)
      return key;
  }
  return "";
}

// The run from its arguments, validated as `shardlab run` validates it. For a
// compare run, options inherited from `run` that its strategy does not read
// are dropped (run = zero3 with no-prefetch, compare = ddp): only those the
// compare table gives itself are held against it.
RunConfig finish_run(const Table& rt, const std::map<std::string, std::string>& args,
                     const std::string& what, bool inherits = false) {
  std::vector<std::string> list, given;
  for (const auto& [k, a] : args) {
    list.push_back(a);
    given.push_back(k);
  }
  try {
    RunConfig c = config_of(list);
    c.record = true;
    if (inherits) {
      for (StrategyOption o : unread_options(c))
        if (!rt.get(flag_name(o) + 2)) reset_option(c, o);
      // validate() refuses a given key the strategy does not read even at its
      // default value. Here an inherited key was not typed for this run, and a
      // default one the compare table gives puts the run's value back
      // (`compare = { strategy = "naive-mp", micro-batches = 1 }`): both pass.
      const StrategyInfo& info = strategy_info(c.strategy);
      for (StrategyOption o : kStrategyOptions)
        if (!info.reads_option(o) && !option_set(c, o))
          given.erase(std::remove(given.begin(), given.end(), flag_name(o) + 2), given.end());
    }
    validate(c, given);
    return c;
  } catch (const ConfigError& e) {
    const std::string key = key_named_in(rt, args, e.what());
    if (!key.empty()) rt.fail(key, e.what());
    rt.ctx.fail(rt.line, what, e.what());
  }
}

// `processes`, `fault`, `max-restarts`, `checkpoint-every` of a run table (for
// a compare table, on top of `base`, the run's). The others need processes.
ProcessOptions read_processes(const Table& rt, const RunConfig& c, const ProcessOptions& base,
                              bool inherits) {
  ProcessOptions p = inherits ? base : ProcessOptions{};
  if (const toml::node* v = rt.get("processes")) {
    if (!v->is_boolean())
      rt.fail("processes", std::string("is a flag: true or false, not ") + type_name(*v));
    p.on = v->as_boolean()->get();
    // A compare run made as threads keeps none of the run's process settings.
    if (!p.on) p = ProcessOptions{};
  }
  for (const char* k : {"fault", "max-restarts", "checkpoint-every"})
    if (rt.get(k) && !p.on)
      rt.fail(k, std::string("'") + k +
                     "' applies to a run of one process per rank (valid: add processes = true, "
                     "or leave it out)");
  if (!p.on) return p;
  const std::string on_key = rt.get("processes") ? "processes" : "strategy";
  try {
    check_process_config(c);
  } catch (const ConfigError& e) {
    if (rt.get(on_key)) rt.fail(on_key, e.what());
    rt.ctx.fail(rt.line, rt.path + "processes", e.what());
  }
  if (rt.get("fault")) {
    const std::string f = rt.string("fault");
    int rank = -1, step = -1, attempt = 0;
    char action[16] = {};
    char extra = 0;
    const int n =
        std::sscanf(f.c_str(), "%d:%d:%15[a-z]:%d%c", &rank, &step, action, &attempt, &extra);
    const std::string act = action;
    if (n < 3 || n > 4 || (act != "kill" && act != "hang" && act != "exit") ||
        (n == 3 && f.size() != f.find(act) + act.size()))
      rt.fail("fault", "'" + f +
                           "' is not a fault (valid: RANK:STEP:kill|hang|exit[:ATTEMPT], e.g. "
                           "\"2:7:kill\")");
    if (rank < 0 || rank >= c.world)
      rt.fail("fault", "rank " + std::to_string(rank) + " of '" + f +
                           "' is outside the run's world (valid: 0.." +
                           std::to_string(c.world - 1) + ")");
    if (step < 0 || step >= c.steps)
      rt.fail("fault", "step " + std::to_string(step) + " of '" + f +
                           "' is outside the run's steps (valid: 0.." +
                           std::to_string(c.steps - 1) + ", 0-based)");
    if (attempt < 0 || attempt > 8)
      rt.fail("fault", "attempt " + std::to_string(attempt) + " of '" + f +
                           "' is out of range (valid: 0..8)");
    p.fault = f;
  }
  if (rt.get("max-restarts")) p.max_restarts = rt.small_int("max-restarts", 0, 8);
  if (rt.get("checkpoint-every"))
    p.checkpoint_every = rt.small_int("checkpoint-every", 1, std::max(1, c.steps));
  return p;
}

// The key a check_metric() message is about, from its first word.
std::string metric_key_of(const std::string& message) {
  for (const char* k : {"rank", "category", "pool", "kind", "step", "link", "axis", "run"})
    if (message.rfind(std::string(k) + " ", 0) == 0) return k;
  if (message.find("compare run") != std::string::npos) return "run";
  return "name";
}

MetricRef read_metric(const Table& parent, const std::string& key, const Step& step) {
  const toml::table& t = parent.table(key);
  const std::string path = parent.path + key + ".";
  const Table mt(parent.ctx, t, path, parent.line_at(key),
                 {"name", "run", "rank", "category", "pool", "kind", "step", "link", "axis"});
  MetricRef m;
  m.name = mt.string("name");
  const MetricInfo* info = find_metric(m.name);
  if (!info) mt.fail("name", "'" + m.name + "' is unknown (valid: " + metric_names() + ")");
  std::vector<std::string> args;
  for (MetricArg a : info->args) args.push_back(to_string(a));
  for (auto&& [k, v] : t) {
    const std::string arg(k.str());
    if (arg == "name" || arg == "run") continue;
    if (std::find(args.begin(), args.end(), arg) == args.end())
      mt.fail(arg, m.name + " takes no " + arg + " (its arguments: " +
                       (args.empty() ? std::string("none") : join(args)) + ", run)");
  }
  if (auto r = mt.opt_string("run")) {
    if (*r != "a" && *r != "b") mt.fail("run", "'" + *r + "' is not a run (valid: a, b)");
    m.run = (*r)[0];
  }
  if (mt.get("rank")) m.rank = mt.small_int("rank", 0, 1 << 20);
  if (mt.get("category")) m.category = mt.string("category");
  if (mt.get("pool")) m.pool = mt.string("pool");
  if (mt.get("kind")) m.kind = mt.string("kind");
  if (mt.get("step")) m.step = mt.small_int("step", 0, 1 << 30);
  if (mt.get("link")) m.link = mt.string("link");
  if (mt.get("axis")) m.axis = mt.string("axis");
  if (step.run || step.recorded) {
    try {
      check_metric(m, step.run ? *step.run : *step.recorded,
                   step.compare ? &*step.compare : nullptr);
    } catch (const ConfigError& e) {
      const std::string k = metric_key_of(e.what());
      parent.ctx.fail(mt.line_at(k), path + k, e.what());
    }
  } else {
    // A recording: only what does not depend on the run can be checked here.
    RunConfig any;
    any.world = 1 << 20;
    any.steps = 1 << 30;
    any.strategy = "gpipe";
    try {
      check_metric(m, any, &any);
    } catch (const ConfigError& e) {
      const std::string k = metric_key_of(e.what());
      parent.ctx.fail(mt.line_at(k), path + k, e.what());
    }
  }
  return m;
}

// "< 1", ">= 0.5" -> op, value.
bool parse_condition(const std::string& s, std::string& op, double& value) {
  size_t i = s.find_first_not_of(' ');
  if (i == std::string::npos) return false;
  for (const char* o : {"<=", ">=", "==", "<", ">"}) {
    if (s.compare(i, std::strlen(o), o) == 0) {
      op = o;
      const std::string rest = s.substr(i + std::strlen(o));
      char* end = nullptr;
      value = std::strtod(rest.c_str(), &end);
      if (end == rest.c_str()) return false;
      while (*end == ' ') ++end;
      return *end == '\0' && std::isfinite(value);
    }
  }
  return false;
}

const std::vector<std::string> kOps = {"<", "<=", ">", ">=", "=="};
const std::vector<std::string> kViews = {"timeline", "memory",  "cluster",
                                         "camping",  "compare", "loss"};

std::optional<SpanKind> span_kind(const std::string& s) {
  for (int k = 0; k < kNumSpanKinds; ++k)
    if (s == to_string(static_cast<SpanKind>(k))) return static_cast<SpanKind>(k);
  return std::nullopt;
}

std::string span_kind_names() {
  std::string s;
  for (int k = 0; k < kNumSpanKinds; ++k)
    s += (k ? ", " : "") + std::string(to_string(static_cast<SpanKind>(k)));
  return s;
}

Seek read_seek(const Table& lt, const Step& step) {
  const toml::table& t = lt.table("seek");
  const Table st(lt.ctx, t, lt.path + "seek.", lt.line_at("seek"),
                 {"step", "event", "layer", "nth", "micro_batch", "rank", "peak_memory"});
  const RunConfig* c = step.run ? &*step.run : step.recorded ? &*step.recorded : nullptr;
  const int world = c ? c->world : 1 << 20;
  const int steps = c ? c->steps : 1 << 30;
  const int layers = c ? make_layout(*c).num_layers() : 1 << 20;
  const int micro = c ? std::max(1, c->micro_batches) : 1 << 20;
  Seek s;
  const bool event = st.get("event") != nullptr, peak = st.get("peak_memory") != nullptr;
  if (event && peak) st.fail("peak_memory", "a seek is an event or a memory peak, not both");
  if (peak) {
    for (const char* k : {"step", "layer", "nth", "micro_batch", "rank"})
      if (st.get(k)) st.fail(k, "does not go with peak_memory (which names the rank itself)");
    s.kind = Seek::Kind::peak_memory;
    s.rank = st.small_int("peak_memory", 0, world - 1);
    return s;
  }
  if (!event) {
    if (!st.get("step"))
      lt.ctx.fail(st.line, lt.path + "seek",
                  "a seek needs step, event or peak_memory (e.g. { step = 2 }, { event = "
                  "\"all_gather\", layer = 0 }, { peak_memory = 0 })");
    for (const char* k : {"layer", "nth", "micro_batch", "rank"})
      if (st.get(k))
        st.fail(k, "goes with event (e.g. { event = \"backward\", " + std::string(k) + " = 1 })");
    s.kind = Seek::Kind::step;
    s.step = st.small_int("step", 0, steps - 1);
    return s;
  }
  s.kind = Seek::Kind::event;
  const std::string ev = st.string("event");
  const auto kind = span_kind(ev);
  if (!kind) st.fail("event", "'" + ev + "' is not a span kind (valid: " + span_kind_names() + ")");
  s.event = *kind;
  if (st.get("step")) s.step = st.small_int("step", 0, steps - 1);
  if (st.get("layer")) s.layer = st.small_int("layer", 0, layers - 1);
  if (st.get("micro_batch")) s.micro_batch = st.small_int("micro_batch", 0, micro - 1);
  if (st.get("rank")) s.rank = st.small_int("rank", 0, world - 1);
  if (st.get("nth")) s.nth = st.small_int("nth", 1, 1 << 20);
  return s;
}

Highlight read_highlight(const Table& lt, const std::string& view, const Step& step) {
  const toml::table& t = lt.table("highlight");
  const Table ht(lt.ctx, t, lt.path + "highlight.", lt.line_at("highlight"),
                 {"rank", "area", "category"});
  if (t.size() != 1)
    lt.ctx.fail(ht.line, ht.path + "rank",
                "a highlight is one of rank, area or category (e.g. { rank = 1 })");
  Highlight h;
  if (ht.get("rank")) {
    h.kind = Highlight::Kind::rank;
    const RunConfig* c = step.run ? &*step.run : step.recorded ? &*step.recorded : nullptr;
    h.rank = ht.small_int("rank", 0, c ? c->world - 1 : 1 << 20);
  } else if (ht.get("area")) {
    h.kind = Highlight::Kind::area;
    h.area = ht.string("area");
    const std::map<std::string, std::string> area_view = {{"breakdown", "timeline"},
                                                          {"bubble", "timeline"},
                                                          {"table", "compare"},
                                                          {"memory", "compare"}};
    auto it = area_view.find(h.area);
    if (it == area_view.end())
      ht.fail("area", "'" + h.area +
                          "' is not an area (valid: breakdown, bubble (timeline), table, "
                          "memory (compare))");
    if (!view.empty() && it->second != view)
      ht.fail("area", "'" + h.area + "' is an area of the " + it->second +
                          " view, and this step looks at " + view);
  } else {
    h.kind = Highlight::Kind::category;
    const std::string c = ht.string("category");
    bool found = false;
    std::string names;
    for (int k = 0; k < kNumMemCategories; ++k) {
      names += (k ? ", " : "") + std::string(to_string(static_cast<MemCategory>(k)));
      if (c == to_string(static_cast<MemCategory>(k))) {
        h.category = static_cast<MemCategory>(k);
        found = true;
      }
    }
    if (!found) ht.fail("category", "'" + c + "' is not a memory category (valid: " + names + ")");
  }
  return h;
}

Look read_look(const Table& st, const Step& step) {
  const Table lt(st.ctx, st.table("look"), "look.", st.line_at("look"),
                 {"view", "seek", "highlight"});
  Look look;
  if (lt.get("view")) {
    look.view = lt.string("view");
    if (std::find(kViews.begin(), kViews.end(), look.view) == kViews.end())
      lt.fail("view", "'" + look.view + "' is not a view (valid: " + join(kViews) + ")");
  }
  if (lt.get("seek")) look.seek = read_seek(lt, step);
  if (lt.get("highlight")) look.highlight = read_highlight(lt, look.view, step);
  return look;
}

Prediction read_prediction(const Table& st, const Step& step) {
  const Table pt(st.ctx, st.table("predict"), "predict.", st.line_at("predict"),
                 {"question", "metric", "unit", "tolerance", "choices"});
  Prediction p;
  p.question = read_text(pt, "question");
  p.metric = read_metric(pt, "metric", step);
  const MetricInfo& info = *find_metric(p.metric.name);
  if (pt.get("choices")) {
    if (pt.get("tolerance"))
      pt.fail("tolerance", "is for a numeric prediction; this one has choices");
    const toml::node& n = pt.need("choices");
    if (!n.is_array()) pt.fail("choices", std::string("must be an array, not ") + type_name(n));
    const toml::array& arr = *n.as_array();
    if (arr.size() < 2) pt.fail("choices", "needs at least two choices");
    int i = 0;
    for (const toml::node& e : arr) {
      ++i;
      const std::string key = "choices[" + std::to_string(i) + "]";
      if (!e.is_table())
        pt.fail("choices", key + " must be a table { en, zh, when }, not " + type_name(e));
      const Table ct(st.ctx, *e.as_table(), "predict." + key + ".", line_of(e, pt.line),
                     {"en", "zh", "when"});
      Choice c;
      Text label;
      for (const char* lang : {"en", "zh"}) {
        if (!ct.get(lang))
          st.ctx.fail(ct.line, ct.path + lang, "missing: every choice needs both en and zh");
        std::string src = ct.string(lang);
        if (src.find_first_not_of(" \t\r\n") == std::string::npos) ct.fail(lang, "is empty");
        Markdown blocks;
        try {
          blocks = parse_markdown(src);
        } catch (const ConfigError& err) {
          ct.fail(lang, err.what());
        }
        (std::string(lang) == "en" ? label.en : label.zh) = src;
        (std::string(lang) == "en" ? label.en_blocks : label.zh_blocks) = std::move(blocks);
      }
      c.label = std::move(label);
      const std::string when = ct.string("when");
      if (!parse_condition(when, c.op, c.value))
        ct.fail(
            "when",
            "'" + when +
                "' is not a condition (valid: an operator and a number, e.g. \"< 1\", \">= 0.5\")");
      p.choices.push_back(std::move(c));
    }
  } else {
    const std::string unit = pt.string("unit");
    if (unit != info.unit)
      pt.fail("unit", "'" + unit + "' is not the unit of " + info.name + " (its unit: '" +
                          info.unit + "')");
    p.unit = unit;
    if (pt.get("tolerance")) {
      p.tolerance = pt.number("tolerance");
      if (p.tolerance <= 0 || p.tolerance >= 10)
        pt.fail("tolerance", "is relative: a number above 0 (0.1 means within 10 %)");
    }
  }
  if (p.unit.empty()) p.unit = info.unit;
  return p;
}

Gate read_gate(const Ctx& ctx, const toml::node& node, int index, const Step& step, int fallback) {
  const std::string key = "gate[" + std::to_string(index) + "]";
  if (!node.is_table())
    ctx.fail(line_of(node, fallback), key, std::string("must be a table, not ") + type_name(node));
  const Table gt(ctx, *node.as_table(), key + ".", fallback,
                 {"metric", "op", "value", "right", "text"});
  Gate g;
  g.line = gt.line;
  g.metric = read_metric(gt, "metric", step);
  g.op = gt.string("op");
  if (std::find(kOps.begin(), kOps.end(), g.op) == kOps.end())
    gt.fail("op", "'" + g.op + "' is not an operator (valid: " + join(kOps) + ")");
  const bool has_value = gt.get("value") != nullptr, has_right = gt.get("right") != nullptr;
  if (has_value == has_right)
    ctx.fail(gt.line, key + ".value",
             "a gate compares with either value or right (a metric), exactly one");
  if (has_value) g.value = gt.number("value");
  if (has_right) g.right = read_metric(gt, "right", step);
  g.text = read_text(gt, "text");
  return g;
}

Step read_step(const Ctx& ctx, const toml::table& t, int fallback, const fs::path& dir) {
  const Table st(
      ctx, t, "", fallback,
      {"title", "text", "run", "compare", "recording", "look", "predict", "reveal", "gate"});
  Step s;
  s.line = st.line;
  s.title = read_text(st, "title");
  s.text = read_text(st, "text");
  const bool run = st.get("run") != nullptr, rec = st.get("recording") != nullptr;
  if (run && rec) st.fail("recording", "a step has a run or a recording, not both");
  if (!run && !rec)
    ctx.fail(st.line, "run",
             "missing: a step needs a run (e.g. run = { strategy = \"ddp\", world = 2 }) or a "
             "recording");
  if (run) {
    const Table rt(ctx, st.table("run"), "run.", st.line_at("run"), allowed_run_keys(),
                   kNotInLessons);
    const auto args = read_run_args(rt);
    s.run = finish_run(rt, args, "run");
    s.run_processes = read_processes(rt, *s.run, {}, false);
    if (st.get("compare")) {
      const Table ct(ctx, st.table("compare"), "compare.", st.line_at("compare"),
                     allowed_run_keys(), kNotInLessons);
      auto merged = args;
      // Keys given in compare replace the run's; a flag set to false there clears it.
      for (auto&& [k, v] : ct.t) {
        const std::string key(k.str());
        merged.erase(key);
      }
      for (const auto& [k, a] : read_run_args(ct)) merged[k] = a;
      s.compare = finish_run(ct, merged, "compare", true);
      s.compare_processes = read_processes(ct, *s.compare, s.run_processes, true);
    }
  } else {
    if (st.get("compare")) st.fail("compare", "goes with a run, not a recording");
    const std::string path = st.string("recording");
    if (path.empty())
      st.fail("recording", "is empty (valid: a file made with `shardlab run --record FILE`)");
    fs::path p(path);
    if (p.is_relative()) p = dir / p;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec))
      st.fail("recording", "'" + path + "' is not a file (looked for " + p.string() + ")");
    s.recording = p.string();
    // Read it now: the metrics are checked against the settings it was made with,
    // and the step says where it was recorded.
    try {
      const Recording r = load_recording(s.recording);
      s.recorded = r.run.cfg;
      s.recorded_where =
          r.origin.device + ", world " + std::to_string(r.run.cfg.world) + ", " + r.origin.date;
    } catch (const std::exception& e) {
      st.fail("recording", e.what());
    }
  }
  if (st.get("look")) s.look = read_look(st, s);
  if (st.get("predict")) s.predict = read_prediction(st, s);
  if (st.get("reveal")) {
    const Table rt(ctx, st.table("reveal"), "reveal.", st.line_at("reveal"), {"text"});
    s.reveal = read_text(rt, "text");
  }
  if (const toml::node* g = st.get("gate")) {
    if (!g->is_array())
      st.fail("gate",
              std::string("must be an array of tables ([[step.gate]]), not ") + type_name(*g));
    int i = 0;
    for (const toml::node& e : *g->as_array())
      s.gates.push_back(read_gate(ctx, e, ++i, s, line_of(*g, st.line)));
  }
  return s;
}

}  // namespace

Lesson parse_lesson(const std::string& content, const std::string& path) {
  Ctx ctx{path, 0};
  if (content.find('\0') != std::string::npos) {
    const size_t nul = content.find('\0');
    const int line = 1 + static_cast<int>(std::count(content.begin(), content.begin() + nul, '\n'));
    throw LessonError(path, line, "", "holds a NUL byte: not a text file");
  }
  check_key_nesting(content, path);  // before toml++ recurses into it
  toml::table root;
  try {
    root = toml::parse(content, path);
  } catch (const toml::parse_error& e) {
    throw LessonError(path, static_cast<int>(e.source().begin.line), "",
                      "TOML syntax: " + std::string(e.description()));
  }
  const Table rt(ctx, root, "", 1, {"format", "id", "title", "summary", "step"});
  Lesson l;
  l.path = path;
  if (root.empty())
    ctx.fail(1, "format", "missing: the file is empty (a lesson starts with format = 1)");
  l.format = static_cast<int>(rt.integer("format"));
  if (l.format != 1)
    rt.fail("format", std::to_string(l.format) + " is not a version this build reads (valid: 1)");
  l.id = rt.string("id");
  if (l.id.empty() ||
      l.id.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
    rt.fail("id", "'" + l.id + "' is not an id (valid: lower-case letters, digits and '-')");
  l.title = read_text(rt, "title");
  l.summary = read_text(rt, "summary");
  const toml::node& steps = rt.need("step");
  if (!steps.is_array() || !steps.as_array()->is_array_of_tables())
    rt.fail("step", std::string("must be an array of tables ([[step]]), not ") + type_name(steps));
  const fs::path dir = fs::path(path).parent_path();
  int k = 0;
  for (const toml::node& n : *steps.as_array()) {
    Ctx sc{path, ++k};
    l.steps.push_back(read_step(sc, *n.as_table(), line_of(steps, 1), dir));
  }
  if (l.steps.empty()) rt.fail("step", "a lesson needs at least one [[step]]");
  return l;
}

Lesson load_lesson(const std::string& path) {
  return parse_lesson(read_lesson_file(path), path);
}

}  // namespace shardlab::lesson
