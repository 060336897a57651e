// SGD and AdamW over a list of parameter ranges. The state is allocated per
// range through the accounting allocator, so a ZeRO rank that owns one shard
// holds optimizer state for that shard only.
#pragma once
#include <string>
#include <vector>

#include "core/config.h"
#include "core/memory.h"

namespace shardlab {

class Optimizer {
 public:
  struct Range {
    std::string name;  // state is named "<name>.exp_avg", "<name>.exp_avg_sq"
    size_t numel;
  };
  Optimizer(const OptimizerConfig& cfg, Allocator& alloc, const std::vector<Range>& ranges);

  // One update: params[i] and grads[i] point at range i.
  void step(const std::vector<float*>& params, const std::vector<const float*>& grads);
  int64_t steps_taken() const { return t_; }

 private:
  OptimizerConfig cfg_;
  std::vector<Range> ranges_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  int64_t t_ = 0;
};

}  // namespace shardlab
