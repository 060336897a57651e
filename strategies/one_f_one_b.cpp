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

// The step's order (a meta run drives the same stage to predict its memory);
// pipeline_strategy.h adds the flush that ends every step.
struct OneFOneBSchedule {
  static void run(PipelineStage& stage) {
    const StageTopology& t = stage.topology();
    const int M = stage.micro_batches();
    // Stage k starts P − k − 1 micro-batches ahead of its first backward: just
    // enough to keep every later stage busy until the first gradient returns.
    const int warmup = std::min(t.stages - t.rank - 1, M);

    // Phase 1 — warm-up: forwards only, filling the pipe.
    for (int mb = 0; mb < warmup; ++mb) {
      stage.post_recv_input(mb + 1);
      stage.forward(mb);
    }

    // Phase 2 — steady 1F1B: forward micro-batch warmup + i, then backward
    // micro-batch i, whose gradient the forward's time gave room to arrive
    // (its receive is posted first). Each backward frees the activations one
    // forward added, so P − k micro-batches at most are alive here.
    for (int i = 0; i + warmup < M; ++i) {
      stage.post_recv_grad(i);
      stage.forward(warmup + i);
      stage.backward(i);
    }

    // Phase 3 — cool-down: the backwards of the last warm-up micro-batches.
    for (int mb = M - warmup; mb < M; ++mb) {
      if (mb + 1 < M) stage.post_recv_grad(mb + 1);
      stage.backward(mb);
    }
    // Phase 4 — flush (PipelineStrategy::step): one optimizer step with the
    // gradient of the whole batch.
  }
};

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
                StrategyOption::mesh, StrategyOption::mesh_order, StrategyOption::sequence_parallel,
                StrategyOption::dp_zero1, StrategyOption::recompute},
      .in_flight = [](int micro_batches, int stages,
                      int rank) { return std::min(micro_batches, stages - rank); },
      .in_flight_formula = "min(P−rank, M)",
      .make = [] { return std::make_unique<PipelineStrategy<OneFOneBSchedule>>(); },
      .validate = [](const RunConfig& cfg) { validate_pipeline(cfg); },
  };
}

}  // namespace shardlab
