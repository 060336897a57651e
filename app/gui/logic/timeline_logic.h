// What the timeline draws: the viewport (time <-> pixels), the visible spans of
// a lane after culling and folding, labels, hit tests and zoom/pan math.
// Tracy's recipe: binary-search the visible window in sorted spans, fold runs
// narrower than a few pixels into one block, then draw the short list.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "app/gui/logic/i18n.h"
#include "app/gui/logic/run_data.h"
#include "core/record/span_label.h"

namespace shardlab {
struct RunResult;
}

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

// micro_batch_tag ("F3", "B3") and the English wording: core/record/span_label.h.
// "F3"/"B3" for a micro-batch's forward/backward, "F L2" for a layer's, "AR L4"
// for a collective, "send F3 →r1" / "recv F3 ←r0" for pipeline messages;
// `long_form` adds the layer and the bytes ("AR L4 · 1.00 MiB"); words in `tr`'s language.
std::string span_label(const Span& s, bool long_form, const Tr& tr = Tr{},
                       const HoldsLayer& holds = {});

// A run of consecutive compute spans that are one micro-batch's forward,
// recompute or backward on one stage (its layers, and the data load and loss
// that go with a forward): what a pipeline diagram draws as one block.
struct PhaseRun {
  uint32_t first = 0, count = 0;  // spans [first, first + count) of the lane
  int64_t t_begin = 0, t_end = 0;
  char letter = 'F';  // F, R (a forward run again for the backward: --recompute) or B
  int micro_batch = -1;
  int step = -1;   // the training step its spans belong to
  int chunk = -1;  // interleaved: the rank's model chunk ("F3.1"); -1: none
  std::string label() const {
    return letter + std::to_string(micro_batch) + (chunk >= 0 ? "." + std::to_string(chunk) : "");
  }
};
// The phase runs meeting [t_begin, t_end) of a compute lane; false (and no
// runs) when more than `max_spans` spans meet it (too small to label anyway).
// `chunk_of_layer` (interleaved; chunk_of_layers in core/parallel/pipeline.h):
// a run stays in one chunk, and is labelled with it.
bool phase_runs(const LaneData& lane, double t_begin, double t_end, size_t max_spans,
                std::vector<PhaseRun>& out, const std::vector<int>& chunk_of_layer = {});

// Runs too narrow for their own label, back to back, share one: "F0-4" for
// forwards of consecutive micro-batches, "F3 B3" for one micro-batch's forward
// and backward. `adjacent_px`: the widest gap that still counts as back to back.
struct RunGroup {
  size_t first = 0, count = 1;  // runs [first, first + count)
  std::string label;
};
std::vector<RunGroup> group_runs(const std::vector<PhaseRun>& runs, const Viewport& vp,
                                 float adjacent_px, float pad,
                                 const std::function<float(const std::string&)>& text_width);

// Label placement along one lane, left to right (requests in order of x0): a
// label goes centred inside its block when it fits (pushed right of the label
// before it if need be), else just right of the block when the free space up
// to `limit` (where the next block starts) holds it; otherwise it is left out.
// Placed labels never overlap each other or another block.
struct LabelRequest {
  float x0 = 0, x1 = 0;  // the block
  float width = 0;       // the label's
  float limit = 0;       // the next block's start (or the lane's end)
};
struct LabelPlace {
  bool shown = false;
  bool inside = false;
  float x = 0;  // left edge
};
std::vector<LabelPlace> place_labels(const std::vector<LabelRequest>& requests, float pad);

// The share of pixels [x0, x1) that spans [first, last) of `lane` cover: a
// label placed inside a pipeline block reads dark on the block's colour only
// where the block is solid; over the gaps between its spans it needs a patch.
float covered_share(const LaneData& lane, size_t first, size_t last, const Viewport& vp, float x0,
                    float x1);

// Greedy, left to right: keeps each box [x, x + w) that starts at least `gap`
// after the last kept one ends and ends before `x_max`.
std::vector<bool> keep_apart(const std::vector<std::pair<float, float>>& boxes, float gap,
                             float x_max);

// Axis ticks on 1-2-5 steps, with labels that differ from their neighbours at
// any zoom: the unit comes from the step, the decimals from the step too
// ("1.020 s, 1.025 s", not "1.02 s, 1.02 s"). `char_px` is the width of one
// label character; ticks are spaced so their labels do not touch.
struct AxisTick {
  double t = 0;
  std::string label;
};
std::vector<AxisTick> time_ticks(double t_begin, double t_end, float width_px, float char_px);

// Send -> recv lines in view. Up to `max_single` they are drawn one by one; past
// that they are bundled per (sender, receiver) into columns `bucket_px` wide,
// one line per bundle, so hundreds of messages read as a few strokes.
struct FlowLine {
  float xa = 0, xb = 0;  // the send's begin, the recv's end
  int from_rank = -1, to_rank = -1;
  uint32_t count = 1;  // > 1: a bundle
};
void flow_lines(const std::vector<Flow>& flows, const Viewport& vp, int max_single, float bucket_px,
                std::vector<FlowLine>& out);

