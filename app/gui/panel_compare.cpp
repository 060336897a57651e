// Compare: up to six configurations (strategy, world, micro-batches and the
// options that strategy reads) run one after the other on the run bar's model
// and settings, shown side by side: a table that fills in as each run finishes,
// then timelines on one time scale, memory over time aligned by step, or each
// rank's peak memory by category.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include <imgui.h>
#include <imgui_stdlib.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/format.h"
#include "app/gui/logic/i18n.h"
#include "app/gui/logic/memory_logic.h"
#include "app/gui/panels.h"
#include "core/parallel/strategy.h"
#include "core/predict/pipeline_analysis.h"

namespace shardlab::gui {

namespace {

// i18n: not shown (the pictures' names on the command line, --compare-show)
constexpr const char* kPictureNames[kNumComparePictures] = {"timelines", "memory", "peaks"};

const char* picture_title(ComparePicture p, const Tr& tr) {
  switch (p) {
    case ComparePicture::timelines:
      return tr("Timelines");
    case ComparePicture::memory:
      return tr("Memory over time");
    case ComparePicture::peaks:
      return tr("Peak memory by category");
  }
  return "";
}

constexpr MemCategory kStackOrder[] = {MemCategory::params,          MemCategory::grads,
                                       MemCategory::optimizer_state, MemCategory::activations,
                                       MemCategory::comm_buffers,    MemCategory::temporary};

// One colour per configuration slot, for its swatch and its memory curve:
// hues far apart, bright enough on the dark and the black (presenter) theme.
constexpr Color kSlotColors[kMaxCompare] = {rgba(255, 160, 60),  rgba(90, 180, 255),
                                            rgba(120, 220, 110), rgba(245, 100, 190),
                                            rgba(240, 225, 80),  rgba(175, 140, 255)};
Color slot_color(size_t i) {
  return kSlotColors[i % kMaxCompare];
}

void swatch(Color c) {
  const float h = ImGui::GetTextLineHeight();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x, p.y + h * 0.15f),
                                            ImVec2(p.x + h * 0.7f, p.y + h * 0.85f), c, 2.0f);
  ImGui::Dummy(ImVec2(h * 0.75f, h));
  ImGui::SameLine(0, 4);
}

