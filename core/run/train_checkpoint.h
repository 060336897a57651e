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
//
// Under tensor parallelism a rank holds slices: each of its ranges also lists
// where its values lie in the full model ("runs" in the file's metadata), so
// the loader assembles the full vectors from the slices as it does from
// shards, and a resume may use another mesh or strategy.
//
// Every file names the run that wrote it (a run id, new for each invocation), so
// a step assembled from two runs' files (two runs given one directory) is
// refused on resume instead of training on a mix. Version 1 checkpoints, from
// before run ids, still load when their files agree.
#pragma once
#include <string>
#include <vector>

#include "core/config.h"
#include "core/model/precision.h"
#include "core/parallel/strategy.h"

namespace shardlab {

// What a run resumes from: the full model and optimizer state after
// `steps_done` steps, and the losses of those steps.
struct ResumeState {
  std::string path;    // the checkpoint's directory, for messages
  std::string run_id;  // the run that saved it; empty for a version-1 checkpoint
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

// A fresh id for one run's checkpoints: 16 hex digits, random.
std::string new_run_id();

// Before a run saves into `dir` (--checkpoint-dir; created when missing),
// refused in one line (ConfigError naming the directory): a directory this user
// cannot create files in, and one that already holds complete checkpoints, unless `resume` is the
// newest of them (continuing that run in place). A second run into the same
// directory would overwrite the first's checkpoints, or mix its files with them.
void check_checkpoint_dir(const std::string& dir, const ResumeState* resume);

// Rank `rank` of run `run_id` saves its state after `steps_done` steps.
void save_rank_checkpoint(const std::string& dir, int steps_done, const RunConfig& cfg, int rank,
                          int world, const RankState& state, DeviceBackend& device,
                          const std::string& run_id);
// Once every rank has saved: checks that every rank file of the step is this
// run's (RunError naming the file and both run ids when another run wrote one
// meanwhile), then the manifest (with the losses so far), then DIR/latest.
// Until the manifest exists the checkpoint does not count.
void commit_checkpoint(const std::string& dir, int steps_done, const RunConfig& cfg, int world,
                       const std::vector<double>& losses, const std::string& run_id);

// The newest complete checkpoint in `dir` (a checkpoint directory, by step
// number, or one step-N directory). Throws ConfigError naming the file and the
// problem: none complete, a missing or malformed rank file, files of two runs
// (naming both run ids), values not covering the model, replicas that
// disagree, a tensor holding NaN or Inf. Each rank file's header is checked
// against the manifest and the model before its data is read.
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
