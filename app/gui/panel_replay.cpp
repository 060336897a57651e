// The replay bar: a recorded run replayed at 1/1000x to 1x, paused, scrubbed,
// or stepped event by event; every view shows the state at this playhead.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/format.h"
#include "app/gui/panels.h"

namespace shardlab::gui {

void draw_replay_bar(App& app) {
  AppState& s = app.state;
  Playhead& p = s.playhead;
  const RunData& d = app.replayed();  // the projected run while the playhead is on its clock
  const UiColors& ui = ui_colors(s.presenter.high_contrast);
  const bool has_data = d.t_end > 0;
  const Tr tr = app.tr();

  ImGui::BeginDisabled(!has_data);
  if (ImGui::Button("|<")) app.set_playhead(d.view_begin());
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tr("to the start (Home)"));
  ImGui::SameLine();
  if (ImGui::Button(tr("< event"))) app.prev_event();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s", tr("previous event: a span starting or ending, an allocation (Left)"));
  ImGui::SameLine();
  if (ImGui::Button(p.playing ? tr("Pause replay") : tr("Play replay"),
                    ImVec2(ImGui::GetFontSize() * 7, 0)))
    app.toggle_replay();
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tr("replay the recorded run (Space)"));
  ImGui::SameLine();
  if (ImGui::Button(tr("event >"))) app.next_event();
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tr("next event (Right)"));
  ImGui::SameLine();
  if (ImGui::Button(tr("collective >"))) app.next_collective();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s", tr("the middle of the next collective or send: pieces in flight in "
                               "the cluster view (C)"));
  ImGui::SameLine();
  ImGui::EndDisabled();
  if (app.run_active()) {
    ImGui::Checkbox(tr("follow live"), &p.live);
    ImGui::SameLine();
  }
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(tr("speed"));
  ImGui::SameLine();
  float slider = static_cast<float>(slider_from_speed(p.speed));
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 9);
  const std::string speed = format_speed(p.speed);
  if (ImGui::SliderFloat("##speed", &slider, 0, 1, speed.c_str()))
    p.speed = speed_from_slider(slider);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "%s",
        strf(tr("run time per wall time: at 1/1000%s one millisecond of the run lasts one second"),
             "\xC3\x97")
            .c_str());
  ImGui::SameLine(0, 16);
  const auto ev =
      std::upper_bound(d.event_times.begin(), d.event_times.end(), static_cast<int64_t>(p.t));
  // The longest form that fits beside the buttons (presenter scale cut the full
  // one at the window's edge): where, of how long, which step, which event.
  std::vector<std::string> forms;
  if (!has_data) {
    forms = {tr("replay: nothing recorded yet (Run first)"), tr("nothing recorded yet")};
  } else {
    const std::string t = format_time_ns(p.t);
    const std::string end = format_time_ns(static_cast<double>(d.t_end));
    const int step = d.step_at(static_cast<int64_t>(p.t));
    const size_t event = static_cast<size_t>(ev - d.event_times.begin());
    forms = {strf(tr("t = %s of %s \xC2\xB7 step %d \xC2\xB7 event %zu of %zu"), t.c_str(),
                  end.c_str(), step, event, d.event_times.size()),
             strf(tr("t = %s of %s \xC2\xB7 step %d"), t.c_str(), end.c_str(), step),
             strf(tr("t = %s \xC2\xB7 step %d"), t.c_str(), step), t};
  }
  // On the projected clock the times are the projected run's: say so first.
  if (has_data && p.projected)
    forms.insert(forms.begin(), strf(tr("as on %d devices"), d.world) + " \xC2\xB7 " + forms[0]);
  auto longest_fitting = [&](float room) -> const std::string* {
    for (const std::string& f : forms)
      if (ImGui::CalcTextSize(f.c_str()).x <= room) return &f;
    return nullptr;
  };
  const std::string* fits = longest_fitting(ImGui::GetContentRegionAvail().x);
  s.replay_rows = fits ? 2 : 3;
  if (!fits) {
    // Not even the shortest fits (large presenter scales): a line of its own.
    ImGui::NewLine();
    fits = longest_fitting(ImGui::GetContentRegionAvail().x);
  }
  const std::string where = fits ? *fits : forms.back();
  ImGui::AlignTextToFramePadding();
  if (!has_data)
    ImGui::TextDisabled("%s", where.c_str());
  else
    ImGui::TextUnformatted(where.c_str());

  // Scrubber: the whole run, with step ticks; click or drag to move the playhead.
  const ImVec2 o = ImGui::GetCursorScreenPos();
  const float w = ImGui::GetContentRegionAvail().x, h = ImGui::GetFrameHeight();
  ImGui::InvisibleButton("scrubber", ImVec2(w, h));  // i18n: not shown
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(o, ImVec2(o.x + w, o.y + h), ui.lane_bg, 3);
  if (!has_data) return;
  // From the first span: connecting the ranks records nothing worth scrubbing through.
  const double t0 = d.view_begin();
  const double scale = (w - 2) / std::max(1.0, static_cast<double>(d.t_end) - t0);
  float last_x = -1e9f;
  for (size_t st = 0; st < d.step_begin.size(); ++st) {
    if (d.step_begin[st] < 0) continue;
    const float x = o.x + 1 + static_cast<float>((d.step_begin[st] - t0) * scale);
    if (x - last_x < 4) continue;  // thousands of steps: one tick per few pixels
    last_x = x;
    dl->AddLine(ImVec2(x, o.y + h * 0.5f), ImVec2(x, o.y + h), ui.text_dim);
  }
  const float xp = o.x + 1 + static_cast<float>(std::max(0.0, p.t - t0) * scale);
  dl->AddRectFilled(o, ImVec2(xp, o.y + h), with_alpha(ui.playhead, 0.18f), 3);
  dl->AddLine(ImVec2(xp, o.y), ImVec2(xp, o.y + h), ui.playhead, 3);
  if (ImGui::IsItemActive()) app.set_playhead(t0 + (ImGui::GetIO().MousePos.x - o.x - 1) / scale);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "%s", tr("the whole run; ticks mark the steps; click or drag to move the playhead"));
}

}  // namespace shardlab::gui
