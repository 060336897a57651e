// `1f1b`: one-forward-one-backward (PipeDream-Flush, Narayanan et al., 2021;
// the schedule of Megatron-LM). The same micro-batches, the same flush and the
// same gradients as gpipe, in a different order: as soon as a micro-batch's
// gradient can come back, the stage runs its backward and frees its activations.
//
// What to notice in the timeline: after a warm-up of P − rank − 1 forwards each
// stage alternates F and B (the steady state), then drains the remaining
// backwards (the cool-down). The bubble is the same as gpipe's, (P−1)/(M+P−1).
// In the memory panel: stage k never holds more than P − k micro-batches of
// activations (gpipe: all M), so the first stage holds the most and the last
// stage holds one at a time.
#include <algorithm>

#include "strategies/pipeline_strategy.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

// The step's order, one line of actions per stage (core/parallel/schedule.h);
// PipelineStrategy runs a stage's line and adds the flush that ends every step.
Schedule one_f_one_b_schedule(int P, int M, int /*chunks: one*/) {
  Schedule s{P, M, 1, std::vector<std::vector<Action>>(P)};
  for (int r = 0; r < P; ++r) {
    auto& line = s.ranks[r];
    // Stage r starts P − r − 1 micro-batches ahead of its first backward: just
    // enough to keep every later stage busy until the first gradient returns.
    const int warmup = std::min(P - r - 1, M);

    // Phase 1 — warm-up: forwards only, filling the pipe.
    for (int mb = 0; mb < warmup; ++mb) line.push_back({ActionKind::forward, mb});

    // Phase 2 — steady 1F1B: forward micro-batch warmup + i, then backward
    // micro-batch i, whose gradient the forward's time gave room to arrive
    // (the executor posts its receive before the forward). Each backward frees
    // the activations one forward added, so P − r micro-batches at most are alive.
    for (int i = 0; i + warmup < M; ++i) {
      line.push_back({ActionKind::forward, warmup + i});
      line.push_back({ActionKind::backward, i});
    }

    // Phase 3 — cool-down: the backwards of the last warm-up micro-batches.
    for (int mb = M - warmup; mb < M; ++mb) line.push_back({ActionKind::backward, mb});
    // Phase 4 — flush (PipelineStrategy::step): one optimizer step with the
    // gradient of the whole batch.
  }
  return s;
}

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo one_f_one_b_strategy() {
  return {
      .name = "1f1b",
      .summary =
          "1F1B (PipeDream-Flush): warm-up, alternate one forward and one backward, cool-down; "
          "activations of at most P - rank micro-batches",
      .family = StrategyFamily::pipeline,
      .reads = {StrategyOption::stages, StrategyOption::micro_batches, StrategyOption::partition,
                StrategyOption::schedule, StrategyOption::mesh, StrategyOption::mesh_order,
                StrategyOption::sequence_parallel, StrategyOption::dp_zero1,
                StrategyOption::recompute},
      .in_flight_formula = "min(P−rank, M)",
      .schedule = one_f_one_b_schedule,
      .bubble_formula = "(P−1)/(M+P−1)",
      .make = [] { return std::make_unique<PipelineStrategy>(); },
      .validate = [](const RunConfig& cfg) { validate_pipeline(cfg); },
  };
}

}  // namespace shardlab
