// Lessons once read (lesson.h): their languages and words, where the lesson
// files are and which one a name means, and the command line that repeats a
// step's run. Reading a file is lesson_read.cpp.
#include "app/lesson/lesson.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>

#include "app/lesson/terminal.h"
#include "core/parallel/strategy.h"

#ifndef SHARDLAB_LESSONS_DIR
#define SHARDLAB_LESSONS_DIR "lessons"
#endif

namespace shardlab::lesson {

namespace fs = std::filesystem;

// The message may quote the file (a key, a value): printed, it shows control
// characters rather than letting them act on the terminal.
LessonError::LessonError(std::string file, int line, std::string key, const std::string& message)
    : ConfigError(escape_controls(file + ":" + std::to_string(line) + ": " + message, false)),
      file_(std::move(file)),
      line_(line),
      key_(std::move(key)) {}

const char* to_string(Lang l) {
  return l == Lang::zh ? "zh" : "en";
}

Lang parse_lang(const std::string& s) {
  if (s == "en") return Lang::en;
  if (s == "zh") return Lang::zh;
  throw ConfigError("--lang '" + s + "' is not a lesson language (valid: en, zh)");
}

const char* span_kind_words(SpanKind k, Lang l) {
  if (l == Lang::en) {
    // "all_gather" as the texts write it: "all-gather".
    static const std::vector<std::string> names = [] {
      std::vector<std::string> out;
      for (int i = 0; i < kNumSpanKinds; ++i) {
        out.push_back(to_string(static_cast<SpanKind>(i)));
        std::replace(out.back().begin(), out.back().end(), '_', '-');
      }
      return out;
    }();
    return names[static_cast<int>(k)].c_str();
  }
  // The kinds' Chinese names, as the lesson texts use them.
  // In SpanKind's order, every kind named: a kind added without its name fails to compile.
  static constexpr const char* kZh[] = {
      "前向",           "反向", "权重梯度", "损失计算", "优化器更新", "全规约", "规约散射",
      "全收集",         "广播", "规约",     "发送",     "接收",       "屏障",   "主机到设备拷贝",
      "设备到主机拷贝", "分发", "收集",     "准备数据", "读盘",       "写盘",   "其他操作"};
  static_assert(std::size(kZh) == kNumSpanKinds, "every span kind needs its Chinese name");
  return kZh[static_cast<int>(k)];
}

std::string lessons_dir() {
  if (const char* e = std::getenv("SHARDLAB_LESSONS"); e && *e) return e;
  return SHARDLAB_LESSONS_DIR;
}

std::vector<std::string> lesson_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw ConfigError(
        "lessons directory '" + dir +
        "' does not exist (set SHARDLAB_LESSONS to the folder holding the lesson files)");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".toml") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<Lesson> load_all_lessons(const std::string& dir, std::vector<std::string>* errors) {
  std::vector<Lesson> out;
  std::map<std::string, std::string> ids;
  for (const std::string& f : lesson_files(dir)) {
    try {
      Lesson l = load_lesson(f);
      // NN-id.toml: the number orders the lessons, the id names them.
      const std::string stem = fs::path(f).stem().string();
      const size_t dash = stem.find('-');
      if (dash == std::string::npos || dash == 0 ||
          stem.substr(0, dash).find_first_not_of("0123456789") != std::string::npos ||
          stem.substr(dash + 1) != l.id)
        throw LessonError(f, 1, "id",
                          "id: the file is named '" + stem + ".toml', and a lesson in " + dir +
                              " is named NN-id.toml with its id ('" + l.id + "')");
      if (auto it = ids.find(l.id); it != ids.end())
        throw LessonError(f, 1, "id", "id: '" + l.id + "' is also the id of " + it->second);
      ids[l.id] = f;
      out.push_back(std::move(l));
    } catch (const LessonError& e) {
      if (!errors) throw;
      errors->push_back(e.what());
    }
  }
  return out;
}

