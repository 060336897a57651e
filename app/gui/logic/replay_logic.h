// The replay playhead: a real step takes milliseconds, so recorded runs are
// replayed at 1/1000× to 1× and can be stepped event by event.
#pragma once
#include <cstdint>
#include <vector>

#include "app/gui/logic/run_data.h"

namespace shardlab::gui {

inline constexpr double kMinSpeed = 1e-3, kMaxSpeed = 1.0;

struct Playhead {
  double t = 0;          // ns since the run's start
  bool playing = false;  // advancing with wall time
  bool live = true;      // follows the newest data while a run is going
  double speed = 1e-2;   // run time per wall time
  // t is on the projected run's clock ("as on N devices", projected_run.h),
  // not the measured one; a new playhead starts on the measured clock.
  bool projected = false;
};

// Moves a playing playhead by `wall_seconds` × speed; stops (and pauses) at t_end.
void advance(Playhead& p, double wall_seconds, double t_end);
// The first event strictly after / before t (t itself when there is none).
double next_event(const std::vector<int64_t>& times, double t);
double prev_event(const std::vector<int64_t>& times, double t);
// A moment 35% into the next collective (or send) that starts after t on any
// rank, or t when there is none: where the cluster view shows pieces in flight
// (an all-reduce is drawn as reduce-scatter then all-gather: 35% is well inside
// its first half, away from the turn at 50% where pieces sit on their cards).
double next_collective(const RunData& d, double t);

// Slider position in [0, 1] <-> speed on a log scale from kMinSpeed to kMaxSpeed.
double speed_from_slider(double s);
double slider_from_speed(double speed);

}  // namespace shardlab::gui
