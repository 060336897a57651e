// The platform layer: a GLFW window with an OpenGL 3.3 context and Dear ImGui
// on it, fonts rebuilt when the presenter font scale changes, full screen, and
// PNGs of the back buffer. Everything GLFW/GL lives here and in gui_main.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <imgui.h>

#include "app/gui/app_state.h"
#include "app/gui/logic/key_taps.h"

struct GLFWwindow;

namespace shardlab::gui {

struct WindowOptions {
  int width = 1600, height = 1000;
  bool vsync = true;
  bool ignore_mouse =
      false;  // headless pictures: no hover tooltips from where Xvfb left the pointer
};

class Window {
 public:
  // Null with `error` set when there is no display (glfwInit fails) or no GL context.
  static std::unique_ptr<Window> open(const WindowOptions& opt, std::string* error);
  ~Window();
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  bool should_close() const;
  // Polls events, applies theme and font scale, starts the ImGui frame.
  void begin_frame(const PresenterState& p);
  // Renders; writes the frame to `png_path` when not empty (before the swap);
  // returns false with `error` when the PNG could not be written.
  bool end_frame(const std::string& png_path, std::string* error);
  void set_fullscreen(bool on);
  // Sleeps until an event arrives or `seconds` pass; true when an event ended it.
  bool wait_events(double seconds);
  int framebuffer_width() const;
  int framebuffer_height() const;
  // Every key press since the last frame, however short (begin_frame turns the page).
  const KeyTaps& taps() const { return taps_; }

 private:
  Window() = default;
  void load_fonts(float chrome_px, float content_px, const std::string& glyphs);
  ImFont* add_font(float px, const std::string& glyphs);

  GLFWwindow* win_ = nullptr;
  float font_px_ = 0;                // the content size the atlas was built for
  std::string glyphs_;               // the extra (CJK) characters it was built with
  std::vector<ImWchar> cjk_ranges_;  // must outlive the atlas build
  bool fonts_built_ = false;
  bool ignore_mouse_ = false;
  KeyTaps taps_;
  int saved_x_ = 0, saved_y_ = 0, saved_w_ = 0, saved_h_ = 0;
};

// Whether a window can be opened at all (glfwInit succeeds); `why` says why not.
bool display_available(std::string* why);

}  // namespace shardlab::gui
