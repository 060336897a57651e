// The app: its state, its runs and the data it draws, and one frame of UI.
// Panels are free functions over App (panels.h); the window and main loop are
// in window.cpp / gui_main.cpp.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/gui/app_state.h"
#include "app/gui/logic/i18n.h"
#include "app/gui/logic/key_taps.h"
#include "app/gui/logic/lesson_player.h"
#include "app/gui/logic/projected_run.h"
#include "app/gui/logic/run_data.h"
#include "app/gui/logic/run_session.h"
#include "core/run/recording.h"

namespace shardlab::gui {

// A recording shown in the views instead of a live run (`shardlab gui --open`).
struct OpenedRecording {
  std::string path;
  RecordingOrigin origin;
  std::shared_ptr<const RunResult> run;
  bool trace = false;  // a Chrome trace read back (see load_run_file)
};

class App {
 public:
  explicit App(const RunConfig& cfg);

  // One frame: take this frame's snapshot of the runs, then draw every panel.
  void frame(double wall_dt);

  // Run-bar actions (also keyboard shortcuts and the headless mode).
  void run();    // start the form's run, or resume a paused one
  void pause();  // pause the running run at the next step boundary
  void step();   // run exactly one more step (starting a paused run if none)
  void reset();  // stop the run and clear everything it showed
  void run_compare(std::vector<RunConfig> cfgs);
  // Shows a recorded run in every view (the compare view gets it as its one
  // entry) without running anything; the run bar takes its settings, so Run
  // then runs them live here.
  void open_recording(Recording rec, const std::string& path);
  void compare_from_form();  // the compare panel's slots

  // Replay actions.
  void toggle_replay();
  void next_event();
  void prev_event();
  void next_collective();
  void set_playhead(double t);  // t on the playhead's clock (replayed())
  // The run the playhead replays: the projected one while it is on that clock
  // (the cluster and camping views' "as on N devices"), else the measured one.
  const RunData& replayed() const;
  // The playhead on `d`'s clock (`d`: the measured or the projected run; any
  // other run reads the measured clock), and set from a time on it.
  double playhead_on(const RunData& d) const;
  void set_playhead_on(const RunData& d, double t);

  // Lessons: open the panel (loading the lessons the first time), and show a
  // step's finished runs in every view, with its view, seek and highlight.
  void open_lessons();
  void show_step(StepShow show);

  bool run_active() const;  // starting, running or paused
  bool settled() const;     // nothing running: the headless mode may take its picture
  // The finished run on screen: the live run's result, else the open recording's.
  const RunResult* shown_result() const;

  AppState state;
  RunSession session;
  RunData data;
  // The run on screen as on one device per rank (timeline.projected_link),
  // made when the timeline or the replay clock asks for it.
  ProjectedRun projection;
  std::vector<double> losses;
  CompareSession compare_session;
  std::vector<CompareEntry> compare;
  LessonPlayer lessons;
  // The app's language is the lessons' (the EN / 中文 switch, --lang): every view follows it.
  Tr tr() const { return Tr{lessons.lang()}; }
  // The window's key presses of this frame, however short (null without a window).
  const KeyTaps* keys = nullptr;
  // The language --lang asked for: kept when the lessons (and their saved language) load.
  std::optional<lesson::Lang> lang_override;
  bool lessons_loaded = false;
  std::string lessons_dir;                   // empty: lesson::lessons_dir()
  std::string progress_path;                 // empty: progress in memory only
  uint64_t progress_saved = 0;               // the player's revision last written
  std::pair<int, int> previewed{-1, -1};     // (lesson, step) whose settings the run bar shows
  std::string progress_error;                // the last save's failure, shown in the panel
  std::optional<OpenedRecording> recording;  // set while the views show a recording

 private:
  void poll();
  void validate_form();
};

}  // namespace shardlab::gui
