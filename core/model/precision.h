// Mixed precision in one place: the storage dtype of --precision, conversions
// between fp32 and 2-byte storage, fp16's dynamic loss scaling, and the update
// (overflow check, unscale, fp32 master step) every data-parallel strategy calls.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device/host_convert.h"
#include "core/device/memory.h"

namespace shardlab {

class Comm;
class Optimizer;

// "fp32" -> f32, "bf16" -> bf16, "fp16" -> f16; throws ConfigError otherwise.
DType precision_dtype(const std::string& precision);

// Values [offset, offset + n) of `t`, in t's dtype, from or to fp32 host memory,
// wherever t lives: through the backend for the device pool; converted in
// place for the host pool (offload), which the host may touch.
void write_from_host(DeviceBackend& dev, Tensor& t, size_t offset, const float* src, size_t n);
void read_to_host(DeviceBackend& dev, float* dst, const Tensor& t, size_t offset, size_t n);

// An fp32 view of a device buffer stored in `dt`: the buffer itself when dt is
// f32, otherwise an upcast copy in an accounted temporary (the "kernels upcast"
// of mixed precision), cast on alloc's device. Written values go back to the
// buffer with store().
class AsF32 {
 public:
  AsF32(Allocator& alloc, const char* name, const void* src, DType dt, size_t n,
        Pool pool = Pool::device);
  // Uninitialised scratch of n fp32 values when dt is low precision (dst is then written by
  // store()).
  static AsF32 scratch(Allocator& alloc, const char* name, void* dst, DType dt, size_t n,
                       Pool pool = Pool::device);
  float* get() { return ptr_; }
  void store(void* dst) const;  // rounds back into dst (no-op for f32: it is dst)

 private:
  AsF32() = default;
  DeviceBackend* dev_ = nullptr;
  Tensor tmp_;
  float* ptr_ = nullptr;
  DType dt_ = DType::f32;
  size_t n_ = 0;
};

// fp16's dynamic loss scaling, as torch.cuda.amp.GradScaler with its
// defaults: the loss gradient is multiplied by scale() before backward so
// small gradients survive fp16's narrow range; the update divides it out.
// A step whose gradients hold inf/NaN is skipped and the scale halved;
// after growth_interval good steps in a row the scale doubles. bf16 has
// fp32's exponent range and fp32 needs none: static scale 1, never skips.
class LossScaler {
 public:
  struct Options {
    float init_scale = 65536.0f;  // 2^16
    float growth_factor = 2.0f;
    float backoff_factor = 0.5f;
    int growth_interval = 2000;
  };
  LossScaler() = default;
  LossScaler(bool dynamic, Options options);
  bool dynamic() const { return dynamic_; }
  float scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_; }
  // After a step's gradients are known: true to apply the update, false to skip it.
  bool update(bool found_overflow);
  // What a checkpoint keeps of it, so a resumed fp16 run scales as the
  // uninterrupted one would.
  struct State {
    float scale = 1.0f;
    int good_steps = 0;
    int64_t skipped = 0;
  };
  State state() const { return {scale_, good_steps_, skipped_}; }
  void restore(const State& s) {
    scale_ = s.scale;
    good_steps_ = s.good_steps;
    skipped_ = s.skipped;
  }

 private:
  bool dynamic_ = false;
  Options options_;
  float scale_ = 1.0f;
  int good_steps_ = 0;
  int64_t skipped_ = 0;
};

// The --precision policy of one rank. fp32: every call below is exactly the
// fp32 code path (no conversion, no scaling). bf16/fp16: parameters used in
// compute, activations and gradients are stored in 2 bytes; the optimizer
// keeps fp32 master weights and moments (K = 12 for AdamW).
class MixedPrecision {
 public:
  explicit MixedPrecision(const std::string& precision,
                          LossScaler::Options scaler = LossScaler::Options{});
  DType dtype() const { return dtype_; }
  bool mixed() const { return dtype_ != DType::f32; }
  size_t bytes() const { return dtype_size(dtype_); }
  const LossScaler& scaler() const { return scaler_; }
  LossScaler& scaler() { return scaler_; }

  // MSELoss (mean over `divisor` values) of pred[n] (stored in dtype()) against
  // target (fp32); writes dpred[n] (dtype()), the gradient times the loss scale.
  // All three are device memory of alloc's device.
  double mse_loss(Allocator& alloc, void* dpred, const void* pred, const float* target, size_t n,
                  size_t divisor) const;

  // The optimizer step on its ranges: params[i], grads[i] point at range i,
  // in dtype(), in the optimizer's pool (its backend() computes on them).
  // The gradients are the full batch's: a data-parallel strategy's reduction
  // only sums (each rank's loss is divided by the global batch:
  // core/parallel/data_parallel.h). fp32: Optimizer::step. Mixed: the overflow check (a
  // global vote over `vote` when each rank sees only its shard of the
  // gradients, so every rank skips or steps together), then
  // Optimizer::step_mixed with the loss scale divided out. Returns false for a
  // skipped step.
  bool step(Optimizer& opt, const std::vector<void*>& params, const std::vector<void*>& grads,
            Comm* vote);

 private:
  DType dtype_;
  LossScaler scaler_;
};

}  // namespace shardlab

namespace shardlab {

// The address of value i of a tensor, whatever its dtype.
inline void* at(Tensor& t, size_t i) {
  return static_cast<char*>(t.raw()) + i * dtype_size(t.dtype());
}
inline const void* at(const Tensor& t, size_t i) {
  return static_cast<const char*>(t.raw()) + i * dtype_size(t.dtype());
}

}  // namespace shardlab
