// The projected run for the views, its cache and the map between the two
// clocks (see projected_run.h).
#include "app/gui/logic/projected_run.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "app/gui/logic/compare_logic.h"
#include "core/predict/projection.h"

namespace shardlab::gui {

namespace {

// What names one span of a rank's program on either clock: everything but its
// times, and how many spans so named came before it (the same op repeats).
using SpanKey = std::tuple<int, int, int, int, int, uint64_t, uint64_t, int, int64_t, int>;

template <typename F>
void for_each_keyed(const RankData& r, F f) {
  for (int l = 0; l < 2; ++l) {
    std::map<SpanKey, int> seen;
    for (const Span& s : r.lanes[l].spans) {
      SpanKey k{l,         static_cast<int>(s.kind),
                s.layer,   s.micro_batch,
                s.step,    s.op,
                s.flow_id, s.peer,
                s.bytes,   0};
      std::get<9>(k) = seen[k]++;
      f(k, s);
    }
  }
}

// Measured time -> projected time on one rank, through the span boundaries both
// clocks share: linear between them, scaled from 0 before the first, the same
// distance past the last after it (the frees at teardown keep their order).
class RankClock {
 public:
  RankClock(const RankData& measured, const RankData& projected) {
    std::map<SpanKey, std::pair<int64_t, int64_t>> at;
    for_each_keyed(projected, [&](const SpanKey& k, const Span& s) {
      at[k] = {s.t_begin_ns, s.t_end_ns};
    });
    for_each_keyed(measured, [&](const SpanKey& k, const Span& s) {
      const auto it = at.find(k);
      if (it == at.end()) return;
      points_.emplace_back(static_cast<double>(s.t_begin_ns),
                           static_cast<double>(it->second.first));
      points_.emplace_back(static_cast<double>(s.t_end_ns), static_cast<double>(it->second.second));
    });
    std::sort(points_.begin(), points_.end());
    // A time later on one clock is never earlier on the other.
    for (size_t i = 1; i < points_.size(); ++i)
      points_[i].second = std::max(points_[i].second, points_[i - 1].second);
  }

  int64_t operator()(int64_t t_ns) const {
    const double t = static_cast<double>(t_ns);
    if (points_.empty()) return t_ns;
    const auto it = std::upper_bound(points_.begin(), points_.end(), t,
                                     [](double v, const auto& p) { return v < p.first; });
    double out;
    if (it == points_.end()) {
      out = points_.back().second + (t - points_.back().first);
    } else if (it == points_.begin()) {
      out = it->first > 0 ? it->second * std::max(0.0, t) / it->first : it->second;
    } else {
      const auto& [a, pa] = *(it - 1);
      const auto& [b, pb] = *it;
      out = pa + (t - a) / (b - a) * (pb - pa);
    }
    return std::llround(out);
  }