// Vertical layout of the timeline rows (pixels from the top of the rows): the
// time axis, a band of step labels under it (labels never fall below the rows,
// where a short window would clip them), then per rank a compute lane and its
// comm lanes (one, or on a mesh one per axis: `lanes` in all).
struct RowsLayout {
  float font = 13, lane_h = 19, gap = 6, axis_h = 21, steps_h = 15;
  int world = 1;
  int lanes = 2;  // per rank
  float rows_top() const { return axis_h + steps_h; }
  float rank_y(int r) const { return rows_top() + r * (lanes * lane_h + gap); }  // compute lane
  float lane_y(int r, int lane) const { return rank_y(r) + lane * lane_h; }
  float height() const { return rows_top() + world * (lanes * lane_h + gap); }
};
RowsLayout rows_layout(float font, float lane_h, int world, bool axis, bool steps, int lanes = 2);
// The lane height for rows that get `avail_h` pixels: grows with the space,
// up to 4 lines of text; never lower than a line of text and its margins, so
// bigger fonts (presenter mode) get taller lanes.
float lane_height_for(float avail_h, float font, int world, bool axis, bool steps, int lanes = 2);
// How tall the rows are in a view `avail` pixels high that also shows tables
// `tables_h` high under them: everything when it fits (lanes growing up to 4
// lines of text); else the rows at their smallest readable lanes, the tables
// keeping at least `peek_h` (they scroll).
float rows_height(float avail, float font, int world, float tables_h, float peek_h, int lanes = 2);
// A text line's box in a lane: [y, y + font) centred; inside the lane for any
// lane from lane_height_for.
inline float text_y_in_lane(const RowsLayout& l, int r, int lane, float text_h) {
  return l.lane_y(r, lane) + (l.lane_h - text_h) * 0.5f;
}

// [begin, end) of `step` as the timeline shows it: step_window (wait_logic.h),
// falling back to the step's start and the next one's. {0, 0}: not recorded.
std::pair<double, double> step_range(const RunData& d, int step);
// The step a one-step view shows: the playhead's, or while a live run is
// followed, the last finished one (the newest is still half done).
int step_to_show(const RunData& d, double playhead_t, bool live);

// The schedule a pipeline's stages ran in step `step`, as the action language
// writes it (core/parallel/schedule.h), read off the first pipeline's compute
// lanes: per stage its actions, and which one the playhead `t` is in (or,
// between two, the last begun). Empty when the run has no stages.
struct ScheduleCell {
  std::string text;      // "F3", "B0"
  bool done = false;     // ended at or before t
  bool current = false;  // the playhead's action on this stage
};
struct ScheduleRow {
  int stage = 0;
  int rank = 0;  // the run's rank running it
  std::vector<ScheduleCell> cells;
};
std::vector<ScheduleRow> schedule_rows(const RunData& d, int step, double t);
// Step 0 of a run of several steps: every median step leaves it out
// (core/run/runner.h, steady_median), and the timeline says so.
bool is_warmup_step(const RunData& d, int step);
// "step 3", "step 0 (warm-up)", in `tr`'s language.
std::string step_label(const RunData& d, int step, const Tr& tr = Tr{});
// Step 0 (the warm-up) took over this many times a later step's median: on a
// GPU, where loading cuBLAS and the kernels makes it ~100x, it would squeeze
// every other step of "All steps" into a sliver. On a CPU it takes ~1-3x.
inline constexpr double kWarmupDwarfs = 5;
// Whether step 0 dwarfs the finished later steps (live: the newest is not finished).
bool warmup_dwarfs(const RunData& d, bool live);
// Where "All steps" begins: at step 1 when the warm-up dwarfs the other steps
// and the playhead is not inside it (a lesson pointing into step 0 keeps it in
// view), else where the training steps begin.
double all_steps_begin(const RunData& d, double playhead_t, bool live);
// Fits the viewport to all training steps (from all_steps_begin), or to
// step_to_show's step.
void fit_steps(Viewport& vp, const RunData& d, bool one_step, double playhead_t, bool live);

// The per-stage table of a finished pipeline run (core/predict/pipeline_analysis.h):
// the measured bubble beside (P-1)/(M+P-1), and the activations a stage held
// at its peak beside what the micro-batches expected in flight hold.
struct StageRow {
  int stage = 0;
  int first_layer = 0, last_layer = 0;  // [first, last) of its first chunk
  std::string layers;                   // "0-1"; interleaved, every chunk's: "0-1,4-5"
  double bubble_measured = 0, bubble_formula = 0;
  int64_t peak_activation_bytes = 0, predicted_peak_activation_bytes = 0;
  int64_t kept_per_micro_batch = 0;  // with --recompute: the stage input only
  double in_flight_measured = 0;     // peak / kept per micro-batch
  int in_flight_expected = 0;
};
std::vector<StageRow> stage_rows(const RunResult& r);  // empty: not a pipeline run

// The block under pixel x (with `slop` pixels of tolerance), or -1.
int hit_test(const std::vector<DrawSpan>& blocks, float x, float slop = 1.0f);

}  // namespace shardlab::gui
