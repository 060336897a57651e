// Optimizer state allocation and dispatch to the kernels.
#include "core/optimizer.h"

#include <stdexcept>

#include "kernels/cpu.h"

namespace shardlab {

Optimizer::Optimizer(const OptimizerConfig& cfg, Allocator& alloc, const std::vector<Range>& ranges)
    : cfg_(cfg), ranges_(ranges) {
  if (cfg.kind != OptimizerKind::adamw) return;  // SGD keeps no state
  for (const Range& r : ranges) {
    exp_avg_.push_back(alloc.alloc(r.name + ".exp_avg", MemCategory::optimizer_state, r.numel));
    exp_avg_sq_.push_back(
        alloc.alloc(r.name + ".exp_avg_sq", MemCategory::optimizer_state, r.numel));
  }
}

void Optimizer::step(const std::vector<float*>& params, const std::vector<const float*>& grads) {
  if (params.size() != ranges_.size() || grads.size() != ranges_.size())
    throw std::logic_error("Optimizer::step: range count mismatch");
  ++t_;
  const kernels::AdamWParams h{cfg_.lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay};
  for (size_t i = 0; i < ranges_.size(); ++i) {
    if (cfg_.kind == OptimizerKind::sgd)
      kernels::sgd_step(params[i], grads[i], ranges_[i].numel, cfg_.lr);
    else
      kernels::adamw_step(params[i], grads[i], exp_avg_[i].data<float>(),
                          exp_avg_sq_[i].data<float>(), ranges_[i].numel, h, t_);
  }
}

}  // namespace shardlab
