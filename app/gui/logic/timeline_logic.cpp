// Viewport math and span culling/folding (see timeline_logic.h).
#include "app/gui/logic/timeline_logic.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "app/gui/logic/format.h"
#include "app/gui/logic/palette.h"
#include "app/gui/logic/wait_logic.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/schedule.h"
#include "core/predict/pipeline_analysis.h"

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

std::string span_label(const Span& s, bool long_form, const Tr& tr, const HoldsLayer& holds) {
  // The core's wording (the traces use it too), with the kinds in tr's language.
  std::string out = shardlab::span_title(
      s, long_form,
      [&](SpanKind k) {
        return std::string(k == SpanKind::other ? tr("other") : kind_short(k, tr));
      },
      holds);
  if (long_form && s.bytes > 0) out += " \xC2\xB7 " + format_bytes(static_cast<double>(s.bytes));
  return out;
}

namespace {

// Spans that belong to a micro-batch's forward or backward on a stage.
bool phase_span(const Span& s) {
  return s.micro_batch >= 0 && (s.kind == SpanKind::forward || s.kind == SpanKind::backward ||
                                s.kind == SpanKind::weight || s.kind == SpanKind::loss ||
                                s.kind == SpanKind::data || s.kind == SpanKind::other);
}
char phase_of(const Span& s) {
  return s.kind == SpanKind::backward ? 'B' : s.kind == SpanKind::weight ? 'W' : 'F';
}
bool layer_span(const Span& s) {
  return s.kind == SpanKind::forward || s.kind == SpanKind::backward || s.kind == SpanKind::weight;
}

struct RunBuilder {
  PhaseRun run;
  int step = -1;
  int last_layer = -1;  // of the run's forward/backward spans, -1 = none yet
  bool open = false;
  const std::vector<int>* chunk_of = nullptr;  // layer → chunk (interleaved); empty: none

  int chunk(const Span& s) const {
    return layer_span(s) && s.layer >= 0 && s.layer < static_cast<int>(chunk_of->size())
               ? (*chunk_of)[s.layer]
               : -1;
  }

  // Whether `s` continues the run: same step, micro-batch and direction, and a
  // layer further along (forward: up, backward: down); a forward that starts
  // over at a lower layer is a recompute, a run of its own.
  bool takes(const Span& s) const {
    if (!open || !phase_span(s) || s.step != step || s.micro_batch != run.micro_batch ||
        phase_of(s) != run.letter)
      return false;
    if (s.layer < 0 || last_layer < 0 || !layer_span(s)) return true;
    if (chunk(s) != run.chunk) return false;  // the next chunk's blocks are a run of their own
    // Backward and its W walk down the layers, forward up.
    return run.letter != 'F' ? s.layer < last_layer : s.layer > last_layer;
  }
  void start(const Span& s, uint32_t i) {
    run = PhaseRun{};
    run.first = i;
    run.count = 1;
    run.t_begin = s.t_begin_ns;
    run.t_end = s.t_end_ns;
    run.letter = phase_of(s);
    run.micro_batch = s.micro_batch;
    run.step = s.step;
    run.chunk = chunk(s);
    step = s.step;
    last_layer = layer_span(s) ? s.layer : -1;
    open = true;
  }
  void add(const Span& s) {
    ++run.count;
    if (run.chunk < 0) run.chunk = chunk(s);  // a run that began with its data span
    run.t_end = std::max(run.t_end, s.t_end_ns);
    if (layer_span(s) && s.layer >= 0) last_layer = s.layer;
  }
};

// A forward run is a recompute when the same micro-batch already ran forward
// on this stage in this step.
bool ran_forward_before(const LaneData& lane, const PhaseRun& r, int step, const RunBuilder& b) {
  constexpr size_t kMaxLookBack = 4096;
  for (size_t j = r.first, n = 0; j-- > 0 && n < kMaxLookBack; ++n) {
    const Span& s = lane.spans[j];
    if (s.step != step) break;
    // (Interleaved: the same micro-batch's forward on another chunk is no recompute.)
    if (s.kind == SpanKind::forward && s.micro_batch == r.micro_batch && b.chunk(s) == r.chunk)
      return true;
  }
  return false;
}

}  // namespace

