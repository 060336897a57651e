// The lesson player's state machine, without ImGui: which lesson and step is
// shown, the learner's answer, the step's runs on a worker thread (its run, its
// compare run, and the reference runs its metrics need), the evaluated step,
// and the progress saved per user. The panel (app/gui/panel_lessons.cpp) draws
// it; the App shows the runs it hands over in every view.
#pragma once
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "app/gui/logic/lesson_progress.h"
#include "app/lesson/lesson.h"
#include "core/run/runner.h"

namespace shardlab::gui {

// A step goes: ask (text and the prediction) -> running -> ran (the views show
// the run) -> revealed (answer, formula and measured side by side, gates).
enum class StepPhase { ask, running, ran, revealed, failed };

// What a finished step hands the App: the runs to show, and where to look.
struct StepShow {
  std::unique_ptr<RunResult> a, b;
  lesson::StepResult result;
};

class LessonPlayer {
 public:
  LessonPlayer() = default;
  ~LessonPlayer();
  LessonPlayer(const LessonPlayer&) = delete;
  LessonPlayer& operator=(const LessonPlayer&) = delete;

  // Loads every lesson in `dir` and the progress file (empty path: progress in
  // memory only). A bad lesson file is reported in load_error(), the others load.
  void load(const std::string& dir, const std::string& progress_path);
  // A lesson read from a file of the learner's (`gui --lesson FILE`): it takes the
  // place of the folder's lesson with the same id (an edited copy runs as edited),
  // else joins the list. Returns its index, for open().
  int adopt(lesson::Lesson l);
  const std::vector<lesson::Lesson>& lessons() const { return lessons_; }
  const std::string& load_error() const { return load_error_; }
  const std::string& note() const { return note_; }  // progress file problems, shown once

  lesson::Lang lang() const { return lang_; }
  void set_lang(lesson::Lang l);

  // Navigation. open() resumes the lesson where the learner stopped.
  void open(int lesson_index);
  void close();  // back to the lesson list
  int lesson_index() const { return lesson_; }
  const lesson::Lesson* lesson() const;
  int step_index() const { return step_; }
  const lesson::Step* step() const;
  void go_to_step(int k);
  bool next_step();  // false on the last step
  bool prev_step();

  // The clicker's Page Down: run the step, reveal it, then move to the next one.
  void advance();

  StepPhase phase() const { return phase_; }
  std::string& answer() { return answer_; }  // bound to the answer field
  int& choice() { return choice_; }          // multiple choice: index, -1 = none
  bool has_run() const;                      // the step needs a run (or a recording)

  // Starts the step's runs on the worker thread (phase running). The answer
  // given so far is kept as the learner's prediction.
  void run_step();
  // Reveal: only after the run; records that the learner saw it.
  void reveal();

  // UI thread, once per frame: takes a finished step's runs (once).
  std::optional<StepShow> poll();
  const std::optional<lesson::StepResult>& result() const { return result_; }
  const std::optional<lesson::AnswerCheck>& answer_check() const { return check_; }
  const std::string& run_error() const { return run_error_; }

  // Bumps whenever something worth saving changed.
  uint64_t revision() const { return revision_; }
  // Writes the progress file (position, answers, reveals seen).
  bool save(std::string* error);

 private:
  void join();
  void enter_step();  // phase and answer for the current step, from progress
  void remember();    // current position and answer into the store

  std::vector<lesson::Lesson> lessons_;
  std::string load_error_, note_, progress_path_;
  ProgressStore store_;
  lesson::Lang lang_ = lesson::Lang::en;
  int lesson_ = -1, step_ = 0;
  StepPhase phase_ = StepPhase::ask;
  std::string answer_;
  int choice_ = -1;
  uint64_t revision_ = 0;
  std::optional<lesson::StepResult> result_;
  std::optional<lesson::AnswerCheck> check_;
  std::string run_error_;

  std::thread worker_;
  std::unique_ptr<RunControl> control_;
  std::mutex mu_;
  bool worker_done_ = false;
  std::optional<StepShow> finished_;  // handed from the worker
  std::string worker_error_;
};

// What a presenter's clicker and the keyboard send to the player.
enum class LessonKey { page_down, page_up, enter };
// One key: Page Down runs the step, reveals it, then goes to the next one; Page
// Up goes back a step; both work while the answer field has the keyboard (a
// clicker cannot leave it). Enter runs or reveals, unless a field is taking
// text (`typing`). Returns whether the key did something.
bool press_lesson_key(LessonPlayer& p, LessonKey key, bool typing);

// The player's own words in both languages (buttons, headings).
const char* ui_text(lesson::Lang l, const char* en);

// Every character the lessons and the player's words use: the font atlas is
// built from these glyphs only, not the whole CJK range.
std::string glyph_text(const std::vector<lesson::Lesson>& lessons);

}  // namespace shardlab::gui
