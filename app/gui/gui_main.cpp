// `shardlab gui`: parses the run settings (the same options as `shardlab run`)
// and the GUI's own, opens the window and runs the plain ImGui main loop. With
// --screenshot it runs the configuration, waits for it, renders N frames and
// writes the window to a PNG (how tests and docs see the app).
#include "app/gui/gui.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "app/args.h"
#include "app/commands.h"
#include "app/config_args.h"
#include "app/gui/app.h"
#include "app/gui/logic/frame_pacing.h"
#include "app/gui/logic/lesson_progress.h"
#include "app/gui/window.h"
#include "app/lesson/lesson.h"
#include "core/model/checkpoint.h"
#include "core/parallel/strategy.h"
#include "core/predict/projection.h"
#include "core/run/recording.h"
#include "core/run_options.h"

namespace shardlab::app {

namespace {

const char* kGuiHelp = R"(usage: shardlab gui [run options] [gui options]

The desktop app: run a configuration and watch it (timeline, memory, cluster
cards, the camping trip), replay it in slow motion, compare strategies, export
traces. Needs a display; without one use a virtual one:
  xvfb-run -a -s "-screen 0 1600x1000x24" shardlab gui --screenshot out.png

run options: the same as 'shardlab run' (--model, --strategy, --world, --batch,
  --steps, --micro-batches, --stages, --precision, --optimizer, --lr, --seed,
  --bucket-mb, --no-overlap, --no-prefetch, --fsdp-unit, --no-reshard, --offload,
  --offload-params, --partition, --recompute, --timeout-ms, --device, --backend, --seq, --data, --attention); the
  app starts by running them.

gui options:
  --open FILE         show a recording (made with 'shardlab run --record FILE', here or on
                      another machine) in every view without running it; the run bar takes
                      its settings (no run options beside it), and Run runs them live here.
                      Also a trace from 'shardlab run --trace' or 'shardlab trace merge'
                      (memory as totals per category, no buffer names)
  --view V            timeline | memory | cluster | camping | compare | loss (default timeline)
  --compare LIST      the compare view's configurations (1 to 6), comma-separated, each
                      STRATEGY[:W][/OPTION]...: ':W' sets the world size, options are m=N
                      (micro-batches), stages=N, bf16|fp16|fp32, recompute, no-prefetch,
                      no-overlap, bucket-mb=X, fsdp-unit=K, no-reshard, offload,
                      offload-params, sp, zero1, offload=nvme:DIR (last in its item: the
                      directory runs to the item's end), mesh=AXES (its commas as '+': mesh=dp=2+pp=2+tp=2, world 8 without
                      ':W'), each only for the strategies that use it; unset options come
                      from the run options where the strategy uses them. E.g.
                        naive-mp:4,gpipe:4/m=8,1f1b:4/m=8     ddp:4,zero3:4,fsdp:4/bf16
                      Default: the run's own configuration, then others at its world size
                      (pipelines with 2 micro-batches per stage unless --micro-batches says),
                      as many as are valid, at most 6: what the compare panel shows.
  --compare-show P    what the compare view draws under its table: timelines | memory (over
                      time, aligned by step) | peaks (peak memory by category); default timelines
  --processes         run one process per rank ('shardlab launch'), watched live as it runs
                      (the run bar's 'processes' box); dp is one process by nature
  --presenter         start in presenter mode (full screen, high contrast, big font)
  --slides            the view and the lesson only: no menus, run bar or replay bar (F9)
  --font-scale X      font scale, 0.6 to 3 (default 1; Ctrl +/- in the app)
  --size WxH          window size (default 1600x1000)
  --screenshot PATH   headless: run, render, write the window to PATH (PNG), exit
  --frames N          with --screenshot: frames rendered after the run ends (default 3)
  --replay-at F       put the playhead at fraction F of the training steps (0: step 0
                      begins, 1: the last step ends; default 1)
  --at-collective     then move the playhead to the middle of the next collective (pieces in
                      flight in the cluster and camping views)
  --projected LINK    show the run as on one dedicated device per rank joined by LINK as
                      well (loopback, pcie4, nvlink-h100, eth100, ib400, or BW,LAT such as
                      25,5 for 25 GB/s and 5 us): the timeline draws it under the rows
                      measured here, on one time scale, and the cluster and camping views
                      replay its clock (the toggles beside the views' captions)
  --check-display     exit 0 if a window can be opened, 1 if not (for scripts)

lessons (the Lessons panel beside the view; L in the app):
  --lessons           open the Lessons panel (progress is kept in $XDG_STATE_HOME/shardlab)
  --lesson NAME       open lesson NAME (id like 'zero', or a .toml file) at its first step
  --lesson-step K     ... at step K (1-based)
  --schedule FILE     with --lesson: your own pipeline schedule in place of the file the
                      lesson's runs read (lesson schedule-exercise)
  --lang en|zh        the app's and the lessons' language (default en, or the one saved
                      with the lessons' progress once they open; switch in the Lessons panel)
  --answer VALUE      with --screenshot: the prediction's answer (a number, or a choice's number)
  --run-step          with --screenshot: run the step before the picture
  --reveal            with --screenshot: run the step and reveal it (answer, formula, measured, gates)

Keyboard: R run, P pause, S step, Space replay, Left/Right events, 1-6 views,
L lessons, Page Down / Page Up / Enter drive a lesson, F11 presenter mode, F9 slides,
Ctrl +/- font, F1 all shortcuts.
)";

std::set<std::string> gui_options() {
  std::set<std::string> o = {"model",     "strategy",    "world",      "batch",        "steps",
                             "optimizer", "lr",          "seed",       "timeout-ms",   "device",
                             "backend",   "view",        "compare",    "screenshot",   "frames",
                             "replay-at", "size",        "font-scale", "compare-show", "open",
                             "lesson",    "lesson-step", "lang",       "answer",       "seq",
                             "data",      "projected",   "attention"};
  o.merge(app::option_flags(true));
  return o;
}

std::set<std::string> gui_flags() {
  std::set<std::string> f = {"presenter", "check-display", "no-record", "at-collective", "lessons",
                             "run-step",  "reveal",        "slides",    "processes"};
  f.merge(app::option_flags(false));
  return f;
}

// Run settings, which a recording brings itself (--open refuses them beside it).
std::vector<std::string> run_keys() {
  std::vector<std::string> k = {"model",     "strategy",  "world", "batch",      "steps",
                                "optimizer", "lr",        "seed",  "timeout-ms", "device",
                                "backend",   "no-record", "seq",   "data",       "attention"};
  for (const OptionRow& r : option_rows()) k.push_back(r.flag + 2);  // without the "--"
  return k;
}

}  // namespace

int cmd_gui(int argc, char** argv) {
  using namespace shardlab::gui;
  const Args a(argc, argv, "gui", gui_options(), gui_flags());
  if (a.help()) {
    std::fputs(kGuiHelp, stdout);
    return 0;
  }
  if (a.has("check-display")) {
    std::string why;
    if (display_available(&why)) return 0;
    std::fprintf(stderr, "shardlab gui: no display (%s)\n", why.c_str());
    return 1;
  }

  // Loaded before any window opens: a bad file is one line and exit 2, display or not.
  std::optional<Recording> opened;
  const std::string open_path = a.str("open", "");
  if (a.has("open")) {
    for (const std::string& key : run_keys())
      if (a.has(key))
        throw ConfigError("--" + key +
                          " cannot be combined with --open (a recording "
                          "brings its own settings; press Run in the app to change them)");
    if (a.has("compare"))
      throw ConfigError(
          "--compare cannot be combined with --open (the compare view shows the "
          "recording; Run comparison there compares live runs of its settings)");
    opened = load_run_file(open_path);
  }
  RunConfig cfg_read = opened ? opened->run.cfg : config_from(a);
  // With --lesson, --schedule is the lesson's (lesson::use_schedule), not the app's own run's.
  auto given = a.given();
  if (a.has("lesson")) {
    cfg_read.schedule.clear();
    given.erase(std::remove(given.begin(), given.end(), "schedule"), given.end());
  }
  const RunConfig cfg = cfg_read;
  // The sizes first: the compare slots below divide by them (--world 0 was a
  // SIGFPE). Other settings a form can correct are shown in the run bar.
  if (!opened) validate_sizes(cfg);
  if (a.has("no-record"))
    throw ConfigError("--no-record: the GUI draws the recorded spans (remove --no-record)");
  const std::string view_text = a.str("view", "timeline");
  const auto view = view_from_name(view_text);
  if (!view)
    throw ConfigError("--view '" + view_text +
                      "' is invalid (valid: timeline, memory, cluster, camping, compare, loss)");
  const std::string shot = a.str("screenshot", "");
  // An empty path would mean "no screenshot": the interactive app, never exiting.
  if (a.has("screenshot") && shot.empty())
    throw ConfigError("--screenshot '' is no file path (valid: a PNG file path, e.g. out.png)");
  const int frames = a.integer("frames", 3);
  if (frames < 1 || frames > 100000)
    throw ConfigError("--frames " + std::to_string(frames) + " is invalid (valid: 1 to 100000)");
  const double replay_at = a.number("replay-at", -1.0);  // -1: where a live run ends
  if (a.has("replay-at") && !(replay_at >= 0 && replay_at <= 1))
    throw ConfigError("--replay-at " + a.str("replay-at", "") +
                      " is invalid (valid: 0 to 1, e.g. 0.5)");
  const double font_scale = a.number("font-scale", 1.0);
  if (!(font_scale >= 0.6 && font_scale <= 3))
    throw ConfigError("--font-scale " + a.str("font-scale", "") + " is invalid (valid: 0.6 to 3)");
  WindowOptions wopt;
  if (auto size = a.get("size")) {
    if (std::sscanf(size->c_str(), "%dx%d", &wopt.width, &wopt.height) != 2 || wopt.width < 320 ||
        wopt.height < 240 || wopt.width > 8192 || wopt.height > 8192)
      throw ConfigError("--size '" + *size +
                        "' is invalid (valid: WxH from 320x240, e.g. 1600x1000)");
  }
  // "As on N devices" over this link (checked now: a bad name is one line and exit 2).
  const std::string projected_link = a.str("projected", "");
  if (a.has("projected")) {
    const std::vector<std::string> names = link_preset_names();
    if (std::find(names.begin(), names.end(), projected_link) == names.end()) {
      std::string valid;
      for (const std::string& n : names) valid += n + ", ";
      try {
        parse_link(projected_link);  // BW,LAT
      } catch (const ConfigError&) {
        throw ConfigError("--projected '" + projected_link + "' is invalid (valid: " + valid +
                          "or BW,LAT such as 25,5 for 25 GB/s and 5 us)");
      }
    }
  }
  // The compare selector's slots: the list as given, or the default the panel starts with.
  std::vector<CompareSlot> compare_slots;
  if (!opened)
    compare_slots =
        a.has("compare") ? parse_compare_slots(*a.get("compare"), cfg) : default_compare_slots(cfg);
  const std::string show_text = a.str("compare-show", "timelines");
  const auto show = compare_picture_from_name(show_text);
  if (!show)
    throw ConfigError("--compare-show '" + show_text +
                      "' is invalid (valid: timelines, memory, peaks)");
  // Headless runs must not hang on bad settings: the picture shows the run bar
  // with the message inline, and the exit is 2 with the CLI's message.
  std::string invalid;
  if (!shot.empty()) {
    check_writable(shot, "--screenshot");
    try {
      // A recording is shown, not run: settings this machine cannot run are no error.
      if (!opened && (*view != View::compare || compare_slots.empty())) validate(cfg, given);
    } catch (const ConfigError& e) {
      invalid = e.what();
    }
  }

  if (a.has("processes")) {
    if (opened)
      throw ConfigError(
          "--processes cannot be combined with --open (a recording is shown, "
          "not run; tick 'processes' in the app before Run)");
    check_process_config(cfg);
  }

  // Lessons: checked before a window opens, so a bad name is one line and exit 2.
  std::optional<lesson::Lesson> lesson_wanted;
  int lesson_step = 0;
  if (auto name = a.get("lesson")) {
    lesson_wanted = lesson::find_lesson(*name, lesson::lessons_dir());
    lesson_step = a.integer("lesson-step", 1) - 1;
    if (lesson_step < 0 || lesson_step >= static_cast<int>(lesson_wanted->steps.size()))
      throw ConfigError("--lesson-step " + a.str("lesson-step", "") + " is invalid (valid: 1 to " +
                        std::to_string(lesson_wanted->steps.size()) + " for lesson '" +
                        lesson_wanted->id + "')");
    // A learner's own schedule for the lesson's runs (lesson schedule-exercise).
    if (auto file = a.get("schedule")) lesson::use_schedule(*lesson_wanted, *file);
  } else {
    for (const char* key : {"lesson-step", "answer", "run-step", "reveal"})
      if (a.has(key))
        throw ConfigError(std::string("--") + key +
                          " needs --lesson NAME (see 'shardlab gui --help')");
  }
  const lesson::Lang lang = lesson::parse_lang(a.str("lang", "en"));
  const bool lesson_run = a.has("run-step") || a.has("reveal");
  wopt.vsync = shot.empty();
  wopt.ignore_mouse = !shot.empty();
  std::string error;
  std::unique_ptr<Window> win = Window::open(wopt, &error);
  if (!win) {
    std::fprintf(stderr,
                 "shardlab gui: %s; without a display run it under a virtual one: xvfb-run -a "
                 "shardlab gui --screenshot out.png (see 'shardlab gui --help')\n",
                 error.c_str());
    return 1;
  }

  App app(cfg);
  app.keys = &win->taps();
  app.state.view = *view;
  app.state.processes = a.has("processes");
  app.state.presenter.font_scale = static_cast<float>(font_scale);
  app.state.slides = a.has("slides");
  if (a.has("presenter")) {
    app.state.request_fullscreen_toggle = true;
  }
  if (a.has("projected")) {
    app.state.timeline.projected = true;
    app.state.timeline.projected_link = projected_link;
    app.state.projected_clock = true;
  }
  if (!compare_slots.empty()) app.state.compare.slots = compare_slots;
  app.state.compare.picture = *show;
  if (a.has("lang")) {  // every view's language, the lessons' too
    app.lang_override = lang;
    app.lessons.set_lang(lang);
  }
  if (a.has("lessons") || lesson_wanted) {
    // Headless pictures never read or write the user's progress.
    app.progress_path = shot.empty() ? default_progress_path() : "";
    app.open_lessons();
    if (lesson_wanted) {
      // The lesson as read (a file outside the folder, or an edited copy of one of
      // its lessons), not the folder's lesson of the same id.
      app.lessons.open(app.lessons.adopt(*lesson_wanted));
      app.lessons.go_to_step(lesson_step);
      if (auto v = a.get("answer")) {
        const lesson::Step* st = app.lessons.step();
        if (st && st->predict && st->predict->is_choice())
          app.lessons.choice() = std::atoi(v->c_str()) - 1;
        else
          app.lessons.answer() = *v;
      }
      if (lesson_run) app.lessons.run_step();
    }
  }
  // The app opens on the recording or on a run of the given settings, so there is
  // something to see (a lesson step brings its own).
  if (opened)
    app.open_recording(std::move(*opened), open_path);
  else if (!lesson_wanted && (*view != View::compare || shot.empty()))
    app.run();
  // What runs is what the selector shows.
  if (!opened && !lesson_wanted && *view == View::compare && !compare_slots.empty())
    app.compare_from_form();

  using clock = std::chrono::steady_clock;
  auto last = clock::now();
  const auto started = last;
  int frames_after = 0;
  bool placed = false;
  int rc = 0;
  FramePacer pacer;
  while (!win->should_close() && !app.state.quit) {
    if (shot.empty()) {
      // Idle, the app sleeps until input; while something moves, 30 frames a second.
      const bool animating = !app.settled() || app.state.playhead.playing;
      const double since = std::chrono::duration<double>(clock::now() - last).count();
      pacer.woke(win->wait_events(pacer.wait_seconds(animating, since)));
    }
    const auto now = clock::now();
    const double dt = std::chrono::duration<double>(now - last).count();
    last = now;
    win->begin_frame(app.state.presenter);
    app.frame(dt);
    std::string png = std::move(app.state.request_png);
    app.state.request_png.clear();
    bool done = false;
    if (!shot.empty()) {
      if (a.has("reveal") && app.lessons.phase() == StepPhase::ran) app.lessons.reveal();
      if (app.settled() && !(a.has("reveal") && app.lessons.phase() == StepPhase::ran)) {
        if (!placed) {
          placed = true;
          if (replay_at >= 0) {
            // A fraction of the training steps: set-up time (connecting, the first
            // broadcast) varies from run to run, the steps are what people look at.
            const RunData& d = app.data;
            const double b = d.step_begin.empty() || d.step_begin[0] < 0
                                 ? d.view_begin()
                                 : static_cast<double>(d.step_begin[0]);
            app.set_playhead_on(d, b + replay_at * (static_cast<double>(d.t_live()) - b));
          }
          if (a.has("at-collective")) app.next_collective();
          if (!lesson_run) {  // a lesson step has placed the view itself
            fit_steps(app.state.timeline.vp, app.data, app.state.timeline.one_step,
                      app.playhead_on(app.data), false);
            app.state.timeline.follow = true;
          }
        }
        if (++frames_after > frames) {
          png = shot;
          done = true;
        }
      } else if (now - started > std::chrono::seconds(300)) {
        std::fprintf(stderr,
                     "shardlab gui: the run did not finish within 300 s; writing what there is\n");
        png = shot;
        done = true;
        rc = 1;
      }
    }
    if (!win->end_frame(png, &error)) {
      std::fprintf(stderr, "error: %s\n", error.c_str());
      if (done) return 1;
      // A PNG asked for from the menu: the export line said "saved"; say why not.
      app.state.exports.message = error;
      app.state.exports.message_is_error = true;
    }
    if (app.state.request_fullscreen_toggle) {
      app.state.request_fullscreen_toggle = false;
      PresenterState& p = app.state.presenter;
      p.presenter = !p.presenter;
      if (p.presenter) {
        p.saved_font_scale = p.font_scale;
        p.saved_high_contrast = p.high_contrast;
        p.font_scale = std::max(p.font_scale, 1.6f);
        p.high_contrast = true;
      } else {
        p.font_scale = p.saved_font_scale;
        p.high_contrast = p.saved_high_contrast;
      }
      win->set_fullscreen(p.presenter);
    }
    if (done) {
      const RunState s = app.session.state();
      if (!invalid.empty()) {
        std::fprintf(stderr, "error: %s\n", invalid.c_str());
        rc = 2;
      }
      if (s == RunState::failed) {
        std::fprintf(stderr, "error: %s\n", app.session.error().c_str());
        rc = 1;
      }
      // The picture was asked to show the projection: without one it shows a reason instead.
      if (a.has("projected") && rc == 0 && !app.projection.ok()) {
        std::fprintf(stderr, "error: %s\n", projection_reason(app.projection).c_str());
        rc = 1;
      }
      std::printf("screenshot written to %s (%dx%d, view %s)\n", shot.c_str(),
                  win->framebuffer_width(), win->framebuffer_height(), view_name(*view));
      break;
    }
  }
  app.session.reset();
  app.compare_session.cancel();
  return rc;
}

}  // namespace shardlab::app