bool phase_runs(const LaneData& lane, double t_begin, double t_end, size_t max_spans,
                std::vector<PhaseRun>& out, const std::vector<int>& chunk_of_layer) {
  auto [first, last] = span_window(lane, t_begin, t_end);
  if (last - first > max_spans) return false;
  const std::vector<Span>& s = lane.spans;
  // A run that began before the window: start from its first span.
  for (size_t n = 0; first > 0 && n < 256 && first < s.size(); ++n) {
    const Span& a = s[first - 1];
    const Span& b = s[first];
    if (!phase_span(a) || !phase_span(b) || a.step != b.step || a.micro_batch != b.micro_batch ||
        phase_of(a) != phase_of(b))
      break;
    --first;
  }
  RunBuilder b;
  b.chunk_of = &chunk_of_layer;
  auto flush = [&] {
    if (!b.open) return;
    if (b.run.letter == 'F' && ran_forward_before(lane, b.run, b.step, b)) b.run.letter = 'R';
    if (static_cast<double>(b.run.t_end) >= t_begin) out.push_back(b.run);
    b.open = false;
  };
  for (size_t i = first; i < last; ++i) {
    const Span& x = s[i];
    if (b.takes(x)) {
      b.add(x);
      continue;
    }
    flush();
    if (phase_span(x)) b.start(x, static_cast<uint32_t>(i));
  }
  // The last run may go on past the window's end.
  for (size_t i = last; b.open && i < s.size() && b.takes(s[i]); ++i) b.add(s[i]);
  flush();
  return true;
}

std::vector<RunGroup> group_runs(const std::vector<PhaseRun>& runs, const Viewport& vp,
                                 float adjacent_px, float pad,
                                 const std::function<float(const std::string&)>& text_width) {
  std::vector<RunGroup> out;
  auto x0 = [&](const PhaseRun& r) { return vp.x_of(static_cast<double>(r.t_begin)); };
  auto x1 = [&](const PhaseRun& r) { return vp.x_of(static_cast<double>(r.t_end)); };
  auto fits = [&](const std::string& label, float a, float b) {
    return b - a >= text_width(label) + 2 * pad;
  };
  auto label_of = [&](size_t first, size_t count) {
    const PhaseRun& a = runs[first];
    const PhaseRun& z = runs[first + count - 1];
    if (count == 1) return a.label();
    if (a.letter == z.letter) {  // "F3-5"; appended, as GCC 12's -Wrestrict misreads "a" + b
      std::string s(1, a.letter);
      s += std::to_string(a.micro_batch);
      s += '-';
      s += std::to_string(z.micro_batch);
      if (a.chunk >= 0) s += "." + std::to_string(a.chunk);
      return s;
    }
    return a.label() + " " + z.label();
  };
  for (size_t k = 0; k < runs.size();) {
    RunGroup g{k, 1, runs[k].label()};
    while (k + g.count < runs.size()) {
      const PhaseRun& last = runs[k + g.count - 1];
      const PhaseRun& next = runs[k + g.count];
      if (fits(g.label, x0(runs[k]), x1(last)) || fits(next.label(), x0(next), x1(next))) break;
      // One step's blocks only: step 1's B0 beside step 2's F0 is no "B0 F0".
      if (x0(next) - x1(last) > adjacent_px || next.step != last.step) break;
      const bool run_of_same = next.letter == last.letter &&
                               next.micro_batch == last.micro_batch + 1 &&
                               runs[k].letter == last.letter && next.chunk == runs[k].chunk;
      const bool pair = g.count == 1 && next.micro_batch == last.micro_batch;
      if (!run_of_same && !pair) break;
      ++g.count;
      g.label = label_of(k, g.count);
      if (pair) break;  // "F3 B3" takes no third
    }
    out.push_back(g);
    k += g.count;
  }
  return out;
}

std::vector<LabelPlace> place_labels(const std::vector<LabelRequest>& requests, float pad) {
  std::vector<LabelPlace> out(requests.size());
  float taken = -1e30f;  // right edge of the last label placed outside its block
  for (size_t k = 0; k < requests.size(); ++k) {
    const LabelRequest& r = requests[k];
    LabelPlace& p = out[k];
    if (r.x1 - r.x0 >= r.width + 2 * pad) {
      // Centred, or pushed right of the label before it while it still fits.
      const float x = std::max((r.x0 + r.x1 - r.width) * 0.5f, taken + pad);
      if (x + r.width + pad <= r.x1) {
        p = {true, true, x};
        taken = x + r.width;
      }
      continue;
    }
    const float x = std::max(r.x1 + pad, taken + pad);
    if (x + r.width + pad <= r.limit) {
      p = {true, false, x};
      taken = x + r.width;
    }
  }
  return out;
}

