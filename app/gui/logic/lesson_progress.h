// Where a student stopped in each lesson, kept per user under the XDG state
// directory ($XDG_STATE_HOME/shardlab/lessons.json, default
// ~/.local/state/shardlab/lessons.json) so the app resumes there. Written
// atomically; a file that cannot be read is set aside, never overwritten.
#pragma once
#include <map>
#include <string>

namespace shardlab::gui {

struct LessonProgress {
  int step = 0;                        // the step shown last
  std::map<int, std::string> answers;  // step -> the learner's answer as typed / chosen
  std::map<int, bool> revealed;        // step -> reveal seen
};

struct ProgressStore {
  std::string lang = "en";     // "en" | "zh"
  std::string current_lesson;  // id; empty = the lesson list
  std::map<std::string, LessonProgress> lessons;
};

// $XDG_STATE_HOME/shardlab/lessons.json, or $HOME/.local/state/shardlab/lessons.json;
// empty when neither variable is set (progress then lives only in memory).
std::string default_progress_path();

// Reads `path`. A missing file is an empty store. A file that is not a valid
// progress file is renamed to `<path>.unreadable` (so nothing the user had is
// lost) and `*note` says so; the store starts empty.
ProgressStore load_progress(const std::string& path, std::string* note);

// Writes atomically: a unique temporary file in the same directory, fsync,
// rename over `path`, fsync of the directory. Creates the directory. Returns
// false with `*error` set on failure (the old file is then untouched).
bool save_progress(const std::string& path, const ProgressStore& store, std::string* error);

std::string progress_json(const ProgressStore& store);
// Throws std::runtime_error naming what is wrong.
ProgressStore progress_from_json(const std::string& text);

}  // namespace shardlab::gui
