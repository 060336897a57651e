// Playhead movement (see replay_logic.h).
#include "app/gui/logic/replay_logic.h"

#include <algorithm>
#include <cmath>

namespace shardlab::gui {

void advance(Playhead& p, double wall_seconds, double t_end) {
  if (!p.playing) return;
  p.t += wall_seconds * p.speed * 1e9;
  if (p.t >= t_end) {
    p.t = t_end;
    p.playing = false;
  }
}

double next_event(const std::vector<int64_t>& times, double t) {
  const auto it = std::upper_bound(times.begin(), times.end(), t,
                                   [](double v, int64_t e) { return v < static_cast<double>(e); });
  return it == times.end() ? t : static_cast<double>(*it);
}

double prev_event(const std::vector<int64_t>& times, double t) {
  const auto it = std::lower_bound(times.begin(), times.end(), t,
                                   [](int64_t e, double v) { return static_cast<double>(e) < v; });
  return it == times.begin() ? t : static_cast<double>(*(it - 1));
}

double next_collective(const RunData& d, double t) {
  double best = -1;
  for (const RankData& r : d.ranks) {
    const std::vector<Span>& lane = r.lane(Lane::comm).spans;
    auto it = std::upper_bound(lane.begin(), lane.end(), t, [](double v, const Span& s) {
      return v < static_cast<double>(s.t_begin_ns);
    });
    for (; it != lane.end(); ++it) {
      if (it->kind == SpanKind::recv || it->kind == SpanKind::barrier) continue;
      const double mid = static_cast<double>(it->t_begin_ns) +
                         0.35 * static_cast<double>(it->t_end_ns - it->t_begin_ns);
      if (best < 0 || mid < best) best = mid;
      break;
    }
  }
  return best < 0 ? t : best;
}

double speed_from_slider(double s) {
  s = std::clamp(s, 0.0, 1.0);
  return kMinSpeed * std::pow(kMaxSpeed / kMinSpeed, s);
}

double slider_from_speed(double speed) {
  speed = std::clamp(speed, kMinSpeed, kMaxSpeed);
  return std::log(speed / kMinSpeed) / std::log(kMaxSpeed / kMinSpeed);
}

}  // namespace shardlab::gui
