// The strategy around a pipeline schedule: naive-mp, gpipe, 1f1b, zb-h1 and
// interleaved differ only in the order their stages run micro-batches forward
// and backward, which is data (core/parallel/schedule.h: one line of actions
// per stage). Each
// strategy's file holds its lecture and names its schedule; this holds the
// rest: set up the stage, run the stage's line of the schedule, then the step's
// last phase, one optimizer step on the stage's own layers with the gradient
// of the whole batch (the flush).
#pragma once
#include <memory>
#include <vector>

#include "core/parallel/pipeline.h"
#include "core/parallel/schedule.h"
#include "core/parallel/strategy.h"

namespace shardlab {

class PipelineStrategy final : public Strategy {
 public:
  void setup(RankEnv& env, const ParamSource& init) override {
    stage_ = std::make_unique<PipelineStage>(env, init);
    // Every stage computes the same schedule from the same settings (the
    // strategy's own, StrategyInfo::schedule), or reads the same --schedule
    // file, and runs its own line of it (a meta run drives the same stage to
    // predict memory).
    schedule_ = run_schedule(env.cfg);
  }

  LossShare step(int step) override {
    stage_->begin_step(step);
    stage_->run(schedule_);
    // The last phase — flush: each stage steps its optimizer once, on its own
    // layers, with the gradients accumulated over every micro-batch.
    return stage_->finish_step();
  }

  std::vector<float> export_params() override { return stage_->export_params(); }
  RankState rank_state() override { return stage_->rank_state(); }

 private:
  Schedule schedule_;
  std::unique_ptr<PipelineStage> stage_;
};

}  // namespace shardlab
