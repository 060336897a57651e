// Optimizer state allocation, fp32 master weights, and dispatch to the kernels.
#include "core/optimizer.h"

#include <stdexcept>

#include "core/precision.h"
#include "kernels/cpu.h"

namespace shardlab {

Optimizer::Optimizer(const OptimizerConfig& cfg, Allocator& alloc, const std::vector<Range>& ranges,
                     DType param_dtype, Pool pool)
    : cfg_(cfg), alloc_(alloc), ranges_(ranges), param_dtype_(param_dtype), pool_(pool) {
  for (const Range& r : ranges) {
    if (mixed())
      master_.push_back(
          alloc.alloc(r.name + ".master", MemCategory::optimizer_state, r.numel, DType::f32, pool));
    if (cfg.kind != OptimizerKind::adamw) continue;  // SGD keeps no other state
    exp_avg_.push_back(
        alloc.alloc(r.name + ".exp_avg", MemCategory::optimizer_state, r.numel, DType::f32, pool));
    exp_avg_sq_.push_back(alloc.alloc(r.name + ".exp_avg_sq", MemCategory::optimizer_state, r.numel,
                                      DType::f32, pool));
  }
}

void Optimizer::update(size_t i, float* param, const float* grad) {
  const kernels::AdamWParams h{cfg_.lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay};
  if (cfg_.kind == OptimizerKind::sgd)
    kernels::sgd_step(param, grad, ranges_[i].numel, cfg_.lr);
  else
    kernels::adamw_step(param, grad, exp_avg_[i].data<float>(), exp_avg_sq_[i].data<float>(),
                        ranges_[i].numel, h, t_);
}

void Optimizer::step(const std::vector<float*>& params, const std::vector<const float*>& grads) {
  if (params.size() != ranges_.size() || grads.size() != ranges_.size())
    throw std::logic_error("Optimizer::step: range count mismatch");
  if (mixed()) throw std::logic_error("Optimizer::step: mixed precision needs step_mixed");
  ++t_;
  for (size_t i = 0; i < ranges_.size(); ++i) update(i, params[i], grads[i]);
}

void Optimizer::step_mixed(const std::vector<void*>& params, const std::vector<const void*>& grads,
                           float grad_scale) {
  if (params.size() != ranges_.size() || grads.size() != ranges_.size())
    throw std::logic_error("Optimizer::step_mixed: range count mismatch");
  if (!mixed()) throw std::logic_error("Optimizer::step_mixed: fp32 parameters need step");
  ++t_;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const size_t n = ranges_[i].numel;
    Tensor g =
        alloc_.alloc(ranges_[i].name + ".grad[fp32]", MemCategory::temporary, n, DType::f32, pool_);
    load_to_f32(g.data<float>(), grads[i], param_dtype_, n);
    kernels::scale(g.data<float>(), n, grad_scale);
    update(i, master(i), g.data<float>());
    store_from_f32(params[i], param_dtype_, master(i), n);
  }
}

}  // namespace shardlab