std::vector<bool> keep_apart(const std::vector<std::pair<float, float>>& boxes, float gap,
                             float x_max) {
  std::vector<bool> keep(boxes.size(), false);
  float last_end = -1e30f;
  for (size_t k = 0; k < boxes.size(); ++k) {
    const auto [x, w] = boxes[k];
    if (x >= last_end + gap && x + w <= x_max) {
      keep[k] = true;
      last_end = x + w;
    }
  }
  return keep;
}

namespace {

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::vector<AxisTick> time_ticks(double t_begin, double t_end, float width_px, float char_px) {
  std::vector<AxisTick> out;
  const double range = t_end - t_begin;
  if (!(range > 0) || !(width_px > 0) || !(char_px > 0)) return out;
  struct Unit {
    double ns;
    const char* name;
  };
  // i18n: units stay as they are
  static constexpr Unit kUnits[] = {{1, "ns"}, {1e3, "\xC2\xB5s"}, {1e6, "ms"}, {1e9, "s"}};
  const double mag = std::max(std::fabs(t_begin), std::fabs(t_end));
  for (int target = std::max(1, static_cast<int>(width_px / (char_px * 7))); target >= 1;
       --target) {
    // 1-2-5 step for about `target` ticks.
    const double raw = range / target;
    const double p10 = std::pow(10.0, std::floor(std::log10(raw)));
    double step = 10 * p10;
    for (double m : {1.0, 2.0, 5.0})
      if (raw <= m * p10 * (1 + 1e-9)) {
        step = m * p10;
        break;
      }
    // The unit the values read in, then as many decimals as the step needs;
    // past 3 decimals the next smaller unit reads better.
    int u = 0;
    while (u < 3 && mag >= kUnits[u + 1].ns) ++u;
    auto decimals_for = [&](int unit) {
      return std::max(0, static_cast<int>(std::ceil(-std::log10(step / kUnits[unit].ns) - 1e-9)));
    };
    int dec = decimals_for(u);
    while (dec > 3 && u > 0) dec = decimals_for(--u);
    std::vector<AxisTick> ticks;
    size_t widest = 0;
    const double first = std::ceil(t_begin / step - 1e-9);
    for (double k = first; k * step <= t_end + step * 1e-9; k += 1) {
      const double t = k * step;
      char buf[48];
      const double v = std::fabs(t) < step * 1e-6 ? 0.0 : t / kUnits[u].ns;
      std::snprintf(buf, sizeof buf, "%.*f %s", dec, v, kUnits[u].name);
      ticks.push_back({t, buf});
      widest = std::max(widest, utf8_length(ticks.back().label));
      if (ticks.size() > 1000) break;
    }
    // Neighbouring labels, centred on their ticks, keep two characters apart.
    const double px_per_step = step * width_px / range;
    if (px_per_step >= (static_cast<double>(widest) + 2) * char_px || target == 1) {
      out = std::move(ticks);
      break;
    }
  }
  return out;
}

void flow_lines(const std::vector<Flow>& flows, const Viewport& vp, int max_single, float bucket_px,
                std::vector<FlowLine>& out) {
  const float x_end = vp.x0 + vp.width;
  std::vector<FlowLine> lines;
  for (const Flow& f : flows) {
    if (f.from_rank < 0 || f.to_rank < 0) continue;
    const float xa = vp.x_of(static_cast<double>(f.t_send)),
                xb = vp.x_of(static_cast<double>(f.t_recv));
    if (std::max(xa, xb) < vp.x0 || std::min(xa, xb) > x_end) continue;
    lines.push_back({xa, xb, f.from_rank, f.to_rank, 1});
  }
  if (static_cast<int>(lines.size()) <= max_single) {
    out.insert(out.end(), lines.begin(), lines.end());
    return;
  }
  // Bundles: (sender, receiver, column of the send) -> sums of the ends.
  struct Sum {
    double xa = 0, xb = 0;
    uint32_t n = 0;
    size_t order = 0;
  };
  std::unordered_map<int64_t, Sum> bundles;
  const float b = std::max(1.0f, bucket_px);
  for (const FlowLine& l : lines) {
    const int64_t col = static_cast<int64_t>(std::floor((l.xa - vp.x0) / b));
    const int64_t key = (col * 64 + l.from_rank) * 64 + l.to_rank;
    Sum& s = bundles[key];
    if (s.n == 0) s.order = bundles.size();
    s.xa += l.xa;
    s.xb += l.xb;
    ++s.n;
  }
  std::vector<std::pair<int64_t, Sum>> sorted(bundles.begin(), bundles.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& c) { return a.second.order < c.second.order; });
  for (const auto& [key, s] : sorted) {
    const int to = static_cast<int>(((key % 64) + 64) % 64);
    const int from = static_cast<int>((((key - to) / 64) % 64 + 64) % 64);
    out.push_back({static_cast<float>(s.xa / s.n), static_cast<float>(s.xb / s.n), from, to, s.n});
  }
}

