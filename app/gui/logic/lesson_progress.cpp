// Lesson progress on disk (see lesson_progress.h).
#include "app/gui/logic/lesson_progress.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/io/atomic_file.h"

namespace shardlab::gui {

namespace {
constexpr int kFormat = 1;
constexpr size_t kMaxBytes = 4 << 20;  // a progress file is a few KiB; more is not ours
}  // namespace

std::string default_progress_path() {
  const char* xdg = std::getenv("XDG_STATE_HOME");
  if (xdg && *xdg == '/') return std::string(xdg) + "/shardlab/lessons.json";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.local/state/shardlab/lessons.json";
  return "";
}

std::string progress_json(const ProgressStore& s) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["lang"] = s.lang;
  j["current_lesson"] = s.current_lesson;
  nlohmann::json lessons = nlohmann::json::object();
  for (const auto& [id, p] : s.lessons) {
    nlohmann::json l;
    l["step"] = p.step;
    nlohmann::json answers = nlohmann::json::object();
    for (const auto& [k, v] : p.answers) answers[std::to_string(k)] = v;
    l["answers"] = answers;
    nlohmann::json revealed = nlohmann::json::array();
    for (const auto& [k, v] : p.revealed)
      if (v) revealed.push_back(k);
    l["revealed"] = revealed;
    lessons[id] = l;
  }
  j["lessons"] = lessons;
  return j.dump(2) + "\n";
}

ProgressStore progress_from_json(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);  // throws on bad JSON
  if (!j.is_object()) throw std::runtime_error("not a JSON object");
  if (j.value("format", 0) != kFormat)
    throw std::runtime_error("format is not " + std::to_string(kFormat));
  ProgressStore s;
  s.lang = j.value("lang", std::string("en"));
  if (s.lang != "en" && s.lang != "zh") throw std::runtime_error("lang '" + s.lang + "'");
  s.current_lesson = j.value("current_lesson", std::string());
  if (j.contains("lessons")) {
    for (const auto& [id, l] : j.at("lessons").items()) {
      LessonProgress p;
      p.step = l.at("step").get<int>();
      if (p.step < 0 || p.step > 10000) throw std::runtime_error("step out of range");
      for (const auto& [k, v] : l.at("answers").items())
        p.answers[std::stoi(k)] = v.get<std::string>();
      for (const auto& k : l.at("revealed")) p.revealed[k.get<int>()] = true;
      s.lessons[id] = std::move(p);
    }
  }
  return s;
}

ProgressStore load_progress(const std::string& path, std::string* note) {
  if (path.empty()) return {};
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};  // nothing saved yet
  std::string why;
  if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (static_cast<size_t>(st.st_size) > kMaxBytes) {
    why = "larger than a progress file can be";
  } else {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    try {
      return progress_from_json(ss.str());
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  // Keep what was there: set it aside under a name the user can find.
  const std::string aside = path + ".unreadable";
  if (S_ISREG(st.st_mode) && std::rename(path.c_str(), aside.c_str()) == 0) {
    if (note)
      *note = "lesson progress '" + path + "' could not be read (" + why + "); kept as '" + aside +
              "', starting afresh";
  } else if (note) {
    *note = "lesson progress '" + path + "' could not be read (" + why +
            "); progress will not be saved";
  }
  return {};
}

bool save_progress(const std::string& path, const ProgressStore& store, std::string* error) {
  if (path.empty()) return true;
  return write_file_atomic(path, progress_json(store), error, /*make_dirs=*/true);
}

}  // namespace shardlab::gui
