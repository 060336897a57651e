// SGD and AdamW over a list of parameter ranges. The state is allocated per
// range through the accounting allocator, so a ZeRO rank that owns one shard
// holds optimizer state for that shard only. In mixed precision the state
// also holds an fp32 master copy of every range (the ZeRO paper's K = 12).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/device/memory.h"
#include "core/model/param_source.h"

namespace shardlab {

class NvmeStore;

// Where an Optimizer's state lives on disk (Optimizer's constructor).
struct OptimizerOnDisk {
  NvmeStore* store = nullptr;  // null: in memory
  Recorder* rec = nullptr;
  std::vector<int> layer_of;
  // --offload-params: range i's parameters (param_dtype values) are the
  // store's region param_region[i], added by the owner; empty: in memory.
  std::vector<int> param_region;
};

class Optimizer {
 public:
  struct Range {
    std::string name;  // state is named "<name>.exp_avg", "<name>.exp_avg_sq", "<name>.master"
    size_t numel;
  };
  // `param_dtype` is how the model stores the parameters it computes with:
  // f32, or bf16/f16 for mixed precision (then fp32 masters are kept here).
  // `pool`: where the state lives (the host for ZeRO-Offload).
  // ZeRO-Infinity (--offload nvme:DIR): the state lives in `store`, one
  // region per state tensor, and is in memory only while its range steps.
  // Each step reads a range's state in, updates it and writes it back, the
  // next range's read overlapping this one's update (the store's I/O
  // thread); the transfers are disk_read/disk_write spans on the disk lane of
  // `rec`, layer_of[i] the layer range i's spans name. The store outlives this.
  using OnDisk = OptimizerOnDisk;
  Optimizer(const OptimizerConfig& cfg, Allocator& alloc, const std::vector<Range>& ranges,
            DType param_dtype = DType::f32, Pool pool = Pool::device, OnDisk disk = {});
  ~Optimizer();

  // One fp32 update: params[i] and grads[i] point at range i, in the
  // optimizer's pool. With the parameters on disk (params_swapped) params[i]
  // is null: each range's parameters are read in with its state, stepped and
  // written back.
  void step(const std::vector<float*>& params, const std::vector<const float*>& grads);

  // One mixed-precision update: grads[i] (param_dtype) times grad_scale are
  // upcast into an fp32 temporary, master i takes the fp32 step, and params[i]
  // (param_dtype) receives the master rounded to 2 bytes. On disk, params[i]
  // is null and the rounded parameters are written to their region (not
  // read: the master is where they come from).
  void step_mixed(const std::vector<void*>& params, const std::vector<const void*>& grads,
                  float grad_scale);

  bool mixed() const { return param_dtype_ != DType::f32; }
  bool swapped() const { return store_ != nullptr; }
  bool params_swapped() const { return !param_region_.empty(); }
  // fp32 parameters on disk: range i's (ranges_[i].numel values) to fp32 host memory.
  void read_param(size_t i, float* host_dst) const;
  // Swapped: range i's initial master, filled by its owner into `t` (a
  // tensor in the optimizer's pool), to the store.
  void store_master(size_t i, const Tensor& t);
  // Bytes of state read from and written to the store so far.
  int64_t disk_bytes_read() const;
  int64_t disk_bytes_written() const;

  // Mixed precision: range i's fp32 master weights (filled by the owner at
  // setup), in the optimizer's pool; not while swapped (read_master instead).
  float* master(size_t i) { return static_cast<float*>(master_.at(i).raw()); }
  const float* master(size_t i) const { return static_cast<const float*>(master_.at(i).raw()); }
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
  // Runs update_range(i, param) for every range, with range i's state in
  // memory (swapped in around it when swapped()), param its parameters:
  // params[i], or with params_swapped() those swapped in beside the state.
  void each_range(const std::vector<void*>& params,
                  const std::function<void(size_t, void*)>& update_range);
  // The state tensors of every range, as (suffix, tensors): master (mixed),
  // exp_avg and exp_avg_sq (AdamW).
  struct Part {
    const char* suffix;
    std::vector<Tensor>* tensors;
  };
  std::vector<Part> parts();
  struct Swap;
  // A state tensor's bytes from / to the store, synchronously on its I/O thread.
  void disk_read(size_t part, size_t i, float* host_dst, size_t n) const;
  void disk_write(size_t part, size_t i, const float* host_src, size_t n);

  OptimizerConfig cfg_;
  Allocator& alloc_;
  std::vector<Range> ranges_;
  DType param_dtype_;
  Pool pool_;
  std::vector<Tensor> master_, exp_avg_, exp_avg_sq_;
  int64_t t_ = 0;
  // OnDisk: the store, each part's region per range, and the disk spans' recorder.
  NvmeStore* store_ = nullptr;
  std::vector<std::vector<int>> region_;  // [part][range]
  std::vector<int> layer_of_;
  Recorder* rec_ = nullptr;
  // --offload-params: each range's parameter region, and its parameters while they step.
  std::vector<int> param_region_;
  std::vector<Tensor> param_;
};

}  // namespace shardlab