RowsLayout rows_layout(float font, float lane_h, int world, bool axis, bool steps, int lanes) {
  RowsLayout l;
  l.lanes = std::max(1, lanes);
  l.font = font;
  l.lane_h = lane_h;
  l.gap = std::max(3.0f, lane_h * 0.3f);
  l.axis_h = axis ? font + 8 : 0;
  l.steps_h = steps ? font + 4 : 0;
  l.world = std::max(1, world);
  return l;
}

float lane_height_for(float avail_h, float font, int world, bool axis, bool steps, int lanes) {
  const RowsLayout l = rows_layout(font, 0, world, axis, steps, lanes);
  const float per_rank = (avail_h - l.rows_top()) / static_cast<float>(l.world);
  // A rank's lanes and its gap (0.3 of a lane): 2.3 lanes for two.
  return std::clamp(per_rank / (static_cast<float>(l.lanes) + 0.3f), font + 6, font * 4.0f);
}

float rows_height(float avail, float font, int world, float tables_h, float peek_h, int lanes) {
  const float rows_min = rows_layout(font, font + 6, world, true, true, lanes).height();
  const float rows_max = rows_layout(font, font * 4, world, true, true, lanes).height();
  if (avail - tables_h >= rows_min) return std::min(rows_max, avail - tables_h);
  return std::max(font * 6, std::min(rows_min, avail - peek_h));
}

std::pair<double, double> step_range(const RunData& d, int step) {
  if (step < 0 || static_cast<size_t>(step) >= d.step_begin.size() || d.step_begin[step] < 0)
    return {0, 0};
  const auto [lo, hi] = step_window(d, step);
  if (hi > lo) return {static_cast<double>(lo), static_cast<double>(hi)};
  const double b = static_cast<double>(d.step_begin[step]);
  double e = static_cast<double>(d.t_end);
  if (static_cast<size_t>(step + 1) < d.step_begin.size() && d.step_begin[step + 1] >= 0)
    e = static_cast<double>(d.step_begin[step + 1]);
  return {b, std::max(b, e)};
}

std::vector<ScheduleRow> schedule_rows(const RunData& d, int step, double t) {
  std::vector<ScheduleRow> rows;
  if (!is_pipeline_strategy(d.cfg.strategy) || step < 0) return rows;
  std::vector<int> ranks;
  int V = 1;
  try {
    ranks = first_pipeline_ranks(d.cfg);
    V = pipeline_chunks(d.cfg);
  } catch (const ConfigError&) {
    return rows;
  }
  for (size_t s = 0; s < ranks.size(); ++s) {
    const int rank = ranks[s];
    if (rank < 0 || rank >= static_cast<int>(d.ranks.size())) return {};
    ScheduleRow row;
    row.stage = static_cast<int>(s);
    row.rank = rank;
    std::vector<int> chunk_of;
    try {
      if (V > 1) chunk_of = chunk_of_layers(d.cfg, rank);
    } catch (const std::exception&) {
      return {};
    }
    const std::vector<TimedAction> actions =
        actions_in_spans(d.ranks[rank].lane(Lane::compute).spans, step, chunk_of);
    int current = -1;
    for (size_t i = 0; i < actions.size(); ++i)
      if (static_cast<double>(actions[i].begin) <= t) current = static_cast<int>(i);
    for (size_t i = 0; i < actions.size(); ++i)
      row.cells.push_back({to_string(actions[i].action, V),
                           static_cast<double>(actions[i].end) <= t,
                           static_cast<int>(i) == current});
    rows.push_back(std::move(row));
  }
  return rows;
}

