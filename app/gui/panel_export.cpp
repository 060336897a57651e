// Export (trace JSON through core/record/trace.h, the same exporter as the CLI; a PNG
// of the window; the compare table as CSV) and the menu bar that leads there.
#include <string>

#include <imgui.h>
#include <imgui_stdlib.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/compare_logic.h"
#include "app/gui/logic/i18n.h"
#include "app/gui/panels.h"
#include "core/io/atomic_file.h"
#include "core/record/trace.h"
#include "core/run/recording.h"

namespace shardlab::gui {

namespace {

void set_message(App& app, std::string text, bool error) {
  app.state.exports.message = std::move(text);
  app.state.exports.message_is_error = error;
}

void export_trace(App& app) {
  const Tr tr = app.tr();
  const RunResult* r = app.shown_result();
  if (!r) {
    set_message(app, tr("no finished run to export yet (Run, then wait for it to finish)"), true);
    return;
  }
  std::vector<Recorder::Snapshot> snaps;
  for (const auto& rec : r->recorders) snaps.push_back(rec->snapshot());
  // The same metadata as `shardlab run --trace` (an opened recording keeps its
  // origin), so the app opens the trace again.
  const nlohmann::json meta =
      app.recording ? trace_metadata(*r, app.recording->origin) : trace_metadata(*r);
  try {
    write_trace(app.state.exports.trace_path, snaps, r->t0_ns, meta);
    set_message(app,
                strf(tr("trace written to %s (open it in ui.perfetto.dev)"),
                     app.state.exports.trace_path.c_str()),
                false);
  } catch (const std::exception& e) {
    set_message(app, e.what(), true);
  }
}

void export_csv(App& app) {
  const Tr tr = app.tr();
  std::vector<CompareRow> rows;
  for (const CompareEntry& e : app.compare)
    if (e.done && e.error.empty()) rows.push_back(e.row);
  if (rows.empty()) {
    set_message(app, tr("no comparison to export yet (Compare view, Run comparison)"), true);
    return;
  }
  std::string error;
  if (!write_file_atomic(app.state.exports.csv_path, compare_csv(rows), &error, false,
                         "compare table"))  // i18n: not shown (a word in core's English error)
    set_message(app, error, true);
  else
    set_message(app, strf(tr("compare table written to %s"), app.state.exports.csv_path.c_str()),
                false);
}

void export_png(App& app) {
  const Tr tr = app.tr();
  app.state.request_png = app.state.exports.png_path;
  set_message(app, strf(tr("window saved to %s"), app.state.exports.png_path.c_str()), false);
}

}  // namespace

void draw_menu_bar(App& app) {
  const Tr tr = app.tr();
  AppState& s = app.state;
  if (!ImGui::BeginMenuBar()) return;
  if (ImGui::BeginMenu(tr("File"))) {
    if (ImGui::MenuItem(tr("Export trace JSON"), nullptr, false, app.shown_result() != nullptr))
      export_trace(app);
    if (ImGui::MenuItem(tr("Save PNG of the window"))) export_png(app);
    if (ImGui::MenuItem(tr("Export compare table CSV"), nullptr, false, !app.compare.empty()))
      export_csv(app);
    if (ImGui::MenuItem(tr("Export paths..."), "E")) s.show_export = true;
    ImGui::Separator();
    if (ImGui::MenuItem(tr("Quit"), "Ctrl+Q")) s.quit = true;  // i18n: a key
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu(tr("View"))) {
    for (int i = 0; i < kNumViews; ++i) {
      char key[4];
      std::snprintf(key, sizeof key, "%d", i + 1);
      if (ImGui::MenuItem(view_title(static_cast<View>(i), tr), key,
                          s.view == static_cast<View>(i)))
        s.view = static_cast<View>(i);
    }
    ImGui::Separator();
    if (ImGui::MenuItem(tr("Presenter mode"), "F11", s.presenter.presenter))
      s.request_fullscreen_toggle = true;
    ImGui::MenuItem(tr("High contrast"), "H", &s.presenter.high_contrast);
    if (ImGui::MenuItem(tr("Larger font"), "Ctrl +"))  // i18n: a key
      s.presenter.font_scale = std::min(3.0f, s.presenter.font_scale * 1.15f);
    if (ImGui::MenuItem(tr("Smaller font"), "Ctrl -"))  // i18n: a key
      s.presenter.font_scale = std::max(0.6f, s.presenter.font_scale / 1.15f);
    ImGui::Separator();
    ImGui::MenuItem(tr("Run bar"), nullptr, &s.show_run_bar);
    ImGui::MenuItem(tr("Replay bar"), nullptr, &s.show_replay_bar);
    ImGui::MenuItem(tr("Slides: view and lesson only"), "F9", &s.slides);
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu(tr("Lessons"))) {
    if (ImGui::MenuItem(tr("Lessons panel"), "L", s.show_lessons)) {
      if (s.show_lessons)
        s.show_lessons = false;
      else
        app.open_lessons();
    }
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu(tr("Help"))) {
    if (ImGui::MenuItem(tr("Keyboard shortcuts"), "F1")) s.show_help = true;
    ImGui::EndMenu();
  }
  if (!s.exports.message.empty()) {
    const UiColors& ui = ui_colors(s.presenter.high_contrast);
    ImGui::PushStyleColor(ImGuiCol_Text, s.exports.message_is_error ? ui.error : ui.ok);
    ImGui::TextUnformatted(s.exports.message.c_str());
    ImGui::PopStyleColor();
  }
  ImGui::EndMenuBar();
}

void draw_export_window(App& app) {
  const Tr tr = app.tr();
  ExportState& e = app.state.exports;
  ImGui::SetNextWindowSize(ImVec2(ImGui::GetFontSize() * 36, 0), ImGuiCond_Appearing);
  // "###export": the window keeps its id (position, size) in either language.
  if (!ImGui::Begin(strf("%s###export", tr("Export")).c_str(), &app.state.show_export,
                    ImGuiWindowFlags_NoCollapse)) {
    ImGui::End();
    return;
  }
  const float w = ImGui::GetFontSize() * 20;
  ImGui::SetNextItemWidth(w);
  ImGui::InputText("##trace", &e.trace_path);
  ImGui::SameLine();
  ImGui::BeginDisabled(app.shown_result() == nullptr);
  if (ImGui::Button(tr("Write trace JSON"))) export_trace(app);
  ImGui::EndDisabled();
  ImGui::SetNextItemWidth(w);
  ImGui::InputText("##png", &e.png_path);
  ImGui::SameLine();
  if (ImGui::Button(tr("Save window PNG"))) export_png(app);
  ImGui::SetNextItemWidth(w);
  ImGui::InputText("##csv", &e.csv_path);
  ImGui::SameLine();
  ImGui::BeginDisabled(app.compare.empty());
  if (ImGui::Button(tr("Write compare CSV"))) export_csv(app);
  ImGui::EndDisabled();
  ImGui::TextDisabled("%s", tr("The trace is Chrome Trace Event JSON: open it in ui.perfetto.dev "
                               "or chrome://tracing."));
  ImGui::End();
}

}  // namespace shardlab::gui
