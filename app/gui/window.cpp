// GLFW + OpenGL3 + Dear ImGui setup, the frame's render and PNG capture (see window.h).
#include "app/gui/window.h"

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>
#include <stb/stb_image_write.h>

#include "app/gui/panels.h"
#include "core/io/atomic_file.h"

namespace shardlab::gui {

namespace {

constexpr float kBaseFontPx = 16.0f;
constexpr const char* kFontPaths[] = {"assets/fonts/DejaVuSans.ttf",
                                      "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"};
// Chinese (the lessons): a Debian font, merged over the Latin one. Noto's .ttc
// holds the Japanese face first; index 2 is Simplified Chinese.
struct CjkFont {
  const char* path;
  int index;
};
constexpr CjkFont kCjkFonts[] = {{"/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", 0},
                                 {"/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc", 2}};
// Latin, Greek (Ψ in the ZeRO formulas), punctuation (·, –), arrows (→), math
// operators (−, ≈, ≤ in the lessons' formulas), shapes.
constexpr ImWchar kGlyphRanges[] = {0x0020, 0x00FF, 0x0370, 0x03FF, 0x2000, 0x206F, 0x2190,
                                    0x21FF, 0x2200, 0x22FF, 0x25A0, 0x25FF, 0};

static_assert(kKeyEnter == GLFW_KEY_ENTER && kKeyPageUp == GLFW_KEY_PAGE_UP &&
                  kKeyPageDown == GLFW_KEY_PAGE_DOWN && kKeyKeypadEnter == GLFW_KEY_KP_ENTER,
              "key_taps.h's codes are GLFW's");

std::string g_glfw_error;  // written by GLFW's error callback, read right after the failing call

void on_glfw_error(int code, const char* text) {
  g_glfw_error = std::to_string(code) + ": " + (text ? text : "");
}

}  // namespace

bool display_available(std::string* why) {
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit()) {
    if (why) *why = g_glfw_error;
    return false;
  }
  glfwTerminate();
  return true;
}

std::unique_ptr<Window> Window::open(const WindowOptions& opt, std::string* error) {
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit()) {
    *error = "cannot open a display (GLFW error " + g_glfw_error + ")";
    return nullptr;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GL_TRUE);
  int w = opt.width, h = opt.height;
  if (const GLFWvidmode* mode = glfwGetVideoMode(glfwGetPrimaryMonitor())) {
    w = std::min(w, mode->width);
    h = std::min(h, mode->height);
  }
  GLFWwindow* win = glfwCreateWindow(w, h, "Shardlab", nullptr, nullptr);
  if (!win) {
    *error = "cannot create an OpenGL 3.3 window (GLFW error " + g_glfw_error + ")";
    glfwTerminate();
    return nullptr;
  }
  glfwMakeContextCurrent(win);
  glfwSwapInterval(opt.vsync ? 1 : 0);

  std::unique_ptr<Window> out(new Window());
  out->win_ = win;
  out->ignore_mouse_ = opt.ignore_mouse;
  // Ours first: ImGui's backend, installed next, calls it before its own. Every
  // press is counted, even one released before the frame that would see it.
  glfwSetWindowUserPointer(win, out.get());
  glfwSetKeyCallback(win, [](GLFWwindow* w, int key, int, int action, int) {
    static_cast<Window*>(glfwGetWindowUserPointer(w))->taps_.on_key(key, action);
  });

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // no imgui.ini next to the user's files
  ImGui_ImplGlfw_InitForOpenGL(win, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");
  return out;
}

Window::~Window() {
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(win_);
  glfwTerminate();
}

bool Window::should_close() const {
  return glfwWindowShouldClose(win_);
}
int Window::framebuffer_width() const {
  int w, h;
  glfwGetFramebufferSize(win_, &w, &h);
  return w;
}
int Window::framebuffer_height() const {
  int w, h;
  glfwGetFramebufferSize(win_, &w, &h);
  return h;
}

// Two fonts in one atlas: Fonts[0] the chrome's (menus, run bar, tabs, replay
// bar) at the base size, Fonts[1] the content's (the view and the lesson) at the
// presenter's scale. Presenter mode and Ctrl +/- grow what the room reads, not
// the controls around it (which took the screen at 2×).
ImFont* Window::add_font(float px, const std::string& glyphs) {
  ImGuiIO& io = ImGui::GetIO();
  ImFont* font = nullptr;
  for (const char* path : kFontPaths) {
    if (!std::filesystem::exists(path)) continue;
    ImFontConfig cfg;
    cfg.OversampleH = 2;
    font = io.Fonts->AddFontFromFileTTF(path, px, &cfg, kGlyphRanges);
    if (font) break;
  }
  if (font && !glyphs.empty()) {
    // Only the characters the texts use: a few hundred glyphs, not the ~20k of
    // the CJK range (16 MiB of atlas and ~0.4 s per rebuild at every Ctrl +/-).
    for (const CjkFont& f : kCjkFonts) {
      if (!std::filesystem::exists(f.path)) continue;
      ImFontConfig cfg;
      cfg.MergeMode = true;
      cfg.FontNo = f.index;
      cfg.OversampleH = 1;
      if (io.Fonts->AddFontFromFileTTF(f.path, px, &cfg, cjk_ranges_.data())) break;
    }
  }
  if (!font) {
    // No TTF: ImGui's built-in bitmap font, scaled (blurry when big, but readable).
    ImFontConfig cfg;
    cfg.SizePixels = std::round(px);
    font = io.Fonts->AddFontDefault(&cfg);
  }
  return font;
}