std::vector<std::string> command_args(const RunConfig& c) {
  const RunConfig d;
  std::vector<std::string> a = {"--model", c.model};
  auto add = [&](const char* key, const std::string& value) {
    a.push_back(key);
    if (!value.empty()) a.push_back(value);
  };
  // A float (the learning rate) is exact when it reads back as the same float:
  // "0.05", not the double 0.05000000074505806 that the float widens to.
  auto num_f = [](float v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
    if (std::strtof(buf, nullptr) != v)
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
    return std::string(buf);
  };
  if (c.seq != d.seq) add("--seq", std::to_string(c.seq));
  if (!c.data.empty()) add("--data", c.data);
  if (!c.attention.empty()) add("--attention", c.attention);
  add("--strategy", c.strategy);
  add("--world", std::to_string(c.world));
  add("--batch", std::to_string(c.batch));
  add("--steps", std::to_string(c.steps));
  if (c.optimizer.kind != d.optimizer.kind) add("--optimizer", to_string(c.optimizer.kind));
  if (c.optimizer.lr != d.optimizer.lr) add("--lr", num_f(c.optimizer.lr));
  if (c.seed != d.seed) add("--seed", std::to_string(c.seed));
  if (c.tf32) add("--tf32", "");
  if (c.device != d.device) add("--device", c.device);
  if (c.backend != d.backend) add("--backend", c.backend);
  if (c.timeout_ms != d.timeout_ms) add("--timeout-ms", std::to_string(c.timeout_ms));
  // The strategy options that differ from their defaults (core/run_options.h).
  for (StrategyOption o : kStrategyOptions)
    if (option_set(c, o)) add(flag_name(o), option_value_text(c, o));
  return a;
}

std::string command_line(const RunConfig& c) {
  std::string s = "shardlab run";
  for (const std::string& a : command_args(c)) s += " " + a;
  return s;
}

std::string command_line(const RunConfig& c, const ProcessOptions& p) {
  if (!p.on) return command_line(c);
  std::string s = p.fault.empty() ? "" : "SHARDLAB_FAULT=" + p.fault + " ";
  s += "shardlab launch --nproc-per-node " + std::to_string(c.world);
  if (p.max_restarts > 0) s += " --max-restarts " + std::to_string(p.max_restarts);
  s += " -- run";
  for (const std::string& a : command_args(c)) s += " " + a;
  if (p.checkpoint_every > 0)
    s += " --checkpoint-every " + std::to_string(p.checkpoint_every) + " --checkpoint-dir DIR";
  return s;
}

const std::vector<UpcomingTopic>& topics_to_come() {
  static const std::vector<UpcomingTopic> topics = {
      {"Hybrid parallelism: tensor and sequence parallelism, and data x pipeline x tensor on a "
       "device mesh",
       "混合并行：张量并行与序列并行，以及设备网格上的数据 × 流水线 × 张量并行"},
      {"The parameter server against all-reduce, and offloading to NVMe",
       "参数服务器与全规约的对比，以及卸载到 NVMe"},
  };
  return topics;
}

Lesson find_lesson(const std::string& name, const std::string& dir) {
  std::error_code ec;
  if (name.find('/') != std::string::npos ||
      (name.size() > 5 && name.substr(name.size() - 5) == ".toml")) {
    if (!fs::exists(name, ec)) throw ConfigError("lesson file '" + name + "' does not exist");
    return load_lesson(name);
  }
  std::vector<std::string> names;
  for (const std::string& f : lesson_files(dir)) {
    const std::string stem = fs::path(f).stem().string();
    const size_t dash = stem.find('-');
    const std::string id = dash == std::string::npos ? stem : stem.substr(dash + 1);
    if (stem == name || id == name) return load_lesson(f);
    names.push_back(id);
  }
  std::string listed;
  for (const std::string& n : names) listed += (listed.empty() ? "" : ", ") + n;
  throw ConfigError("no lesson '" + name + "' in " + dir + " (valid: " +
                    (names.empty() ? std::string("none, the folder has no lessons") : listed) +
                    ", a path to a .toml file, or another folder in SHARDLAB_LESSONS)");
}

void use_schedule(Lesson& l, const std::string& file) {
  bool any = false;
  for (Step& step : l.steps)
    for (std::optional<RunConfig>* run : {&step.run, &step.compare})
      if (*run && !(*run)->schedule.empty()) {
        (*run)->schedule = file;
        validate(**run);  // the file read and checked now, before anything trains
        any = true;
      }
  if (!any)
    throw ConfigError("--schedule " + file + ": lesson '" + l.id +
                      "' runs no schedule file (valid: a lesson whose runs read one, such as "
                      "schedule-exercise)");
}

}  // namespace shardlab::lesson
