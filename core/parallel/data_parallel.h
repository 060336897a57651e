// The mechanics the data-parallel strategies share, so that each strategy file
// keeps only its phases: this rank's rows of the batch and their loss, the
// model states of a sharded rank (zero1/2/3, fsdp), and the reduce-scatters
// started during backward. (core/parallel/pipeline.h is the same for the pipelines.)
#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "core/io/nvme_store.h"
#include "core/model/optimizer.h"
#include "core/model/precision.h"
#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"

namespace shardlab {

// ---------------------------------------------------------------------------
// Batch and loss
// ---------------------------------------------------------------------------

// Rows [first_row, first_row + rows) of step `step`'s global batch, from the
// model's dataset: inputs x [rows, act_numel(0)] and targets y [rows,
// target_numel()], activations named "batch.x" and "batch.y".
struct Batch {
  int rows = 0;
  Tensor x, y;
};
Batch load_batch(RankEnv& env, int step, int first_row, int rows);
// This rank's slice, in rank order: rows [rank·b, (rank + 1)·b), b = batch / world.
Batch load_rank_slice(RankEnv& env, int step);

// The model's loss (MSE, cross-entropy: the family's) of `output` (stored in
// mp's dtype) against the batch's targets, as one loss span. Divided by the
// global batch's rows (--batch), not the batch's own, as the pipelines divide
// their micro-batches' losses: `value` is these rows' share of the step's mean
// loss, and `grad` ("loss.grad", a temporary in mp's dtype) its gradient, the
// start of backward. The ranks' gradients then add up to the full batch's, so a
// reduction only sums: nothing is divided by the world after it. In fp16 that
// matters: each rank's 2-byte gradient is already its 1/N of the total, so their
// sum is the size of `single`'s and overflows (skips a step) exactly when it
// does; a mean over the local rows made the sum N times larger and skipped
// steps `single` took. (PyTorch's DDP divides by the world before its
// all-reduce for the same reason.)
struct Loss {
  double value = 0;
  Tensor grad;
  int global_rows = 0;
  // The loss summed over these rows: the strategy's LossShare::sum.
  double sum() const { return value * global_rows; }
};
Loss compute_loss(RankEnv& env, const MixedPrecision& mp, const void* output, const Batch& batch);

// ---------------------------------------------------------------------------
// Sharded model states (ZeRO stages 1–3, FSDP)
// ---------------------------------------------------------------------------

// What a rank keeps of a model state: the whole (padded) flat buffer, the
// same on every rank, or only its own 1/N shard. The ZeRO stages differ in
// exactly these switches; the optimizer state is always sharded.
enum class Keep { whole, shard };

struct ShardedStatesSpec {
  int layers_per_group = 1;  // 1: a flat group per layer (ZeRO); K: FSDP units of K layers
  Keep params = Keep::shard;
  Keep grads = Keep::shard;
  Pool pool = Pool::device;  // Pool::host: the model states live in host memory (offload)
  // --offload nvme:DIR: the optimizer state lives in a file under this
  // directory (ZeRO-Infinity), in memory only while its shard steps.
  std::string nvme_dir;
  // --offload-params (with nvme_dir, params shard): the parameter shards live
  // in that file too, in memory only for a gather or the update.
  bool params_on_disk = false;
  // Whether a gather's shard is read one ahead (plan_gathers): --no-prefetch turns it off.
  bool read_ahead = true;
};

// One rank's model states, a flat buffer per group: parameters and gradients
// ("layers.3.flat", "layers.3.flat[shard 1/4].grad"; whole or shard as the
// spec says) and an optimizer over this rank's shards only (its state, and
// the fp32 masters in mixed precision).
class ShardedStates {
 public:
  // Allocates the buffers group by group (parameters, then gradients), then
  // the optimizer, and fills them from the full initial parameters `init`.
  ShardedStates(RankEnv& env, const ParamSource& init, const MixedPrecision& mp,
                ShardedStatesSpec spec);
  ~ShardedStates();

  const std::vector<FlatGroup>& groups() const { return groups_; }
  Optimizer& optimizer() { return *optimizer_; }
  // This rank's shards as a checkpoint sees them (strategy.h).
  RankState rank_state(MixedPrecision* precision);
  // Group g's parameter and gradient buffers: whole or shard, as allocated.
  Tensor& params(int g) { return params_[g]; }
  Tensor& grads(int g) { return grads_[g]; }
  // Where this rank's shard of group g begins in them (not for parameters on disk).
  void* param_shard(int g);
  void* grad_shard(int g);

  // The input of group g's all-gather: this rank's parameter shard. With the
  // shards on disk (--offload-params) `data` is a copy read from the file,
  // `copy` its tensor, to keep until the all-gather has finished.
  struct GatherInput {
    Tensor copy;
    const void* data = nullptr;
  };
  GatherInput shard_for_gather(int g);
  // The groups a step will gather, in order (forward's, then backward's):
  // with the shards on disk each is read one gather ahead, on the store's
  // I/O thread, so the disk read overlaps the gather and compute before it.
  // Nothing to do with the shards in memory.
  void plan_gathers(std::vector<int> order);

