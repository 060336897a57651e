// Key presses counted per frame (see key_taps.h).
#include "app/gui/logic/key_taps.h"

#include <algorithm>

namespace shardlab::gui {

void KeyTaps::on_key(int key, int action) {
  if (action == 1) pending_.push_back(key);  // a press; its release may come before the frame
}

void KeyTaps::next_frame() {
  frame_.swap(pending_);
  pending_.clear();
}

int KeyTaps::presses(int key) const {
  return static_cast<int>(std::count(frame_.begin(), frame_.end(), key));
}

int drive_lesson_keys(LessonPlayer& p, const KeyTaps& taps, bool typing) {
  int done = 0;
  for (int key : taps.frame()) {
    if (key == kKeyPageDown) done += press_lesson_key(p, LessonKey::page_down, typing);
    if (key == kKeyPageUp) done += press_lesson_key(p, LessonKey::page_up, typing);
    if (key == kKeyEnter || key == kKeyKeypadEnter)
      done += press_lesson_key(p, LessonKey::enter, typing);
  }
  return done;
}

}  // namespace shardlab::gui
