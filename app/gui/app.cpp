// App: actions behind the buttons and shortcuts, and the frame that lays out
// the panels (run bar, view tabs, the selected view, the replay bar).
#include "app/gui/app.h"

#include <algorithm>
#include <cmath>

#include <imgui.h>

#include "app/config_args.h"
#include "app/gui/draw_util.h"
#include "app/gui/logic/compare_logic.h"
#include "app/gui/logic/format.h"
#include "app/gui/logic/recording_view.h"
#include "app/gui/panels.h"
#include "app/lesson/lesson.h"
#include "core/comm/cores.h"
#include "core/device/gpu.h"
#include "core/parallel/strategy.h"
#include "core/predict/pipeline_analysis.h"

namespace shardlab::gui {

namespace {
// i18n: not shown (the views' names in lesson files and on the command line)
constexpr const char* kViewNames[kNumViews] = {"timeline", "memory",  "cluster",
                                               "camping",  "compare", "loss"};
// i18n: keys of the string table (view_title passes them through tr)
constexpr const char* kViewTitles[kNumViews] = {"Timeline",     "Memory",  "Cluster",
                                                "Camping trip", "Compare", "Loss"};
}  // namespace

const char* view_name(View v) {
  return kViewNames[static_cast<int>(v)];
}
const char* view_title(View v, const Tr& tr) {
  return tr(kViewTitles[static_cast<int>(v)]);
}
std::optional<View> view_from_name(const std::string& s) {
  for (int i = 0; i < kNumViews; ++i)
    if (s == kViewNames[i]) return static_cast<View>(i);
  return std::nullopt;
}

App::App(const RunConfig& cfg) {
  state.form = cfg;
  for (size_t i = 0; i < cfg.partition.size(); ++i) {
    if (i) state.partition_text += ',';
    state.partition_text += std::to_string(cfg.partition[i]);
  }
  state.compare.slots = default_compare_slots(cfg);
  // The views' own Chinese is in the atlas before any lesson is loaded.
  state.presenter.font_glyphs = glyph_text({});
  validate_form();
}

void App::validate_form() {
  try {
    state.form.partition.clear();
    if (!state.partition_text.empty())
      state.form.partition =
          parse_int_list(state.partition_text, "--partition");  // i18n: an option's name
    validate(state.form);
    if (state.processes) check_process_config(state.form);
    state.form_error.clear();
    state.form_note.clear();
  } catch (const std::exception& e) {
    state.form_error = e.what();  // the CLI's own message, word for word
    const std::optional<std::string> note =
        recording ? rerun_here_note(state.form, recording->origin, cuda_device_count(), tr())
                  : std::nullopt;
    state.form_note = note ? *note : "";
  }
}

bool App::run_active() const {
  const RunState s = session.state();
  return s == RunState::starting || s == RunState::running || s == RunState::paused;
}

bool App::settled() const {
  return !run_active() && !compare_session.busy() && lessons.phase() != StepPhase::running;
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
  for (size_t i = 0; i < cfg.partition.size(); ++i) {
    if (i) state.partition_text += ',';
    state.partition_text += std::to_string(cfg.partition[i]);
  }
  validate_form();
  ingest_result(data, *run);
  losses = run->losses;

  compare.clear();
  compare.resize(1);
  CompareEntry& e = compare[0];
  fill_compare_entry(e, std::make_unique<RunResult>(*run));
  e.cfg = cfg;
  state.compare.slots = {slot_from(cfg, cfg.strategy, cfg.world)};
  fit(state.compare.vp, 0, e.data.t_end - e.data.view_begin());

  // As a live run ends: the playhead rests after the last step, the whole run in view.
  state.playhead = Playhead{static_cast<double>(data.t_live()), false, true, state.playhead.speed};
  state.timeline.follow = true;
  state.timeline.one_step = is_pipeline_strategy(cfg.strategy);  // as a live run opens
  fit_steps(state.timeline.vp, data, state.timeline.one_step, state.playhead.t, false);
  recording = OpenedRecording{path, std::move(rec.origin), std::move(run), rec.from_trace};
}

void App::run() {
  if (session.state() == RunState::paused) {
    session.resume();
    return;
  }
  if (!state.form_error.empty() || run_active()) return;
  losses.clear();
  recording.reset();
  if (state.processes)
    session.start_processes(state.form);
  else
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
  // Processes run on their own: nothing here can hold them between steps.
  if (!state.form_error.empty() || state.processes) return;
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
  const RunData& d = replayed();
  if (p.playing) {
    p.playing = false;
    return;
  }
  if (p.live || p.t >= static_cast<double>(d.t_end)) p.t = d.view_begin();
  p.live = false;
  p.playing = true;
}

void App::next_event() {
  state.playhead.playing = state.playhead.live = false;
  state.playhead.t = gui::next_event(replayed().event_times, state.playhead.t);
}

void App::next_collective() {
  state.playhead.playing = state.playhead.live = false;
  state.playhead.t = gui::next_collective(replayed(), state.playhead.t);
}

void App::prev_event() {
  state.playhead.playing = state.playhead.live = false;
  state.playhead.t = gui::prev_event(replayed().event_times, state.playhead.t);
}

void App::set_playhead(double t) {
  state.playhead.playing = state.playhead.live = false;
  state.playhead.t = std::clamp(t, 0.0, static_cast<double>(replayed().t_end));
}

const RunData& App::replayed() const {
  return state.playhead.projected && projection.ok() ? projection.data : data;
}

double App::playhead_on(const RunData& d) const {
  const Playhead& p = state.playhead;
  const bool on_projected = &d == &projection.data && projection.ok();
  if (!projection.ok() || on_projected == p.projected) return p.t;
  return on_projected ? map_clock(projection.measured_marks, projection.projected_marks, p.t)
                      : map_clock(projection.projected_marks, projection.measured_marks, p.t);
}

void App::set_playhead_on(const RunData& d, double t) {
  const bool on_projected = &d == &projection.data && projection.ok();
  if (projection.ok() && on_projected != state.playhead.projected)
    t = on_projected ? map_clock(projection.projected_marks, projection.measured_marks, t)
                     : map_clock(projection.measured_marks, projection.projected_marks, t);
  set_playhead(t);
}

void App::open_lessons() {
  state.show_lessons = true;
  if (lessons_loaded) return;
  lessons_loaded = true;
  lessons.load(lessons_dir.empty() ? lesson::lessons_dir() : lessons_dir, progress_path);
  // --lang outranks the language saved with the progress.
  if (lang_override) lessons.set_lang(*lang_override);
  progress_saved = lessons.revision();
  state.presenter.font_glyphs = glyph_text(lessons.lessons());
}

void App::show_step(StepShow show) {
  const lesson::Step* s = lessons.step();
  // The run bar shows the step's settings, so the learner can change one and run again
  // (as processes when the step ran them so).
  state.form = show.a->cfg;
  state.processes = s && s->run && s->run_processes.on;
  state.partition_text.clear();
  for (size_t i = 0; i < state.form.partition.size(); ++i) {
    if (i) state.partition_text += ',';
    state.partition_text += std::to_string(state.form.partition[i]);
  }
  validate_form();
  recording.reset();
  // A step with a second run fills the compare view with both, side by side.
  compare_session.cancel();
  compare.clear();
  if (show.b) {
    state.compare.slots.clear();
    for (const RunResult* r : {show.a.get(), show.b.get()}) {
      CompareEntry e;
      fill_compare_entry(e, std::make_unique<RunResult>(*r));
      compare.push_back(std::move(e));
      state.compare.slots.push_back(slot_from(r->cfg, r->cfg.strategy, r->cfg.world));
    }
    fill_cross_row_columns(compare);
    state.compare.fitted = false;
  }
  session.adopt(std::move(show.a));
  session.poll(data, losses);
  // Without a seek the playhead waits at the start of step 1: by then every rank
  // has set up and run a whole step (at step 0's start, on a busy machine, some
  // ranks are still allocating, and their cards would look empty).
  const double settled_t = data.step_begin.size() > 1 && data.step_begin[1] >= 0
                               ? static_cast<double>(data.step_begin[1])
                               : static_cast<double>(data.t_live());
  state.playhead = Playhead{settled_t, false, false, state.playhead.speed};
  state.highlight = LessonHighlight{};
  if (s && s->look) {
    if (auto v = view_from_name(s->look->view)) state.view = *v;
    if (show.result.seek && show.result.seek->found)
      state.playhead.t = std::clamp(static_cast<double>(show.result.seek->t_ns), 0.0,
                                    static_cast<double>(data.t_end));
    if (const auto& h = s->look->highlight) {
      state.highlight.active = true;
      if (h->kind == lesson::Highlight::Kind::rank) state.highlight.rank = h->rank;
      if (h->kind == lesson::Highlight::Kind::area) state.highlight.area = h->area;
      // The compare view's memory area: each rank's peak by category (activations
      // beside model states), the picture a step about memory asks for; without
      // it the outline would point at nothing.
      if (state.view == View::compare && state.highlight.area == "memory")
        state.compare.picture = ComparePicture::peaks;
      if (h->kind == lesson::Highlight::Kind::category)
        state.highlight.category = static_cast<int>(h->category);
    }
  }
  // Pipelines open on one step, the one the seek points into; others on all steps.
  state.timeline.one_step = is_pipeline_strategy(data.cfg.strategy);
  state.timeline.follow = false;
  fit_steps(state.timeline.vp, data, state.timeline.one_step, state.playhead.t, false);
}

void App::poll() {
  if (session.poll(data, losses)) {
    if (state.playhead.live && !state.playhead.projected)
      state.playhead.t = static_cast<double>(data.t_live());
    if (state.timeline.follow)
      fit_steps(state.timeline.vp, data, state.timeline.one_step, playhead_on(data),
                run_active() && state.playhead.live);
  }
  // The compare panel fits its time scale again to take in each run that arrives.
  if (compare_session.poll(compare)) state.compare.fitted = false;
}

namespace {

void draw_status(App& app) {
  const Tr tr = app.tr();
  const UiColors& ui = ui_colors(app.state.presenter.high_contrast);
  const RunState s = app.session.state();
  const RunConfig& c = app.data.world ? app.data.cfg : app.state.form;
  std::string text = config_label(c, tr) + " \xC2\xB7 ";
  ImU32 col = ui.text_dim;
  switch (s) {
    case RunState::idle:
      if (app.recording) {
        // Replaying: nothing runs until Run, which runs these settings live here.
        text =
            recording_status(file_name(app.recording->path), app.recording->origin, c.world,
                             app.recording->trace, tr) +
            " \xC2\xB7 " +
            (app.state.form_error.empty() ? tr("replay: Run (R) runs it live") : tr("replay only"));
        col = ui.ok;
      } else {
        text = tr("no run yet: press Run (R)");
      }
      break;
    case RunState::starting:
      text += tr("connecting ranks...");
      break;
    case RunState::running:
    case RunState::paused:
      text += strf(s == RunState::paused ? tr("paused after step %d/%d") : tr("running step %d/%d"),
                   app.session.steps_done(), c.steps);
      if (app.session.processes())
        text += " \xC2\xB7 " + strf(tr("%d processes, watched live"), c.world);
      col = ui.ok;
      break;
    case RunState::finished: {
      const RunResult* r = app.session.result();
      text += app.session.processes()
                  ? strf(tr("finished %d steps as %d processes"), c.steps, c.world)
                  : strf(tr("finished %d steps"), c.steps);
      if (r)
        text += " \xC2\xB7 " + strf(tr("median step %.2f ms \xC2\xB7 final loss %.4g"),
                                    r->median_step_ms, r->losses.empty() ? 0.0 : r->losses.back());
      break;
    }
    case RunState::failed:
      text = strf(tr("run failed: %s"), app.session.error().c_str());
      col = ui.error;
      break;
    case RunState::cancelled:
      text += tr("cancelled");
      break;
  }
  ImGui::PushStyleColor(ImGuiCol_Text, col);
  // Never cut: at presenter sizes the line moves under the tabs and wraps.
  if (ImGui::CalcTextSize(text.c_str()).x > ImGui::GetContentRegionAvail().x) ImGui::NewLine();
  ImGui::TextWrapped("%s", text.c_str());
  ImGui::PopStyleColor();
  if (s == RunState::idle && app.recording && ImGui::IsItemHovered())
    ImGui::SetTooltip("%s", recording_details(*app.recording->run, app.recording->path,
                                              app.recording->origin, app.recording->trace, tr)
                                .c_str());
  // Every timing on screen is stretched when ranks take turns on the cores: say so beside them.
  // (The core words it in English; the Chinese says the same with the same numbers.)
  const int cores = cores_available();
  std::string busy = oversubscription_note(c, cores, true);
  std::string busy_long = oversubscription_note(c, cores);
  if (!busy.empty() && tr.zh()) {
    busy = strf(tr("%d ranks on %d cores: timings stretched"), c.world, cores);
    busy_long = strf(tr("%d ranks on %d cores: ranks take turns on the cores, so step times and "
                        "compute spans are stretched and waits grow; compare timings at world "
                        "\xE2\x89\xA4 %d here"),
                     c.world, cores, cores);
  }
  if (!busy.empty()) {
    ImGui::SameLine(0, 16);
    // Big presenter fonts: the note goes under the line rather than off the screen.
    if (ImGui::CalcTextSize(busy.c_str()).x > ImGui::GetContentRegionAvail().x) ImGui::NewLine();
    ImGui::PushStyleColor(ImGuiCol_Text, ui.error);
    ImGui::TextUnformatted(busy.c_str());
    ImGui::PopStyleColor();
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", busy_long.c_str());
  }
}

void draw_view_tabs(App& app) {
  for (int i = 0; i < kNumViews; ++i) {
    const View v = static_cast<View>(i);
    const bool selected = app.state.view == v;
    if (selected)
      ImGui::PushStyleColor(ImGuiCol_Button, ImGui::GetStyleColorVec4(ImGuiCol_ButtonActive));
    char label[64];
    std::snprintf(label, sizeof label, "%d %s###view%d", i + 1, view_title(v, app.tr()), i);
    if (ImGui::Button(label)) app.state.view = v;
    if (selected) ImGui::PopStyleColor();
    ImGui::SameLine();
  }
  ImGui::SameLine(0, 24);
  draw_status(app);
}

}  // namespace

namespace {

// The lesson's "look here": a bright outline around every region of the view
// that the step's highlight names, pulsing gently so the eye finds it.
void draw_highlight(const AppState& s, ImVec2 view_min, ImVec2 view_max) {
  if (!s.highlight.active) return;
  // Only inside the view: a region scrolled out of it must not outline the
  // replay bar or the lessons panel.
  ImDrawList* fg = ImGui::GetForegroundDrawList();
  fg->PushClipRect(view_min, view_max, false);
  const LessonHighlight& h = s.highlight;
  const float pulse = 0.6f + 0.4f * static_cast<float>(std::sin(ImGui::GetTime() * 4.0));
  const ImU32 col = IM_COL32(255, 200, 0, static_cast<int>(255 * pulse));
  const float w = 3.0f * std::max(1.0f, s.presenter.font_scale);
  for (const ViewRegion& r : s.regions) {
    const bool hit = (h.rank >= 0 && r.rank == h.rank && r.area.empty()) ||
                     (!h.area.empty() && r.area == h.area) ||
                     (h.category >= 0 && r.category == h.category);
    if (hit) fg->AddRect(ImVec2(r.x0 - 3, r.y0 - 3), ImVec2(r.x1 + 3, r.y1 + 3), col, 4.0f, 0, w);
  }
  fg->PopClipRect();
}

}  // namespace

void mark_region(App& app, int rank, const char* area, int category, ImVec2 a, ImVec2 b) {
  app.state.regions.push_back(ViewRegion{rank, area ? area : "", category, a.x, a.y, b.x, b.y});
}

void App::frame(double wall_dt) {
  poll();
  if (auto show = lessons.poll()) show_step(std::move(*show));
  // A new step: before its run, the run bar shows what will run and the view is
  // the one the step will point at, so the learner predicts with the settings in sight.
  if (const lesson::Step* st = lessons.step();
      st && previewed != std::pair{lessons.lesson_index(), lessons.step_index()}) {
    previewed = {lessons.lesson_index(), lessons.step_index()};
    if (lessons.phase() == StepPhase::ask) {
      if (const auto& cfg = st->run ? st->run : st->recorded) {
        state.form = *cfg;
        state.partition_text.clear();
        for (size_t i = 0; i < cfg->partition.size(); ++i) {
          if (i) state.partition_text += ',';
          state.partition_text += std::to_string(cfg->partition[i]);
        }
      }
      // A step with a second run: the compare view lists the two runs it will
      // set side by side, not the selector's last configurations.
      const auto& a = st->run ? st->run : st->recorded;
      if (a && st->compare) {
        compare_session.cancel();
        compare.clear();
        state.compare.slots = {slot_from(*a, a->strategy, a->world),
                               slot_from(*st->compare, st->compare->strategy, st->compare->world)};
        state.compare.fitted = false;
      }
      if (st->look)
        if (auto v = view_from_name(st->look->view)) state.view = *v;
      state.highlight = LessonHighlight{};
    }
  }
  if (lessons_loaded && lessons.revision() != progress_saved) {
    progress_saved = lessons.revision();
    if (lessons.save(&progress_error)) progress_error.clear();
  }
  validate_form();
  // Before the shortcuts and the views: they read the playhead on its clock.
  refresh_projection(projection, state.playhead, run_active() ? nullptr : shown_result(), data,
                     run_active(), state.timeline.projected_link, state.timeline.projected,
                     state.projected_clock);
  handle_shortcuts(*this);
  advance(state.playhead, wall_dt, static_cast<double>(replayed().t_end));

  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(io.DisplaySize);
  const bool slides = state.slides;
  const ImGuiWindowFlags flags = ImGuiWindowFlags_NoDecoration |
                                 (slides ? 0 : ImGuiWindowFlags_MenuBar) |
                                 ImGuiWindowFlags_NoBringToFrontOnFocus |
                                 ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoMove;
  ImGui::Begin("Shardlab", nullptr, flags);
  if (!slides) draw_menu_bar(*this);
  if (!slides && state.show_run_bar) {
    draw_run_bar(*this);
    ImGui::Separator();
    draw_view_tabs(*this);
  }

  const bool replay_bar = !slides && state.show_replay_bar;
  const float replay_h =
      replay_bar ? ImGui::GetFrameHeightWithSpacing() * static_cast<float>(state.replay_rows) +
                       ImGui::GetStyle().ItemSpacing.y * 2
                 : 0;
  const float view_h = std::max(100.0f, ImGui::GetContentRegionAvail().y - replay_h);
  // The view and the lesson are the content: drawn in the content font, which
  // presenter mode and Ctrl +/- scale (the chrome above and below keeps its size).
  ImFont* content = ImGui::GetIO().Fonts->Fonts.Size > 1 ? ImGui::GetIO().Fonts->Fonts[1] : nullptr;
  const float content_em = content ? content->FontSize : ImGui::GetFontSize();
  // The Lessons panel sits beside the view, so the text and what it points at
  // are seen together.
  const float avail_w = ImGui::GetContentRegionAvail().x;
  const float lessons_w = state.show_lessons ? std::clamp(avail_w * (slides ? 0.4f : 0.34f),
                                                          content_em * 18, avail_w * 0.6f)
                                             : 0;
  state.regions.clear();
  if (content) ImGui::PushFont(content);
  ImGui::BeginChild("view", ImVec2(state.show_lessons ? avail_w - lessons_w : 0, view_h), true,
                    ImGuiWindowFlags_NoScrollWithMouse);
  switch (state.view) {
    case View::timeline:
      draw_timeline(*this);
      break;
    case View::memory:
      draw_memory(*this);
      break;
    case View::cluster:
      draw_cluster(*this, replayed());
      break;
    case View::camping:
      draw_camping(*this, replayed());
      break;
    case View::compare:
      draw_compare(*this);
      break;
    case View::loss:
      draw_loss(*this);
      break;
  }
  ImGui::EndChild();
  draw_highlight(state, ImGui::GetItemRectMin(), ImGui::GetItemRectMax());
  if (state.show_lessons) {
    ImGui::SameLine();
    ImGui::BeginChild("lessons", ImVec2(0, view_h), true);
    draw_lessons(*this);
    if (!progress_error.empty()) {
      ImGui::PushStyleColor(ImGuiCol_Text, ui_colors(state.presenter.high_contrast).error);
      ImGui::TextWrapped("%s", progress_error.c_str());
      ImGui::PopStyleColor();
    }
    ImGui::EndChild();
  }
  if (content) ImGui::PopFont();
  if (replay_bar) draw_replay_bar(*this);
  ImGui::End();

  if (state.show_export) draw_export_window(*this);
  if (state.show_help) {
    if (content) ImGui::PushFont(content);  // read from the back of the room, like the view
    draw_help_window(*this);
    if (content) ImGui::PopFont();
  }
}

}  // namespace shardlab::gui
