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
#include "core/memory_estimate.h"
#include "core/pipeline.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

class NaiveMp final : public Strategy {
 public:
  void setup(RankEnv& env, const ParamSource& init) override {
    stage_ = std::make_unique<PipelineStage>(env, init);
  }

  LossShare step(int step) override {
    stage_->begin_step(step);
    schedule(*stage_);
    // Phase 3 — update: each stage steps the optimizer on its own layers.
    return stage_->finish_step();
  }

  // The step's order, on the real stage or on its memory plan (StageMemory).
  template <class Stage>
  static void schedule(Stage& stage) {
    // Phase 1 — forward: wait for the previous stage, run my layers, pass the
    // activations on (the last stage computes the loss instead).
    stage.forward(0);
    // Phase 2 — backward: wait for the gradient from the next stage, run my
    // layers backward, pass the gradient of my input back.
    stage.backward(0);
  }

  std::vector<float> export_params() override { return stage_->export_params(); }
  RankState rank_state() override { return stage_->rank_state(); }

 private:
  std::unique_ptr<PipelineStage> stage_;
};

// What a stage allocates, replayed for the memory preflight on the same schedule.
void plan_memory(MemoryPlan& p) {
  StageMemory stage(p);
  p.steps([&](int) {
    stage.begin_step();
    NaiveMp::schedule(stage);
    stage.finish_step();
  });
  stage.export_params();
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
      .reads = {StrategyOption::stages, StrategyOption::partition},
      .traffic = Traffic::activations,
      .in_flight = [](int, int, int) { return 1; },
      .in_flight_formula = "1",
      .make = [] { return std::make_unique<NaiveMp>(); },
      .validate = [](const RunConfig& cfg) { validate_pipeline(cfg); },
      .plan_memory = plan_memory,
  };
}

}  // namespace shardlab
