// `zb-h1`: the first zero-bubble schedule (Qi et al., "Zero Bubble Pipeline
// Parallelism", ICLR 2024, §3). 1F1B's order with each backward split in two:
// B, the gradient of the stage's input, which the previous stage is waiting
// for, and W, the gradient of the stage's weights, which nobody waits for. W
// can therefore run later, in the time 1F1B leaves idle. Same weights as
// `single`: B then W add exactly the gradients one backward adds.
//
// What to notice in the timeline: the B blocks are shorter than 1f1b's (half
// their GEMMs moved into W), so each gradient travels back up the pipe sooner;
// the W blocks (named W, lighter green) fill the cool-down where 1f1b's stages
// sit idle. The bubble falls from (P−1)/M of the compute to about (P−1)/(3M).
// In the memory panel: between B and W a micro-batch keeps only each linear's
// input and a copy of its output gradient; every stage holds at most P
// micro-batches, the most 1f1b's first stage holds.
#include <algorithm>

#include "strategies/pipeline_strategy.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

// The step's order, one line of actions per stage (core/parallel/schedule.h).
Schedule zb_h1_schedule(int P, int M, int /*chunks: one*/) {
  Schedule s{P, M, 1, std::vector<std::vector<Action>>(P)};
  for (int r = 0; r < P; ++r) {
    auto& line = s.ranks[r];
    int f = 0, b = 0, w = 0;
    const auto F = [&] { line.push_back({ActionKind::forward, f++}); };
    const auto B = [&] { line.push_back({ActionKind::backward, b++}); };
    const auto W = [&] { line.push_back({ActionKind::weight, w++}); };

    // Phase 1 — warm-up, as 1f1b's: P − r − 1 forwards fill the pipe.
    for (int i = 0; i < P - r - 1 && f < M; ++i) F();
    // Phase 2 — W held back: stage r runs its first r F B pairs without their
    // W. Its first gradient arrives r time units after stage 0's; holding r
    // Ws back lets every stage finish together instead of the last starting late.
    for (int i = 0; i < r && f < M; ++i) F(), B();
    // Phase 3 — steady state: F, B, and the oldest W still owed.
    while (f < M) F(), B(), W();
    // Phase 4 — cool-down: the last Bs, each followed by a W, then the Ws held
    // back in phase 2 fill the time 1f1b's cool-down leaves idle.
    while (b < M) B(), W();
    while (w < M) W();
    // Phase 5 — flush (PipelineStrategy::step): one optimizer step.
  }
  return s;
}

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo zb_h1_strategy() {
  return {
      .name = "zb-h1",
      .summary =
          "Zero bubble H1: 1F1B with each backward split into B (input gradient) and W "
          "(weight gradient), W deferred into the bubble; activations of at most P "
          "micro-batches",
      .family = StrategyFamily::pipeline,
      .reads = {StrategyOption::stages, StrategyOption::micro_batches, StrategyOption::partition,
                StrategyOption::schedule, StrategyOption::mesh, StrategyOption::mesh_order,
                StrategyOption::dp_zero1},
      // A micro-batch is alive from its F to its W: stage r runs P forwards
      // before its first W (P − r − 1 warm-up, r held back, then one).
      .in_flight_formula = "min(P, M)",
      .schedule = zb_h1_schedule,
      .bubble_formula = "(P−1)/(3M+P−1)",
      .make = [] { return std::make_unique<PipelineStrategy>(); },
      .validate = [](const RunConfig& cfg) { validate_pipeline(cfg); },
  };
}

}  // namespace shardlab
