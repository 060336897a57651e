// Measured pipeline numbers (see pipeline_analysis.h): bubble from the spans,
// activations from the allocator, schedule order from the compute spans.
#include "core/predict/pipeline_analysis.h"

#include "core/comm/meta_comm.h"
#include "core/comm/placement.h"
#include "core/model/model_family.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "core/device/meta_backend.h"
#include "core/model/layer_stack.h"
#include "core/model/model.h"
#include "core/model/param_source.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/strategy.h"

namespace shardlab {

namespace {

struct Interval {
  int64_t begin, end;
};

// Length of the union of intervals clipped to [lo, hi): compute spans of one
// rank should not overlap, but a strategy that nests spans must not count twice.
int64_t covered(std::vector<Interval> v, int64_t lo, int64_t hi) {
  std::sort(v.begin(), v.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  int64_t total = 0, cur_begin = 0, cur_end = 0;
  bool open = false;
  for (const Interval& i : v) {
    const int64_t b = std::max(i.begin, lo), e = std::min(i.end, hi);
    if (e <= b) continue;
    if (open && b <= cur_end) {
      cur_end = std::max(cur_end, e);
      continue;
    }
    if (open) total += cur_end - cur_begin;
    cur_begin = b, cur_end = e, open = true;
  }
  if (open) total += cur_end - cur_begin;
  return total;
}

struct StageShape {
  int64_t unit = 0;               // bytes of the stage input for one micro-batch
  int64_t kept = 0;               // bytes one micro-batch keeps for backward, stage input aside
  int64_t forward_transient = 0;  // bytes a forward that frees as it goes holds at once
  // A split backward (zero bubble): the most one micro-batch holds while its
  // B runs, and what it keeps from its B until its W (layer inputs, output
  // gradients), stage input included.
  int64_t split_peak = 0, split_kept = 0;
  int64_t saved() const { return kept; }
};

// Measured on the stage's own layers, run on a meta device (no memory behind
// them) for one micro-batch in fp32, the pipelines' precision: what forward
// keeps, and the most a forward that frees as it goes (--recompute) holds at
// once; with `split`, what a B alone holds and leaves for its W.
StageShape stage_shape(const RunConfig& cfg, int rank, int chunk = 0, bool split = false) {
  const ModelLayout whole = make_layout(cfg);
  const StageTopology t = stage_topology(
      pipeline_stage_of(cfg, rank), pipeline_partition(cfg, whole), pipeline_chunks(cfg), chunk);
  const int rows = cfg.batch / pipeline_replicas(cfg) / micro_batches_run(cfg);
  const std::unique_ptr<DeviceBackend> dev = make_meta_backend(Device{});
  Allocator alloc(*dev, nullptr);
  // Under tensor parallelism the stage holds its tp slice: the slice's
  // activations, its layers' all-reduces on a meta communicator (nothing moves).
  const Mesh mesh = run_mesh(cfg);
  const int T = mesh.size(MeshAxis::tp);
  const ModelLayout layout(whole.spec(), TensorSlice{T, mesh.coord(rank, MeshAxis::tp)});
  const std::unique_ptr<Comm> tp =
      T > 1 ? make_meta_comm(mesh.coord(rank, MeshAxis::tp), T, nullptr, ScratchPlacement::device)
            : nullptr;
  const MetaParams init(layout.state_total());
  LayerStack stack(layout, t.first_layer, t.last_layer, alloc, nullptr, init, DType::f32, tp.get());
  const size_t in_numel = static_cast<size_t>(rows) * layout.act_numel(t.first_layer);
  const Tensor in = alloc.alloc("stage_input", MemCategory::temporary, in_numel);
  const auto activations = [&](bool peak) {
    const PoolStats s = alloc.stats().device;
    return (peak ? s.peak : s.current)[static_cast<int>(MemCategory::activations)];
  };
  StageShape s;
  s.unit = static_cast<int64_t>(in_numel * sizeof(float));
  const int64_t before = activations(false);
  stack.forward(in.raw(), rows, 0);
  s.kept = activations(false) - before;
  alloc.reset_peaks();
  const int64_t holding = activations(false);
  { const Tensor out = stack.forward_keep_input(in.raw(), rows, 1); }
  s.forward_transient = activations(true) - holding;
  if (!split) return s;
  // Micro-batch 0's B alone, then its W (a schedule that splits its backwards).
  const Tensor dout = alloc.alloc("stage_output_grad", MemCategory::temporary,
                                  static_cast<size_t>(rows) * layout.act_numel(t.last_layer));
  alloc.reset_peaks();
  const int64_t base = activations(false) - s.kept;  // micro-batch 0's activations aside
  { const Tensor din = stack.backward_input(dout.raw(), 0, !t.is_first); }
  s.split_peak = activations(true) - base + s.unit;
  s.split_kept = activations(false) - base + s.unit;
  stack.backward_weights(0);
  return s;
}

}  // namespace

std::vector<double> bubble_share_per_rank(const RunResult& r) {
  const size_t W = r.recorders.size();
  // busy[step][rank]: that rank's compute-lane spans in that step.
  std::vector<std::vector<std::vector<Interval>>> busy;
  std::vector<bool> recorded(W, false);
  for (size_t w = 0; w < W; ++w)
    for (const Span& s : r.recorders[w]->snapshot().spans) {
      if (s.lane != Lane::compute || s.step < 0) continue;
      if (busy.size() <= static_cast<size_t>(s.step))
        busy.resize(s.step + 1, std::vector<std::vector<Interval>>(W));
      busy[s.step][w].push_back({s.t_begin_ns, s.t_end_ns});
      recorded[w] = true;
    }
  std::vector<double> share(W, 0.0);
  int counted = 0;
  for (size_t step = busy.size() > 1 ? 1 : 0; step < busy.size(); ++step) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (const auto& spans : busy[step])
      for (const Interval& i : spans) lo = std::min(lo, i.begin), hi = std::max(hi, i.end);
    if (hi <= lo) continue;
    for (size_t w = 0; w < W; ++w)
      share[w] +=
          1.0 - static_cast<double>(covered(busy[step][w], lo, hi)) / static_cast<double>(hi - lo);
    ++counted;
  }
  for (size_t w = 0; w < W; ++w) share[w] = counted && recorded[w] ? share[w] / counted : 0.0;
  return share;
}

double bubble_formula(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

namespace {

// The order a finished run followed: its strategy's, or with --schedule the
// order its stages recorded (which outlives the file), else the file's.
Schedule run_order(const RunResult& r) {
  if (r.cfg.schedule.empty()) return run_schedule(r.cfg);
  try {
    Schedule s = recorded_schedule(r, 0);
    validate_schedule(s, s.stages, s.micro_batches, s.chunks);
    return s;
  } catch (const ConfigError&) {
    // --no-record: no spans to read it from; --recompute: forwards run twice.
    return run_schedule(r.cfg);
  }
}

double busiest_idle_share(const UnitTiming& t) {
  const double most = t.busy.empty() ? 0 : *std::max_element(t.busy.begin(), t.busy.end());
  return t.makespan > 0 ? (t.makespan - most) / t.makespan : 0;
}

}  // namespace

double schedule_bubble_formula(const RunResult& r) {
  const StrategyInfo* info = find_strategy(r.cfg.strategy);
  if (!info || (!info->schedule && r.cfg.schedule.empty()))
    return bubble_formula(pipeline_stages(r.cfg), micro_batches_run(r.cfg));
  return busiest_idle_share(unit_timing(run_order(r)));
}

int micro_batches_run(const RunConfig& cfg) {
  const StrategyInfo* info = find_strategy(cfg.strategy);
  return info ? info->micro_batches(cfg) : 1;
}

int expected_in_flight(const RunConfig& cfg, int rank) {
  const StrategyInfo& info = strategy_info(cfg.strategy);
  if (!info.schedule)
    throw std::invalid_argument("expected_in_flight: " + cfg.strategy + " is not a pipeline");
  // The most micro-batches (chunks, interleaved) alive between F and their
  // last B or W on this stage, counted from the order it runs.
  return unit_timing(run_schedule(cfg)).peak_alive.at(pipeline_stage_of(cfg, rank));
}

int64_t micro_batch_activation_bytes(const RunConfig& cfg, int rank) {
  const StageShape s = stage_shape(cfg, rank);
  return s.unit + s.saved();
}

int64_t stage_input_bytes(const RunConfig& cfg, int rank) {
  return stage_shape(cfg, rank).unit;
}

int64_t predicted_peak_activation_bytes(const RunConfig& cfg, int rank) {
  // Walk the rank's line: a chunk's micro-batch is added at its F and taken
  // away at its B (or its W, when the backward is split); a receive posted
  // early (plan_receives: the executor's own rule) holds its stage input from
  // its post until the F that reads it. With --recompute a micro-batch keeps
  // only its input, and one more recomputes its layers at a time.
  const int V = pipeline_chunks(cfg);
  const int stage = pipeline_stage_of(cfg, rank);
  const Schedule order = run_schedule(cfg);
  const ReceivePlan plan = plan_receives(order);
  const std::vector<Action>& line = order.ranks.at(stage);
  std::set<std::pair<int, int>> split;  // (mb, chunk) whose W the line runs
  for (const Action& a : line)
    if (a.kind == ActionKind::weight) split.insert({a.micro_batch, a.chunk});
  std::vector<StageShape> shapes;
  int64_t transient = 0;
  for (int c = 0; c < V; ++c) {
    shapes.push_back(stage_shape(cfg, rank, c, !split.empty() && !cfg.recompute));
    transient =
        std::max(transient, std::max(shapes.back().saved(), shapes.back().forward_transient));
  }
  const auto keeps = [&](int chunk) {
    const StageShape& s = shapes.at(static_cast<size_t>(chunk));
    return cfg.recompute ? s.unit : s.unit + s.saved();
  };
  std::set<std::pair<int, int>> waiting;  // (mb, chunk) inputs posted, not yet read
  int64_t alive = 0, posted = 0, peak = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    for (const Receive& m : plan.posted.at(stage).at(i))
      if (!m.gradient && waiting.insert({m.micro_batch, m.chunk}).second)
        posted += shapes.at(static_cast<size_t>(m.chunk)).unit;
    const Action& a = line[i];
    const StageShape& sh = shapes.at(static_cast<size_t>(a.chunk));
    const int64_t k = keeps(a.chunk);
    const bool is_split = split.count({a.micro_batch, a.chunk}) > 0;
    if (a.kind == ActionKind::forward) {
      if (waiting.erase({a.micro_batch, a.chunk})) posted -= sh.unit;
      alive += k;
      peak = std::max(peak, alive + posted);
    } else if (a.kind == ActionKind::backward && is_split && !cfg.recompute) {
      // B alone: the layers' saved values give way to their output
      // gradients, which W reads with the layer inputs.
      peak = std::max(peak, alive - k + sh.split_peak + posted);
      alive += sh.split_kept - k;
    } else if (a.kind == ActionKind::weight) {
      peak = std::max(peak, alive + posted);
      alive -= cfg.recompute ? k : sh.split_kept;
    } else if (!is_split) {
      // A backward frees as it walks down: the peak is at its start.
      peak = std::max(peak, alive + posted);
      alive -= k;
    }
  }
  return cfg.recompute ? peak + transient : peak;
}

std::vector<StageReport> pipeline_stage_reports(const RunResult& r) {
  const RunConfig& cfg = r.cfg;
  if (!is_pipeline_strategy(cfg.strategy)) return {};
  const ModelLayout layout = make_layout(cfg);
  const std::vector<int> partition = pipeline_partition(cfg, layout);
  const std::vector<double> bubble = bubble_share_per_rank(r);
  const UnitTiming order = unit_timing(run_order(r));
  std::vector<StageReport> out;
  // The first pipeline's stages (the others, on a mesh's dp axis, are alike).
  for (int rank : first_pipeline_ranks(cfg)) {
    if (rank >= static_cast<int>(r.ranks.size())) break;
    const int V = pipeline_chunks(cfg);
    const StageTopology t = stage_topology(pipeline_stage_of(cfg, rank), partition, V);
    StageReport s;
    s.rank = rank;
    s.stage = t.rank;
    s.first_layer = t.first_layer;
    s.last_layer = t.last_layer;
    for (int c = 0; c < V; ++c) {
      const StageTopology ct = stage_topology(t.rank, partition, V, c);
      if (!s.layers.empty()) s.layers += ",";
      s.layers += std::to_string(ct.first_layer);
      if (ct.last_layer - 1 > ct.first_layer) s.layers += "-" + std::to_string(ct.last_layer - 1);
    }
    s.bubble_measured = bubble[rank];
    s.bubble_formula = busiest_idle_share(order);
    s.peak_activation_bytes =
        r.ranks[rank].memory.device.peak[static_cast<int>(MemCategory::activations)];
    // A learner's schedule: its own count, from the order the stage ran.
    s.in_flight_expected =
        cfg.schedule.empty() ? expected_in_flight(cfg, rank) : order.peak_alive.at(t.rank);
    s.predicted_peak_activation_bytes = predicted_peak_activation_bytes(cfg, rank);
    s.micro_batch_activation_bytes = micro_batch_activation_bytes(cfg, rank);
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> schedule_order(const Recorder::Snapshot& snap, int step, int first_layer,
                                        int last_layer) {
  std::vector<const Span*> marks;
  for (const Span& s : snap.spans) {
    if (s.step != step || s.lane != Lane::compute || s.micro_batch < 0) continue;
    if ((s.kind == SpanKind::forward && s.layer == first_layer) ||
        (s.kind == SpanKind::backward && s.layer == last_layer - 1) || s.kind == SpanKind::weight)
      marks.push_back(&s);
  }
  std::stable_sort(marks.begin(), marks.end(),
                   [](const Span* a, const Span* b) { return a->t_begin_ns < b->t_begin_ns; });
  std::vector<std::string> order;
  std::set<int> forwarded, weighted;
  for (const Span* s : marks) {
    // A W has a span per layer holding a linear: its first marks it.
    if (s->kind == SpanKind::weight && !weighted.insert(s->micro_batch).second) continue;
    const char* letter = s->kind == SpanKind::backward             ? "B"
                         : s->kind == SpanKind::weight             ? "W"
                         : forwarded.insert(s->micro_batch).second ? "F"
                                                                   : "R";
    std::string mark = letter;
    mark += std::to_string(s->micro_batch);
    order.push_back(std::move(mark));
  }
  return order;
}

}  // namespace shardlab