void Window::load_fonts(float chrome_px, float content_px, const std::string& glyphs) {
  ImGuiIO& io = ImGui::GetIO();
  io.Fonts->Clear();
  if (!glyphs.empty()) {
    ImFontGlyphRangesBuilder builder;
    builder.AddText(glyphs.c_str());
    ImVector<ImWchar> ranges;
    builder.BuildRanges(&ranges);
    cjk_ranges_.assign(ranges.begin(), ranges.end());
  }
  io.FontDefault = add_font(chrome_px, glyphs);
  add_font(content_px, glyphs);
  io.Fonts->Build();
  if (fonts_built_) {
    // The backend made the first texture itself; later sizes replace it here.
    ImGui_ImplOpenGL3_DestroyFontsTexture();
    ImGui_ImplOpenGL3_CreateFontsTexture();
  }
  fonts_built_ = true;
  font_px_ = content_px;
  glyphs_ = glyphs;
}

void Window::begin_frame(const PresenterState& p) {
  glfwPollEvents();
  taps_.next_frame();
  const float px = std::round(kBaseFontPx * p.font_scale);
  if (px != font_px_ || p.font_glyphs != glyphs_) load_fonts(kBaseFontPx, px, p.font_glyphs);
  apply_theme(p);
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  if (ignore_mouse_) ImGui::GetIO().MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
  ImGui::NewFrame();
}

bool Window::end_frame(const std::string& png_path, std::string* error) {
  ImGui::Render();
  int w, h;
  glfwGetFramebufferSize(win_, &w, &h);
  glViewport(0, 0, w, h);
  const ImVec4 bg = ImGui::GetStyle().Colors[ImGuiCol_WindowBg];
  glClearColor(bg.x, bg.y, bg.z, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  bool ok = true;
  if (!png_path.empty()) {
    // Read the back buffer before the swap: after it, its content is undefined.
    std::vector<unsigned char> pixels(static_cast<size_t>(w) * h * 3);
    glReadBuffer(GL_BACK);
    glPixelStorei(GL_PACK_ALIGNMENT, 1);
    glReadPixels(0, 0, w, h, GL_RGB, GL_UNSIGNED_BYTE, pixels.data());
    stbi_flip_vertically_on_write(1);
    // Encoded in memory, then written by the one atomic writer (stb's own file
    // writer would truncate the old file first and follow a link at the name).
    std::string png;
    const auto append = [](void* context, void* data, int size) {
      static_cast<std::string*>(context)->append(static_cast<const char*>(data),
                                                 static_cast<size_t>(size));
    };
    if (!stbi_write_png_to_func(append, &png, w, h, 3, pixels.data(), w * 3)) {
      if (error) *error = "cannot write PNG '" + png_path + "': encoding failed";
      ok = false;
    } else if (!write_file_atomic(png_path, png, error, false, "PNG")) {
      ok = false;
    }
  }
  glfwSwapBuffers(win_);
  return ok;
}

bool Window::wait_events(double seconds) {
  if (seconds <= 0) return false;
  const double t0 = glfwGetTime();
  glfwWaitEventsTimeout(seconds);
  // GLFW does not say what woke it: an early return was an event.
  return glfwGetTime() - t0 < seconds * 0.95;
}

void Window::set_fullscreen(bool on) {
  GLFWmonitor* monitor = glfwGetPrimaryMonitor();
  const GLFWvidmode* mode = monitor ? glfwGetVideoMode(monitor) : nullptr;
  if (on && mode) {
    glfwGetWindowPos(win_, &saved_x_, &saved_y_);
    glfwGetWindowSize(win_, &saved_w_, &saved_h_);
    glfwSetWindowMonitor(win_, monitor, 0, 0, mode->width, mode->height, mode->refreshRate);
  } else if (!on && saved_w_ > 0) {
    glfwSetWindowMonitor(win_, nullptr, saved_x_, saved_y_, saved_w_, saved_h_, 0);
  }
}

}  // namespace shardlab::gui
