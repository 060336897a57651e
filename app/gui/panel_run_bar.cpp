// The run bar: the run's settings, checked with the CLI's validate() every
// frame (its message shown inline, Run disabled while invalid), and the
// Run / Pause / Step / Reset buttons. Options the chosen strategy does not
// read are greyed out; one set anyway is shown in the error colour.
#include <algorithm>

#include <imgui.h>
#include <imgui_stdlib.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/recording_view.h"
#include "app/gui/panels.h"
#include "core/comm/placement.h"
#include "core/parallel/strategy.h"

namespace shardlab::gui {

namespace {

// Values of the command line's options, shown as they are typed there.
constexpr const char* kDevices[] = {"cpu", "cuda", "auto", "cpu-guarded"};  // i18n: values
constexpr const char* kBackends[] = {"auto", "gloo", "nccl"};               // i18n: values

// "Label [widget]", moved to a new line when the rest of this one is too
// short for both (big presenter fonts).
void label(const char* text, float widget_em = 4) {
  const float need = ImGui::CalcTextSize(text).x + ImGui::GetFontSize() * widget_em + 8;
  if (ImGui::GetContentRegionAvail().x < need) ImGui::NewLine();
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(text);
  ImGui::SameLine(0, 4);
}

bool int_field(const char* text, const char* id, int* v, float width, const char* tip) {
  label(text, width);
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * width);
  const bool changed = ImGui::InputInt(id, v, 0, 0);
  if (tip && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tip);
  ImGui::SameLine(0, 12);
  return changed;
}

void combo_strings(const char* text, const char* id, std::string* value,
                   const std::vector<std::string>& items, float width,
                   const std::vector<std::string>* tips = nullptr) {
  label(text, width);
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * width);
  if (ImGui::BeginCombo(id, value->c_str())) {
    for (size_t i = 0; i < items.size(); ++i) {
      if (ImGui::Selectable(items[i].c_str(), *value == items[i])) *value = items[i];
      if (tips && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", (*tips)[i].c_str());
    }
    ImGui::EndCombo();
  }
  ImGui::SameLine(0, 12);
}

// How the chosen strategy stands to one option's widget.
enum class OptionUse {
  read,    // it reads the option: a normal widget
  unread,  // it does not, and the option is at its default: greyed out
  stray,   // it does not, yet the option is set: editable, in the error colour, so it can be undone
};

OptionUse begin_option(const RunConfig& f, StrategyOption o, const UiColors& ui) {
  const StrategyInfo* info = find_strategy(f.strategy);
  if (!info || info->reads_option(o)) return OptionUse::read;
  if (option_set(f, o)) {
    ImGui::PushStyleColor(ImGuiCol_Text, ui.error);
    return OptionUse::stray;
  }
  ImGui::BeginDisabled();
  return OptionUse::unread;
}

// Ends begin_option's scope; the tooltip of the widget just drawn says what
// the option does, who reads it and, when the strategy does not, that too.
void end_option(OptionUse use, const RunConfig& f, StrategyOption o, const char* what,
                const Tr& tr) {
  if (use == OptionUse::stray) ImGui::PopStyleColor();
  if (use == OptionUse::unread) ImGui::EndDisabled();
  if (!ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) return;
  std::string tip =
      strf(tr("%s (%s)\nused by %s"), what, flag_name(o), strategies_reading(o).c_str());
  if (use == OptionUse::unread) tip += "\n" + strf(tr("%s does not read it"), f.strategy.c_str());
  if (use == OptionUse::stray) tip = unread_option_message(f, o);
  ImGui::SetTooltip("%s", tip.c_str());
}

// One strategy option's widget, as its row's kind says (core/run_options.h), in
// begin_option's colours; `partition` holds a list's text as typed (the next
// frame parses it into f).
void option_widget(RunConfig& f, const OptionRow& r, std::string& partition, const UiColors& ui,
                   const Tr& tr) {
  const OptionUse use = begin_option(f, r.id, ui);
  const std::string id = std::string("##") + r.json_key;  // i18n: not shown (an id)
  switch (r.kind) {
    case OptionKind::integer:
      label(tr(r.label), 2.5f);
      ImGui::SetNextItemWidth(ImGui::GetFontSize() * 2.5f);
      ImGui::InputInt(id.c_str(), &(f.*r.integer), 0, 0);
      break;
    case OptionKind::number:
      label(tr(r.label));
      ImGui::SetNextItemWidth(ImGui::GetFontSize() * 4);
      ImGui::InputDouble(id.c_str(), &(f.*r.number), 0, 0, "%g");
      break;
    case OptionKind::on_flag:
    case OptionKind::off_flag:
      ImGui::Checkbox(tr(r.label), &(f.*r.boolean));  // ticked: the effect is on
      break;
    case OptionKind::choice: {
      const std::vector<std::string>& values = r.choices;  // values, the same in every language
      combo_strings(tr(r.label), id.c_str(), &(f.*r.text), values, 3.5f);
      break;
    }
    case OptionKind::int_list:
      label(tr(r.label), 6);
      ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6);
      ImGui::InputTextWithHint(id.c_str(), tr("balanced"), &partition);
      break;
    case OptionKind::text:
      label(tr(r.label), 6);
      ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6);
      ImGui::InputText(id.c_str(), &(f.*r.text));
      break;
  }
  end_option(use, f, r.id, tr(r.tip), tr);
  // "Stages 0" alone reads as no pipeline at all: say what 0 means.
  if (r.default_note && !option_set(f, r.id) && use == OptionUse::read) {
    ImGui::SameLine(0, 0);
    ImGui::AlignTextToFramePadding();
    // On a mesh the stages are its pp axis, not one per rank.
    ImGui::TextDisabled("%s", r.id == StrategyOption::stages && !f.mesh.empty()
                                  ? tr("(the mesh's pp)")
                                  : tr(r.default_note));
  }
  ImGui::SameLine(0, 12);
}

