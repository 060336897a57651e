// The strategy around a pipeline schedule: naive-mp, gpipe and 1f1b differ only
// in the order their stage runs micro-batches forward and backward, so each
// file holds its schedule (and its lecture) and this holds the rest: set up
// the stage, run the schedule, then the step's last phase, one optimizer step
// on the stage's own layers with the gradient of the whole batch (the flush).
#pragma once
#include <memory>
#include <vector>

#include "core/parallel/pipeline.h"
#include "core/parallel/strategy.h"

namespace shardlab {

// Schedule: a type with `static void run(PipelineStage&)`, the step's order of
// forwards and backwards over the micro-batches.
template <class Schedule>
class PipelineStrategy final : public Strategy {
 public:
  void setup(RankEnv& env, const ParamSource& init) override {
    stage_ = std::make_unique<PipelineStage>(env, init);
  }

  LossShare step(int step) override {
    stage_->begin_step(step);
    Schedule::run(*stage_);
    // The last phase — flush: each stage steps its optimizer once, on its own
    // layers, with the gradients accumulated over every micro-batch.
    return stage_->finish_step();
  }

  std::vector<float> export_params() override { return stage_->export_params(); }
  RankState rank_state() override { return stage_->rank_state(); }

 private:
  std::unique_ptr<PipelineStage> stage_;
};

}  // namespace shardlab
