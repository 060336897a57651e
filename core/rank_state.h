// What a checkpoint saves of one rank (core/run/train_checkpoint.h), as the
// rank's strategy, layer stack or pipeline stage holds it: a value apart from
// the strategy interface, so the pieces that fill it need not know strategies.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

namespace shardlab {

class Tensor;
class Optimizer;
class MixedPrecision;
class ModelLayout;

// What a checkpoint saves of one rank, as the rank holds it: each range of its
// optimizer sits at `offset` in the model's flat parameters with `count` real
// values (a shard's padding after them is not saved); the rank's fp32 weights
// for it are `weight` from element `weight_at` (unused in mixed precision,
// where the optimizer's fp32 masters are the weights; null where they are in
// the optimizer's offload file, --offload-params). Ranges held by more than
// one rank (ddp's replicas, a pipeline's tied copy) are saved by each: a
// resume checks they agree. `precision` carries the fp16 loss scaler.
struct RankState {
  Optimizer* optimizer = nullptr;
  MixedPrecision* precision = nullptr;
  std::vector<size_t> offset, count;
  std::vector<const Tensor*> weight;
  std::vector<size_t> weight_at;
  // BatchNorm running statistics the rank holds: [buffer_offset, +buffer_count)
  // of the model's flat state vector (after the parameters), read by read_buffers.
  size_t buffer_offset = 0, buffer_count = 0;
  std::function<void(float*)> read_buffers;
  // The rank keeps nothing between steps (dp's devices other than 0): it saves
  // an empty file and restores nothing.
  bool holds_nothing = false;
  // Tensor parallelism: the offsets above (and the buffers') are in this
  // slice's flat vector, each range the full model's values where
  // for_each_slice_run puts them (a checkpoint saves those places, and drops
  // a padded vocabulary's padding). Null: offsets in the full model.
  const ModelLayout* slice = nullptr;
  bool empty() const { return optimizer == nullptr && !holds_nothing; }
};

}  // namespace shardlab