void draw_options(RunConfig& f, std::string& partition, const UiColors& ui, const Tr& tr) {
  ImGui::Indent();
  label(tr("Optimizer"));
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 5);
  int opt = f.optimizer.kind == OptimizerKind::adamw ? 0 : 1;
  if (ImGui::Combo("##opt", &opt, "adamw\0sgd\0"))  // i18n: values
    f.optimizer.kind = opt == 0 ? OptimizerKind::adamw : OptimizerKind::sgd;
  ImGui::SameLine(0, 12);
  label("lr");  // i18n: the option's name
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 5);
  ImGui::InputFloat("##lr", &f.optimizer.lr, 0, 0, "%g");
  ImGui::SameLine(0, 12);
  int seed = static_cast<int>(f.seed);
  if (int_field(tr("Seed"), "##seed", &seed, 4, nullptr))
    f.seed = static_cast<uint64_t>(std::max(0, seed));
  for (const OptionRow& r : option_rows())
    if (r.place == OptionPlace::options) option_widget(f, r, partition, ui, tr);
  combo_strings(tr("Backend"), "##backend", &f.backend,
                {std::begin(kBackends), std::end(kBackends)}, 4);
  ImGui::NewLine();  // end the row: the combo left the line open for a next item
  ImGui::Unindent();
}

}  // namespace

