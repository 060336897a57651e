// Shared drawing helpers (see draw_util.h).
#include "app/gui/draw_util.h"

#include <algorithm>
#include <cmath>

#include "app/gui/logic/format.h"

namespace shardlab::gui {

namespace {
// The two themes' fixed colours (constants, not UI state).
const UiColors kNormal{
    IM_COL32(225, 228, 235, 255), IM_COL32(150, 155, 165, 255), IM_COL32(70, 74, 84, 255),
    IM_COL32(190, 195, 205, 255), IM_COL32(255, 215, 0, 255),   IM_COL32(32, 35, 42, 255),
    IM_COL32(38, 42, 50, 255),    IM_COL32(15, 15, 18, 200),    IM_COL32(30, 34, 42, 255),
    IM_COL32(85, 92, 108, 255),   IM_COL32(255, 110, 100, 255), IM_COL32(120, 210, 130, 255),
    IM_COL32(12, 12, 16, 255)};
const UiColors kContrast{
    IM_COL32(255, 255, 255, 255), IM_COL32(215, 215, 215, 255), IM_COL32(110, 110, 110, 255),
    IM_COL32(255, 255, 255, 255), IM_COL32(255, 255, 0, 255),   IM_COL32(0, 0, 0, 255),
    IM_COL32(18, 18, 18, 255),    IM_COL32(0, 0, 0, 255),       IM_COL32(0, 0, 0, 255),
    IM_COL32(255, 255, 255, 255), IM_COL32(255, 80, 80, 255),   IM_COL32(90, 255, 120, 255),
    IM_COL32(0, 0, 0, 255)};
}  // namespace

const UiColors& ui_colors(bool hc) {
  return hc ? kContrast : kNormal;
}

void legend_item(Color c, const char* label) {
  const float h = ImGui::GetTextLineHeight();
  // Wrap instead of running off the right edge (big fonts, narrow windows).
  if (ImGui::GetContentRegionAvail().x < h + 4 + ImGui::CalcTextSize(label).x) ImGui::NewLine();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(ImVec2(p.x, p.y + h * 0.15f), ImVec2(p.x + h * 0.7f, p.y + h * 0.85f), c, 2.0f);
  ImGui::Dummy(ImVec2(h * 0.8f, h));
  ImGui::SameLine(0, 4);
  ImGui::TextUnformatted(label);
  ImGui::SameLine(0, 14);
}

void help_marker(const char* text) {
  ImGui::TextDisabled("(?)");
  if (ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 32.0f);
    ImGui::TextUnformatted(text);
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
  }
}

void draw_time_axis(ImDrawList* dl, const Viewport& vp, float y, float h, const UiColors& ui) {
  // Labels distinct at every zoom, spaced by the widest (time_ticks).
  const float char_px = ImGui::CalcTextSize("00.000 ms").x / 9;  // i18n: a width
  dl->AddLine(ImVec2(vp.x0, y + h - 1), ImVec2(vp.x0 + vp.width, y + h - 1), ui.axis);
  for (const AxisTick& tick : time_ticks(vp.t_begin, vp.t_end, vp.width, char_px)) {
    const float x = std::round(vp.x_of(tick.t));
    dl->AddLine(ImVec2(x, y + h - 6), ImVec2(x, y + h - 1), ui.axis);
    const std::string& s = tick.label;
    const float w = ImGui::CalcTextSize(s.c_str()).x;
    if (x - w * 0.5f < vp.x0 || x + w * 0.5f > vp.x0 + vp.width) continue;
    dl->AddText(ImVec2(x - w * 0.5f, y + 1), ui.text_dim, s.c_str());
  }
}

bool text_in_rect(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, const char* text) {
  const ImVec2 sz = ImGui::CalcTextSize(text);
  if (sz.x + 4 > b.x - a.x || sz.y > b.y - a.y + 2) return false;
  dl->AddText(ImVec2(std::floor((a.x + b.x - sz.x) * 0.5f), std::floor((a.y + b.y - sz.y) * 0.5f)),
              col, text);
  return true;
}

void hatch(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float spacing) {
  // Lines clipped by hand: a clip rect per block would be a draw call per
  // block, and thousands of folded blocks would swamp a software rasteriser.
  const float h = b.y - a.y;
  if (h <= 0 || b.x <= a.x) return;
  for (float x = a.x - h; x < b.x; x += spacing) {
    const float t0 = std::max(0.0f, (a.x - x) / h), t1 = std::min(1.0f, (b.x - x) / h);
    if (t1 <= t0) continue;
    dl->AddLine(ImVec2(x + h * t0, b.y - h * t0), ImVec2(x + h * t1, b.y - h * t1), col);
  }
}

bool zoom_pan(Viewport& vp, TimelineState& ts) {
  ImGuiIO& io = ImGui::GetIO();
  bool moved = false;
  if (ImGui::IsItemHovered() && io.MouseWheel != 0) {
    zoom_at(vp, io.MousePos.x, std::pow(1.25, io.MouseWheel));
    moved = true;
  }
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 3.0f)) {
    ts.dragging = true;
    pan_pixels(vp, io.MouseDelta.x);
    moved = moved || io.MouseDelta.x != 0;
  }
  if (!ImGui::IsMouseDown(ImGuiMouseButton_Left) && !ImGui::IsMouseReleased(ImGuiMouseButton_Left))
    ts.dragging = false;
  return moved;
}

}  // namespace shardlab::gui