std::string slot_error(const CompareSlot& slot, const RunConfig& form) {
  try {
    validate(config_for(slot, form));
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// The width one slot's widgets take, so the selector can wrap before a slot, not inside it.
float slot_width(const CompareSlot& s, const Tr& tr) {
  const ImGuiStyle& st = ImGui::GetStyle();
  const float font = ImGui::GetFontSize(), frame = ImGui::GetFrameHeight();
  const auto check = [&](const char* label) {
    return frame + st.ItemInnerSpacing.x + ImGui::CalcTextSize(label).x + st.ItemSpacing.x;
  };
  float w = font * 1.4f + font * 6.5f + ImGui::CalcTextSize("\xC3\x97").x + font * 2.4f +
            st.ItemSpacing.x * 3;
  const StrategyInfo* info = find_strategy(s.strategy);
  for (const OptionRow& r : option_rows()) {
    if (!r.short_label || !info || !info->reads_option(r.id)) continue;
    switch (r.kind) {
      case OptionKind::on_flag:
      case OptionKind::off_flag:
        w += check(tr(r.label));
        break;
      case OptionKind::choice:
        w += font * 3.6f + st.ItemSpacing.x;
        break;
      case OptionKind::text:
        w += ImGui::CalcTextSize(tr(r.short_label)).x + font * 8.5f + 12;
        break;
      default:
        w += ImGui::CalcTextSize(tr(r.short_label)).x + font * 2.6f + 12;
    }
  }
  return w + frame + font * 1.5f;  // the remove button and the gap to the next slot
}

// One slot's widgets on the current line. Returns false when the slot asks to be removed.
bool draw_slot(CompareSlot& s, size_t i, bool can_remove, bool invalid, bool hc, const Tr& tr) {
  const float font = ImGui::GetFontSize();
  const UiColors& ui = ui_colors(hc);
  ImGui::PushID(static_cast<int>(i));
  ImGui::BeginGroup();
  swatch(slot_color(i));
  ImGui::PushStyleColor(ImGuiCol_Text, invalid ? ui.error : ui.text);
  ImGui::Text("%zu", i + 1);
  ImGui::PopStyleColor();
  ImGui::SameLine(0, 4);
  ImGui::SetNextItemWidth(font * 6.5f);
  if (ImGui::BeginCombo("##s", s.strategy.c_str())) {
    for (const StrategyInfo& info : all_strategies()) {
      // The other options stay: a strategy that reads them takes them over.
      if (ImGui::Selectable(info.name.c_str(), info.name == s.strategy)) {
        s.strategy = info.name;
        s.world = info.world_for(s.world);
      }
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", info.summary.c_str());
    }
    ImGui::EndCombo();
  }
  ImGui::SameLine(0, 3);
  ImGui::TextUnformatted("\xC3\x97");
  ImGui::SameLine(0, 3);
  ImGui::SetNextItemWidth(font * 2.4f);
  ImGui::InputInt("##w", &s.world, 0, 0);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s", tr("world size: ranks (threads) of this run"));
  // One widget per option the strategy reads that a configuration can set (core/run_options.h).
  const StrategyInfo* info = find_strategy(s.strategy);
  for (const OptionRow& r : option_rows()) {
    if (!r.short_label || !info || !info->reads_option(r.id)) continue;
    ImGui::SameLine();
    const std::string id = std::string("##") + r.json_key;  // i18n: not shown (an id)
    switch (r.kind) {
      case OptionKind::on_flag:
      case OptionKind::off_flag: {
        // Ticked means the option's effect is on: "offload", "overlap".
        bool on = s.options.*r.boolean;
        if (ImGui::Checkbox(tr(r.label), &on)) s.options.*r.boolean = on;
        break;
      }
      case OptionKind::choice:
        ImGui::SetNextItemWidth(font * 3.6f);
        if (ImGui::BeginCombo(id.c_str(), (s.options.*r.text).c_str())) {
          for (const std::string& v : r.choices)  // values, the same in every language
            if (ImGui::Selectable(v.c_str(), s.options.*r.text == v)) s.options.*r.text = v;
          ImGui::EndCombo();
        }
        break;
      case OptionKind::integer:
        ImGui::TextUnformatted(tr(r.short_label));
        ImGui::SameLine(0, 3);
        ImGui::SetNextItemWidth(font * 2.4f);
        ImGui::InputInt(id.c_str(), &(s.options.*r.integer), 0, 0);
        break;
      case OptionKind::number:
        ImGui::TextUnformatted(tr(r.short_label));
        ImGui::SameLine(0, 3);
        ImGui::SetNextItemWidth(font * 2.6f);
        ImGui::InputDouble(id.c_str(), &(s.options.*r.number), 0, 0, "%g");
        break;
      case OptionKind::text: {
        // A mesh, typed as on the command line (dp=2,pp=2,tp=2); the world follows it.
        ImGui::TextUnformatted(tr(r.short_label));
        ImGui::SameLine(0, 3);
        ImGui::SetNextItemWidth(font * 8.5f);
        if (ImGui::InputText(id.c_str(), &(s.options.*r.text)) && !(s.options.*r.text).empty()) {
          try {
            s.world = parse_mesh(s.options.*r.text).world();
          } catch (const ConfigError&) {
            // Still being typed: the slot shows as invalid until it parses.
          }
        }
        break;
      }
      case OptionKind::int_list:
        break;  // no compare key: never here
    }
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s (%s)", tr(r.tip), r.flag);
  }
  bool keep = true;
  if (can_remove) {
    ImGui::SameLine(0, 4);
    if (ImGui::SmallButton("x")) keep = false;
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tr("remove this configuration"));
  }
  ImGui::EndGroup();
  if (ImGui::IsItemHovered() && !ImGui::IsAnyItemActive())
    ImGui::SetTooltip(tr("as a --compare item: %s"), slot_text(s).c_str());
  ImGui::PopID();
  return keep;
}

void draw_selector(App& app) {
  const Tr tr = app.tr();
  CompareState& c = app.state.compare;
  const bool hc = app.state.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  const float font = ImGui::GetFontSize();
  const float right = ImGui::GetCursorScreenPos().x + ImGui::GetContentRegionAvail().x;

  // Folded, the slots are one line: in presenter mode, until asked, so the big
  // font leaves room for the table and the picture.
  const bool show = c.show_slots.value_or(!app.state.presenter.presenter);
  if (ImGui::ArrowButton("##fold", show ? ImGuiDir_Down : ImGuiDir_Right)) c.show_slots = !show;
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s", show ? tr("fold the configurations into one line")
                                 : tr("show the configurations to edit them"));
  ImGui::SameLine();
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(tr("Compare"));
  std::vector<std::string> errors(c.slots.size());
  bool any_invalid = false;
  for (size_t i = 0; i < c.slots.size(); ++i) {
    errors[i] = slot_error(c.slots[i], app.state.form);
    any_invalid = any_invalid || !errors[i].empty();
  }
  size_t remove = c.slots.size();
  for (size_t i = 0; i < c.slots.size(); ++i) {
    ImGui::SameLine(0, font);
    if (!show) {
      const std::string label = config_label(config_for(c.slots[i], app.state.form), tr);
      if (ImGui::GetCursorScreenPos().x + ImGui::CalcTextSize(label.c_str()).x + font * 2 > right)
        ImGui::NewLine();
      swatch(slot_color(i));
      ImGui::PushStyleColor(ImGuiCol_Text, errors[i].empty() ? ui.text : ui.error);
      ImGui::TextUnformatted(label.c_str());
      ImGui::PopStyleColor();
      continue;
    }
    if (ImGui::GetCursorScreenPos().x + slot_width(c.slots[i], tr) > right) ImGui::NewLine();
    if (!draw_slot(c.slots[i], i, c.slots.size() > 1, !errors[i].empty(), hc, tr)) remove = i;
  }
  if (remove < c.slots.size()) c.slots.erase(c.slots.begin() + static_cast<long>(remove));

  const bool busy = app.compare_session.busy();
  const float buttons_w = font * 16;
  ImGui::SameLine(0, font);
  if (ImGui::GetCursorScreenPos().x + buttons_w > right) ImGui::NewLine();
  ImGui::BeginDisabled(static_cast<int>(c.slots.size()) >= kMaxCompare);
  if (ImGui::Button(tr("+ add"))) {
    // A copy of the last slot: the usual next step is to change one thing about it.
    c.slots.push_back(c.slots.empty() ? slot_from(app.state.form, app.state.form.strategy)
                                      : c.slots.back());
  }
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip(tr("up to %d configurations"), kMaxCompare);
  ImGui::SameLine();
  ImGui::BeginDisabled(busy || any_invalid || c.slots.empty());
  if (ImGui::Button(tr("Run comparison"))) app.compare_from_form();
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) {
    std::string list;
    for (const CompareSlot& s : c.slots) {
      if (!list.empty()) list += ',';
      list += slot_text(s);
    }
    ImGui::SetTooltip(
        tr("runs each configuration in turn with the run bar's model, batch, steps, optimizer, "
           "seed and device\nthe same from the command line: --compare %s"),
        list.c_str());
  }
  if (busy) {
    ImGui::SameLine();
    if (ImGui::Button(tr("Cancel"))) app.compare_session.cancel();
  }
  // A slot the settings cannot run: its number in red, and why, in the CLI's words.
  for (size_t i = 0; i < errors.size(); ++i) {
    if (errors[i].empty()) continue;
    ImGui::PushStyleColor(ImGuiCol_Text, ui.error);
    ImGui::TextWrapped("%zu: %s", i + 1, errors[i].c_str());
    ImGui::PopStyleColor();
  }
}

