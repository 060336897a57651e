// The metric registry: every number a lesson can ask about, by name, measured
// on finished runs (allocator, recorders, final weights) and, where one exists,
// beside the formula that predicts it. One documented table, metric_registry().
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/predict/memory_estimate.h"
#include "core/predict/projection.h"
#include "core/run/runner.h"

namespace shardlab {

// Which argument a metric takes (beside `run`, which every metric accepts).
enum class MetricArg { rank, category, pool, kind, step, link, axis };

struct MetricInfo {
  std::string name;
  std::string unit;  // "B", "ms", "%", "x", "count" or "" (a plain number)
  std::vector<MetricArg> args;
  std::string meaning;           // one line
  std::string formula;           // what the formula beside it is ("16Ψ/N, …"); empty: none
  bool needs_both_runs = false;  // compares run a with run b (step_time_ratio)
};

// The table, in the order lessons/FORMAT.md lists it.
const std::vector<MetricInfo>& metric_registry();
const MetricInfo* find_metric(const std::string& name);
std::string metric_names();  // "final_loss, median_step_ms, …"
const char* to_string(MetricArg a);

// A metric as a lesson names it: { name, run, rank, category, pool, kind, step }.
// Shares are in percent (25 means 25 %), so a learner types what they read.
struct MetricRef {
  std::string name;
  char run = 'a';  // 'a' (the step's run) or 'b' (its compare run)
  int rank = 0;
  std::string category = "total";    // peak_bytes: total | params | grads | optimizer_state | …
  std::string pool = "device";       // peak_bytes: device | host
  std::string kind;                  // collective_count: a span kind (all_gather, send, …)
  int step = 1;                      // collective_count: the training step counted
  std::string link = "nvlink-h100";  // projected_*: the link between the dedicated devices
  std::string axis = "tp";           // axis_sent_bytes_per_step: a mesh axis (dp, pp, tp)
};

// Throws ConfigError when the reference cannot be evaluated on runs with these
// configurations: unknown name or argument value, rank outside the world, run
// 'b' without a compare run, a formula-only metric on a strategy without it.
// The message names the bad argument and what is valid, without a prefix.
void check_metric(const MetricRef& ref, const RunConfig& a, const RunConfig* b);

struct MetricValue {
  double measured = 0;
  std::optional<double> formula;  // the formula's value, when the registry has one for this run
  std::string formula_text;       // e.g. "16Ψ/N" or "(P−1)/(M+P−1)"
  std::string unit;
};

// Runs the metrics need beyond the step's own: weight_diff_to_single trains
// `single` on the same model, data, batch, steps, seed, optimizer and precision.
// Kept here so each reference run is made once per step.
class MetricRuns {
 public:
  MetricRuns(const RunResult& a, const RunResult* b) : a_(a), b_(b) {}
  const RunResult& run(char which) const;  // throws ConfigError for 'b' without b
  bool has_b() const { return b_ != nullptr; }
  const RunResult& single_reference(char which);
  // The meta run's prediction of the run's memory (core/predict/memory_estimate.h); made once.
  const MemoryEstimate& estimate(char which);
  // The run as on one dedicated device per rank joined by `link`; made once.
  const Projection& projection(char which, const std::string& link);

 private:
  const RunResult& a_;
  const RunResult* b_;
  std::optional<RunResult> single_a_, single_b_;
  std::map<std::pair<char, std::string>, Projection> projections_;
  std::map<char, MemoryEstimate> estimates_;
};

// Evaluates one metric. Throws ConfigError as check_metric does, and RunError
// when the run lacks what the metric needs (spans of a run made with --no-record).
MetricValue evaluate_metric(const MetricRef& ref, MetricRuns& runs);

// Measured model states of one rank: peaks of the params, grads and optimizer
// categories over the device and host pools (what the ZeRO formulas count).
struct ModelStateMeasured {
  double params = 0, grads = 0, optimizer = 0;
  double host = 0;                                          // of which in the host pool
  double activations = 0, comm_buffers = 0, temporary = 0;  // device pool peaks
  double total() const { return params + grads + optimizer; }
};
ModelStateMeasured measured_model_state(const RankReport& rr);

// Share (0..1) of a rank's communication time, in training steps 1.. (step 0
// too when it is the only one), that overlapped its compute-lane spans.
// 0 when the rank recorded no communication.
double comm_hidden_share(const Recorder::Snapshot& snap, int steps);

}  // namespace shardlab
