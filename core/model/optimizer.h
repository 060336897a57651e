// SGD and AdamW over a list of parameter ranges. The state is allocated per
// range through the accounting allocator, so a ZeRO rank that owns one shard
// holds optimizer state for that shard only. In mixed precision the state
// also holds an fp32 master copy of every range (the ZeRO paper's K = 12).
#pragma once
#include <string>
#include <vector>

#include "core/config.h"
#include "core/device/memory.h"
#include "core/model/param_source.h"

namespace shardlab {

class Optimizer {
 public:
  struct Range {
    std::string name;  // state is named "<name>.exp_avg", "<name>.exp_avg_sq", "<name>.master"
    size_t numel;
  };
  // `param_dtype` is how the model stores the parameters it computes with:
  // f32, or bf16/f16 for mixed precision (then fp32 masters are kept here).
  // `pool`: where the state lives (the host for ZeRO-Offload).
  Optimizer(const OptimizerConfig& cfg, Allocator& alloc, const std::vector<Range>& ranges,
            DType param_dtype = DType::f32, Pool pool = Pool::device);

  // One fp32 update: params[i] and grads[i] point at range i, in the
  // optimizer's pool.
  void step(const std::vector<float*>& params, const std::vector<const float*>& grads);

  // One mixed-precision update: grads[i] (param_dtype) times grad_scale are
  // upcast into an fp32 temporary, master i takes the fp32 step, and params[i]
  // (param_dtype) receives the master rounded to 2 bytes.
  void step_mixed(const std::vector<void*>& params, const std::vector<const void*>& grads,
                  float grad_scale);

  bool mixed() const { return param_dtype_ != DType::f32; }
  // Mixed precision: range i's fp32 master weights (filled by the owner at
  // setup), in the optimizer's pool.
  float* master(size_t i) { return static_cast<float*>(master_[i].raw()); }
  const float* master(size_t i) const { return static_cast<const float*>(master_[i].raw()); }
  // Range i's master tensor, for its owner to fill at setup.
  Tensor& master_tensor(size_t i) { return master_[i]; }
  // Range i's master from / to fp32 host memory (ranges_[i].numel values).
  void load_master(size_t i, const float* host_src);
  // The same from the initial state vector: floats [from, from + numel).
  void load_master(size_t i, const ParamSource& init, size_t from);
  void read_master(size_t i, float* host_dst) const;
  // What computes on the state, and on the params and grads handed to step:
  // the allocator's device, or with the state in the host pool (ZeRO-Offload's
  // CPU optimizer) the host's own kernels.
  DeviceBackend& backend() const;
  const std::vector<Range>& ranges() const { return ranges_; }
  int64_t steps_taken() const { return t_; }

  // For checkpoints: AdamW's moments of range i (`second`: exp_avg_sq, else
  // exp_avg), `n` values from element 0, to or from fp32 host memory; and the
  // step count AdamW's bias correction reads. SGD has no moments.
  bool has_moments() const { return !exp_avg_.empty(); }
  void read_moment(size_t i, bool second, float* host_dst, size_t n) const;
  void load_moment(size_t i, bool second, const float* host_src, size_t n);
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  void update(size_t i, float* param, const float* grad);

  OptimizerConfig cfg_;
  Allocator& alloc_;
  std::vector<Range> ranges_;
  DType param_dtype_;
  Pool pool_;
  std::vector<Tensor> master_, exp_avg_, exp_avg_sq_;
  int64_t t_ = 0;
};

}  // namespace shardlab