// "2.35, 2.35, 2.34 MiB": one unit for the row, so the numbers line up and stay short.
std::string per_rank_bytes(const std::vector<int64_t>& v) {
  int64_t top = 1;
  for (int64_t b : v) top = std::max(top, b);
  const char* units[] = {"B", "KiB", "MiB", "GiB"};  // i18n: units, the same in Chinese
  int u = 0;
  double scale = 1;
  while (u < 3 && top / scale >= 1024) {
    scale *= 1024;
    ++u;
  }
  std::string s;
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, u == 0 ? "%s%.0f" : "%s%.2f", i ? ", " : "", v[i] / scale);
    s += buf;
  }
  return s + " " + units[u];
}

void draw_table(App& app) {
  const Tr tr = app.tr();
  const bool hc = app.state.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  const ImGuiTableFlags flags =
      ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp;
  constexpr int kCols = 10;
  if (!ImGui::BeginTable("compare_table", kCols, flags)) return;
  // Short headers, so a big presenter font still fits them; each explains itself on hover.
  // "here" is measured on this machine; "on N" is the projection onto dedicated devices.
  ImGui::TableSetupColumn(tr("configuration"), 0, 2.2f);
  ImGui::TableSetupColumn(tr("step here"), 0, 1.1f);
  ImGui::TableSetupColumn(tr("step on N"), 0, 1.1f);
  ImGui::TableSetupColumn(tr("peak memory per rank"), 0, 2.3f);
  ImGui::TableSetupColumn(tr("sent/step"), 0, 1.1f);
  ImGui::TableSetupColumn(tr("idle here"), 0, 1.0f);
  ImGui::TableSetupColumn(tr("bubble on N | formula"), 0, 2.0f);
  ImGui::TableSetupColumn(tr("exposed on N"), 0, 1.0f);
  ImGui::TableSetupColumn(tr("final loss"), 0, 1.0f);
  ImGui::TableSetupColumn(tr("weights vs single"), 0, 1.1f);
  // Headers one by one, so the idle and bubble columns can explain themselves on hover.
  ImGui::TableNextRow(ImGuiTableRowFlags_Headers);
  for (int c = 0; c < kCols; ++c) {
    ImGui::TableNextColumn();
    ImGui::TableHeader(ImGui::TableGetColumnName(c));
    if (!ImGui::IsItemHovered()) continue;
    if (c == 1)
      ImGui::SetTooltip(
          "%s",
          tr("median step time measured here (the slowest rank's, per step); with more ranks\n"
             "than cores, the ranks took turns and this measures that too"));
    if (c == 2)
      ImGui::SetTooltip(
          tr("as on N dedicated devices (one per rank) joined by %s: each op costs the CPU\n"
             "time its thread used, each transfer the link's time ('shardlab project');\n"
             "rows of the same work share one table of op costs, so they differ by schedule"),
          kCompareLink);
    if (c == 3)
      ImGui::SetTooltip("%s", tr("each rank's peak, device pool, from its accounting allocator"));
    if (c == 4) ImGui::SetTooltip("%s", tr("bytes the busiest rank sends per training step"));
    if (c == 5) {
      ImGui::BeginTooltip();
      ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30);
      ImGui::TextUnformatted(idle_share_definition(tr));
      ImGui::PopTextWrapPos();
      ImGui::EndTooltip();
    }
    if (c == 6)
      ImGui::SetTooltip(
          "%s",
          tr("as on N devices: the share of a step a rank waits for another to get there (a\n"
             "neighbour's activation or gradient, a late peer at a collective), mean over ranks;\n"
             "for pipelines beside the textbook (P-1)/(M+P-1), P stages and M micro-batches"));
    if (c == 7)
      ImGui::SetTooltip("%s",
                        tr("as on N devices: the share of a step a rank waits while bytes move"));
    if (c == 9)
      ImGui::SetTooltip(
          "%s", tr("the largest difference of a final weight from the 'single' row's (same model,\n"
                   "seed, batch and steps): ~1e-7 is float32 reduction order; more means the\n"
                   "strategy trained something else (BatchNorm over part of the batch, 2-byte\n"
                   "types). Add single:1 to the list to compare with it."));
  }
  const int running = app.compare_session.running_index();
  const bool busy = app.compare_session.busy();
  for (size_t i = 0; i < app.compare.size(); ++i) {
    const CompareEntry& e = app.compare[i];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    swatch(slot_color(i));
    ImGui::TextUnformatted(run_label(e.cfg, e.result.get(), tr).c_str());
    if (!e.done) {
      ImGui::TableNextColumn();
      if (busy && static_cast<int>(i) == running)
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(ui.ok),
                           tr("running\xE2\x80\xA6 step %d/%d"),
                           app.compare_session.running_steps_done(), e.cfg.steps);
      else if (busy && static_cast<int>(i) > running)
        ImGui::TextDisabled("%s", tr("queued"));
      else
        ImGui::TextDisabled("%s", tr("cancelled"));
      continue;
    }
    if (!e.error.empty()) {
      ImGui::TableNextColumn();
      ImGui::PushStyleColor(ImGuiCol_Text, ui.error);
      ImGui::TextWrapped(tr("not run: %s"), e.error.c_str());
      ImGui::PopStyleColor();
      continue;
    }
    const CompareRow& r = e.row;
    ImGui::TableNextColumn();
    ImGui::Text("%.2f ms", r.median_step_ms);  // i18n: a unit
    ImGui::TableNextColumn();
    if (r.projected) {
      ImGui::Text("%.2f ms", r.projected_step_ms);  // i18n: a unit
    } else {
      ImGui::TextDisabled("\xE2\x80\x94");
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", r.projection_error.c_str());
    }
    ImGui::TableNextColumn();
    {
      // Every rank when they fit; else the range, every rank on hover.
      const std::string all = per_rank_bytes(r.peak_bytes);
      if (ImGui::CalcTextSize(all.c_str()).x <= ImGui::GetContentRegionAvail().x ||
          r.peak_bytes.size() < 2) {
        ImGui::TextUnformatted(all.c_str());
      } else {
        const auto [lo, hi] = std::minmax_element(r.peak_bytes.begin(), r.peak_bytes.end());
        // Both in the larger one's unit: "2.45–2.51 MiB".
        std::string range = per_rank_bytes({*lo, *hi});
        range.replace(range.find(", "), 2, "\xE2\x80\x93");
        if (*lo == *hi) range = strf(tr("%s each"), format_bytes(static_cast<double>(*hi)).c_str());
        ImGui::TextUnformatted(range.c_str());
        if (ImGui::IsItemHovered()) ImGui::SetTooltip(tr("rank 0, 1, ...: %s"), all.c_str());
      }
    }
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(format_bytes(r.sent_bytes_per_step).c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%.1f%%", 100 * r.idle_share);
    if (ImGui::IsItemHovered() && !r.idle_per_rank.empty()) {
      std::string per;
      char buf[64];
      for (size_t k = 0; k < r.idle_per_rank.size(); ++k) {
        std::snprintf(buf, sizeof buf, "%srank %zu: %.1f%%", k ? "\n" : "", k,
                      100 * r.idle_per_rank[k]);
        per += buf;
      }
      ImGui::SetTooltip("%s", per.c_str());
    }
    ImGui::TableNextColumn();
    if (!r.projected) {
      ImGui::TextDisabled("\xE2\x80\x94");
    } else if (r.pipeline) {
      ImGui::Text("%.1f%% | %.1f%%", 100 * r.projected_bubble, 100 * r.bubble_formula);
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip(
            tr("as on %d devices %.1f%% (measured here: idle %.1f%%); %s with P = %d, M = %d: "
               "%.1f%%"),
            r.world, 100 * r.projected_bubble, 100 * r.idle_share,
            strategy_info(r.strategy).bubble_formula.c_str(), r.stages, r.micro_batches,
            100 * r.bubble_formula);
    } else {
      ImGui::Text("%.1f%%", 100 * r.projected_bubble);
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip("%s",
                          tr("not a pipeline: waiting for peers at collectives (no formula)"));
    }
    ImGui::TableNextColumn();
    if (r.projected)
      ImGui::Text("%.1f%%", 100 * r.projected_exposed);
    else
      ImGui::TextDisabled("\xE2\x80\x94");
    ImGui::TableNextColumn();
    ImGui::Text("%.6g", r.final_loss);
    ImGui::TableNextColumn();
    if (r.weight_diff_to_single < 0)
      ImGui::TextDisabled("\xE2\x80\x94");
    else
      ImGui::Text("%.2g", r.weight_diff_to_single);
  }
  ImGui::EndTable();
  mark_region(app, -1, "table", -1, ImGui::GetItemRectMin(),  // i18n: a lesson's area key
              ImGui::GetItemRectMax());
  ImGui::PushStyleColor(ImGuiCol_Text, ui.text_dim);
  ImGui::PushTextWrapPos(0);
  ImGui::TextUnformatted(idle_share_short_definition(tr));
  ImGui::PopTextWrapPos();
  ImGui::PopStyleColor();
}

