// All of the GUI's state in one struct: what is open, which view, the shared
// viewport, the playhead, the run form, presenter settings. No panel keeps
// state of its own (no function-local statics), so everything can be reset,
// set from the command line and inspected.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/gui/logic/compare_logic.h"
#include "app/gui/logic/i18n.h"
#include "app/gui/logic/replay_logic.h"
#include "app/gui/logic/timeline_logic.h"
#include "core/config.h"

namespace shardlab::gui {

enum class View { timeline, memory, cluster, camping, compare, loss };
inline constexpr int kNumViews = 6;
const char* view_name(View v);                        // "timeline" (command line and tabs)
const char* view_title(View v, const Tr& tr = Tr{});  // "Timeline" / "时间线"
std::optional<View> view_from_name(const std::string& s);

struct TimelineState {
  Viewport vp;             // shared by the timeline and memory charts
  bool follow = true;      // keep the run in view while it grows (see one_step)
  bool one_step = false;   // following fits one training step, not all (pipelines open so)
  bool show_flows = true;  // send -> recv lines
  bool dragging = false;   // a pan is in progress (so a release is not a click)
  // "As on N devices": the finished run projected onto one device per rank joined
  // by `projected_link` (core/predict), drawn under the measured rows on their time scale.
  bool projected = false;
  std::string projected_link = kCompareLink;  // also the cluster and camping views' clock's
  // The per-stage pipeline table of the finished run, computed once per run.
  std::vector<StageRow> stage_rows;
  const void* stage_rows_of = nullptr;  // the RunResult they came from
  uint64_t stage_rows_version = 0;      // and the RunData version then (an address can be reused)
};

// What the compare panel shows below its table.
enum class ComparePicture { timelines, memory, peaks };
inline constexpr int kNumComparePictures = 3;
const char* compare_picture_name(ComparePicture p);  // "timelines" (command line)
std::optional<ComparePicture> compare_picture_from_name(const std::string& s);

struct CompareState {
  // The selector's configurations, 1..kMaxCompare: exactly what Run comparison runs
  // (with the run bar's model, batch, steps, optimizer, seed and device).
  std::vector<CompareSlot> slots{CompareSlot{}};
  // The selector's widgets, or one line of labels; unset: folded in presenter mode only.
  std::optional<bool> show_slots;
  ComparePicture picture = ComparePicture::timelines;
  Viewport vp;         // one time scale for every compared run
  int focus_step = 1;  // timelines start at this step of each run (0 has first-touch costs)
  bool fitted = false;
  // Memory over time: which rank (kMemoryBusiest, kMemorySum or a rank) and which steps.
  int memory_rank = kMemoryBusiest;
  int memory_first_step = 0, memory_last_step = 2;
  float top_height = 0;  // the selector and table's height last frame (they scroll past 42%)
};

struct ExportState {
  std::string trace_path = "shardlab-trace.json";
  std::string png_path = "shardlab.png";
  std::string csv_path = "shardlab-compare.csv";
  std::string message;  // the result of the last export, shown under the buttons
  bool message_is_error = false;
};

struct PresenterState {
  bool presenter = false;      // full screen + high contrast + bigger font
  bool high_contrast = false;  // also available outside presenter mode
  float font_scale = 1.0f;     // Ctrl +/- (applied by the window between frames)
  // What presenter mode replaced, restored when it ends.
  float saved_font_scale = 1.0f;
  bool saved_high_contrast = false;
  // Characters beyond Latin the font atlas must hold (the lessons' Chinese):
  // the window builds the CJK font from exactly these glyphs.
  std::string font_glyphs;
};

// What a lesson step asks the learner to look at, outlined over the view.
struct LessonHighlight {
  bool active = false;
  int rank = -1;      // a rank's lanes, card or hiker
  std::string area;   // "breakdown", "bubble" (timeline), "table", "memory" (compare)
  int category = -1;  // a memory category (MemCategory as int)
};

// A part of the view a highlight can point at, registered each frame by the
// panel that drew it (screen coordinates).
struct ViewRegion {
  int rank = -1;
  std::string area;
  int category = -1;
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

struct AppState {
  View view = View::timeline;
  RunConfig form;              // the run bar's settings
  std::string partition_text;  // --partition as typed ("3,2,2,1"), parsed into form
  std::string form_error;      // validate(form)'s message; empty when the form is valid
  // With form_error: an opened GPU recording on a machine without a GPU says so
  // in a neutral line instead (recording_view.h: rerun_here_note); else empty.
  std::string form_note;
  TimelineState timeline;
  Playhead playhead;
  // The cluster and camping views replay the projected run (timeline.projected_link),
  // the playhead on its clock, instead of the one measured here.
  bool projected_clock = false;
  CompareState compare;
  ExportState exports;
  PresenterState presenter;
  bool show_export = false;
  bool show_help = false;
  bool show_options = false;  // the run bar's strategy options row
  bool show_lessons = false;  // the Lessons panel beside the view (L)
  // The chrome a presenter may hide: the run bar (with the tabs and status line)
  // and the replay bar; "slides" hides the menus too: the view and the lesson only (F9).
  bool show_run_bar = true;
  bool show_replay_bar = true;
  bool slides = false;
  // Rows of the replay bar last frame: 3 when its position line moved under the
  // buttons (large presenter scales), so the view above leaves it room.
  int replay_rows = 2;
  // Run starts one process per rank (`shardlab launch`), watched live, instead
  // of one thread per rank.
  bool processes = false;
  // The lesson step whose reveal the panel last scrolled into sight (lesson and
  // step, 1-based, packed; 0: none): it scrolls once, then the learner scrolls.
  int64_t lesson_reveal_scrolled = 0;
  LessonHighlight highlight;
  std::vector<ViewRegion> regions;  // this frame's, cleared before the view is drawn
  bool quit = false;
  // Requests to the window layer, taken and cleared by it after the frame.
  bool request_fullscreen_toggle = false;
  std::string request_png;  // write the window to this path after rendering
};

}  // namespace shardlab::gui
