// Storage conversions, the loss scaler and the mixed-precision update (see precision.h).
#include "core/model/precision.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "core/comm/comm.h"
#include "core/model/optimizer.h"
#include "kernels/precision.h"

namespace shardlab {

DType precision_dtype(const std::string& precision) {
  if (precision == "fp32") return DType::f32;
  if (precision == "bf16") return DType::bf16;
  if (precision == "fp16") return DType::f16;
  throw ConfigError("--precision '" + precision + "' is invalid (valid: fp32, bf16, fp16)");
}

void write_from_host(DeviceBackend& dev, Tensor& t, size_t offset, const float* src, size_t n) {
  if (t.pool() == Pool::host)
    store_from_f32(at(t, offset), t.dtype(), src, n);
  else
    dev.upload(at(t, offset), t.dtype(), src, n);
}

void read_to_host(DeviceBackend& dev, float* dst, const Tensor& t, size_t offset, size_t n) {
  if (t.pool() == Pool::host)
    load_to_f32(dst, at(t, offset), t.dtype(), n);
  else
    dev.download(dst, at(t, offset), t.dtype(), n);
}

AsF32::AsF32(Allocator& alloc, const char* name, const void* src, DType dt, size_t n, Pool pool)
    : dev_(&alloc.backend()), dt_(dt), n_(n) {
  if (dt == DType::f32) {
    ptr_ = const_cast<float*>(static_cast<const float*>(src));
    return;
  }
  tmp_ = alloc.alloc(name, MemCategory::temporary, n, DType::f32, pool);
  ptr_ = static_cast<float*>(tmp_.raw());
  if (src) dev_->cast(ptr_, DType::f32, src, dt, n);
}

AsF32 AsF32::scratch(Allocator& alloc, const char* name, void* dst, DType dt, size_t n, Pool pool) {
  AsF32 a;
  a.dev_ = &alloc.backend();
  a.dt_ = dt;
  a.n_ = n;
  if (dt == DType::f32) {
    a.ptr_ = static_cast<float*>(dst);
  } else {
    a.tmp_ = alloc.alloc(name, MemCategory::temporary, n, DType::f32, pool);
    a.ptr_ = static_cast<float*>(a.tmp_.raw());
  }
  return a;
}

void AsF32::store(void* dst) const {
  if (dt_ != DType::f32) dev_->cast(dst, dt_, ptr_, DType::f32, n_);
}

LossScaler::LossScaler(bool dynamic, Options options)
    : dynamic_(dynamic), options_(options), scale_(dynamic ? options.init_scale : 1.0f) {}

bool LossScaler::update(bool found_overflow) {
  if (!dynamic_) return !found_overflow;
  if (found_overflow) {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++good_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
  return true;
}

MixedPrecision::MixedPrecision(const std::string& precision, LossScaler::Options scaler)
    : dtype_(precision_dtype(precision)), scaler_(dtype_ == DType::f16, scaler) {}

double MixedPrecision::mse_loss(Allocator& alloc, void* dpred, const void* pred,
                                const float* target, size_t n, size_t divisor) const {
  DeviceBackend& dev = alloc.backend();
  if (!mixed())
    return dev.mse_forward_backward(static_cast<float*>(dpred), static_cast<const float*>(pred),
                                    target, n, divisor);
  // The loss and its gradient in fp32, on the upcast prediction; the
  // gradient is scaled (fp16) before it is rounded to 2 bytes, so that small
  // values do not flush to zero on the way back through the layers.
  AsF32 p(alloc, "loss.pred[fp32]", pred, dtype_, n);
  AsF32 d = AsF32::scratch(alloc, "loss.grad[fp32]", dpred, dtype_, n);
  const double loss = dev.mse_forward_backward(d.get(), p.get(), target, n, divisor);
  if (scaler_.scale() != 1.0f) dev.scale(d.get(), n, scaler_.scale());
  d.store(dpred);
  return loss;
}

bool MixedPrecision::step(Optimizer& opt, const std::vector<void*>& params,
                          const std::vector<void*>& grads, Comm* vote) {
  const auto& ranges = opt.ranges();
  DeviceBackend& dev = opt.backend();  // where the gradients live, next to the optimizer state
  if (!mixed()) {
    std::vector<float*> p;
    std::vector<const float*> g;
    for (size_t i = 0; i < ranges.size(); ++i) {
      p.push_back(static_cast<float*>(params[i]));
      g.push_back(static_cast<const float*>(grads[i]));
    }
    opt.step(p, g);
    return true;
  }
  float grad_scale = 1.0f;
  if (scaler_.dynamic()) {
    // An overflow anywhere must skip the step everywhere: a rank that sees
    // only its shard of the gradients votes, and the vote is summed.
    float overflow = 0;
    for (size_t i = 0; i < ranges.size() && overflow == 0; ++i)
      if (!dev.all_finite(grads[i], dtype_, ranges[i].numel)) overflow = 1;
    if (vote) vote->all_reduce(&overflow, 1, DType::f32);  // a host float: comm stages it
    const float unscale = 1.0f / scaler_.scale();          // before update() changes the scale
    if (!scaler_.update(overflow > 0)) return false;
    grad_scale = unscale;
  }
  std::vector<const void*> g(grads.begin(), grads.end());
  opt.step_mixed(params, g, grad_scale);
  return true;
}

}  // namespace shardlab