void draw_picture_buttons(App& app) {
  const Tr tr = app.tr();
  CompareState& c = app.state.compare;
  for (int i = 0; i < kNumComparePictures; ++i) {
    const auto p = static_cast<ComparePicture>(i);
    const bool selected = c.picture == p;
    if (selected)
      ImGui::PushStyleColor(ImGuiCol_Button, ImGui::GetStyleColorVec4(ImGuiCol_ButtonActive));
    if (ImGui::Button(picture_title(p, tr))) c.picture = p;
    if (selected) ImGui::PopStyleColor();
    ImGui::SameLine();
  }
}

// ---- timelines ------------------------------------------------------------------

// Where run `e`'s rows start: the beginning of the focus step (or of its last step).
double focus_time(const CompareEntry& e, int focus) {
  if (e.bounds.size() < 2) return e.data.view_begin();
  const int k = std::clamp(focus, 0, static_cast<int>(e.bounds.size()) - 2);
  return static_cast<double>(e.bounds[k]);
}

void fit_timelines(App& app) {
  CompareState& c = app.state.compare;
  // Two steps of the slowest run: enough to see one step end and the next begin.
  double longest = 0;
  for (const CompareEntry& e : app.compare) {
    if (!e.result || e.bounds.size() < 2) continue;
    const int n = static_cast<int>(e.bounds.size()) - 1;
    const int k = std::clamp(c.focus_step, 0, n - 1);
    longest = std::max(longest, static_cast<double>(e.bounds[std::min(n, k + 2)] - e.bounds[k]));
  }
  if (longest > 0) fit(c.vp, 0, longest);
  c.fitted = true;
}

