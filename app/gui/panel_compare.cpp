// Compare: 2-4 configurations run one after the other on the run bar's model
// and settings, shown side by side: a table, timelines on one time scale, and
// each rank's peak memory by category.
#include <algorithm>
#include <array>
#include <string>

#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/format.h"
#include "app/gui/logic/memory_logic.h"
#include "app/gui/panels.h"
#include "core/strategy.h"

namespace shardlab::gui {

namespace {

constexpr MemCategory kStackOrder[] = {MemCategory::params,          MemCategory::grads,
                                       MemCategory::optimizer_state, MemCategory::activations,
                                       MemCategory::comm_buffers,    MemCategory::temporary};

void draw_controls(App& app) {
  CompareState& c = app.state.compare;
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Compare");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 5);
  ImGui::InputInt("configurations##count", &c.count, 1, 1);
  c.count = std::clamp(c.count, 2, 4);
  for (int i = 0; i < c.count; ++i) {
    ImGui::SameLine(0, 16);
    ImGui::PushID(i);
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6);
    if (ImGui::BeginCombo("##s", c.strategies[i].c_str())) {
      for (const StrategyInfo& info : all_strategies())
        if (ImGui::Selectable(info.name.c_str(), info.name == c.strategies[i]))
          c.strategies[i] = info.name;
      ImGui::EndCombo();
    }
    ImGui::SameLine(0, 2);
    ImGui::TextUnformatted("\xC3\x97");
    ImGui::SameLine(0, 2);
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 2.5f);
    ImGui::InputInt("##w", &c.worlds[i], 0, 0);
    ImGui::PopID();
  }
  ImGui::SameLine(0, 16);
  const bool busy = app.compare_session.busy();
  ImGui::BeginDisabled(busy);
  if (ImGui::Button("Run comparison")) app.compare_from_form();
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip(
        "runs each configuration in turn with the run bar's model, batch, steps and options");
  if (busy) {
    ImGui::SameLine();
    const int i = app.compare_session.running_index();
    if (i >= 0 && i < static_cast<int>(app.compare.size()))
      ImGui::Text("running %d of %zu: %s ...", i + 1, app.compare.size(),
                  config_label(app.compare[i].cfg).c_str());
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) app.compare_session.cancel();
  }
}

void draw_table(App& app) {
  const UiColors& ui = ui_colors(app.state.presenter.high_contrast);
  const ImGuiTableFlags flags =
      ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp;
  if (!ImGui::BeginTable("compare_table", 6, flags)) return;
  ImGui::TableSetupColumn("configuration");
  ImGui::TableSetupColumn("median step");
  ImGui::TableSetupColumn("peak memory per rank (device)");
  ImGui::TableSetupColumn("sent per step (busiest rank)");
  ImGui::TableSetupColumn("bubble share (?)");
  ImGui::TableSetupColumn("final loss");
  // Headers one by one, so the bubble column can explain itself on hover.
  ImGui::TableNextRow(ImGuiTableRowFlags_Headers);
  for (int c = 0; c < 6; ++c) {
    ImGui::TableNextColumn();
    ImGui::TableHeader(ImGui::TableGetColumnName(c));
    if (c == 4 && ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "idle share of the compute lane per step, averaged over ranks and steps 1..\n"
          "(pipeline bubbles; for data parallelism: time spent waiting for communication)");
  }
  for (const CompareEntry& e : app.compare) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(config_label(e.cfg).c_str());
    if (!e.done) {
      ImGui::TableNextColumn();
      ImGui::TextDisabled("waiting / running");
      continue;
    }
    if (!e.error.empty()) {
      ImGui::TableNextColumn();
      ImGui::PushStyleColor(ImGuiCol_Text, ui.error);
      ImGui::TextWrapped("not run: %s", e.error.c_str());
      ImGui::PopStyleColor();
      continue;
    }
    const CompareRow& r = e.row;
    ImGui::TableNextColumn();
    ImGui::Text("%.3f ms", r.median_step_ms);
    ImGui::TableNextColumn();
    std::string peaks;
    for (size_t i = 0; i < r.peak_bytes.size(); ++i)
      peaks += (i ? ", " : "") + format_bytes(static_cast<double>(r.peak_bytes[i]));
    ImGui::TextWrapped("%s", peaks.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(format_bytes(r.sent_bytes_per_step).c_str());
    ImGui::TableNextColumn();
    if (!r.bubble_share_known) {
      ImGui::TextDisabled("n/a");
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip("needs core/pipeline_analysis.h (pipeline strategies)");
    } else if (r.bubble_share.empty()) {
      ImGui::TextDisabled("-");
    } else {
      double sum = 0;
      for (double b : r.bubble_share) sum += b;
      ImGui::Text("%.1f%%", 100 * sum / r.bubble_share.size());
    }
    ImGui::TableNextColumn();
    ImGui::Text("%.6g", r.final_loss);
  }
  ImGui::EndTable();
}

}  // namespace