  // One optimizer step on this rank's shard of every group (an "optimizer"
  // span), with the reduced gradient shards; returns whether it was taken
  // (MixedPrecision::step: fp16 skips a step that overflowed on any rank).
  bool update_shards(MixedPrecision& mp);
  // Collective, whole parameters only (zero1, zero2): every group's updated
  // shard to every rank, an in-place all-gather per group.
  void all_gather_params();

  // Collective: the model's flat fp32 parameters on rank 0 ({} elsewhere):
  // the fp32 masters in mixed precision, else the parameters themselves.
  std::vector<float> export_params();

 private:
  RankEnv& env_;
  ShardedStatesSpec spec_;
  DType dtype_;  // of the parameters and gradients
  std::vector<FlatGroup> groups_;
  std::vector<Tensor> params_, grads_;
  std::unique_ptr<NvmeStore> store_;  // --offload nvme:DIR: the rank's offload file
  std::vector<uint64_t> on_disk_;     // its regions, as the allocator's disk pool counts them
  // --offload-params: each group's parameter region, and the gathers to come,
  // the first of them being read already (`ahead`).
  struct ShardRead;
  std::vector<int> param_region_;
  std::deque<int> gathers_;
  std::unique_ptr<ShardRead> ahead_;
  std::unique_ptr<ShardRead> start_read(int g);
  // What region `region` of the file holds, as the disk pool counts it.
  MemCategory disk_category(int region) const;
  // The rank's allocator, for the destructor: the RankEnv is gone by then,
  // the allocator (which outlives the strategy) is not.
  Allocator* alloc_ = nullptr;
  std::unique_ptr<Optimizer> optimizer_;
};

// The groups a sharded step gathers, in order (ShardedStates::plan_gathers):
// 0 to n-1 for forward, then n-1 to 0 for backward when forward freed them.
std::vector<int> gather_order(int n, bool again_for_backward);

// ---------------------------------------------------------------------------
// Tied weights across flat groups
// ---------------------------------------------------------------------------

// A tied parameter (gpt's lm_head, a copy of transformer.wte: core/model/model.h)
// gets a gradient from each of its two uses, in two flat groups: the head's,
// computed first in backward, and the embedding's, computed last. Its group's
// full gradient is held back from its reduce-scatter until the home group's
// is computed; then the two are summed locally (what PyTorch's one shared
// .grad accumulates) and both reduced, so both copies take the same update.
class TiedGradients {
 public:
  TiedGradients(const ModelLayout& m, const std::vector<FlatGroup>& groups);
  // Group g holds a tied copy whose home is in another group, not yet computed.
  bool holds_back(int g) const;
  // After group g's backward: sums every pair with its home in g, in the full
  // (unreduced) gradients full(group) of both groups (dt values).
  void sum(int g, const std::function<void*(int group)>& full, DeviceBackend& dev, DType dt) const;
  // The held-back groups whose homes are all in g: to reduce now, after sum(g).
  std::vector<int> released_by(int g) const;

 private:
  struct Pair {
    int copy_group, home_group;
    size_t copy_offset, home_offset, numel;  // inside the groups' flat buffers
  };
  std::vector<Pair> pairs_;
};

// ---------------------------------------------------------------------------
// Reduce-scatters in flight during backward
// ---------------------------------------------------------------------------

// Reduce-scatters of unreduced gradients, oldest first. Each keeps its
// full-size gradient (the collective's workspace) until it completes; retiring
// it frees that buffer, so at most a few layers' full gradients exist at once.
class ReduceScatterQueue {
 public:
  struct Pending {
    int group = -1;
    Tensor unreduced;  // the full gradient being reduce-scattered
    Tensor staged;     // optional: where the reduced shard lands before its home (offload)
    Work work;
  };

  // Starts reduce-scattering group g's full gradient `unreduced` into `out`
  // (this rank's shard of the sum), on the comm thread.
  void start(Comm& comm, const FlatGroup& g, Tensor unreduced, void* out, DType dt,
             Tensor staged = {});
  // Retires the reduce-scatters that are done, oldest first, and waits for the
  // oldest while more than `keep_at_most` are in flight (memory stays bounded
  // even when the comm thread falls behind backward). `on_done` runs for each
  // before its buffers are freed. Rethrows a failed collective.
  void retire(size_t keep_at_most, const std::function<void(Pending&)>& on_done = {});

 private:
  std::deque<Pending> pending_;
};

// ---------------------------------------------------------------------------
// Traffic of sharded model states (StrategyInfo::moves)
// ---------------------------------------------------------------------------

// Gradients reduce-scattered in backward, the updated parameter shards
// all-gathered after the update: the two halves of ddp's all-reduce, 2Ψ
// (zero1, zero2).
std::vector<StateMove> sharded_update_moves(const MoveQuery& q);
// Parameters all-gathered for forward and, when they were freed after it,
// again for backward; gradients reduce-scattered: 3Ψ, or 2Ψ keeping them
// (zero3, fsdp).
std::vector<StateMove> sharded_params_moves(const MoveQuery& q);

}  // namespace shardlab
