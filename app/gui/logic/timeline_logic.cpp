// Viewport math and span culling/folding (see timeline_logic.h).
#include "app/gui/logic/timeline_logic.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "app/gui/logic/format.h"
#include "app/gui/logic/palette.h"

namespace shardlab::gui {

void zoom_at(Viewport& vp, float x, double factor, double min_ns) {
  if (!(factor > 0)) return;
  const double t = vp.t_of(x);
  double span = (vp.t_end - vp.t_begin) / factor;
  span = std::max(span, min_ns);
  const double frac = (x - vp.x0) / vp.width;
  vp.t_begin = t - frac * span;
  vp.t_end = vp.t_begin + span;
}

void pan_pixels(Viewport& vp, float dx) {
  const double dt = dx / vp.px_per_ns();
  vp.t_begin -= dt;
  vp.t_end -= dt;
}

void fit(Viewport& vp, double t_begin, double t_end, double margin) {
  if (!(t_end > t_begin)) t_end = t_begin + 1e6;
  const double pad = (t_end - t_begin) * margin;
  vp.t_begin = t_begin - pad;
  vp.t_end = t_end + pad;
}

std::pair<size_t, size_t> span_window(const LaneData& lane, double t_begin, double t_end) {
  // First span whose running max end passes t_begin: everything before it ended earlier.
  const auto first =
      std::upper_bound(lane.max_end.begin(), lane.max_end.end(), t_begin,
                       [](double t, int64_t e) { return t < static_cast<double>(e); });
  const auto last = std::lower_bound(lane.spans.begin(), lane.spans.end(), t_end,
                                     [](const Span& s, double t) { return s.t_begin_ns < t; });
  const size_t f = static_cast<size_t>(first - lane.max_end.begin());
  const size_t l = static_cast<size_t>(last - lane.spans.begin());
  return {f, std::max(f, l)};
}

void visible_spans(const LaneData& lane, const Viewport& vp, float min_px,
                   std::vector<DrawSpan>& out) {
  const auto [first, last] = span_window(lane, vp.t_begin, vp.t_end);
  const double ppn = vp.px_per_ns();
  const double min_ns = min_px / ppn;
  const std::vector<Span>& s = lane.spans;
  size_t i = first;
  while (i < last) {
    const Span& a = s[i];
    if (a.t_end_ns < vp.t_begin) {  // inside the window only because of an earlier long span
      ++i;
      continue;
    }
    const double w = (a.t_end_ns - a.t_begin_ns) * ppn;
    if (w >= min_px) {
      out.push_back(
          {vp.x_of(a.t_begin_ns), vp.x_of(a.t_end_ns), static_cast<uint32_t>(i), 1, a.kind});
      ++i;
      continue;
    }
    // Fold: take every span that ends within min_ns of the fold's end in one
    // binary search, then look at the next one to decide whether it joins.
    std::array<uint32_t, kNumSpanKinds> votes{};
    votes[static_cast<int>(a.kind)]++;
    const size_t fold_first = i;
    const double fold_begin = static_cast<double>(a.t_begin_ns);
    double fold_end = static_cast<double>(a.t_end_ns);
    ++i;
    while (i < last) {
      const double limit = fold_end + min_ns;
      const auto jump =
          std::upper_bound(lane.max_end.begin() + i, lane.max_end.begin() + last, limit,
                           [](double t, int64_t e) { return t < static_cast<double>(e); });
      const size_t j = static_cast<size_t>(jump - lane.max_end.begin());
      if (j > i) {
        // Spans i..j-1 end before `limit` and begin after the fold's start: all inside.
        fold_end = std::max(fold_end, static_cast<double>(lane.max_end[j - 1]));
        votes[static_cast<int>(s[j - 1].kind)]++;
        i = j;
      }
      if (i >= last) break;
      const Span& n = s[i];
      const bool narrow = (n.t_end_ns - n.t_begin_ns) * ppn < min_px;
      if (!narrow || n.t_begin_ns > fold_end + min_ns) break;
      fold_end = std::max(fold_end, static_cast<double>(n.t_end_ns));
      votes[static_cast<int>(n.kind)]++;
      ++i;
    }
    DrawSpan d;
    d.first = static_cast<uint32_t>(fold_first);
    d.count = static_cast<uint32_t>(i - fold_first);
    d.x0 = vp.x_of(fold_begin);
    d.x1 = std::max(vp.x_of(fold_end), d.x0 + min_px);
    d.kind =
        d.count == 1
            ? a.kind
            : static_cast<SpanKind>(std::max_element(votes.begin(), votes.end()) - votes.begin());
    out.push_back(d);
  }
}

std::string span_label(const Span& s, bool long_form) {
  std::string out = kind_short(s.kind);
  const bool compute = s.kind == SpanKind::forward || s.kind == SpanKind::backward;
  if (compute && s.micro_batch >= 0) {
    out += std::to_string(s.micro_batch);  // "F3": micro-batch 3
    if (long_form && s.layer >= 0) out += " L" + std::to_string(s.layer);
  } else {
    if (s.layer >= 0) out += " L" + std::to_string(s.layer);
    if (!compute && s.micro_batch >= 0) out += " mb" + std::to_string(s.micro_batch);
  }
  if (long_form && s.bytes > 0) out += " \xC2\xB7 " + format_bytes(static_cast<double>(s.bytes));
  return out;
}

namespace {
using Interval = std::pair<int64_t, int64_t>;

// Merged intervals of the lane's spans of `step` inside [t_from, t_to).
std::vector<Interval> step_union(const LaneData& lane, int step, int64_t t_from, int64_t t_to) {
  std::vector<Interval> out;
  const auto [first, last] =
      span_window(lane, static_cast<double>(t_from), static_cast<double>(t_to));
  for (size_t i = first; i < last; ++i) {
    const Span& s = lane.spans[i];
    if (s.step != step) continue;
    if (!out.empty() && s.t_begin_ns <= out.back().second)
      out.back().second = std::max(out.back().second, s.t_end_ns);
    else
      out.push_back({s.t_begin_ns, s.t_end_ns});
  }
  return out;
}

int64_t length(const std::vector<Interval>& v) {
  int64_t n = 0;
  for (const Interval& i : v) n += i.second - i.first;
  return n;
}
}  // namespace

StepBreakdown step_breakdown(const RankData& rank, int step, int64_t t_from, int64_t t_to) {
  StepBreakdown b;
  const std::vector<Interval> cp = step_union(rank.lane(Lane::compute), step, t_from, t_to);
  const std::vector<Interval> cm = step_union(rank.lane(Lane::comm), step, t_from, t_to);
  if (cp.empty() && cm.empty()) return b;
  b.begin = INT64_MAX;
  b.end = INT64_MIN;
  for (const auto* v : {&cp, &cm})
    if (!v->empty()) {
      b.begin = std::min(b.begin, v->front().first);
      b.end = std::max(b.end, v->back().second);
    }
  b.compute = length(cp);
  b.comm = length(cm);
  // Both lists are sorted and disjoint: sweep them together for the overlap.
  size_t i = 0, j = 0;
  while (i < cp.size() && j < cm.size()) {
    const int64_t lo = std::max(cp[i].first, cm[j].first),
                  hi = std::min(cp[i].second, cm[j].second);
    if (hi > lo) b.overlap += hi - lo;
    (cp[i].second < cm[j].second) ? ++i : ++j;
  }
  return b;
}

int hit_test(const std::vector<DrawSpan>& blocks, float x, float slop) {
  // Blocks are in begin order; prefer an exact hit, else the nearest within slop.
  int best = -1;
  float best_d = slop;
  for (size_t k = 0; k < blocks.size(); ++k) {
    const DrawSpan& b = blocks[k];
    if (x >= b.x0 && x <= b.x1) return static_cast<int>(k);
    const float d = x < b.x0 ? b.x0 - x : x - b.x1;
    if (d <= best_d) {
      best_d = d;
      best = static_cast<int>(k);
    }
  }
  return best;
}

}  // namespace shardlab::gui
