// Memory: per rank, bytes in use by category over time (stacked, measured by
// the accounting allocator), sharing the timeline's zoom; beside it, each
// rank's state at the playhead as a bar, with the predicted model-state bytes
// as a marker where the strategy has a formula.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>

#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/format.h"
#include "app/gui/logic/memory_logic.h"
#include "app/gui/panels.h"

namespace shardlab::gui {

namespace {

// Stacked from the bottom in this order: model states first (what ZeRO shards).
constexpr MemCategory kStackOrder[] = {MemCategory::params,          MemCategory::grads,
                                       MemCategory::optimizer_state, MemCategory::activations,
                                       MemCategory::comm_buffers,    MemCategory::temporary};

void y_axis(ImDrawList* dl, float x_right, float y_bottom, float h, double max_bytes,
            const UiColors& ui, float x_grid_end) {
  for (const ByteTick& tick : byte_ticks(max_bytes, std::max(2, static_cast<int>(h / 40)))) {
    const float y = y_bottom - static_cast<float>(tick.bytes / max_bytes) * h;
    dl->AddLine(ImVec2(x_right, y), ImVec2(x_grid_end, y), ui.grid);
    const std::string& s = tick.label;
    const ImVec2 sz = ImGui::CalcTextSize(s.c_str());
    if (y - sz.y * 0.5f < y_bottom - h - 2) continue;
    dl->AddText(ImVec2(x_right - sz.x - 4, y - sz.y * 0.5f), ui.text_dim, s.c_str());
  }
}

// Chinese characters are as wide as two Latin ones: a column of names is
// padded by its widest name's pixels, not by a count of bytes.
void stack_tooltip(const char* title, const CategoryBytes& b, const Tr& tr) {
  ImGui::BeginTooltip();
  ImGui::TextUnformatted(title);
  float name_w = ImGui::CalcTextSize(tr("total")).x;
  for (MemCategory c : kStackOrder)
    name_w = std::max(name_w, ImGui::CalcTextSize(category_label(c, tr)).x);
  const float x = ImGui::GetCursorPosX() + ImGui::CalcTextSize("  ").x;
  auto row = [&](const char* name, int64_t bytes) {
    ImGui::SetCursorPosX(x);
    ImGui::TextUnformatted(name);
    ImGui::SameLine(x + name_w + ImGui::CalcTextSize(" ").x);
    ImGui::TextUnformatted(format_bytes(static_cast<double>(bytes)).c_str());
  };
  for (MemCategory c : kStackOrder)
    if (b[static_cast<int>(c)] > 0) row(category_label(c, tr), b[static_cast<int>(c)]);
  row(tr("total"), total(b));
  ImGui::EndTooltip();
}

void draw_stack(ImDrawList* dl, float x0, float x1, float y_bottom, float h, double max_bytes,
                const CategoryBytes& b, bool hc) {
  float y = y_bottom;
  for (MemCategory c : kStackOrder) {
    const int64_t v = b[static_cast<int>(c)];
    if (v <= 0) continue;
    const float dy = static_cast<float>(v / max_bytes) * h;
    dl->AddRectFilled(ImVec2(x0, y - dy), ImVec2(x1, y), category_color(c, hc));
    y -= dy;
  }
}

}  // namespace

void draw_memory(App& app) {
  const Tr tr = app.tr();
  AppState& s = app.state;
  const RunData& d = app.data;
  const bool hc = s.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  if (d.world == 0) {
    ImGui::TextWrapped("%s", tr("No run yet. Press Run (R): memory is measured from every "
                                "allocation the ranks make."));
    return;
  }
  for (MemCategory c : kStackOrder) {
    legend_item(category_color(c, hc), category_label(c, tr));
    // A lesson's { category = … } outlines the legend's swatch and name (and each
    // rank's band at the playhead, below).
    const float sw = ImGui::GetTextLineHeight() * 0.8f + 4;
    mark_region(app, -1, nullptr, static_cast<int>(c),
                ImVec2(ImGui::GetItemRectMin().x - sw, ImGui::GetItemRectMin().y),
                ImGui::GetItemRectMax());
  }
  const char* note = tr("| measured by each rank's accounting allocator (device pool)");
  // On the legend's line if it fits, else on its own (never cut at the edge).
  if (ImGui::GetContentRegionAvail().x >
      ImGui::CalcTextSize(note).x + ImGui::CalcTextSize("(?)").x + 20)
    ImGui::SameLine(0, 10);
  else
    ImGui::NewLine();
  ImGui::TextDisabled("%s", note);
  ImGui::SameLine();
  help_marker(
      tr("Left: bytes in use over time, stacked by category, on the timeline's time axis (wheel: "
         "zoom, drag: pan, click: move the playhead). Right: each rank at the playhead. The "
         "white marker is the predicted model-state memory (params + grads + optimizer state) "
         "from the ZeRO paper's formula, where the strategy has one: compare it with the bottom "
         "three colours of the bar."));

  // A mesh: what each axis divided of rank 0's model states.
  if (const std::optional<AxisSavings> a = axis_savings(d.cfg, 0)) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::ColorConvertU32ToFloat4(ui.text_dim));
    ImGui::TextWrapped("%s", axis_savings_line(*a, 0, tr).c_str());
    ImGui::PopStyleColor();
  }

  std::vector<const std::vector<CategorySample>*> series;
  std::vector<std::string> names;
  for (int r = 0; r < d.world; ++r) {
    series.push_back(&d.ranks[r].device_series);
    names.push_back(strf(tr("rank %d"), r));
    if (d.has_host_memory) {
      series.push_back(&d.ranks[r].host_series);
      names.push_back(strf(tr("rank %d host"), r));
    }
  }
  std::vector<std::optional<Predicted>> predicted;
  double max_bytes = 1024;
  for (size_t i = 0; i < series.size(); ++i)
    max_bytes = std::max(max_bytes, static_cast<double>(total(peak_of(*series[i]).bytes)));
  for (int r = 0; r < d.world; ++r) {
    predicted.push_back(predicted_model_state(d.cfg, r));
    if (predicted.back())
      max_bytes = std::max(max_bytes, static_cast<double>(predicted.back()->model_state_bytes));
  }
  // What the check before the run predicted (the meta run), once per frame.
  const std::shared_ptr<const MemoryEstimate> meta_est = meta_prediction(d.cfg);
  for (size_t i = 0; i < series.size(); ++i) {
    const bool host_row = d.has_host_memory && i % 2 == 1;
    const int rank = static_cast<int>(d.has_host_memory ? i / 2 : i);
    if (const auto meta = meta_predicted_peak(meta_est.get(), rank, host_row))
      max_bytes = std::max(max_bytes, static_cast<double>(*meta));
  }
  max_bytes *= 1.08;  // headroom for the peak label

  const float font = ImGui::GetFontSize();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  // The right column is as wide as its longest line needs (at presenter scale
  // its numbers were cut at the view's edge), up to 42 % of the view.
  // Samples of the widest numbers, for sizing.
  const char* kBytes = "000.00 KiB";  // i18n: not shown
  const char* kTime = "000.0 ms";     // i18n: not shown
  const auto width = [](const std::string& text) { return ImGui::CalcTextSize(text.c_str()).x; };
  float text_w = width(strf(tr("%s: %s"), strf(tr("rank %d host"), 10).c_str(), kBytes));
  text_w = std::max(text_w, width(strf(tr("peak predicted before the run %s"), kBytes)));
  for (int r = 0; r < d.world; ++r) {
    if (const auto& pred = predicted[r])
      text_w = std::max(text_w, width(strf(tr("predicted %s (%s)"), kBytes,
                                           predicted_formula_text(*pred, tr).c_str())));
    for (const std::string& line : block_activation_lines(d.cfg, r, tr))
      text_w = std::max(text_w, width(line));
  }
  const float need =
      std::max(width(strf(tr("at the playhead, t = %s"), kTime)), font * 4.3f + text_w) + font;
  const float bars_w = std::min(avail.x * 0.42f, std::max(font * 10, need));
  const float gutter = font * 6.5f;
  const float axis_h = font + 8;
  const float chart_w = avail.x - bars_w - 12;
  const int rows = static_cast<int>(series.size());
  const float row_gap = font * 0.6f;
  const float row_h = std::max(font * 3, (avail.y - axis_h - 4) / rows - row_gap);

  ImDrawList* dl = ImGui::GetWindowDrawList();
  Viewport& vp = s.timeline.vp;
  ImGui::InvisibleButton("memory_charts",  // i18n: not shown
                         ImVec2(chart_w, axis_h + rows * (row_h + row_gap)));
  vp.x0 = origin.x + gutter;
  vp.width = std::max(1.0f, chart_w - gutter - 6);
  if (zoom_pan(vp, s.timeline)) s.timeline.follow = false;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const bool hovered = ImGui::IsItemHovered();
  if (ImGui::IsItemDeactivated() && !s.timeline.dragging && mouse.x >= vp.x0)
    app.set_playhead_on(d, vp.t_of(mouse.x));
  if (hovered && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
    fit(vp, d.steps_begin(), static_cast<double>(d.t_end));
    s.timeline.follow = true;
    s.timeline.one_step = false;
  }

  const float x_end = vp.x0 + vp.width;
  dl->PushClipRect(origin, ImVec2(origin.x + chart_w, origin.y + avail.y), true);
  draw_time_axis(dl, vp, origin.y, axis_h, ui);
  std::vector<StackColumn> cols;
  const int64_t playhead = static_cast<int64_t>(app.playhead_on(d));
  for (int i = 0; i < rows; ++i) {
    const float top = origin.y + axis_h + i * (row_h + row_gap);
    const float bottom = top + row_h;
    dl->AddRectFilled(ImVec2(vp.x0, top), ImVec2(x_end, bottom), ui.lane_bg);
    y_axis(dl, vp.x0, bottom, row_h, max_bytes, ui, x_end);
    dl->AddText(ImVec2(origin.x + 2, top), ui.text, names[i].c_str());
    // Rows go rank by rank (device, then host when offloading): a lesson may point at one.
    mark_region(app, d.has_host_memory ? i / 2 : i, nullptr, -1, ImVec2(origin.x, top),
                ImVec2(x_end, bottom));
    cols.clear();
    memory_columns(*series[i], vp, 2.0f, cols);
    dl->PushClipRect(ImVec2(vp.x0, top), ImVec2(x_end, bottom), true);
    for (const StackColumn& c : cols)
      draw_stack(dl, c.x0, c.x1, bottom, row_h, max_bytes, c.bytes, hc);
    // The peak, where it happened.
    const Peak pk = peak_of(*series[i]);
    const float px = vp.x_of(static_cast<double>(pk.t));
    const float py = bottom - static_cast<float>(total(pk.bytes) / max_bytes) * row_h;
    if (px >= vp.x0 && px <= x_end) {
      const std::string label =
          strf(tr("peak %s"), format_bytes(static_cast<double>(total(pk.bytes))).c_str());
      dl->AddCircleFilled(ImVec2(px, py), 3, ui.text);
      const float w = ImGui::CalcTextSize(label.c_str()).x;
      dl->AddText(ImVec2(std::min(px + 5, x_end - w - 2), std::max(top, py - font - 1)), ui.text,
                  label.c_str());
    }
    // What the check before the run predicted for this rank's peak (the meta
    // run): a dashed line that the measured peak should touch, never rise above.
    const bool host_row = d.has_host_memory && i % 2 == 1;
    if (const auto meta =
            meta_predicted_peak(meta_est.get(), d.has_host_memory ? i / 2 : i, host_row);
        meta && *meta > 0) {
      const float my = bottom - static_cast<float>(*meta / max_bytes) * row_h;
      for (float x = vp.x0; x < x_end; x += 10)
        dl->AddLine(ImVec2(x, my), ImVec2(std::min(x + 5, x_end), my), ui.text_dim, 1.0f);
    }
    dl->PopClipRect();
    if (hovered && mouse.y >= top && mouse.y < bottom && mouse.x >= vp.x0) {
      const int64_t t = static_cast<int64_t>(vp.t_of(mouse.x));
      const std::string title =
          strf(tr("%s at %s"), names[i].c_str(), format_time_ns(static_cast<double>(t)).c_str());
      stack_tooltip(title.c_str(), bytes_at(*series[i], t), tr);
    }
  }
  const float xp = vp.x_of(app.playhead_on(d));
  if (xp >= vp.x0 && xp <= x_end)
    dl->AddLine(ImVec2(xp, origin.y), ImVec2(xp, origin.y + axis_h + rows * (row_h + row_gap)),
                ui.playhead, 2.0f);
  dl->PopClipRect();

  // Right: the state at the playhead, one bar per row, same scale as the charts.
  const float bx = origin.x + chart_w + 12;
  const std::string head =
      strf(tr("at the playhead, t = %s"), format_time_ns(app.playhead_on(d)).c_str());
  dl->AddText(ImVec2(bx, origin.y), ui.text, head.c_str());
  const float bar_w = font * 2.2f;
  for (int i = 0; i < rows; ++i) {
    const float top = origin.y + axis_h + i * (row_h + row_gap);
    const float bottom = top + row_h;
    const CategoryBytes now = bytes_at(*series[i], playhead);
    const float x0 = bx + font * 0.5f;
    dl->AddRect(ImVec2(x0 - 1, top), ImVec2(x0 + bar_w + 1, bottom + 1), ui.grid);
    draw_stack(dl, x0, x0 + bar_w, bottom, row_h, max_bytes, now, hc);
    // Each category's band in this bar, for a lesson's category highlight.
    float band = bottom;
    for (MemCategory c : kStackOrder) {
      const int64_t v = now[static_cast<int>(c)];
      if (v <= 0) continue;
      const float dy = static_cast<float>(v / max_bytes) * row_h;
      mark_region(app, -1, nullptr, static_cast<int>(c), ImVec2(x0, band - dy),
                  ImVec2(x0 + bar_w, band));
      band -= dy;
    }
    const int64_t model_state = now[0] + now[1] + now[2];
    float ty = top;
    const float tx = x0 + bar_w + font * 1.6f;
    // Each line in the longest wording that fits the view (presenter scale cut
    // "model states 1.01 MiB" to "model states 1.01 I").
    const float room = origin.x + avail.x - tx - 4;
    auto line = [&](ImU32 col, std::initializer_list<std::string> wordings) {
      if (ty + font > bottom + 2) return;
      const std::string* pick = &*(wordings.end() - 1);
      for (const std::string& w : wordings)
        if (ImGui::CalcTextSize(w.c_str()).x <= room) {
          pick = &w;
          break;
        }
      dl->AddText(ImVec2(tx, ty), col, pick->c_str());
      ty += font + 1;
    };
    const std::string total_text = format_bytes(static_cast<double>(total(now)));
    const std::string states_text = format_bytes(static_cast<double>(model_state));
    line(ui.text, {strf(tr("%s: %s"), names[i].c_str(), total_text.c_str()), total_text});
    line(ui.text_dim, {strf(tr("model states %s"), states_text.c_str()),
                       strf(tr("states %s"), states_text.c_str()), states_text});
    const bool host_row = d.has_host_memory && i % 2 == 1;
    const int rank = d.has_host_memory ? i / 2 : i;
    const auto& pred = predicted[rank];
    if (pred && pred->on_host == host_row) {
      const float y = bottom - static_cast<float>(pred->model_state_bytes / max_bytes) * row_h;
      // A white tick with a triangle pointing at the bar: "the formula says here".
      dl->AddLine(ImVec2(x0 - 3, y), ImVec2(x0 + bar_w + 3, y), ui.text, 2.0f);
      dl->AddTriangleFilled(ImVec2(x0 + bar_w + 4, y), ImVec2(x0 + bar_w + 12, y - 5),
                            ImVec2(x0 + bar_w + 12, y + 5), ui.text);
      const std::string predicted_text = format_bytes(static_cast<double>(pred->model_state_bytes));
      line(ui.text, {strf(tr("predicted %s (%s)"), predicted_text.c_str(),
                          predicted_formula_text(*pred, tr).c_str()),
                     strf(tr("predicted %s"), predicted_text.c_str()),
                     strf(tr("pred. %s"), predicted_text.c_str())});
    } else if (!pred && !host_row) {
      line(ui.text_dim,
           {strf(tr("no formula for %s"), d.cfg.strategy.c_str()), std::string(tr("no formula"))});
    }
    // The dashed line's value: the whole peak, as the check before the run predicted it.
    if (const auto meta = meta_predicted_peak(meta_est.get(), rank, host_row); meta && *meta > 0) {
      const std::string meta_text = format_bytes(static_cast<double>(*meta));
      line(ui.text_dim, {strf(tr("peak predicted before the run %s"), meta_text.c_str()),
                         strf(tr("predicted peak %s"), meta_text.c_str()),
                         strf(tr("pred. peak %s"), meta_text.c_str())});
    }
    if (model_state == 0 && total(now) == 0)
      line(ui.text_dim, {std::string(tr("(nothing allocated)")), std::string(tr("(none)"))});
    // --offload nvme:DIR: what the rank keeps in its file instead (the disk pool).
    if (!host_row && !d.ranks[rank].disk_series.empty()) {
      const int64_t on_disk = total(bytes_at(d.ranks[rank].disk_series, playhead));
      if (on_disk > 0) {
        const std::string disk_text = format_bytes(static_cast<double>(on_disk));
        line(ui.text_dim,
             {strf(d.cfg.offload_params ? tr("on disk %s (parameters and optimizer state)")
                                        : tr("on disk %s (optimizer state)"),
                   disk_text.c_str()),
              strf(tr("on disk %s"), disk_text.c_str())});
      }
    }
    if (!host_row)
      for (const std::string& text : block_activation_lines(d.cfg, rank, tr))
        line(ui.text_dim, {text});
  }
}

}  // namespace shardlab::gui
