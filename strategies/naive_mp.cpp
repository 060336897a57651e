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

// The step's order (a meta run drives the same stage to predict its memory);
// pipeline_strategy.h adds the flush that ends every step.
struct NaiveMpSchedule {
  static void run(PipelineStage& stage) {
    // Phase 1 — forward: wait for the previous stage, run my layers, pass the
    // activations on (the last stage computes the loss instead).
    stage.forward(0);
    // Phase 2 — backward: wait for the gradient from the next stage, run my
    // layers backward, pass the gradient of my input back.
    stage.backward(0);
    // Phase 3 — update (PipelineStrategy::step): each stage steps the optimizer
    // on its own layers.
  }
};

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
      .in_flight = [](int, int, int) { return 1; },
      .in_flight_formula = "1",
      .make = [] { return std::make_unique<PipelineStrategy<NaiveMpSchedule>>(); },
      .validate = [](const RunConfig& cfg) { validate_pipeline(cfg); },
  };
}

}  // namespace shardlab
