// FramePacer: the app's frame rate as a function of what is moving.
#include "app/gui/logic/frame_pacing.h"

#include <algorithm>

namespace shardlab::gui {

double FramePacer::wait_seconds(bool animating, double since_frame_s) {
  if (animating) {
    // The frames after it stops show the last state settled.
    extra_frames_ = kFramesAfterEvent;
    return std::max(0.0, kFrameSeconds - since_frame_s);
  }
  if (extra_frames_ > 0) {
    --extra_frames_;
    return 0;
  }
  return kIdleSeconds;
}

void FramePacer::woke(bool by_event) {
  if (by_event) extra_frames_ = kFramesAfterEvent;
}

}  // namespace shardlab::gui
