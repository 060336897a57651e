// The metric registry (see metrics.h): each metric reads a finished run's
// allocator peaks, recorder spans or final weights, and asks model_state.h or
// pipeline_analysis.h for the formula shown beside it.
#include "core/run/metrics.h"

#include <algorithm>
#include <cmath>

#include "core/device/gpu.h"
#include "core/model/model.h"
#include "core/parallel/model_state.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/schedule.h"
#include "core/parallel/strategy.h"
#include "core/predict/mesh_estimate.h"
#include "core/predict/offload_traffic.h"
#include "core/predict/pipeline_analysis.h"
#include "core/predict/server_traffic.h"

namespace shardlab {

namespace {

// Beside a pipeline's bubble: its schedule's, with unit costs, and the formula
// its strategy writes ((P−1)/(M+P−1) for 1f1b, (P−1)/(3M+P−1) for zb-h1).
void set_bubble_formula(MetricValue& v, const RunResult& r) {
  const RunConfig& c = r.cfg;
  v.formula = 100.0 * schedule_bubble_formula(r);
  v.formula_text = (c.schedule.empty() ? strategy_info(c.strategy).bubble_formula
                                       : std::string("--schedule's order, unit costs")) +
                   " with P=" + std::to_string(pipeline_stages(c)) +
                   ", M=" + std::to_string(micro_batches_run(c));
}

using A = MetricArg;

// The table. Units: B bytes, ms, % (0..100), x (a ratio), count, "" (a plain number).
const std::vector<MetricInfo> kRegistry = {
    {"final_loss",
     "",
     {},
     "loss of the last training step (mean over the global batch)",
     "",
     false},
    {"median_step_ms",
     "ms",
     {},
     "median wall time of a training step (the slowest rank's), step 0 (a warm-up) left out",
     "",
     false},
    {"step_time_ratio",
     "x",
     {},
     "run a's median step time ÷ run b's (needs a compare run)",
     "",
     true},
    {"peak_bytes",
     "B",
     {A::rank, A::category, A::pool},
     "allocator peak of the rank: category total (the peak of the sum) or one memory category; "
     "pool device or host",
     "",
     false},
    {"model_state_bytes",
     "B",
     {A::rank},
     "measured peak params + grads + optimizer state the rank held (device and host pools)",
     "ZeRO paper: (P+G+K)Ψ for single/ddp, (P+G)Ψ+KΨ/N zero1, PΨ+(G+K)Ψ/N zero2, (P+G+K)Ψ/N "
     "zero3/fsdp",
     false},
    {"bytes_per_param",
     "B",
     {A::rank},
     "model_state_bytes ÷ Ψ (the model's parameter count)",
     "the model-state formula ÷ Ψ: 16 for fp32 AdamW without sharding",
     false},
    {"predicted_peak_bytes",
     "B",
     {A::rank, A::category, A::pool},
     "peak_bytes as predicted before the run by the meta run: the same strategy and model code "
     "on devices that hold no memory, every allocation counted by the real allocator "
     "(`shardlab estimate`)",
     "",
     false},
    {"peak_prediction_error",
     "B",
     {A::rank, A::category, A::pool},
     "predicted_peak_bytes − peak_bytes: 0 where the meta run predicted the allocator's peak to "
     "the byte, above 0 where a buffer that the meta run keeps to the end was freed early",
     "",
     false},
    {"param_count", "count", {}, "Ψ, the parameters of the whole model", "", false},
    {"sent_bytes_per_step",
     "B",
     {A::rank},
     "bytes the rank put on the wire per training step (setup excluded)",
     "ring collectives: the paper's volume (2Ψ ddp/zero1/zero2, 3Ψ zero3/fsdp) × (N−1)/N × bytes "
     "per element",
     false},
    {"received_bytes_per_step",
     "B",
     {A::rank},
     "bytes the rank received per training step, read from the recording (its receives)",
     "ps: W·Ψ/S into a server (its shard's gradient from every worker), Ψ into a worker",
     false},
    {"disk_read_bytes_per_step",
     "B",
     {A::rank},
     "--offload nvme:DIR: bytes the rank read from its offload file per training step, read "
     "from the recording (its disk_read spans)",
     "the optimizer state of the rank's shards: 8 B a parameter (AdamW), 12 B in mixed precision",
     false},
    {"disk_written_bytes_per_step",
     "B",
     {A::rank},
     "--offload nvme:DIR: bytes the rank wrote to its offload file per training step, read "
     "from the recording (its disk_write spans)",
     "the optimizer state of the rank's shards, written back once a step",
     false},
    {"max_staleness",
     "count",
     {},
     "ps: the most updates any worker's parameters lagged behind its step, read from the "
     "recording (0: every step computed with the latest update)",
     "at most --staleness K",
     false},
    {"axis_sent_bytes_per_step",
     "B",
     {A::rank, A::axis},
     "of sent_bytes_per_step, what went over the rank's group on one mesh axis (dp, pp or tp)",
     "gpt: M × the tp all-reduces of b·s·h, the pp activations and tied gradient, 2Ψ_stage·(N−1)/N "
     "(shardlab estimate --mesh)",
     false},
    {"collective_count",
     "count",
     {A::rank, A::kind, A::step},
     "spans of one kind (all_gather, send, forward, …) the rank recorded in one training step",
     "",
     false},
    {"bubble_share",
     "%",
     {A::rank},
     "idle share of the rank's compute lane over a step (steps 1.., the whole group's window)",
     "(P−1)/(M+P−1) for pipeline strategies",
     false},
    {"idle_share",
     "%",
     {A::rank},
     "the same measure as bubble_share, for any strategy: share of the step the rank computed "
     "nothing",
     "",
     false},
    {"comm_hidden_share",
     "%",
     {A::rank},
     "share of the rank's communication time that ran while it was computing",
     "",
     false},
    {"peak_activation_bytes",
     "B",
     {A::rank},
     "allocator peak of the rank's activations category",
     "pipelines: micro-batches in flight × one micro-batch's activations",
     false},
    {"activations_in_flight",
     "count",
     {A::rank},
     "pipelines: peak activations ÷ one micro-batch's activations on the stage",
     "M (gpipe), min(P−rank, M) (1f1b), 1 (naive-mp)",
     false},
    {"forwards_before_backward",
     "count",
     {A::rank, A::step},
     "pipelines: micro-batches the rank's stage ran forward before its first backward in the "
     "step, read from the recording (the order its schedule says, `shardlab schedule`)",
     "the strategy's schedule: M (gpipe), min(P−rank, M) (1f1b), 1 (naive-mp)",
     false},
    {"activation_bytes_saved",
     "B",
     {A::rank},
     "run b's peak activations on the rank − run a's (needs a compare run): what run a's "
     "settings save, e.g. --attention flash against naive",
     "pipelines: the difference of the two runs' activation predictions",
     true},
    {"weight_diff_to_single",
     "",
     {},
     "max |w − w_single| over the final weights (trained parameters; BatchNorm's running "
     "statistics are buffers, not weights), against `single` with the same model, data, "
     "batch, steps, seed, optimizer and precision",
     "0 (up to float32 reduction order)",
     false},
    {"weight_diff_between_runs",
     "",
     {},
     "max |w_a − w_b| over the final weights of run a and run b (trained parameters, as "
     "weight_diff_to_single counts them); 0 means bit-identical",
     "",
     true},
    {"clock_offset_us",
     "us",
     {A::rank},
     "one process per rank: |offset| in µs of the rank's clock from rank 0's, measured at "
     "rendezvous by Cristian's algorithm: (t_send + t_recv)/2 on the rank − rank 0's answer, "
     "from the round trip with the least delay; 0 "
     "when the ranks are threads of one process, which share one clock",
     "",
     false},
    {"resumed_after_step",
     "count",
     {},
     "the steps the run's checkpoint already held when it resumed (it trained steps k.. after a "
     "restart), 0 when it started fresh",
     "",
     false},
    {"projected_step_ms",
     "ms",
     {A::link},
     "median step as on one dedicated device per rank joined by `link` (default nvlink-h100): "
     "each op costs the CPU time its thread used, each transfer what the link says "
     "(shardlab project)",
     "",
     false},
    {"projected_step_ratio",
     "x",
     {A::link},
     "run a's projected_step_ms ÷ run b's, on the same link (needs a compare run)",
     "",
     true},
    {"projected_bubble_share",
     "%",
     {A::rank, A::link},
     "as on dedicated devices: share of the rank's step spent waiting for another rank to get "
     "there (a neighbour's activation or gradient, a late peer at a collective)",
     "(P−1)/(M+P−1) for pipeline strategies",
     false},
    {"projected_exposed_share",
     "%",
     {A::rank, A::link},
     "as on dedicated devices: share of the rank's step spent waiting while bytes moved",
     "",
     false},
    {"world_size", "count", {}, "ranks in the run", "", false},
    {"gpus_available", "count", {}, "usable GPUs on this machine", "", false},
};

bool takes(const MetricInfo& m, MetricArg a) {
  return std::find(m.args.begin(), m.args.end(), a) != m.args.end();
}

std::optional<MemCategory> parse_category(const std::string& s) {
  for (int c = 0; c < kNumMemCategories; ++c)
    if (s == to_string(static_cast<MemCategory>(c))) return static_cast<MemCategory>(c);
  return std::nullopt;
}

std::string category_names() {
  std::string s = "total";
  for (int c = 0; c < kNumMemCategories; ++c) s += std::string(", ") + to_string(MemCategory(c));
  return s;
}

std::optional<SpanKind> parse_kind(const std::string& s) {
  for (int k = 0; k < kNumSpanKinds; ++k)
    if (s == to_string(static_cast<SpanKind>(k))) return static_cast<SpanKind>(k);
  return std::nullopt;
}

std::string kind_names() {
  std::string s;
  for (int k = 0; k < kNumSpanKinds; ++k)
    s += (k ? ", " : "") + std::string(to_string(SpanKind(k)));
  return s;
}

// Ψ as the ZeRO accounting counts what a rank holds: every trained tensor,
// gpt's tied lm_head copy included (ModelLayout::total()).
double params_of(const RunConfig& c) {
  return static_cast<double>(make_layout(c).total());
}

bool has_spans(const RunResult& r) {
  if (!r.cfg.record || static_cast<int>(r.recorders.size()) != r.cfg.world) return false;
  for (const auto& rec : r.recorders)
    if (!rec) return false;
  return true;
}

void need_spans(const RunResult& r, const std::string& metric) {
  if (!r.cfg.record || r.recorders.empty())
    throw RunError(metric + " needs the run's spans, and this run was made without recording");
}

// Over the first `n` values: the trained parameters. BatchNorm's buffers after
// them (running statistics, num_batches_tracked) are not weights: a pipeline
// with M micro-batches updates them M times per step by design.
double max_abs_diff(const std::vector<float>& x, const std::vector<float>& y, size_t n,
                    const std::string& metric = "weight_diff_to_single") {
  if (x.size() != y.size() || x.size() < n)
    throw RunError(metric + ": the runs have different parameter counts");
  double d = 0;
  for (size_t i = 0; i < n; ++i)
    d = std::max(d, std::abs(static_cast<double>(x[i]) - static_cast<double>(y[i])));
  return d;
}

}  // namespace

const char* to_string(MetricArg a) {
  switch (a) {
    case MetricArg::rank:
      return "rank";
    case MetricArg::category:
      return "category";
    case MetricArg::pool:
      return "pool";
    case MetricArg::kind:
      return "kind";
    case MetricArg::step:
      return "step";
    case MetricArg::link:
      return "link";
    case MetricArg::axis:
      return "axis";
  }
  return "?";
}

const std::vector<MetricInfo>& metric_registry() {
  return kRegistry;
}

const MetricInfo* find_metric(const std::string& name) {
  for (const MetricInfo& m : kRegistry)
    if (m.name == name) return &m;
  return nullptr;
}

std::string metric_names() {
  std::string s;
  for (const MetricInfo& m : kRegistry) s += (s.empty() ? "" : ", ") + m.name;
  return s;
}

ModelStateMeasured measured_model_state(const RankReport& rr) {
  auto idx = [](MemCategory c) { return static_cast<int>(c); };
  ModelStateMeasured m;
  for (const PoolStats* p : {&rr.memory.device, &rr.memory.host}) {
    m.params += static_cast<double>(p->peak[idx(MemCategory::params)]);
    m.grads += static_cast<double>(p->peak[idx(MemCategory::grads)]);
    m.optimizer += static_cast<double>(p->peak[idx(MemCategory::optimizer_state)]);
  }
  const PoolStats& h = rr.memory.host;
  m.host = static_cast<double>(h.peak[idx(MemCategory::params)] + h.peak[idx(MemCategory::grads)] +
                               h.peak[idx(MemCategory::optimizer_state)]);
  const PoolStats& d = rr.memory.device;
  m.activations = static_cast<double>(d.peak[idx(MemCategory::activations)]);
  m.comm_buffers = static_cast<double>(d.peak[idx(MemCategory::comm_buffers)]);
  m.temporary = static_cast<double>(d.peak[idx(MemCategory::temporary)]);
  return m;
}

double comm_hidden_share(const Recorder::Snapshot& snap, int steps) {
  const int first = steps > 1 ? 1 : 0;  // step 0 pays first-touch costs
  std::vector<std::pair<int64_t, int64_t>> compute;
  for (const Span& s : snap.spans)
    if (s.lane == Lane::compute && s.step >= first) compute.push_back({s.t_begin_ns, s.t_end_ns});
  std::sort(compute.begin(), compute.end());
  // Union of the compute spans, so nested or overlapping ones count once.
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (const auto& iv : compute) {
    if (!busy.empty() && iv.first <= busy.back().second)
      busy.back().second = std::max(busy.back().second, iv.second);
    else
      busy.push_back(iv);
  }
  double total = 0, hidden = 0;
  for (const Span& s : snap.spans) {
    if (s.lane != Lane::comm || s.step < first || s.t_end_ns <= s.t_begin_ns) continue;
    total += static_cast<double>(s.t_end_ns - s.t_begin_ns);
    auto it = std::lower_bound(busy.begin(), busy.end(), std::make_pair(s.t_begin_ns, INT64_MIN));
    if (it != busy.begin()) --it;
    for (; it != busy.end() && it->first < s.t_end_ns; ++it) {
      const int64_t lo = std::max(it->first, s.t_begin_ns), hi = std::min(it->second, s.t_end_ns);
      if (hi > lo) hidden += static_cast<double>(hi - lo);
    }
  }
  return total > 0 ? hidden / total : 0.0;
}

void check_metric(const MetricRef& ref, const RunConfig& a, const RunConfig* b) {
  const MetricInfo* m = find_metric(ref.name);
  if (!m) throw ConfigError("'" + ref.name + "' is unknown (valid: " + metric_names() + ")");
  if (ref.run != 'a' && ref.run != 'b')
    throw ConfigError("run '" + std::string(1, ref.run) + "' is not valid (valid: a, b)");
  if ((ref.run == 'b' || m->needs_both_runs) && !b)
    throw ConfigError(ref.name + (m->needs_both_runs ? " compares two runs" : " on run 'b'") +
                      " needs a compare run (add `compare = { … }` to the step)");
  const RunConfig& c = ref.run == 'b' ? *b : a;
  // A metric of both runs reads the rank in each.
  const int world = m->needs_both_runs && b ? std::min(a.world, b->world) : c.world;
  if (takes(*m, A::rank) && (ref.rank < 0 || ref.rank >= world))
    throw ConfigError("rank " + std::to_string(ref.rank) +
                      " is outside the run's world (valid: 0.." + std::to_string(world - 1) + ")");
  if (takes(*m, A::category) && ref.category != "total" && !parse_category(ref.category))
    throw ConfigError("category '" + ref.category + "' is unknown (valid: " + category_names() +
                      ")");
  if (takes(*m, A::pool) && ref.pool != "device" && ref.pool != "host" && ref.pool != "disk")
    throw ConfigError("pool '" + ref.pool + "' is unknown (valid: device, host, disk)");
  if (takes(*m, A::kind)) {
    if (ref.kind.empty()) throw ConfigError(ref.name + " needs kind (valid: " + kind_names() + ")");
    if (!parse_kind(ref.kind))
      throw ConfigError("kind '" + ref.kind + "' is unknown (valid: " + kind_names() + ")");
  }
  if (takes(*m, A::step) && (ref.step < 0 || ref.step >= c.steps))
    throw ConfigError("step " + std::to_string(ref.step) +
                      " is outside the run's steps (valid: 0.." + std::to_string(c.steps - 1) +
                      ")");
  if (takes(*m, A::link) && ref.link != "loopback") parse_link(ref.link);  // names what is valid
  if (takes(*m, A::axis)) {
    // An axis of the run's mesh (one of size 1 carries nothing: no group).
    const Mesh mesh = run_mesh(c);
    std::string valid;
    bool found = false;
    for (const auto& [axis, size] : mesh.axes())
      if (size > 1) {
        valid += (valid.empty() ? "" : ", ") + std::string(to_string(axis));
        found = found || ref.axis == to_string(axis);
      }
    if (!found)
      throw ConfigError("axis '" + ref.axis + "' is not an axis of the run's mesh " + mesh.text() +
                        " (valid: " + (valid.empty() ? std::string("none") : valid) + ")");
  }
  if ((ref.name == "activations_in_flight" || ref.name == "forwards_before_backward") &&
      !is_pipeline_strategy(c.strategy))
    throw ConfigError(ref.name +
                      " is measured on pipeline strategies only (the run's "
                      "strategy is '" +
                      c.strategy + "'; valid: " +
                      strategy_names_where([](const StrategyInfo& s) { return s.has_stages(); }) +
                      ")");
}

const MemoryEstimate& MetricRuns::estimate(char which) {
  auto it = estimates_.find(which);
  if (it == estimates_.end()) it = estimates_.emplace(which, estimate_memory(run(which).cfg)).first;
  return it->second;
}

const RunResult& MetricRuns::run(char which) const {
  if (which == 'b') {
    if (!b_) throw ConfigError("this metric needs a compare run (run 'b')");
    return *b_;
  }
  return a_;
}

const Projection& MetricRuns::projection(char which, const std::string& link) {
  auto it = projections_.find({which, link});
  if (it == projections_.end()) {
    const RunResult& r = run(which);
    ProjectionOptions o;
    o.devices = r.cfg.world;
    o.link = parse_link(link);
    // A compare pair of the same work (overlap on and off, prefetch on and
    // off) is replayed with one cost table: what differs is the schedule.
    const RunResult* other = which == 'b' ? &a_ : b_;
    if (other && same_work(r.cfg, other->cfg) && has_spans(*other))
      o.pool_costs_with.push_back(other);
    it = projections_.emplace(std::make_pair(which, link), project(r, o)).first;
  }
  return it->second;
}

const RunResult& MetricRuns::single_reference(char which) {
  std::optional<RunResult>& slot = which == 'b' ? single_b_ : single_a_;
  if (!slot) {
    const RunConfig& c = run(which).cfg;
    RunConfig s;
    s.model = c.model;
    s.seq = c.seq;  // gpt: the context sizes wpe, the text gives the vocabulary
    s.data = c.data;
    s.attention = c.attention;  // gpt: the same attention core, so only the strategy differs
    s.strategy = "single";
    s.world = 1;
    s.batch = c.batch;
    s.steps = c.steps;
    s.seed = c.seed;
    s.optimizer = c.optimizer;
    s.precision = c.precision;
    s.device = c.device;
    s.timeout_ms = c.timeout_ms;
    s.record = false;
    slot = run_training(s);
  }
  return *slot;
}

MetricValue evaluate_metric(const MetricRef& ref, MetricRuns& runs) {
  const RunResult& r = runs.run(ref.run);
  check_metric(ref, runs.run('a').cfg, runs.has_b() ? &runs.run('b').cfg : nullptr);
  const MetricInfo& info = *find_metric(ref.name);
  const RunConfig& c = r.cfg;
  const std::string& n = ref.name;
  MetricValue v;
  v.unit = info.unit;
  if (takes(info, A::rank) && ref.rank >= static_cast<int>(r.ranks.size()))
    throw RunError(n + ": the run has no report for rank " + std::to_string(ref.rank));
  const bool family = has_model_state_prediction(c.strategy);
  auto model_state_in = [&] { return model_state_input(c, params_of(c)); };
  // A gpt on a pipeline or a mesh: Megatron's accounting of the rank's stage.
  auto mesh_stage = [&]() -> std::optional<MeshStageEstimate> {
    if (!is_pipeline_strategy(c.strategy) || c.model.rfind("gpt:", 0) != 0) return std::nullopt;
    try {
      return estimate_mesh(c).stages.at(static_cast<size_t>(pipeline_stage_of(c, ref.rank)));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };

  if (n == "final_loss") {
    if (r.losses.empty()) throw RunError("final_loss: the run has no steps");
    v.measured = r.losses.back();
  } else if (n == "median_step_ms") {
    v.measured = r.median_step_ms;
  } else if (n == "step_time_ratio") {
    const RunResult& rb = runs.run('b');
    if (rb.median_step_ms <= 0) throw RunError("step_time_ratio: run b has no step time");
    v.measured = runs.run('a').median_step_ms / rb.median_step_ms;
  } else if (n == "peak_bytes" || n == "predicted_peak_bytes" || n == "peak_prediction_error") {
    const auto peak = [&](const MemStats& m) {
      const PoolStats& p = m.pool(ref.pool == "host"   ? Pool::host
                                  : ref.pool == "disk" ? Pool::disk
                                                       : Pool::device);
      return static_cast<double>(ref.category == "total"
                                     ? p.peak_total
                                     : p.peak[static_cast<int>(*parse_category(ref.category))]);
    };
    const double measured = peak(r.ranks[ref.rank].memory);
    if (n == "peak_bytes") {
      v.measured = measured;
    } else {
      const MemoryEstimate& e = runs.estimate(ref.run);
      if (ref.rank >= static_cast<int>(e.ranks.size()))
        throw RunError(n + ": the meta run has no rank " + std::to_string(ref.rank));
      const double predicted = peak(e.ranks[ref.rank].at_report);
      v.measured = n == "predicted_peak_bytes" ? predicted : predicted - measured;
    }
  } else if (n == "model_state_bytes" || n == "bytes_per_param") {
    // Divided, not multiplied by 1/Ψ: 16Ψ bytes must give exactly 16 (a gate
    // compares with ==), and 3 106 816 × (1/194 176) is 15.999999999999998.
    const double psi = n == "bytes_per_param" ? params_of(c) : 1.0;
    v.measured = measured_model_state(r.ranks[ref.rank]).total() / psi;
    if (family) {
      const ModelStateBytes p = predict_model_state(model_state_in(), ref.rank);
      v.formula = p.total() / psi;
      v.formula_text = n == "bytes_per_param" ? "(" + p.formula + ") ÷ Ψ" : p.formula;
    } else if (const auto g = n == "model_state_bytes" ? mesh_stage() : std::nullopt) {
      v.formula = g->model_states.total();
      v.formula_text = g->model_states.formula + ", Ψ_stage = " + g->params_formula;
    }
  } else if (n == "param_count") {
    v.measured = params_of(c);
  } else if (n == "axis_sent_bytes_per_step") {
    const auto g = mesh_stage();
    for (MeshAxis axis : kMeshAxes)
      if (ref.axis == to_string(axis)) {
        const size_t x = static_cast<size_t>(axis);
        v.measured = r.ranks[ref.rank].sent_by_axis_per_step[x];
        if (g && !g->sent_formula[x].empty()) {
          v.formula = g->sent[x];
          v.formula_text = g->sent_formula[x];
        }
        // A data-parallel strategy on a mesh: ZeRO's traffic is its dp group's.
        if (family && axis == MeshAxis::dp) {
          const CommPrediction p = predict_comm(model_state_in(), ref.rank);
          v.formula = p.sent_bytes;
          v.formula_text = p.formula + " × " + std::to_string(p.bytes_per_element) +
                           " B × (N−1)/N, Ψ of one tp slice, N = dp";
        }
      }
  } else if (n == "sent_bytes_per_step") {
    v.measured = r.ranks[ref.rank].bytes_sent_per_step;
    if (const auto t = predict_server_traffic(c)) {
      const bool server = strategy_info(c.strategy).role(c, ref.rank) == RankRole::server;
      v.formula = server ? t->server_out : t->worker_out;
      v.formula_text = server ? "W·Ψ/S: its shard of the parameters to each of the W workers"
                              : "Ψ: each server's shard of the gradient";
    }
    // On a mesh with tp the layers' own all-reduces are in the measured bytes
    // too, which ZeRO's accounting does not cover: no formula beside them.
    const bool tp_bytes = tensor_parallel_degree(c) > 1;
    if (family && !tp_bytes) {
      const CommPrediction p = predict_comm(model_state_in(), ref.rank);
      v.formula = p.sent_bytes;
      // DP's copies go point to point, whole; a ring puts (N−1)/N of the volume on
      // each rank's wire.
      if (p.volume_bytes == 0)
        v.formula_text = "0";
      else if (p.sent_bytes == p.volume_bytes)
        v.formula_text =
            p.formula + " × " + std::to_string(p.bytes_per_element) + " B, copied whole";
      else
        v.formula_text = p.formula + " volume, " + std::to_string(c.world - 1) + "/" +
                         std::to_string(c.world) + " of it on each rank's wire";
    }
  } else if (n == "received_bytes_per_step") {
    need_spans(r, n);
    v.measured = bytes_per_step(r.recorders[ref.rank]->snapshot().spans,
                                static_cast<int>(r.step_ms.size()), SpanKind::recv);
    if (const auto t = predict_server_traffic(c)) {
      const bool server = strategy_info(c.strategy).role(c, ref.rank) == RankRole::server;
      v.formula = server ? t->server_in : t->worker_in;
      v.formula_text = server ? "W·Ψ/S: its shard's gradient from each of the W workers"
                              : "Ψ: every server's shard of the parameters";
    }
  } else if (n == "disk_read_bytes_per_step" || n == "disk_written_bytes_per_step") {
    need_spans(r, n);
    const bool read = n == "disk_read_bytes_per_step";
    v.measured =
        bytes_per_step(r.recorders[ref.rank]->snapshot().spans, static_cast<int>(r.step_ms.size()),
                       read ? SpanKind::disk_read : SpanKind::disk_write);
    if (const auto t = predict_disk_traffic(c, ref.rank)) {
      v.formula = read ? t->read : t->written;
      // Fixed texts, each translated whole (app/gui/logic/strings_zh.cpp).
      if (!option_in_effect(c, StrategyOption::offload_params))
        v.formula_text =
            "the optimizer state of the rank's padded shards (8 B a parameter, 12 B in mixed "
            "precision), once a step";
      else if (read)
        v.formula_text =
            "the rank's optimizer state once, and its parameter shards before each all-gather "
            "and for an fp32 update";
      else
        v.formula_text = "the rank's optimizer state and its updated parameter shards, once a step";
    }
  } else if (n == "max_staleness") {
    need_spans(r, n);
    std::vector<int> by_step;
    for (const auto& rec : r.recorders)
      if (rec)
        for (const Span& s : rec->snapshot().spans) note_staleness(by_step, s);
    if (by_step.empty())
      throw RunError("max_staleness: no worker of a parameter server in this run");
    v.measured = *std::max_element(by_step.begin(), by_step.end());
    v.formula = c.staleness;
    v.formula_text = "the bound, --staleness K";
  } else if (n == "collective_count") {
    need_spans(r, n);
    const SpanKind kind = *parse_kind(ref.kind);
    int count = 0;
    for (const Span& s : r.recorders[ref.rank]->snapshot().spans)
      if (s.kind == kind && s.step == ref.step) ++count;
    v.measured = count;
  } else if (n == "bubble_share" || n == "idle_share") {
    need_spans(r, n);
    v.measured = 100.0 * bubble_share_per_rank(r).at(ref.rank);
    if (n == "bubble_share" && is_pipeline_strategy(c.strategy)) {
      set_bubble_formula(v, r);
    }
  } else if (n == "comm_hidden_share") {
    need_spans(r, n);
    v.measured = 100.0 * comm_hidden_share(r.recorders[ref.rank]->snapshot(), c.steps);
  } else if (n == "peak_activation_bytes") {
    v.measured = static_cast<double>(
        r.ranks[ref.rank].memory.device.peak[static_cast<int>(MemCategory::activations)]);
    if (is_pipeline_strategy(c.strategy)) {
      v.formula = static_cast<double>(predicted_peak_activation_bytes(c, ref.rank));
      v.formula_text = c.recompute ? "in flight × stage input + one micro-batch recomputed"
                                   : "in flight × one micro-batch's activations";
    }
  } else if (n == "activations_in_flight") {
    const double one = static_cast<double>(micro_batch_activation_bytes(c, ref.rank));
    v.measured =
        static_cast<double>(
            r.ranks[ref.rank].memory.device.peak[static_cast<int>(MemCategory::activations)]) /
        one;
    v.formula = expected_in_flight(c, ref.rank);
    v.formula_text = strategy_info(c.strategy).in_flight_formula;
  } else if (n == "forwards_before_backward") {
    need_spans(r, n);
    // Distinct micro-batches: a --recompute forward runs a micro-batch again.
    const auto count = [](const std::vector<Action>& actions) {
      std::vector<int> seen;
      for (const Action& a : actions) {
        if (a.kind != ActionKind::forward) break;
        if (std::find(seen.begin(), seen.end(), a.micro_batch) == seen.end())
          seen.push_back(a.micro_batch);
      }
      return static_cast<double>(seen.size());
    };
    std::vector<Action> ran;
    for (const TimedAction& t : actions_in_spans(r.recorders[ref.rank]->snapshot().spans, ref.step,
                                                 chunk_of_layers(c, ref.rank)))
      ran.push_back(t.action);
    v.measured = count(ran);
    const int stage = pipeline_stage_of(c, ref.rank);
    if (strategy_info(c.strategy).schedule) {
      v.formula = count(run_schedule(c).ranks.at(stage));
      v.formula_text = "the " + c.strategy + " schedule's line for stage " + std::to_string(stage);
    }
  } else if (n == "activation_bytes_saved") {
    const RunResult& ra = runs.run('a');
    const RunResult& rb = runs.run('b');
    if (ref.rank >= static_cast<int>(rb.ranks.size()))
      throw RunError(n + ": run b has no report for rank " + std::to_string(ref.rank));
    auto peak = [&](const RunResult& x) {
      return static_cast<double>(
          x.ranks[ref.rank].memory.device.peak[static_cast<int>(MemCategory::activations)]);
    };
    v.measured = peak(rb) - peak(ra);
    if (is_pipeline_strategy(ra.cfg.strategy) && is_pipeline_strategy(rb.cfg.strategy)) {
      v.formula = static_cast<double>(predicted_peak_activation_bytes(rb.cfg, ref.rank) -
                                      predicted_peak_activation_bytes(ra.cfg, ref.rank));
      v.formula_text = "run b's predicted peak − run a's";
    }
  } else if (n == "weight_diff_to_single") {
    const size_t params = make_layout(c).total();
    v.measured = max_abs_diff(r.final_params, runs.single_reference(ref.run).final_params, params);
    // 0 when every row is computed as on one device. BatchNorm normalizes over the
    // rows it sees together: once a run cuts the batch (micro-batches, or a shard
    // per data-parallel rank) the model computes something else, and no formula
    // gives the distance (a lesson must not print "0" beside a measured 0.009).
    const StrategyInfo* info = find_strategy(c.strategy);
    const bool cuts_batch = info && info->rows_per_pass(c, 0) < c.batch;
    if (ModelSpec::parse(c.model).batchnorm && cuts_batch) {
      v.formula_text =
          "none: BatchNorm's statistics over part of the batch are not the whole batch's";
    } else {
      v.formula = 0;
      v.formula_text = "0 (up to float32 reduction order)";
    }
  } else if (n == "weight_diff_between_runs") {
    const RunResult& ra = runs.run('a');
    const RunResult& rb = runs.run('b');
    const size_t params = make_layout(ra.cfg).total();
    v.measured = max_abs_diff(ra.final_params, rb.final_params, params, n);
  } else if (n == "clock_offset_us") {
    v.measured = ref.rank < static_cast<int>(r.clock_offset_ns.size())
                     ? std::abs(static_cast<double>(r.clock_offset_ns[ref.rank])) / 1e3
                     : 0.0;
  } else if (n == "resumed_after_step") {
    v.measured = r.resumed_after_step;
  } else if (n == "projected_step_ms") {
    need_spans(r, n);
    v.measured = runs.projection(ref.run, ref.link).median_step_ms;
  } else if (n == "projected_step_ratio") {
    need_spans(runs.run('a'), n);
    need_spans(runs.run('b'), n);
    const double b = runs.projection('b', ref.link).median_step_ms;
    if (b <= 0) throw RunError("projected_step_ratio: run b has no projected step time");
    v.measured = runs.projection('a', ref.link).median_step_ms / b;
  } else if (n == "projected_bubble_share" || n == "projected_exposed_share") {
    need_spans(r, n);
    const Projection& p = runs.projection(ref.run, ref.link);
    v.measured = 100.0 * (n == "projected_bubble_share" ? p.bubble_share(ref.rank)
                                                        : p.exposed_share(ref.rank));
    if (n == "projected_bubble_share" && is_pipeline_strategy(c.strategy)) {
      set_bubble_formula(v, r);
    }
  } else if (n == "world_size") {
    v.measured = static_cast<double>(r.ranks.size());
  } else if (n == "gpus_available") {
    v.measured = cuda_device_count();
  } else {
    throw ConfigError("metric '" + n + "' has no evaluation (a registry bug)");
  }
  return v;
}

}  // namespace shardlab
