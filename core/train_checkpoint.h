// Checkpoints of a training run that a run can resume from, bit for bit: each
// rank saves what it holds (its shards of the weights and of AdamW's moments,
// as ZeRO and FSDP keep them, with their offsets in the model), then rank 0
// writes the manifest that makes the checkpoint complete. A resume rebuilds
// the full vectors from the ranks' files, so it may use another world size or
// strategy (re-sharding, as torch.distributed.checkpoint does).
//
//   DIR/step-000050/rank-00000.safetensors   weight/<i>, exp_avg/<i>, exp_avg_sq/<i>,
//                                            buffer/0 (a +bn model's running statistics)
//   DIR/step-000050/manifest.json            written last: the checkpoint is complete
//   DIR/latest                               "step-000050", replaced atomically
#pragma once
#include <string>
#include <vector>

#include "core/config.h"
#include "core/precision.h"
#include "core/strategy.h"

namespace shardlab {

// What a run resumes from: the full model and optimizer state after
// `steps_done` steps, and the losses of those steps.
struct ResumeState {
  std::string path;  // the checkpoint's directory, for messages
  int steps_done = 0;
  RunConfig saved;  // the settings it was saved with
  // The flat state: parameters (the fp32 masters in mixed precision), then a
  // +bn model's BatchNorm running statistics.
  std::vector<float> weights;
  std::vector<float> exp_avg, exp_avg_sq;  // flat, empty for SGD
  int64_t optimizer_steps = 0;             // AdamW's t
  LossScaler::State scaler;                // fp16's loss scale
  std::vector<double> losses;              // steps 1..steps_done
};

// Refuses (ConfigError, one line) what cannot be checkpointed: a CUDA device
// (not built yet).
void check_checkpointable(const RunConfig& cfg);

// Rank `rank` saves its state after `steps_done` steps.
void save_rank_checkpoint(const std::string& dir, int steps_done, const RunConfig& cfg, int rank,
                          int world, const RankState& state, DeviceBackend& device);
// Once every rank has saved: the manifest (with the losses so far), then
// DIR/latest. Until the manifest exists the checkpoint does not count.
void commit_checkpoint(const std::string& dir, int steps_done, const RunConfig& cfg, int world,
                       const std::vector<double>& losses);

// The newest complete checkpoint in `dir` (a checkpoint directory, or one
// step-N directory). Throws ConfigError naming the file and the problem:
// none complete, a missing or malformed rank file, values not covering the
// model, replicas that disagree.
ResumeState load_checkpoint(const std::string& dir, const ModelLayout& layout);
// Whether `dir` holds a complete checkpoint (what a restarted group resumes from).
bool has_complete_checkpoint(const std::string& dir);

// Whether `cfg` may resume from `r`: the same model, data, seed, batch and
// optimizer settings, and more steps than were done; strategy, world size and
// precision may differ. Throws ConfigError naming the first difference.
void check_resume(const RunConfig& cfg, const ResumeState& r);

// After setup: this rank's optimizer state (moments, step count, loss scale)
// from the full vectors; the weights came in through setup's initial values.
void restore_rank_state(const RankState& state, const ResumeState& r);

}  // namespace shardlab