int step_to_show(const RunData& d, double playhead_t, bool live) {
  const int n = static_cast<int>(d.step_begin.size());
  if (n == 0) return -1;
  int at = d.step_at(static_cast<int64_t>(playhead_t));
  if (live && at > 0) --at;
  return std::clamp(at, 0, n - 1);
}

void fit_steps(Viewport& vp, const RunData& d, bool one_step, double playhead_t, bool live) {
  if (one_step) {
    auto [b, e] = step_range(d, step_to_show(d, playhead_t, live));
    if (e > b) {
      // Where ranks overlap steps (a pipeline's first stage still swapping the
      // tied gradient while the next step has begun elsewhere) the playhead can
      // sit just before the window of the step it counts as: widen the window
      // back to it so the playhead stays in view. (After the window is the
      // teardown, which a resting playhead need not pull in.)
      if (!live && playhead_t >= 0 && playhead_t < b) b = playhead_t;
      fit(vp, b, e, 0.01);
      return;
    }
  }
  fit(vp, all_steps_begin(d, playhead_t, live), static_cast<double>(d.t_end));
}

bool is_warmup_step(const RunData& d, int step) {
  return step == 0 && d.cfg.steps > 1;
}

std::string step_label(const RunData& d, int step, const Tr& tr) {
  return is_warmup_step(d, step) ? strf(tr("step %d (warm-up)"), step) : strf(tr("step %d"), step);
}

bool warmup_dwarfs(const RunData& d, bool live) {
  const int n = static_cast<int>(d.step_begin.size());
  if (n < 2 || d.step_begin[1] < 0) return false;  // step 0 not finished
  std::vector<double> later;
  for (int s = 1; s < n; ++s) {
    // A step is finished once the next one has begun, or (not live) the run has ended.
    const bool finished = s + 1 < n ? d.step_begin[s + 1] >= 0 : !live;
    const auto [b, e] = step_range(d, s);
    if (finished && e > b) later.push_back(e - b);
  }
  const auto [b0, e0] = step_range(d, 0);
  return !later.empty() && e0 - b0 > kWarmupDwarfs * median(later);
}

double all_steps_begin(const RunData& d, double playhead_t, bool live) {
  if (!warmup_dwarfs(d, live)) return d.steps_begin();
  const double step1 = static_cast<double>(d.step_begin[1]);
  const bool in_warmup = !live && playhead_t >= d.steps_begin() && playhead_t < step1;
  return in_warmup ? d.steps_begin() : step1;
}

std::vector<StageRow> stage_rows(const RunResult& r) {
  std::vector<StageRow> out;
  std::vector<StageReport> reports;
  try {
    reports = pipeline_stage_reports(r);
  } catch (const ConfigError&) {
    return out;  // a --schedule file gone since a --no-record run: no order to compare with
  }
  for (const StageReport& s : reports) {
    StageRow row;
    row.stage = s.stage;
    row.first_layer = s.first_layer;
    row.layers = s.layers;
    row.last_layer = s.last_layer;
    row.bubble_measured = s.bubble_measured;
    row.bubble_formula = s.bubble_formula;
    row.peak_activation_bytes = s.peak_activation_bytes;
    row.predicted_peak_activation_bytes = s.predicted_peak_activation_bytes;
    row.kept_per_micro_batch =
        r.cfg.recompute ? stage_input_bytes(r.cfg, s.rank) : s.micro_batch_activation_bytes;
    row.in_flight_measured = row.kept_per_micro_batch > 0
                                 ? static_cast<double>(row.peak_activation_bytes) /
                                       static_cast<double>(row.kept_per_micro_batch)
                                 : 0.0;
    row.in_flight_expected = s.in_flight_expected;
    out.push_back(row);
  }
  return out;
}

float covered_share(const LaneData& lane, size_t first, size_t last, const Viewport& vp, float x0,
                    float x1) {
  if (x1 <= x0) return 0;
  // Spans of one run follow each other in a compute lane; overlaps are counted once.
  float covered = 0, reached = x0;
  for (size_t i = first; i < std::min(last, lane.spans.size()); ++i) {
    const float a = std::max(vp.x_of(static_cast<double>(lane.spans[i].t_begin_ns)), reached);
    const float b = std::min(vp.x_of(static_cast<double>(lane.spans[i].t_end_ns)), x1);
    if (b > a) covered += b - a, reached = b;
  }
  return covered / (x1 - x0);
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