 private:
  std::vector<std::pair<double, double>> points_;  // (measured, projected), sorted
};

}  // namespace

void projected_run_data(RunData& out, const RunData& measured, const RunResult& projected) {
  ingest_result(out, projected);
  const int n = std::min(out.world, measured.world);
  for (int r = 0; r < n; ++r) {
    const RankClock clock(measured.ranks[r], out.ranks[r]);
    std::vector<AllocEvent> allocs = measured.ranks[r].allocs;
    for (AllocEvent& e : allocs) e.t_ns = clock(e.t_ns);
    append(out, r, {}, std::move(allocs));
  }
}

std::vector<double> clock_marks(const RunData& d) {
  std::vector<double> m{0.0, d.view_begin()};
  for (int64_t b : step_bounds(d)) m.push_back(static_cast<double>(b));
  m.push_back(static_cast<double>(d.t_end));
  // Marks never go back (a run cut short can end before its last span's end).
  for (size_t i = 1; i < m.size(); ++i) m[i] = std::max(m[i], m[i - 1]);
  return m;
}

double map_clock(const std::vector<double>& from, const std::vector<double>& to, double t) {
  const size_t n = std::min(from.size(), to.size());
  if (n == 0) return t;
  // The last mark at or before t: the segment [from[k], from[k+1]) holds t.
  const size_t k =
      static_cast<size_t>(std::upper_bound(from.begin(), from.begin() + n, t) - from.begin());
  if (k == 0) return to[0] + (t - from[0]);
  if (k == n) return to[n - 1] + (t - from[n - 1]);
  const double a = from[k - 1], b = from[k];
  return to[k - 1] + (t - a) / (b - a) * (to[k] - to[k - 1]);
}

bool projection_stale(const ProjectedRun& p, const RunResult* finished, const RunData& measured,
                      bool running, const std::string& link) {
  if (p.status == ProjectionStatus::none || p.link != link) return true;
  if (running) return p.status != ProjectionStatus::running;
  if (!finished) return p.status != ProjectionStatus::no_run;
  return p.of != finished || p.of_version != measured.version;
}

bool update_projection(ProjectedRun& p, const RunResult* finished, const RunData& measured,
                       bool running, const std::string& link) {
  if (!projection_stale(p, finished, measured, running, link)) return false;
  p.link = link;
  p.of = nullptr;
  p.of_version = 0;
  p.error.clear();
  p.measured_marks.clear();
  p.projected_marks.clear();
  if (running || !finished) {
    p.status = running ? ProjectionStatus::running : ProjectionStatus::no_run;
    return true;
  }
  p.of = finished;
  p.of_version = measured.version;
  ++p.projections;
  try {
    ProjectionOptions o;
    o.devices = finished->cfg.world;
    o.link = parse_link(link);
    const Projection proj = project(*finished, o);
    projected_run_data(p.data, measured, proj.run);
    p.link_label = proj.link.name;
    p.median_step_ms = proj.median_step_ms;
    p.gpu = finished->placement.kind == DeviceKind::cuda;
    p.measured_marks = clock_marks(measured);
    p.projected_marks = clock_marks(p.data);
    p.status = ProjectionStatus::ok;
  } catch (const std::exception& e) {
    p.status = ProjectionStatus::failed;
    p.error = e.what();
  }
  return true;
}

void keep_clock(Playhead& p, bool projected, const ProjectedRun& pr) {
  projected = projected && pr.ok();
  if (p.projected == projected) return;
  // Without a projection there is no other clock: the time stays as it is.
  if (pr.ok())
    p.t = projected ? map_clock(pr.measured_marks, pr.projected_marks, p.t)
                    : map_clock(pr.projected_marks, pr.measured_marks, p.t);
  p.projected = projected;
}

void refresh_projection(ProjectedRun& p, Playhead& playhead, const RunResult* finished,
                        const RunData& measured, bool running, const std::string& link, bool wanted,
                        bool clock_projected) {
  wanted = wanted || clock_projected;
  if (playhead.projected && (!wanted || projection_stale(p, finished, measured, running, link)))
    keep_clock(playhead, false, p);
  if (wanted) update_projection(p, finished, measured, running, link);
  keep_clock(playhead, wanted && clock_projected, p);
}

std::vector<std::string> link_choices(const std::string& current) {
  std::vector<std::string> out = link_preset_names();
  if (!current.empty() && std::find(out.begin(), out.end(), current) == out.end())
    out.push_back(current);
  return out;
}

double projected_offset(const RunData& measured, const RunData& projected, int step) {
  auto begin_of = [](const RunData& d, int k) {
    return k >= 0 && static_cast<size_t>(k) < d.step_begin.size() ? d.step_begin[k] : -1;
  };
  const int64_t m = begin_of(measured, step), p = begin_of(projected, step);
  if (m >= 0 && p >= 0) return static_cast<double>(p - m);
  return projected.steps_begin() - measured.steps_begin();
}

std::string projection_reason(const ProjectedRun& p, const Tr& tr) {
  switch (p.status) {
    case ProjectionStatus::running:
      return tr("As on N devices: the run is still going; it is projected when it has finished.");
    case ProjectionStatus::none:
    case ProjectionStatus::no_run:
      return tr("As on N devices: no finished run to project yet; Run (R) one to the end.");
    case ProjectionStatus::failed:
      return strf(tr("As on N devices: this run cannot be projected: %s"), p.error.c_str());
    case ProjectionStatus::ok:
      break;
  }
  return "";
}

std::string measured_caption(const RunResult& r, int cores, const Tr& tr) {
  const int world = r.cfg.world;
  std::string s;
  if (r.placement.kind == DeviceKind::cuda) {
    std::set<int> gpus(r.placement.gpu_of_rank.begin(), r.placement.gpu_of_rank.end());
    s = strf(tr("measured here \xC2\xB7 %d ranks on %d GPU(s)"), world,
             std::max<int>(1, static_cast<int>(gpus.size())));
  } else {
    s = strf(world == 1 ? tr("measured here \xC2\xB7 %d rank on %d cores")
                        : tr("measured here \xC2\xB7 %d ranks on %d cores"),
             world, cores);
  }
  if (r.median_step_ms > 0) s += " \xC2\xB7 " + strf(tr("median step %.2f ms"), r.median_step_ms);
  return s;
}

std::string projected_caption(const ProjectedRun& p, const Tr& tr) {
  std::string s = strf(tr("as on %d \xC3\x97 %s, %s"), p.data.cfg.world,
                       p.gpu ? tr("GPU") : tr("CPU core"), p.link_label.c_str());
  if (p.median_step_ms > 0) s += " \xC2\xB7 " + strf(tr("median step %.2f ms"), p.median_step_ms);
  return s;
}

}  // namespace shardlab::gui
