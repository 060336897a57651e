// `gpipe`: GPipe (Huang et al., 2019). The batch is cut into M micro-batches
// that flow through the stages one after another: all forwards, then all
// backwards, the gradients accumulating over the micro-batches, then one
// optimizer step for the whole batch (the flush). Same weights as `single`.
//
// What to notice in the timeline: F0 F1 … F(M−1) run down the stages like a
// staircase, then B0 B1 … B(M−1) climb back. While stage k works on micro-batch
// i, stage k+1 works on i−1: all stages are busy at once except while the pipe
// fills and drains, a bubble of (P−1)/(M+P−1) of the step — more micro-batches,
// smaller bubble. In the memory panel: every stage holds the activations of all
// M micro-batches at the end of the forwards (the cost 1f1b removes), unless
// --recompute keeps only each stage's input and runs the forward again, per
// micro-batch, just before its backward (extra F spans, less memory).
#include "strategies/pipeline_strategy.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

// The step's order, one line of actions per stage (core/parallel/schedule.h);
// PipelineStrategy runs a stage's line and adds the flush that ends every step.
Schedule gpipe_schedule(int P, int M, int /*chunks: one*/) {
  Schedule s{P, M, 1, std::vector<std::vector<Action>>(P)};
  for (auto& line : s.ranks) {
    // Phase 1 — fill: every micro-batch forward, in order (the executor posts
    // the receive of the next one's input first, so the transfer overlaps).
    for (int mb = 0; mb < M; ++mb) line.push_back({ActionKind::forward, mb});
    // Phase 2 — drain: every micro-batch backward, in the same order; each
    // adds its share to the gradients.
    for (int mb = 0; mb < M; ++mb) line.push_back({ActionKind::backward, mb});
    // Phase 3 — flush (PipelineStrategy::step): one optimizer step with the
    // gradient of the whole batch.
  }
  return s;
}

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo gpipe_strategy() {
  return {
      .name = "gpipe",
      .summary =
          "GPipe: micro-batches, all forwards then all backwards, one flush (--recompute to save "
          "activations)",
      .family = StrategyFamily::pipeline,
      .reads = {StrategyOption::stages, StrategyOption::micro_batches, StrategyOption::partition,
                StrategyOption::schedule, StrategyOption::mesh, StrategyOption::mesh_order,
                StrategyOption::sequence_parallel, StrategyOption::dp_zero1,
                StrategyOption::recompute},
      .in_flight_formula = "M",
      .schedule = gpipe_schedule,
      .bubble_formula = "(P−1)/(M+P−1)",
      .make = [] { return std::make_unique<PipelineStrategy>(); },
      .validate = [](const RunConfig& cfg) { validate_pipeline(cfg); },
  };
}

}  // namespace shardlab
