// App: actions behind the buttons and shortcuts, and the frame that lays out
// the panels (run bar, view tabs, the selected view, the replay bar).
#include "app/gui/app.h"

#include <algorithm>

#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/compare_logic.h"
#include "app/gui/logic/format.h"
#include "app/gui/logic/recording_view.h"
#include "app/gui/panels.h"
#include "core/cores.h"
#include "core/pipeline_analysis.h"
#include "core/strategy.h"

namespace shardlab::gui {

namespace {
constexpr const char* kViewNames[kNumViews] = {"timeline", "memory",  "cluster",
                                               "camping",  "compare", "loss"};
constexpr const char* kViewTitles[kNumViews] = {"Timeline",     "Memory",  "Cluster",
                                                "Camping trip", "Compare", "Loss"};
}  // namespace

const char* view_name(View v) {
  return kViewNames[static_cast<int>(v)];
}
const char* view_title(View v) {
  return kViewTitles[static_cast<int>(v)];
}
std::optional<View> view_from_name(const std::string& s) {
  for (int i = 0; i < kNumViews; ++i)
    if (s == kViewNames[i]) return static_cast<View>(i);
  return std::nullopt;
}

App::App(const RunConfig& cfg) {
  state.form = cfg;
  for (size_t i = 0; i < cfg.partition.size(); ++i)
    state.partition_text += (i ? "," : "") + std::to_string(cfg.partition[i]);
  state.compare.slots = default_compare_slots(cfg);
  validate_form();
}

void App::validate_form() {
  try {
    state.form.partition.clear();
    if (!state.partition_text.empty() && parse_list)
      state.form.partition = parse_list(state.partition_text);
    validate(state.form);
    state.form_error.clear();
  } catch (const std::exception& e) {
    state.form_error = e.what();  // the CLI's own message, word for word
  }
}

bool App::run_active() const {
  const RunState s = session.state();
  return s == RunState::starting || s == RunState::running || s == RunState::paused;
}

bool App::settled() const {
  return !run_active() && !compare_session.busy();
}

const RunResult* App::shown_result() const {
  if (const RunResult* r = session.result()) return r;
  return recording ? recording->run.get() : nullptr;
}

void App::open_recording(Recording rec, const std::string& path) {
  session.reset();
  compare_session.cancel();
  auto run = std::make_shared<const RunResult>(std::move(rec.run));
  const RunConfig& cfg = run->cfg;
  state.form = cfg;
  state.partition_text.clear();
  for (size_t i = 0; i < cfg.partition.size(); ++i)
    state.partition_text += (i ? "," : "") + std::to_string(cfg.partition[i]);
  validate_form();
  ingest_result(data, *run);
  losses = run->losses;

  compare.clear();
  compare.resize(1);
  CompareEntry& e = compare[0];
  e.cfg = cfg;
  e.done = true;
  e.result = std::make_unique<RunResult>(*run);
  ingest_result(e.data, *run);
  e.row = compare_row(*run);
  state.compare.slots = {slot_from(cfg, cfg.strategy, cfg.world)};
  fit(state.compare.vp, 0, e.data.t_end - e.data.view_begin());

  // As a live run ends: the playhead rests after the last step, the whole run in view.
  state.playhead = Playhead{static_cast<double>(data.t_live()), false, true, state.playhead.speed};
  state.timeline.follow = true;
  state.timeline.one_step = is_pipeline_strategy(cfg.strategy);  // as a live run opens
  fit_steps(state.timeline.vp, data, state.timeline.one_step, state.playhead.t, false);
  recording = OpenedRecording{path, std::move(rec.origin), std::move(run)};
}

void App::run() {
  if (session.state() == RunState::paused) {
    session.resume();
    return;
  }
  if (!state.form_error.empty() || run_active()) return;
  losses.clear();
  recording.reset();
  session.start(state.form, false);
  state.playhead = Playhead{0, false, true, state.playhead.speed};
  state.timeline.follow = true;
  state.timeline.one_step = is_pipeline_strategy(state.form.strategy);  // a pipeline is one step
}

void App::pause() {
  if (run_active()) session.pause();
}

void App::step() {
  if (run_active()) {
    session.step_once();
    return;
  }
  if (!state.form_error.empty()) return;
  losses.clear();
  recording.reset();
  session.start(state.form, true);
  state.playhead = Playhead{0, false, true, state.playhead.speed};
  state.timeline.follow = true;
  state.timeline.one_step = is_pipeline_strategy(state.form.strategy);
}

void App::reset() {
  session.reset();
  recording.reset();
  const uint64_t version = data.version + 1;
  data = RunData{};
  data.version = version;
  losses.clear();
  state.playhead = Playhead{0, false, true, state.playhead.speed};
  state.timeline.follow = true;
}

void App::run_compare(std::vector<RunConfig> cfgs) {
  state.compare.fitted = false;
  compare_session.start(std::move(cfgs));
}

void App::compare_from_form() {
  std::vector<RunConfig> cfgs;
  for (const CompareSlot& slot : state.compare.slots) cfgs.push_back(config_for(slot, state.form));
  run_compare(std::move(cfgs));
}

void App::toggle_replay() {
  Playhead& p = state.playhead;
  if (p.playing) {
    p.playing = false;
    return;
  }
  if (p.live || p.t >= static_cast<double>(data.t_end)) p.t = data.view_begin();
  p.live = false;
  p.playing = true;
}

void App::next_event() {
  state.playhead.playing = state.playhead.live = false;
  state.playhead.t = gui::next_event(data.event_times, state.playhead.t);
}

void App::next_collective() {
  state.playhead.playing = state.playhead.live = false;
  state.playhead.t = gui::next_collective(data, state.playhead.t);
}

void App::prev_event() {
  state.playhead.playing = state.playhead.live = false;
  state.playhead.t = gui::prev_event(data.event_times, state.playhead.t);
}

void App::set_playhead(double t) {
  state.playhead.playing = state.playhead.live = false;
  state.playhead.t = std::clamp(t, 0.0, static_cast<double>(data.t_end));
}

void App::poll() {
  if (session.poll(data, losses)) {
    if (state.playhead.live) state.playhead.t = static_cast<double>(data.t_live());
    if (state.timeline.follow)
      fit_steps(state.timeline.vp, data, state.timeline.one_step, state.playhead.t,
                run_active() && state.playhead.live);
  }
  // The compare panel fits its time scale again to take in each run that arrives.
  if (compare_session.poll(compare)) state.compare.fitted = false;
}

namespace {

void draw_status(App& app) {
  const UiColors& ui = ui_colors(app.state.presenter.high_contrast);
  const RunState s = app.session.state();
  const RunConfig& c = app.data.world ? app.data.cfg : app.state.form;
  std::string text = config_label(c) + " \xC2\xB7 ";
  ImU32 col = ui.text_dim;
  switch (s) {
    case RunState::idle:
      if (app.recording) {
        // Replaying: nothing runs until Run, which runs these settings live here.
        text = recording_status(file_name(app.recording->path), app.recording->origin, c.world) +
               (app.state.form_error.empty() ? " \xC2\xB7 replay: Run (R) runs it live"
                                             : " \xC2\xB7 replay only");
        col = ui.ok;
      } else {
        text = "no run yet: press Run (R)";
      }
      break;
    case RunState::starting:
      text += "connecting ranks...";
      break;
    case RunState::running:
    case RunState::paused:
      text += std::string(s == RunState::paused ? "paused after step " : "running step ") +
              std::to_string(app.session.steps_done()) + "/" + std::to_string(c.steps);
      col = ui.ok;
      break;
    case RunState::finished: {
      const RunResult* r = app.session.result();
      text += "finished " + std::to_string(c.steps) + " steps";
      if (r) {
        char buf[96];
        std::snprintf(buf, sizeof buf, " \xC2\xB7 median step %.2f ms \xC2\xB7 final loss %.4g",
                      r->median_step_ms, r->losses.empty() ? 0.0 : r->losses.back());
        text += buf;
      }
      break;
    }
    case RunState::failed:
      text = "run failed: " + app.session.error();
      col = ui.error;
      break;
    case RunState::cancelled:
      text += "cancelled";
      break;
  }
  ImGui::PushStyleColor(ImGuiCol_Text, col);
  ImGui::TextUnformatted(text.c_str());
  ImGui::PopStyleColor();
  if (s == RunState::idle && app.recording && ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "%s",
        recording_details(*app.recording->run, app.recording->path, app.recording->origin).c_str());
  // Every timing on screen is stretched when ranks take turns on the cores: say so beside them.
  const std::string busy = oversubscription_note(c, cores_available(), true);
  if (!busy.empty()) {
    ImGui::SameLine(0, 16);
    ImGui::PushStyleColor(ImGuiCol_Text, ui.error);
    ImGui::TextUnformatted(busy.c_str());
    ImGui::PopStyleColor();
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("%s", oversubscription_note(c, cores_available()).c_str());
  }
}

void draw_view_tabs(App& app) {
  for (int i = 0; i < kNumViews; ++i) {
    const View v = static_cast<View>(i);
    const bool selected = app.state.view == v;
    if (selected)
      ImGui::PushStyleColor(ImGuiCol_Button, ImGui::GetStyleColorVec4(ImGuiCol_ButtonActive));
    char label[64];
    std::snprintf(label, sizeof label, "%d %s", i + 1, view_title(v));
    if (ImGui::Button(label)) app.state.view = v;
    if (selected) ImGui::PopStyleColor();
    ImGui::SameLine();
  }
  ImGui::SameLine(0, 24);
  draw_status(app);
}

}  // namespace

void App::frame(double wall_dt) {
  poll();
  validate_form();
  handle_shortcuts(*this);
  advance(state.playhead, wall_dt, static_cast<double>(data.t_end));

  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(io.DisplaySize);
  const ImGuiWindowFlags flags = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_MenuBar |
                                 ImGuiWindowFlags_NoBringToFrontOnFocus |
                                 ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoMove;
  ImGui::Begin("Shardlab", nullptr, flags);
  draw_menu_bar(*this);
  draw_run_bar(*this);
  ImGui::Separator();
  draw_view_tabs(*this);

  const float replay_h =
      ImGui::GetFrameHeightWithSpacing() * 2 + ImGui::GetStyle().ItemSpacing.y * 2;
  const float view_h = std::max(100.0f, ImGui::GetContentRegionAvail().y - replay_h);
  ImGui::BeginChild("view", ImVec2(0, view_h), true, ImGuiWindowFlags_NoScrollWithMouse);
  switch (state.view) {
    case View::timeline:
      draw_timeline(*this);
      break;
    case View::memory:
      draw_memory(*this);
      break;
    case View::cluster:
      draw_cluster(*this);
      break;
    case View::camping:
      draw_camping(*this);
      break;
    case View::compare:
      draw_compare(*this);
      break;
    case View::loss:
      draw_loss(*this);
      break;
  }
  ImGui::EndChild();
  draw_replay_bar(*this);
  ImGui::End();

  if (state.show_export) draw_export_window(*this);
  if (state.show_help) draw_help_window(*this);
}

}  // namespace shardlab::gui