void draw_timelines(App& app) {
  const Tr tr = app.tr();
  AppState& s = app.state;
  CompareState& c = s.compare;
  const bool hc = s.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  const float font = ImGui::GetFontSize();
  int steps = 0;  // of the longest finished run; 0 while none has finished
  for (const CompareEntry& e : app.compare)
    if (e.bounds.size() >= 2) steps = std::max(steps, static_cast<int>(e.bounds.size()) - 1);
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(tr("From step"));
  ImGui::SameLine(0, 4);
  ImGui::SetNextItemWidth(font * 5.5f);
  if (ImGui::InputInt("##focus", &c.focus_step)) c.fitted = false;
  if (steps > 0) c.focus_step = std::clamp(c.focus_step, 0, steps - 1);
  ImGui::SameLine();
  if (ImGui::Button(tr("fit"))) c.fitted = false;
  ImGui::SameLine();
  help_marker(
      tr("Each run is drawn from the start of this step of its own, all on one time scale: a "
         "slower configuration is visibly longer. Step 0 pays first-touch costs, so it starts at "
         "step 1. fit: two steps of the slowest run. Wheel: zoom, drag: pan, hover: details."));
  ImGui::SameLine(0, font);
  if (!c.fitted) fit_timelines(app);
  std::array<bool, kNumSpanKinds> seen{};
  for (const CompareEntry& e : app.compare)
    for (int k = 0; k < kNumSpanKinds; ++k) seen[k] = seen[k] || e.data.kinds_seen[k];
  for (int k = 0; k < kNumSpanKinds; ++k)
    if (seen[k])
      legend_item(kind_color(static_cast<SpanKind>(k), hc),
                  kind_label(static_cast<SpanKind>(k), tr));
  ImGui::NewLine();

  // Lanes one font line tall at least, so rank and lane labels never overlap;
  // what does not fit scrolls.
  const float lane_h = font + 2;
  bool first = true;
  for (size_t i = 0; i < app.compare.size(); ++i) {
    const CompareEntry& e = app.compare[i];
    swatch(slot_color(i));
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(ui.text), "%s",
                       run_label(e.cfg, e.result.get(), tr).c_str());
    if (!e.result) {
      const char* why = !e.done ? tr("(not finished yet)") : tr("(not run, see the table)");
      ImGui::SameLine();
      ImGui::TextDisabled("%s", !e.done || !e.error.empty() ? why : "");
      continue;
    }
    ImGui::SameLine(0, font);
    ImGui::TextDisabled(tr("median step %.2f ms"), e.row.median_step_ms);
    TimelineRowsOptions opt;
    const std::string id = "cmp_rows_" + std::to_string(i);  // i18n: not shown
    opt.id = id.c_str();
    opt.lane_height = lane_h;
    opt.show_playhead = false;
    opt.show_axis = first;
    opt.click_sets_playhead = false;
    opt.t_offset = focus_time(e, c.focus_step);
    draw_timeline_rows(app, e.data, c.vp, opt);
    first = false;
    ImGui::Dummy(ImVec2(1, font * 0.3f));
  }
}

