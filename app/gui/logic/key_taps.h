// Key presses as the window received them, each counted once, however short:
// a presenter's clicker taps Page Down for ~10 ms, and a tap that begins and
// ends between two frames never shows in ImGui 1.86's key-down state.
#pragma once

#include <vector>

#include "app/gui/logic/lesson_player.h"

namespace shardlab::gui {

// GLFW's key codes for the keys the logic reads (window.cpp checks they match).
constexpr int kKeyEnter = 257, kKeyPageUp = 266, kKeyPageDown = 267, kKeyKeypadEnter = 335;

class KeyTaps {
 public:
  // From the window's key callback: GLFW's key and action (0 release, 1 press, 2 repeat).
  void on_key(int key, int action);
  // At the start of a frame: the presses since the last one become this frame's.
  void next_frame();
  // How often `key` was pressed in this frame's batch (repeats not counted).
  int presses(int key) const;
  const std::vector<int>& frame() const { return frame_; }  // this frame's presses, in order

 private:
  std::vector<int> pending_, frame_;
};

// The lesson keys of one frame, in the order pressed: each Page Down / Page Up /
// Enter tap drives the player once. Returns how many did something.
int drive_lesson_keys(LessonPlayer& p, const KeyTaps& taps, bool typing);

}  // namespace shardlab::gui