void draw_run_bar(App& app) {
  AppState& s = app.state;
  RunConfig& f = s.form;
  const UiColors& ui = ui_colors(s.presenter.high_contrast);
  const Tr tr = app.tr();

  label(tr("Model"), 6);
  // Wide enough for the spec it holds ("mlp:4x64+bn", "gpt:2x64x4"), at least 6 em.
  ImGui::SetNextItemWidth(
      std::max(ImGui::GetFontSize() * 6,
               ImGui::CalcTextSize(f.model.c_str()).x + ImGui::GetStyle().FramePadding.x * 2 + 4));
  ImGui::InputText("##model", &f.model);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s",
                      tr("mlp:LxD = L Linear(D,D) layers with GELU between; mlp:LxD+bn puts a "
                         "BatchNorm1d before each GELU; gpt:LxDxH = a nanoGPT of L blocks, "
                         "width D, H heads"));
  ImGui::SameLine(0, 12);

  std::vector<std::string> names, tips;
  for (const StrategyInfo& info : all_strategies()) {
    names.push_back(info.name);
    tips.push_back(tr(info.summary));  // the core's summaries have table entries (tested)
  }
  combo_strings(tr("Strategy"), "##strategy", &f.strategy, names, 6, &tips);
  int_field(tr("World"), "##world", &f.world, 2.5f,
            s.processes ? tr("ranks (processes talking through Gloo)")
                        : tr("ranks (threads talking through Gloo)"));
  ImGui::Checkbox(tr("processes"), &s.processes);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s", tr("one process per rank, started with 'shardlab launch' and watched "
                               "live (off: one thread per rank in this app). Pause and Step need "
                               "threads."));
  ImGui::SameLine(0, 12);
  int_field(tr("Batch"), "##batch", &f.batch, 3,
            tr("global batch, split across data-parallel ranks"));
  int_field(tr("Steps"), "##steps", &f.steps, 3.5f, tr("training steps"));
  for (const OptionRow& r : option_rows())
    if (r.place == OptionPlace::main_bar) option_widget(f, r, s.partition_text, ui, tr);
  combo_strings(tr("Device"), "##device", &f.device, {std::begin(kDevices), std::end(kDevices)},
                7.5f);
  if (ImGui::GetContentRegionAvail().x < ImGui::GetFontSize() * 5) ImGui::NewLine();
  ImGui::Checkbox(tr("Options"), &s.show_options);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tr("optimizer, seed and strategy options"));

  // Buttons on the same line, right after the settings, if they fit.
  ImGui::SameLine(0, 20);
  const std::string buttons =
      std::string(tr("Resume (R)")) + tr("Pause (P)") + tr("Step (S)") + tr("Reset");
  if (ImGui::GetContentRegionAvail().x < ImGui::CalcTextSize(buttons.c_str()).x + 60)
    ImGui::NewLine();
  const RunState rs = app.session.state();
  const bool valid = s.form_error.empty();
  const bool paused = rs == RunState::paused;
  ImGui::BeginDisabled(!(valid || paused) || rs == RunState::running || rs == RunState::starting);
  if (ImGui::Button(paused ? tr("Resume (R)") : tr("Run (R)"))) app.run();
  ImGui::EndDisabled();
  ImGui::SameLine();
  const bool processes = app.session.processes() || s.processes;
  ImGui::BeginDisabled(rs != RunState::running || app.session.processes());
  if (ImGui::Button(tr("Pause (P)"))) app.pause();
  ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::BeginDisabled((!valid && !app.run_active()) || processes);
  if (ImGui::Button(tr("Step (S)"))) app.step();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("%s", processes ? tr("processes run on their own: Pause and Step need one "
                                           "thread per rank (untick 'processes')")
                                      : tr("run exactly one more training step, then pause"));
  ImGui::EndDisabled();
  ImGui::SameLine();
  if (ImGui::Button(tr("Reset"))) app.reset();

  // A set option the strategy does not read may sit in the hidden Options row:
  // open it, so the field in the error colour is there to be seen and undone.
  const std::vector<StrategyOption> unread = unread_options(f);
  for (StrategyOption o : unread)
    if (option_row(o).place == OptionPlace::options) s.show_options = true;
  if (s.show_options) draw_options(f, s.partition_text, ui, tr);
  if (!valid && !s.form_note.empty()) {
    // A GPU recording replayed without a GPU: nothing to fix, a way to run it here.
    ImGui::TextWrapped("%s", s.form_note.c_str());
    if (ImGui::SmallButton(tr("Use --device cpu"))) f = on_this_cpu(f);
  } else if (!valid) {
    ImGui::PushStyleColor(ImGuiCol_Text, ui.error);
    ImGui::TextWrapped(tr("Cannot run these settings: %s"), s.form_error.c_str());
    ImGui::PopStyleColor();
    if (!unread.empty()) {
      const std::string reset = strf(tr("Reset what %s does not read"), f.strategy.c_str());
      if (ImGui::SmallButton(reset.c_str())) {
        for (StrategyOption o : unread) reset_option(f, o);
        // The typed text is what the next frame parses into f.partition.
        for (StrategyOption o : unread)
          if (option_row(o).kind == OptionKind::int_list) s.partition_text.clear();
      }
    }
  } else if (f.device != "cpu" || f.backend != "auto") {
    // Where the ranks will run and how they will talk, e.g. ranks sharing one GPU
    // through Gloo with host staging because NCCL needs a GPU per rank.
    ImGui::TextDisabled(tr("Placement: %s"), plan_placement(f).summary.c_str());
  }
}

}  // namespace shardlab::gui
