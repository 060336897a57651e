// The strategy around a pipeline schedule: naive-mp, gpipe and 1f1b differ only
// in the order their stages run micro-batches forward and backward, which is
// data (core/parallel/schedule.h: one line of actions per stage). Each
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
  using MakeSchedule = Schedule (*)(int stages, int micro_batches);
  // `schedule`: the strategy's order (StrategyInfo::schedule).
  explicit PipelineStrategy(MakeSchedule schedule) : schedule_(schedule) {}

  void setup(RankEnv& env, const ParamSource& init) override {
    stage_ = std::make_unique<PipelineStage>(env, init);
    const StageTopology& t = stage_->topology();
    // Every stage computes the same schedule from the same sizes, or reads the
    // same --schedule file; this stage runs its own line (a meta run drives
    // the same stage to predict memory).
    const Schedule s = env.cfg.schedule.empty() ? schedule_(t.stages, stage_->micro_batches())
                                                : run_schedule(env.cfg);
    actions_ = s.ranks[t.rank];
  }

  LossShare step(int step) override {
    stage_->begin_step(step);
    stage_->run(actions_);
    // The last phase — flush: each stage steps its optimizer once, on its own
    // layers, with the gradients accumulated over every micro-batch.
    return stage_->finish_step();
  }

  std::vector<float> export_params() override { return stage_->export_params(); }
  RankState rank_state() override { return stage_->rank_state(); }

 private:
  MakeSchedule schedule_;
  std::vector<Action> actions_;
  std::unique_ptr<PipelineStage> stage_;
};

}  // namespace shardlab
