// What the timeline draws: the viewport (time <-> pixels), the visible spans of
// a lane after culling and folding, labels, hit tests and zoom/pan math.
// Tracy's recipe: binary-search the visible window in sorted spans, fold runs
// narrower than a few pixels into one block, then draw the short list.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "app/gui/logic/run_data.h"

namespace shardlab::gui {

// One viewport is shared by every row (timeline lanes, memory charts).
struct Viewport {
  double t_begin = 0, t_end = 1e6;  // ns since the run's start
  float x0 = 0, width = 1;          // screen pixels
  double px_per_ns() const { return width / (t_end - t_begin); }
  float x_of(double t) const { return x0 + static_cast<float>((t - t_begin) * px_per_ns()); }
  double t_of(float x) const { return t_begin + (x - x0) / px_per_ns(); }
};

// Zoom by `factor` (> 1 zooms in) keeping the time under pixel `x` in place;
// the window never gets narrower than `min_ns`.
void zoom_at(Viewport& vp, float x, double factor, double min_ns = 1000);
void pan_pixels(Viewport& vp, float dx);  // content follows the mouse by dx pixels
void fit(Viewport& vp, double t_begin, double t_end, double margin = 0.02);

// A span, or a run of spans folded into one block.
struct DrawSpan {
  float x0 = 0, x1 = 0;
  uint32_t first = 0;               // index into the lane's spans
  uint32_t count = 1;               // > 1: folded
  SpanKind kind = SpanKind::other;  // folded: the kind met most among the spans looked at
  bool folded() const { return count > 1; }
};

// Appends the visible spans of `lane` to `out`. Spans narrower than `min_px`
// fold with their neighbours while the gap between them is under `min_px`;
// the cost is O(visible blocks × log n), not O(spans in view).
void visible_spans(const LaneData& lane, const Viewport& vp, float min_px,
                   std::vector<DrawSpan>& out);

// Index range [first, last) of spans that may intersect [t_begin, t_end).
std::pair<size_t, size_t> span_window(const LaneData& lane, double t_begin, double t_end);

// "F3"/"B3" for a micro-batch's forward/backward, "F L2" for a layer's,
// "AR L4" for a collective; `long_form` adds the bytes ("AR L4 · 1.00 MiB").
std::string span_label(const Span& s, bool long_form);

// Where one rank's time went in one step: the union of its compute spans and
// of its comm spans, how much of the comm ran while computing (hidden), and
// the rest (waiting). Durations in ns.
struct StepBreakdown {
  int64_t begin = 0, end = 0;  // the rank's first span begin and last span end in the step
  int64_t compute = 0, comm = 0, overlap = 0;
  int64_t duration() const { return end - begin; }
  int64_t compute_only() const { return compute - overlap; }
  int64_t comm_only() const { return comm - overlap; }
  int64_t idle() const { return duration() - compute - comm + overlap; }
};
StepBreakdown step_breakdown(const RankData& rank, int step, int64_t t_from, int64_t t_to);

// The block under pixel x (with `slop` pixels of tolerance), or -1.
int hit_test(const std::vector<DrawSpan>& blocks, float x, float slop = 1.0f);

}  // namespace shardlab::gui
