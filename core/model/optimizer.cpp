// Optimizer state allocation, fp32 master weights, and dispatch to the kernels.
#include "core/model/optimizer.h"

#include <memory>
#include <stdexcept>

#include "core/model/precision.h"

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

DeviceBackend& Optimizer::backend() const {
  if (pool_ == Pool::host) {
    // Host-pool state is host memory even beside a GPU: step it with the
    // CPU kernels, as ZeRO-Offload's CPU Adam does, not with device kernels.
    static const std::unique_ptr<DeviceBackend> host = make_cpu_backend();
    return *host;
  }
  return alloc_.backend();
}

void Optimizer::load_master(size_t i, const float* host_src) {
  write_from_host(backend(), master_[i], 0, host_src, ranges_[i].numel);
}

void Optimizer::load_master(size_t i, const ParamSource& init, size_t from) {
  init.write_to(backend(), master_[i], 0, from, ranges_[i].numel);
}

void Optimizer::read_master(size_t i, float* host_dst) const {
  read_to_host(backend(), host_dst, master_[i], 0, ranges_[i].numel);
}

void Optimizer::read_moment(size_t i, bool second, float* host_dst, size_t n) const {
  read_to_host(backend(), host_dst, second ? exp_avg_sq_[i] : exp_avg_[i], 0, n);
}

void Optimizer::load_moment(size_t i, bool second, const float* host_src, size_t n) {
  write_from_host(backend(), second ? exp_avg_sq_[i] : exp_avg_[i], 0, host_src, n);
}

void Optimizer::update(size_t i, float* param, const float* grad) {
  const kernels::AdamWParams h{cfg_.lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay};
  DeviceBackend& dev = backend();
  if (cfg_.kind == OptimizerKind::sgd)
    dev.sgd_step(param, grad, ranges_[i].numel, cfg_.lr);
  else
    dev.adamw_step(param, grad, static_cast<float*>(exp_avg_[i].raw()),
                   static_cast<float*>(exp_avg_sq_[i].raw()), ranges_[i].numel, h, t_);
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
  DeviceBackend& dev = backend();
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const size_t n = ranges_[i].numel;
    Tensor g =
        alloc_.alloc(ranges_[i].name + ".grad[fp32]", MemCategory::temporary, n, DType::f32, pool_);
    float* g32 = static_cast<float*>(g.raw());
    dev.cast(g32, DType::f32, grads[i], param_dtype_, n);
    dev.scale(g32, n, grad_scale);
    update(i, master(i), g32);
    dev.cast(params[i], param_dtype_, master(i), DType::f32, n);
  }
}

}  // namespace shardlab