// ---- memory over time -------------------------------------------------------------

void draw_memory_over_time(App& app) {
  const Tr tr = app.tr();
  AppState& s = app.state;
  CompareState& c = s.compare;
  const bool hc = s.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  const float font = ImGui::GetFontSize();
  ImDrawList* dl = ImGui::GetWindowDrawList();

  int max_world = 0, steps = 0;
  for (const CompareEntry& e : app.compare) {
    max_world = std::max(max_world, e.data.world);
    if (e.bounds.size() >= 2) steps = std::max(steps, static_cast<int>(e.bounds.size()) - 1);
  }
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(tr("Device memory of"));
  ImGui::SameLine();
  const auto rank_name = [&](int r) {
    return r == kMemoryBusiest ? std::string(tr("the busiest rank"))
           : r == kMemorySum   ? std::string(tr("all ranks added up"))
                               : strf(tr("rank %d"), r);
  };
  ImGui::SetNextItemWidth(font * 9);
  if (ImGui::BeginCombo("##rank", rank_name(c.memory_rank).c_str())) {
    for (int r = kMemorySum; r < max_world; ++r)
      if (ImGui::Selectable(rank_name(r).c_str(), r == c.memory_rank)) c.memory_rank = r;
    ImGui::EndCombo();
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s", tr("the busiest rank: the one with the highest peak in each run"));
  ImGui::SameLine();
  ImGui::TextUnformatted(tr("over steps"));
  ImGui::SameLine();
  ImGui::SetNextItemWidth(font * 9);
  ImGui::DragIntRange2("##steps", &c.memory_first_step, &c.memory_last_step, 0.1f, 0,
                       std::max(0, steps - 1), "%d", tr("to %d"));
  if (steps > 0) {  // before any run finished there is nothing to clamp against
    c.memory_first_step = std::clamp(c.memory_first_step, 0, steps - 1);
    c.memory_last_step = std::clamp(c.memory_last_step, c.memory_first_step, steps - 1);
  }
  ImGui::SameLine();
  help_marker(
      tr("Bytes in use on the device, measured by each rank's accounting allocator, drawn against "
         "the training step: x = step index + the fraction of that step elapsed, so every run's "
         "step k starts at the same x however long its steps take. Step s lasts from the first "
         "span any rank begins in it to the first span of step s + 1."));

  struct Curve {
    size_t slot;
    int rank;
    std::vector<MemoryPoint> points;
    int64_t peak = 0;
  };
  std::vector<Curve> curves;
  double max_bytes = 1024;
  for (size_t i = 0; i < app.compare.size(); ++i) {
    const CompareEntry& e = app.compare[i];
    if (!e.result) continue;
    Curve cv{i, c.memory_rank == kMemoryBusiest ? busiest_rank(e.data) : c.memory_rank, {}, 0};
    cv.points = memory_by_step(e.data, e.bounds, cv.rank, c.memory_first_step, c.memory_last_step);
    for (const MemoryPoint& p : cv.points) cv.peak = std::max(cv.peak, p.bytes);
    max_bytes = std::max(max_bytes, static_cast<double>(cv.peak));
    curves.push_back(std::move(cv));
  }
  // Legend: each run's colour, label and its peak over the steps shown.
  for (const Curve& cv : curves) {
    const CompareEntry& e = app.compare[cv.slot];
    const std::string run = run_label(e.cfg, e.result.get(), tr);
    const std::string peak = format_bytes(static_cast<double>(cv.peak));
    const std::string label =
        !cv.points.empty() && c.memory_rank == kMemoryBusiest
            ? strf(tr("%s (rank %d): peak %s"), run.c_str(), cv.rank, peak.c_str())
        : !cv.points.empty() ? strf(tr("%s: peak %s"), run.c_str(), peak.c_str())
        : c.memory_rank >= 0 ? strf(tr("%s (no rank %d)"), run.c_str(), c.memory_rank)
                             : strf(tr("%s (no steps)"), run.c_str());
    legend_item(slot_color(cv.slot), label.c_str());
  }
  ImGui::NewLine();
  if (curves.empty()) {
    ImGui::TextDisabled("%s", tr("no finished run yet"));
    return;
  }
  max_bytes *= 1.08;

  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float height = std::max(font * 5, avail.y - 4);
  const float gutter = ImGui::CalcTextSize("000.0 MiB").x + 10;  // i18n: a width, not shown
  const float axis_h = font + 8;
  const float x0 = origin.x + gutter, x1 = origin.x + avail.x - font;
  const float top = origin.y + font * 0.5f, bottom = origin.y + height - axis_h;
  ImGui::InvisibleButton("memory_over_time", ImVec2(avail.x, height));  // i18n: an id
  mark_region(app, -1, "memory", -1, ImGui::GetItemRectMin(),           // i18n: a lesson's area key
              ImGui::GetItemRectMax());
  const bool hovered = ImGui::IsItemHovered();
  const double xa = c.memory_first_step, xb = c.memory_last_step + 1;
  const auto px = [&](double x) {
    return x0 + static_cast<float>((x - xa) / (xb - xa)) * (x1 - x0);
  };
  const auto py = [&](double b) {
    return bottom - static_cast<float>(b / max_bytes) * (bottom - top);
  };

  dl->AddRectFilled(ImVec2(x0, top), ImVec2(x1, bottom), ui.lane_bg);
  for (const ByteTick& t :
       byte_ticks(max_bytes, std::max(2, static_cast<int>((bottom - top) / (font * 2.5f))))) {
    const float y = py(t.bytes);
    dl->AddLine(ImVec2(x0, y), ImVec2(x1, y), ui.grid);
    const ImVec2 sz = ImGui::CalcTextSize(t.label.c_str());
    dl->AddText(ImVec2(x0 - sz.x - 6, y - sz.y * 0.5f), ui.text_dim, t.label.c_str());
  }
  // Steps: a line at each start, quarter marks between, "step k" under the middle.
  for (int k = c.memory_first_step; k <= c.memory_last_step + 1; ++k) {
    const float x = px(k);
    dl->AddLine(ImVec2(x, top), ImVec2(x, bottom + 4), ui.axis, 1.0f);
    if (k > c.memory_last_step) break;
    for (int q = 1; q < 4; ++q) {
      const float xq = px(k + q * 0.25);
      dl->AddLine(ImVec2(xq, bottom - 4), ImVec2(xq, bottom), ui.grid);
    }
    const std::string label = strf(tr("step %d"), k);
    const float w = ImGui::CalcTextSize(label.c_str()).x;
    if (px(k + 1) - x > w + 8)
      dl->AddText(ImVec2((x + px(k + 1) - w) * 0.5f, bottom + 4), ui.text_dim, label.c_str());
  }
  // The curves: a step function per run, thicker with the font for presenter mode.
  const float thick = std::max(1.5f, font / 8);
  dl->PushClipRect(ImVec2(x0 - thick, top - thick), ImVec2(x1 + thick, bottom + thick), true);
  std::vector<ImVec2> path;
  for (const Curve& cv : curves) {
    if (cv.points.size() < 2) continue;
    path.clear();
    for (size_t k = 0; k + 1 < cv.points.size(); ++k) {
      const float y = py(static_cast<double>(cv.points[k].bytes));
      path.push_back(ImVec2(px(cv.points[k].x), y));
      path.push_back(ImVec2(px(cv.points[k + 1].x), y));
    }
    dl->AddPolyline(path.data(), static_cast<int>(path.size()), slot_color(cv.slot), 0, thick);
  }
  dl->PopClipRect();

  if (hovered) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    if (m.x >= x0 && m.x <= x1) {
      const double x = xa + (m.x - x0) / (x1 - x0) * (xb - xa);
      dl->AddLine(ImVec2(m.x, top), ImVec2(m.x, bottom), ui.playhead, 1.0f);
      ImGui::BeginTooltip();
      const int k = static_cast<int>(std::floor(x));
      ImGui::Text(tr("step %d, %.0f%% through it"), k, 100 * (x - k));
      for (const Curve& cv : curves) {
        if (cv.points.empty()) continue;
        swatch(slot_color(cv.slot));
        ImGui::Text(
            "%s: %s",
            run_label(app.compare[cv.slot].cfg, app.compare[cv.slot].result.get(), tr).c_str(),
            format_bytes(static_cast<double>(bytes_at_position(cv.points, x))).c_str());
      }
      ImGui::EndTooltip();
    }
  }
}

