// The loss curve of the current run, one point per finished step, drawn with
// the draw list (no ImPlot in Debian).
#include <algorithm>
#include <cmath>
#include <string>

#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/format.h"
#include "app/gui/panels.h"

namespace shardlab::gui {

void draw_loss(App& app) {
  const AppState& s = app.state;
  const std::vector<double>& loss = app.losses;
  const UiColors& ui = ui_colors(s.presenter.high_contrast);
  const Tr tr = app.tr();
  if (loss.empty()) {
    ImGui::TextWrapped("%s", tr("No finished step yet. Press Run (R): the global loss (mean over "
                                "the whole batch) appears here after every step."));
    return;
  }
  ImGui::TextUnformatted(strf(tr("Training loss (%s), %zu steps; last %.6g"),
                              loss_name(app.data.cfg.model, tr).c_str(), loss.size(), loss.back())
                             .c_str());
  const ImVec2 o = ImGui::GetCursorScreenPos();
  const ImVec2 size = ImGui::GetContentRegionAvail();
  ImGui::InvisibleButton("loss_plot", size);  // i18n: not shown
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const float left = o.x + font * 5, right = o.x + size.x - font, top = o.y + font * 0.5f,
              bottom = o.y + size.y - font * 2.5f;
  double lo = *std::min_element(loss.begin(), loss.end()),
         hi = *std::max_element(loss.begin(), loss.end());
  if (hi - lo < 1e-12) {
    hi += 0.5 * std::max(1e-6, std::fabs(hi));
    lo -= 0.5 * std::max(1e-6, std::fabs(lo));
  }
  const double pad = (hi - lo) * 0.05;
  lo -= pad;
  hi += pad;
  const int n = static_cast<int>(loss.size());
  auto X = [&](double step) {
    return left + static_cast<float>(step / std::max(1, n - 1)) * (right - left);
  };
  auto Y = [&](double v) {
    return bottom - static_cast<float>((v - lo) / (hi - lo)) * (bottom - top);
  };
  dl->AddRectFilled(ImVec2(left, top), ImVec2(right, bottom), ui.lane_bg);
  char buf[32];
  for (double v : nice_ticks(lo, hi, 6)) {
    dl->AddLine(ImVec2(left, Y(v)), ImVec2(right, Y(v)), ui.grid);
    std::snprintf(buf, sizeof buf, "%.4g", v);
    dl->AddText(ImVec2(left - ImGui::CalcTextSize(buf).x - 6, Y(v) - font * 0.5f), ui.text_dim,
                buf);
  }
  for (double st : nice_ticks(0, std::max(1, n - 1), 10)) {
    if (st != std::floor(st)) continue;
    dl->AddLine(ImVec2(X(st), bottom), ImVec2(X(st), bottom + 4), ui.axis);
    std::snprintf(buf, sizeof buf, "%.0f", st);
    dl->AddText(ImVec2(X(st) - ImGui::CalcTextSize(buf).x * 0.5f, bottom + 5), ui.text_dim, buf);
  }
  const char* step_word = tr("step");
  dl->AddText(
      ImVec2((left + right) * 0.5f - ImGui::CalcTextSize(step_word).x * 0.5f, bottom + font + 8),
      ui.text_dim, step_word);
  const ImU32 line = kind_color(SpanKind::forward, s.presenter.high_contrast);
  for (int i = 1; i < n; ++i)
    dl->AddLine(ImVec2(X(i - 1), Y(loss[i - 1])), ImVec2(X(i), Y(loss[i])), line, 2);
  if (n <= 60)
    for (int i = 0; i < n; ++i) dl->AddCircleFilled(ImVec2(X(i), Y(loss[i])), 3, line);
  // The playhead's step.
  const int st = app.replayed().step_at(static_cast<int64_t>(s.playhead.t));
  if (st >= 0 && st < n) dl->AddLine(ImVec2(X(st), top), ImVec2(X(st), bottom), ui.playhead, 1.5f);
  if (ImGui::IsItemHovered()) {
    const float mx = ImGui::GetIO().MousePos.x;
    const int i =
        std::clamp(static_cast<int>(std::lround((mx - left) / (right - left) * (n - 1))), 0, n - 1);
    dl->AddCircle(ImVec2(X(i), Y(loss[i])), 5, ui.text, 0, 2);
    ImGui::SetTooltip("%s", strf(tr("step %d: loss %.6g"), i, loss[i]).c_str());
  }
}

}  // namespace shardlab::gui
