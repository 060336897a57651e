// Drawing helpers shared by the panels: theme colours, legend swatches, the
// time axis, text fitted into boxes, hatching, and wheel-zoom / drag-pan.
#pragma once
#include <string>

#include <imgui.h>

#include "app/gui/app_state.h"
#include "app/gui/logic/palette.h"

namespace shardlab::gui {

struct UiColors {
  ImU32 text, text_dim, grid, axis, playhead, lane_bg, lane_bg_alt, outline, card_bg, card_border,
      error, ok, label_on_span;
};
const UiColors& ui_colors(bool high_contrast);

// A coloured square and its label, on the current line.
void legend_item(Color c, const char* label);
// A small "(?)" that shows `text` on hover.
void help_marker(const char* text);

// Ticks and labels for the viewport's time range along [y, y + h).
void draw_time_axis(ImDrawList* dl, const Viewport& vp, float y, float h, const UiColors& ui);

// `text` centred in [a, b] when it fits; returns whether it was drawn.
bool text_in_rect(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, const char* text);
// Diagonal stripes over [a, b] (gathered copies, folded spans).
void hatch(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float spacing);

// After an InvisibleButton over a chart: wheel zooms around the mouse, dragging
// pans. Returns true when the viewport moved (the caller stops auto-fitting).
bool zoom_pan(Viewport& vp, TimelineState& ts);

}  // namespace shardlab::gui
