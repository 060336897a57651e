// `naive-mp`: naive model parallelism, the baseline of the pipeline lessons.
// The layers are cut into consecutive stages, one per rank; the whole batch
// goes forward through stage 0, 1, …, P−1, and its gradient comes back the same way.
//
// What to notice in the timeline: at any moment exactly one rank computes.
// Stage k waits for stage k−1's activations, runs its layers, sends them on and
// waits again, this time for the gradient from stage k+1: with P stages every
// rank idles (P−1)/P of the step, the bubble that micro-batches (gpipe) shrink.
// In the memory panel each rank holds only its own layers' parameters,
// gradients and optimizer state — the point of model parallelism — but the
// activations of the whole batch for those layers.
//
// One batch, no micro-batches: --micro-batches must be 1 (gpipe with M = 1 is
// the same schedule; with more, use gpipe or 1f1b).
#include "strategies/pipeline_strategy.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

// The step's order, one line of actions per stage (core/parallel/schedule.h);
// PipelineStrategy runs a stage's line and adds the optimizer step. (With M
// micro-batches, `shardlab schedule naive-mp` runs them one after another.)
Schedule naive_mp_schedule(int P, int M, int /*chunks: one*/) {
  Schedule s{P, M, 1, std::vector<std::vector<Action>>(P)};
  for (auto& line : s.ranks)
    for (int mb = 0; mb < M; ++mb) {
      // Phase 1 — forward: wait for the previous stage, run my layers, pass
      // the activations on (the last stage computes the loss instead).
      line.push_back({ActionKind::forward, mb});
      // Phase 2 — backward: wait for the gradient from the next stage, run my
      // layers backward, pass the gradient of my input back.
      line.push_back({ActionKind::backward, mb});
    }
  // Phase 3 — update (PipelineStrategy::step): each stage steps the optimizer
  // on its own layers.
  return s;
}

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo naive_mp_strategy() {
  return {
      .name = "naive-mp",
      .summary =
          "naive model parallelism: consecutive layers per rank, one batch, one stage busy at a "
          "time",
      .family = StrategyFamily::pipeline,
      .reads = {StrategyOption::stages, StrategyOption::partition, StrategyOption::mesh,
                StrategyOption::mesh_order, StrategyOption::sequence_parallel,
                StrategyOption::dp_zero1},
      .in_flight_formula = "1",
      .schedule = naive_mp_schedule,
      .bubble_formula = "(P−1)/P",
      .make = [] { return std::make_unique<PipelineStrategy>(); },
      .validate = [](const RunConfig& cfg) { validate_pipeline(cfg); },
  };
}

}  // namespace shardlab