// ---- peak memory by category --------------------------------------------------------

void draw_peaks(App& app) {
  const Tr tr = app.tr();
  const bool hc = app.state.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  const float font = ImGui::GetFontSize();
  ImGui::TextUnformatted(tr("Each rank's peak, by category at the moment of the peak (device)"));
  ImGui::SameLine(0, font);
  for (MemCategory c : kStackOrder) legend_item(category_color(c, hc), category_label(c, tr));
  ImGui::NewLine();
  double max_bytes = 1;
  for (const CompareEntry& e : app.compare)
    for (const RankData& r : e.data.ranks)
      max_bytes = std::max(max_bytes, static_cast<double>(total(peak_of(r.device_series).bytes)));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  float label_w = font * 4;
  for (const CompareEntry& e : app.compare)
    label_w = std::max(
        label_w, ImGui::CalcTextSize((run_label(e.cfg, e.result.get(), tr) + " r00").c_str()).x);
  label_w += font;
  const float bar_w = std::max(font * 4, ImGui::GetContentRegionAvail().x - label_w - font * 6);
  const float row_h = font * 1.35f;
  const ImVec2 bars_min = ImGui::GetCursorScreenPos();
  for (size_t i = 0; i < app.compare.size(); ++i) {
    const CompareEntry& e = app.compare[i];
    for (int r = 0; r < e.data.world; ++r) {
      const Peak pk = peak_of(e.data.ranks[r].device_series);
      const ImVec2 o = ImGui::GetCursorScreenPos();
      const std::string label = run_label(e.cfg, e.result.get(), tr) + " r" + std::to_string(r);
      dl->AddRectFilled(ImVec2(o.x, o.y + font * 0.15f), ImVec2(o.x + font * 0.3f, o.y + font),
                        slot_color(i));
      dl->AddText(ImVec2(o.x + font * 0.6f, o.y), ui.text_dim, label.c_str());
      float x = o.x + label_w;
      for (MemCategory c : kStackOrder) {
        const float w = static_cast<float>(pk.bytes[static_cast<int>(c)] / max_bytes) * bar_w;
        if (w <= 0) continue;
        dl->AddRectFilled(ImVec2(x, o.y + 1), ImVec2(x + w, o.y + font), category_color(c, hc));
        x += w;
      }
      const std::string v = format_bytes(static_cast<double>(total(pk.bytes)));
      dl->AddText(ImVec2(x + 6, o.y), ui.text, v.c_str());
      ImGui::Dummy(ImVec2(label_w + bar_w, row_h));
    }
  }
  // A lesson's { area = "memory" } in the compare view outlines these bars.
  const ImVec2 end = ImGui::GetCursorScreenPos();
  mark_region(app, -1, "memory", -1, bars_min,  // i18n: a lesson's area key
              ImVec2(bars_min.x + label_w + bar_w + font * 5, end.y));
}

}  // namespace

