// The loss curve of the current run, one point per finished step, drawn with
// the draw list (no ImPlot in Debian). When the run is one of a comparison (a
// lesson step with a second run, or the compare view's set), the other runs'
// curves are drawn beside it on the same axes: single's next to gpipe's shows
// where a model computes something else once its batch is cut (BatchNorm).
#include <algorithm>
#include <cmath>
#include <string>

#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/compare_logic.h"
#include "app/gui/logic/format.h"
#include "app/gui/panels.h"
#include "core/predict/server_traffic.h"

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
  // The other runs of a comparison that holds this one (same settings).
  struct Curve {
    const std::vector<double>* loss;
    std::string label;
    ImU32 color;
  };
  std::vector<Curve> others;
  bool holds_this = false;
  for (const CompareEntry& e : app.compare)
    holds_this |= e.done && e.result && config_label(e.cfg) == config_label(app.data.cfg);
  static constexpr ImU32 kOtherColors[] = {
      IM_COL32(255, 160, 60, 255), IM_COL32(120, 220, 110, 255), IM_COL32(245, 100, 190, 255),
      IM_COL32(240, 225, 80, 255)};
  if (holds_this)
    for (const CompareEntry& e : app.compare)
      if (e.done && e.result && !e.result->losses.empty() &&
          config_label(e.cfg) != config_label(app.data.cfg))
        others.push_back({&e.result->losses, config_label(e.cfg, tr),
                          kOtherColors[others.size() % std::size(kOtherColors)]});
  const ImVec2 o = ImGui::GetCursorScreenPos();
  const ImVec2 size = ImGui::GetContentRegionAvail();
  ImGui::InvisibleButton("loss_plot", size);  // i18n: not shown
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const float left = o.x + font * 5, right = o.x + size.x - font, top = o.y + font * 0.5f,
              bottom = o.y + size.y - font * 2.5f;
  double lo = *std::min_element(loss.begin(), loss.end()),
         hi = *std::max_element(loss.begin(), loss.end());
  int n = static_cast<int>(loss.size());
  for (const Curve& c : others) {
    lo = std::min(lo, *std::min_element(c.loss->begin(), c.loss->end()));
    hi = std::max(hi, *std::max_element(c.loss->begin(), c.loss->end()));
    n = std::max(n, static_cast<int>(c.loss->size()));
  }
  if (hi - lo < 1e-12) {
    hi += 0.5 * std::max(1e-6, std::fabs(hi));
    lo -= 0.5 * std::max(1e-6, std::fabs(lo));
  }
  const double pad = (hi - lo) * 0.05;
  lo -= pad;
  hi += pad;
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
  const auto curve = [&](const std::vector<double>& v, ImU32 col, float width) {
    const int m = static_cast<int>(v.size());
    for (int i = 1; i < m; ++i)
      dl->AddLine(ImVec2(X(i - 1), Y(v[i - 1])), ImVec2(X(i), Y(v[i])), col, width);
    if (m <= 60)
      for (int i = 0; i < m; ++i) dl->AddCircleFilled(ImVec2(X(i), Y(v[i])), 3, col);
  };
  // Asynchronous training (ps --staleness K): under each step (drawn first: the curves stay on
  // top), a bar as tall as the most stale worker's parameters were (updates behind), against K.
  const int bound = app.data.cfg.staleness;
  std::vector<int> stale;
  if (bound > 0) {
    for (const RankData& rd : app.data.ranks)
      for (const Span& sp : rd.lane(Lane::compute).spans) note_staleness(stale, sp);
    const float bar_h = (bottom - top) * 0.18f, bar_w = std::max(2.0f, (right - left) / n * 0.5f);
    const ImU32 bar = kind_color(SpanKind::recv, s.presenter.high_contrast);
    for (int i = 0; i < static_cast<int>(stale.size()) && i < n; ++i)
      if (stale[i] > 0)
        dl->AddRectFilled(ImVec2(X(i) - bar_w * 0.5f, bottom - bar_h * stale[i] / bound),
                          ImVec2(X(i) + bar_w * 0.5f, bottom), (bar & 0x00FFFFFF) | 0xA0000000);
    const std::string key =
        strf(tr("bars: the most stale worker's parameters each step, in updates behind (up to %d)"),
             bound);
    dl->AddText(ImVec2(left + font * 0.4f, bottom - bar_h - font * 1.3f), ui.text_dim, key.c_str());
  }
  // The others first and thinner: where the curves coincide, this run's stays on top.
  for (const Curve& c : others) curve(*c.loss, c.color, 3);
  curve(loss, line, 2);
  if (!others.empty()) {
    // The legend, top right inside the plot.
    std::vector<std::pair<std::string, ImU32>> rows = {
        {strf(tr("%s (shown)"), config_label(app.data.cfg, tr).c_str()), line}};
    for (const Curve& c : others) rows.push_back({c.label, c.color});
    float w = 0;
    for (const auto& r : rows) w = std::max(w, ImGui::CalcTextSize(r.first.c_str()).x);
    float y = top + font * 0.4f;
    const float x = right - w - font * 2.2f;
    for (const auto& r : rows) {
      dl->AddLine(ImVec2(x, y + font * 0.5f), ImVec2(x + font * 1.2f, y + font * 0.5f), r.second,
                  3);
      dl->AddText(ImVec2(x + font * 1.6f, y), ui.text, r.first.c_str());
      y += font * 1.25f;
    }
  }
  // The playhead's step.
  const int st = app.replayed().step_at(static_cast<int64_t>(s.playhead.t));
  if (st >= 0 && st < n) dl->AddLine(ImVec2(X(st), top), ImVec2(X(st), bottom), ui.playhead, 1.5f);
  if (ImGui::IsItemHovered()) {
    const float mx = ImGui::GetIO().MousePos.x;
    const int last = static_cast<int>(loss.size()) - 1;
    const int i =
        std::clamp(static_cast<int>(std::lround((mx - left) / (right - left) * (n - 1))), 0, last);
    dl->AddCircle(ImVec2(X(i), Y(loss[i])), 5, ui.text, 0, 2);
    std::string tip = strf(tr("step %d: loss %.6g"), i, loss[i]);
    if (i < static_cast<int>(stale.size()) && stale[i] >= 0)
      tip += "\n" +
             strf(tr("the most stale worker computed it with parameters %d updates old"), stale[i]);
    for (const Curve& c : others)
      if (i < static_cast<int>(c.loss->size()))
        tip += "\n" + strf(tr("%s: loss %.6g"), c.label.c_str(), (*c.loss)[i]);
    ImGui::SetTooltip("%s", tip.c_str());
  }
}

}  // namespace shardlab::gui
