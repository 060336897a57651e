// Presenter mode and keyboard: the themes (normal and high contrast, sized by
// the font scale), the shortcuts for Run/Step/Replay/views, and their help.
#include <algorithm>
#include <string>
#include <vector>

#include <GLFW/glfw3.h>
#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/i18n.h"
#include "app/gui/panels.h"

namespace shardlab::gui {

namespace {

struct Shortcut {
  const char* keys;  // keyboard keys, the same in every language
  const char* what;
};
// The keys stay as they are on the keyboard; the descriptions go through tr.
std::vector<Shortcut> shortcuts(const Tr& tr) {
  return {
      {"R", tr("Run (or resume a paused run)")},
      {"P", tr("Pause the training run at the next step boundary")},
      {"S", tr("Step: run exactly one more training step")},
      {"Space", tr("Play / pause the replay")},                                       // i18n: a key
      {"Left / Right", tr("Previous / next event (span start or end, allocation)")},  // i18n: a key
      {"C", tr("The middle of the next collective (pieces in flight)")},
      {"Home", tr("Playhead to the start")},  // i18n: a key
      {"[ / ]", tr("Replay slower / faster")},
      {"1 ... 6", tr("Timeline, Memory, Cluster, Camping trip, Compare, Loss")},
      {"F", tr("Fit all training steps in the timeline")},
      {"F11", tr("Presenter mode: full screen, high contrast, big font")},
      {"F9", tr("Slides: the view and the lesson only (F9 again for the menus and bars)")},
      {"H", tr("High-contrast theme")},
      {"Ctrl + / Ctrl -", tr("Larger / smaller font")},  // i18n: a key
      {"E", tr("Export window")},
      {"L", tr("Lessons panel (beside the view)")},
      {"Page Down",  // i18n: a key
       tr("Lesson: run the step, reveal it, then the next step (a clicker's forward key)")},
      {"Page Up", tr("Lesson: the previous step")},    // i18n: a key
      {"Enter", tr("Lesson: run the step / reveal")},  // i18n: a key
      {"F1", tr("This help")},
      {"Ctrl Q", tr("Quit")},  // i18n: a key
  };
}

// A press since the last frame, as the window's key callback counted it (a tap
// shorter than a frame included); ImGui's key-down state without a window.
bool pressed(const App& app, int key) {
  return app.keys ? app.keys->presses(key) > 0 : ImGui::IsKeyPressed(key, false);
}

}  // namespace

void apply_theme(const PresenterState& p) {
  ImGuiStyle st;
  ImGui::StyleColorsDark(&st);
  st.WindowRounding = 0;
  st.FrameRounding = 3;
  st.ItemSpacing = ImVec2(8, 5);
  st.CellPadding = ImVec2(6, 3);
  if (p.high_contrast) {
    ImVec4* c = st.Colors;
    c[ImGuiCol_WindowBg] = c[ImGuiCol_ChildBg] = ImVec4(0, 0, 0, 1);
    c[ImGuiCol_PopupBg] = ImVec4(0.05f, 0.05f, 0.05f, 1);
    c[ImGuiCol_Text] = ImVec4(1, 1, 1, 1);
    c[ImGuiCol_TextDisabled] = ImVec4(0.85f, 0.85f, 0.85f, 1);
    c[ImGuiCol_Border] = ImVec4(1, 1, 1, 0.8f);
    c[ImGuiCol_FrameBg] = ImVec4(0.12f, 0.12f, 0.12f, 1);
    c[ImGuiCol_Button] = ImVec4(0.0f, 0.25f, 0.6f, 1);
    c[ImGuiCol_ButtonHovered] = ImVec4(0.0f, 0.4f, 0.85f, 1);
    c[ImGuiCol_ButtonActive] = ImVec4(0.95f, 0.75f, 0.0f, 1);
    c[ImGuiCol_MenuBarBg] = ImVec4(0.1f, 0.1f, 0.1f, 1);
    st.FrameBorderSize = 1;
    st.ChildBorderSize = 1;
  }
  // Sizes stay 1×: the chrome keeps its size; the content's font is scaled alone.
  ImGui::GetStyle() = st;
}

void handle_shortcuts(App& app) {
  AppState& s = app.state;
  const ImGuiIO& io = ImGui::GetIO();
  if (io.KeyCtrl) {
    if (pressed(app, GLFW_KEY_EQUAL) || pressed(app, GLFW_KEY_KP_ADD))
      s.presenter.font_scale = std::min(3.0f, s.presenter.font_scale * 1.15f);
    if (pressed(app, GLFW_KEY_MINUS) || pressed(app, GLFW_KEY_KP_SUBTRACT))
      s.presenter.font_scale = std::max(0.6f, s.presenter.font_scale / 1.15f);
    if (pressed(app, GLFW_KEY_0)) s.presenter.font_scale = 1.0f;
    if (pressed(app, GLFW_KEY_Q)) s.quit = true;
    return;
  }
  if (pressed(app, GLFW_KEY_F11)) s.request_fullscreen_toggle = true;
  if (pressed(app, GLFW_KEY_F9)) s.slides = !s.slides;
  if (pressed(app, GLFW_KEY_F1)) s.show_help = !s.show_help;
  // A presenter's clicker sends Page Down / Page Up: they drive the lesson even
  // while the answer field has the keyboard.
  if (s.show_lessons) {
    // Every tap counts, in order: two quick Page Downs are two steps.
    if (app.keys) {
      drive_lesson_keys(app.lessons, *app.keys, io.WantTextInput);
    } else {
      if (pressed(app, GLFW_KEY_PAGE_DOWN))
        press_lesson_key(app.lessons, LessonKey::page_down, false);
      if (pressed(app, GLFW_KEY_PAGE_UP)) press_lesson_key(app.lessons, LessonKey::page_up, false);
      if (pressed(app, GLFW_KEY_ENTER) || pressed(app, GLFW_KEY_KP_ENTER))
        press_lesson_key(app.lessons, LessonKey::enter, io.WantTextInput);
    }
  }
  if (io.WantTextInput) return;  // typing in a field: letters are text
  if (pressed(app, GLFW_KEY_L)) {
    if (s.show_lessons)
      s.show_lessons = false;
    else
      app.open_lessons();
  }
  if (pressed(app, GLFW_KEY_R)) app.run();
  if (pressed(app, GLFW_KEY_P)) app.pause();
  if (pressed(app, GLFW_KEY_S)) app.step();
  if (pressed(app, GLFW_KEY_SPACE)) app.toggle_replay();
  if (pressed(app, GLFW_KEY_RIGHT)) app.next_event();
  if (pressed(app, GLFW_KEY_LEFT)) app.prev_event();
  if (pressed(app, GLFW_KEY_C)) app.next_collective();
  if (pressed(app, GLFW_KEY_HOME)) app.set_playhead(app.replayed().view_begin());
  if (pressed(app, GLFW_KEY_LEFT_BRACKET))
    s.playhead.speed = std::max(kMinSpeed, s.playhead.speed / 2);
  if (pressed(app, GLFW_KEY_RIGHT_BRACKET))
    s.playhead.speed = std::min(kMaxSpeed, s.playhead.speed * 2);
  if (pressed(app, GLFW_KEY_H)) s.presenter.high_contrast = !s.presenter.high_contrast;
  if (pressed(app, GLFW_KEY_E)) s.show_export = !s.show_export;
  if (pressed(app, GLFW_KEY_F)) {
    fit(s.timeline.vp, app.data.steps_begin(), static_cast<double>(app.data.t_end));
    s.timeline.follow = true;
    s.timeline.one_step = false;
  }
  for (int i = 0; i < kNumViews; ++i)
    if (pressed(app, GLFW_KEY_1 + i)) s.view = static_cast<View>(i);
}

void draw_help_window(App& app) {
  const Tr tr = app.tr();
  // Wide enough for the longest description at any font scale, and wrapped
  // rather than cut when the screen is narrower than that.
  const float em = ImGui::GetFontSize();
  const float width = std::min(em * 42, ImGui::GetIO().DisplaySize.x * 0.9f);
  ImGui::SetNextWindowSize(ImVec2(width, 0), ImGuiCond_Always);
  // "###help": the window keeps its id (position) in either language.
  if (!ImGui::Begin(strf("%s###help", tr("Keyboard shortcuts")).c_str(), &app.state.show_help,
                    ImGuiWindowFlags_NoCollapse)) {
    ImGui::End();
    return;
  }
  if (ImGui::BeginTable("keys", 2, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp)) {
    // No header row: the column names are ids.
    ImGui::TableSetupColumn("key", ImGuiTableColumnFlags_WidthFixed, em * 9);  // i18n: not shown
    ImGui::TableSetupColumn("what", ImGuiTableColumnFlags_WidthStretch);       // i18n: not shown
    for (const Shortcut& k : shortcuts(tr)) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(k.keys);
      ImGui::TableNextColumn();
      ImGui::TextWrapped("%s", k.what);
    }
    ImGui::EndTable();
  }
  ImGui::End();
}

}  // namespace shardlab::gui