const char* compare_picture_name(ComparePicture p) {
  return kPictureNames[static_cast<int>(p)];
}

std::optional<ComparePicture> compare_picture_from_name(const std::string& s) {
  for (int i = 0; i < kNumComparePictures; ++i)
    if (s == kPictureNames[i]) return static_cast<ComparePicture>(i);
  return std::nullopt;
}

void draw_compare(App& app) {
  const Tr tr = app.tr();
  CompareState& c = app.state.compare;
  const float font = ImGui::GetFontSize();
  const float avail_h = ImGui::GetContentRegionAvail().y;
  // The selector and the table on top, the picture below. The picture keeps at
  // least 58% of the height (a big presenter font included); past that the top scrolls.
  const float top_h = app.compare.empty()
                          ? avail_h
                          : std::clamp(c.top_height > 0 ? c.top_height : avail_h * 0.42f,
                                       std::min(font * 4, avail_h * 0.42f), avail_h * 0.42f);
  ImGui::BeginChild("compare_top", ImVec2(0, top_h), false);
  draw_selector(app);
  if (app.compare.empty()) {
    ImGui::Spacing();
    ImGui::TextWrapped(
        tr("Set up to %d configurations (strategy, world size, micro-batches and the options that "
           "strategy reads), then Run comparison: each runs in turn with the run bar's model, "
           "batch, steps and optimizer, and its row appears here as soon as it finishes."),
        kMaxCompare);
  } else {
    draw_table(app);
  }
  c.top_height = ImGui::GetCursorPosY() + ImGui::GetStyle().WindowPadding.y;
  ImGui::EndChild();
  if (app.compare.empty()) return;
  draw_picture_buttons(app);
  ImGui::NewLine();
  // The pictures scroll as a whole; the wheel zooms the timelines, and scrolls elsewhere.
  ImGui::BeginChild("compare_pictures", ImVec2(0, 0), false, ImGuiWindowFlags_NoScrollWithMouse);
  switch (c.picture) {
    case ComparePicture::timelines:
      draw_timelines(app);
      break;
    case ComparePicture::memory:
      draw_memory_over_time(app);
      break;
    case ComparePicture::peaks:
      draw_peaks(app);
      break;
  }
  const ImGuiIO& io = ImGui::GetIO();
  if (io.MouseWheel != 0 && ImGui::IsWindowHovered() && !ImGui::IsAnyItemHovered())
    ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * font * 3);
  ImGui::EndChild();
}

}  // namespace shardlab::gui
