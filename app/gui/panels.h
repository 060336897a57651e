// Every panel of the app, one file each; all draw from App and keep no state.
#pragma once
#include <cstdint>

#include "app/gui/app.h"

struct ImVec2;

namespace shardlab::gui {

void draw_menu_bar(App& app);                     // panel_export.cpp (File/View menus)
void draw_run_bar(App& app);                      // panel_run_bar.cpp
void draw_timeline(App& app);                     // panel_timeline.cpp
void draw_memory(App& app);                       // panel_memory.cpp
void draw_cluster(App& app, const RunData& run);  // panel_cluster.cpp
void draw_camping(App& app, const RunData& run);  // panel_camping.cpp
void draw_compare(App& app);                      // panel_compare.cpp
void draw_loss(App& app);                         // panel_loss.cpp
void draw_replay_bar(App& app);                   // panel_replay.cpp
void draw_export_window(App& app);                // panel_export.cpp
void draw_help_window(App& app);                  // panel_presenter.cpp
void draw_lessons(App& app);                      // panel_lessons.cpp
// (The cluster and camping views replay `run`, App::replayed(): the measured
// run, or the projected one while the playhead is on its clock.)

// Registers a part of the view that a lesson's highlight may point at: a rank's
// lanes, card or hiker (rank >= 0, area null), a named area ("breakdown",
// "bubble", "table", "memory"), or a memory category (category >= 0).
void mark_region(App& app, int rank, const char* area, int category, ImVec2 a, ImVec2 b);

// How long a freed gathered copy keeps fading, in `run`'s time (panel_cluster.cpp).
int64_t fade_ns_for(const App& app, const RunData& run);
// The cluster and camping views' header line: which clock they replay (measured
// here, or as on N devices over a link), or why the projected one is missing.
void draw_clock_choice(App& app);
// The link "as on N devices" assumes (timeline.projected_link), as a combo (panel_timeline.cpp).
void link_combo(App& app, const char* id);

// Presenter mode (panel_presenter.cpp): theme and keyboard shortcuts.
void apply_theme(const PresenterState& p);
void handle_shortcuts(App& app);

// Timeline rows of one run inside a given rectangle; shared by the timeline
// and compare panels. Returns true when the viewport changed (zoom/pan).
struct TimelineRowsOptions {
  const char* id = "rows";
  float height = 0;       // 0 = as tall as the rows need
  float lane_height = 0;  // 0 = from the font
  bool show_playhead = true;
  bool show_flows = true;
  bool show_axis = true;
  bool show_steps = true;
  bool click_sets_playhead = true;  // compare rows are not the replayed run
  double t_offset = 0;              // run time drawn at the viewport's time 0
};
bool draw_timeline_rows(App& app, const RunData& d, Viewport& vp, const TimelineRowsOptions& opt);

}  // namespace shardlab::gui