void draw_compare(App& app) {
  AppState& s = app.state;
  const bool hc = s.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  draw_controls(app);
  if (app.compare.empty()) {
    ImGui::TextWrapped(
        "Pick 2 to 4 strategies and world sizes, then Run comparison: each runs in turn with the "
        "run bar's model and settings, and appears here side by side.");
    return;
  }
  draw_table(app);

  // Timelines on one time scale: a slower configuration is visibly longer.
  const float font = ImGui::GetFontSize();
  ImGui::Spacing();
  ImGui::TextUnformatted(
      "Timelines on one time scale, each from its first span (wheel: zoom, drag: pan)");
  std::array<bool, kNumSpanKinds> seen{};
  for (const CompareEntry& e : app.compare)
    for (int k = 0; k < kNumSpanKinds; ++k) seen[k] = seen[k] || e.data.kinds_seen[k];
  for (int k = 0; k < kNumSpanKinds; ++k)
    if (seen[k])
      legend_item(kind_color(static_cast<SpanKind>(k), hc), kind_label(static_cast<SpanKind>(k)));
  ImGui::NewLine();
  int total_ranks = 0;
  for (const CompareEntry& e : app.compare) total_ranks += e.data.world;
  const float mem_h = font * 1.3f * std::max(1, total_ranks) + font * 3;
  const float avail = ImGui::GetContentRegionAvail().y - mem_h;
  const float lane_h = std::clamp(avail / std::max(1, total_ranks) / 2.6f - 2, 6.0f, font * 1.4f);
  for (size_t i = 0; i < app.compare.size(); ++i) {
    const CompareEntry& e = app.compare[i];
    if (!e.result) continue;
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(ui.text), "%s", config_label(e.cfg).c_str());
    TimelineRowsOptions opt;
    const std::string id = "cmp_rows_" + std::to_string(i);
    opt.id = id.c_str();
    opt.lane_height = lane_h;
    opt.show_playhead = false;
    opt.show_axis = i == 0;
    opt.click_sets_playhead = false;
    opt.t_offset = e.data.view_begin();
    draw_timeline_rows(app, e.data, s.compare.vp, opt);
  }

  // Peak memory per rank: the breakdown at the moment of each rank's peak.
  ImGui::Spacing();
  ImGui::TextUnformatted("Peak memory per rank, by category at the moment of the peak (device)");
  ImGui::SameLine(0, 12);
  for (MemCategory c : kStackOrder) legend_item(category_color(c, hc), category_label(c));
  ImGui::NewLine();
  double max_bytes = 1;
  for (const CompareEntry& e : app.compare)
    for (const RankData& r : e.data.ranks)
      max_bytes = std::max(max_bytes, static_cast<double>(total(peak_of(r.device_series).bytes)));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float label_w = font * 8;
  const float bar_w = ImGui::GetContentRegionAvail().x - label_w - font * 7;
  for (const CompareEntry& e : app.compare) {
    for (int r = 0; r < e.data.world; ++r) {
      const Peak pk = peak_of(e.data.ranks[r].device_series);
      const ImVec2 o = ImGui::GetCursorScreenPos();
      const std::string label = config_label(e.cfg) + " r" + std::to_string(r);
      dl->AddText(o, ui.text_dim, label.c_str());
      float x = o.x + label_w;
      for (MemCategory c : kStackOrder) {
        const float w = static_cast<float>(pk.bytes[static_cast<int>(c)] / max_bytes) * bar_w;
        if (w <= 0) continue;
        dl->AddRectFilled(ImVec2(x, o.y + 1), ImVec2(x + w, o.y + font), category_color(c, hc));
        x += w;
      }
      const std::string v = format_bytes(static_cast<double>(total(pk.bytes)));
      dl->AddText(ImVec2(x + 6, o.y), ui.text, v.c_str());
      ImGui::Dummy(ImVec2(label_w + bar_w, font * 1.3f));
    }
  }
}

}  // namespace shardlab::gui
