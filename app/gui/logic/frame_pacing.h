// When the app draws: every frame (at most 30 a second) while something moves
// (a run, a replay, a lesson step); otherwise it sleeps until input, drawing a
// few frames after each event so hover and layout settle. An idle app must
// not take the cores whose times its runs measure.
#pragma once

namespace shardlab::gui {

class FramePacer {
 public:
  static constexpr double kFrameSeconds = 1.0 / 30;  // while animating
  static constexpr double kIdleSeconds = 5.0;        // longest sleep without input
  static constexpr int kFramesAfterEvent = 3;

  // Seconds to wait for input before the next frame (0: draw now).
  // `since_frame_s`: time since the last frame began.
  double wait_seconds(bool animating, double since_frame_s);
  // After the wait: whether input (or another event) ended it early.
  void woke(bool by_event);

 private:
  int extra_frames_ = kFramesAfterEvent;
};

}  // namespace shardlab::gui
