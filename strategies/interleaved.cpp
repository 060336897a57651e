// `interleaved`: Megatron-LM's interleaved 1F1B (Narayanan et al., "Efficient
// Large-Scale Language Model Training on GPU Clusters", SC 2021, §2.2). Each
// rank holds V model chunks instead of one contiguous stage: the model is cut
// into P·V chunks dealt round-robin, chunk c of rank r being model stage
// c·P + r, so a micro-batch passes every rank V times. Same weights as
// `single`: the same micro-batches, the same flush.
//
// What to notice in the timeline: the blocks are V times shorter (a chunk holds
// 1/V of a stage's layers), so the pipe fills and drains V times faster — the
// bubble falls from (P−1)/M of the compute to (P−1)/(V·M). The price is in the
// network lane: every micro-batch now crosses P·V − 1 boundaries instead of
// P − 1, V times the messages; and in the memory panel the first rank holds
// more chunks' activations during its longer warm-up.
#include "strategies/pipeline_strategy.h"
#include "strategies/registry.h"

#include <algorithm>

namespace shardlab {
namespace {

Action act(ActionKind kind, int mb, int chunk) {
  return {kind, mb, chunk};
}

// The step's order, one line of actions per rank (core/parallel/schedule.h).
Schedule interleaved_schedule(int P, int M, int V) {
  if (M > P && M % P != 0)
    throw ConfigError("--micro-batches " + std::to_string(M) +
                      ": interleaved sends micro-batches through the chunks in groups of the " +
                      std::to_string(P) + " stages (valid: a multiple of " + std::to_string(P) +
                      ", or " + std::to_string(P) + " or fewer)");
  Schedule s{P, M, V, std::vector<std::vector<Action>>(P)};
  const int total = M * V;       // forwards per rank: every micro-batch through every chunk
  const int G = std::min(M, P);  // micro-batches per group
  // The k-th forward of a rank runs micro-batch (k / GV)·G + k mod G on chunk
  // (k mod GV) / G: groups of G micro-batches go through chunk 0, then chunk
  // 1, …; backwards the same with the chunks reversed.
  const auto nth = [&](int k, ActionKind kind) {
    const int in_group = k % (G * V);
    int chunk = in_group / G;
    if (kind == ActionKind::backward) chunk = V - 1 - chunk;
    return act(kind, (k / (G * V)) * G + in_group % G, chunk);
  };
  for (int r = 0; r < P; ++r) {
    auto& line = s.ranks[r];
    // Phase 1 — warm-up: 2(P − r − 1) + (V − 1)·P forwards, enough for the
    // first gradient to come back through every chunk. (With M ≤ P Megatron
    // runs every forward first: there is nothing to alternate with.)
    const int warmup = M <= P ? total : std::min(total, 2 * (P - r - 1) + (V - 1) * P);
    for (int k = 0; k < warmup; ++k) line.push_back(nth(k, ActionKind::forward));
    // Phase 2 — steady state: one forward, one backward.
    for (int k = 0; k + warmup < total; ++k) {
      line.push_back(nth(warmup + k, ActionKind::forward));
      line.push_back(nth(k, ActionKind::backward));
    }
    // Phase 3 — cool-down: the backwards still owed.
    for (int k = total - warmup; k < total; ++k) line.push_back(nth(k, ActionKind::backward));
    // Phase 4 — flush (PipelineStrategy::step): one optimizer step.
  }
  return s;
}

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo interleaved_strategy() {
  return {
      .name = "interleaved",
      .summary =
          "Interleaved 1F1B (Megatron): V model chunks per rank dealt round-robin; "
          "bubble (P-1)/(V*M) of the compute for V times the messages",
      .family = StrategyFamily::pipeline,
      // (Not yet on a device mesh: its chunks on a pp axis beside dp and tp are untested.)
      .reads = {StrategyOption::stages, StrategyOption::micro_batches, StrategyOption::partition,
                StrategyOption::schedule, StrategyOption::virtual_stages},
      .in_flight_formula = "2(P−rank−1)+(V−1)P+1 chunks",
      .schedule = interleaved_schedule,
      .bubble_formula = "(P−1)/(V·M+P−1)",
      .make = [] { return std::make_unique<PipelineStrategy>(); },
      .validate = [](const RunConfig& cfg) { validate_pipeline(cfg); },
  };
}

}  // namespace shardlab
