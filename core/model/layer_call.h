// The pieces of a layer call that LayerStack, LayerTape and the model
// families share (model_family.h has the families themselves): naming, what a
// layer keeps for its backward, running statistics, and the data a model trains on.
#pragma once
#include <string>
#include <vector>

#include "core/device/memory.h"

namespace shardlab {

class Comm;

// The zero-bubble split of a backward (Qi et al., ICLR 2024): B computes the
// gradient of the input, which the previous stage is waiting for, and W the
// linears' weight gradients, which nobody waits for, later (in the bubble).
// One deferred W is one linear's dW += doutᵀ·x (and db += Σ dout): it owns a
// copy of dout and reads x, which must stay alive until it runs. When dout is
// the stack's own gradient buffer (an MLP layer's), the copy is made after
// the layer's backward has freed what it kept (LayerStack::backward_pass), so
// a split B never holds more activations at once than the whole backward. W is the
// weight GEMMs, as in the paper; LayerNorm's, BatchNorm's and the embedding's
// small gradients stay in B. fp32 only (pipelines train in fp32).
struct DeferredWeightGrad {
  Tensor dout;                      // [rows, out], the linear's output gradient
  const void* copy_from = nullptr;  // not yet copied: dout's source, alive until the layer ends
  std::string dout_name;            // the copy's name in the memory panel
  const void* x = nullptr;          // [rows, in], the linear's input
  void* dw = nullptr;               // [out, in], accumulated into
  void* db = nullptr;               // [out], accumulated into; may be null
  int layer = -1;                   // the layer it belongs to (its W span's)
  int rows = 0, in = 0, out = 0;
};

// One call of a layer: where its buffers come from and how they are named.
struct LayerCall {
  Allocator& alloc;
  DType dt;  // storage of parameters, activations and gradients
  int rows;  // rows of the batch (samples or sequences) in this call
  int mb;    // micro-batch (-1: none); only names use it
  // Tensor parallelism: the communicator of this rank's tp group, whose ranks
  // hold the other slices of the layer (null: the layer is whole here).
  Comm* tp = nullptr;
  // B of a split backward: the linears' weight gradients are not computed
  // but appended here, for W to run later (null: the whole backward now).
  std::vector<DeferredWeightGrad>* defer = nullptr;
  // "layers.3.pre_gelu[mb 2]": an activation's name in the memory panel.
  std::string name(int layer, const std::string& what) const;
};

// What one layer keeps between its forward and its backward, and its output.
// Tensors are freed in order when backward is done with them.
struct LayerKeep {
  std::vector<Tensor> t;
  int out = -1;  // index of the layer's output in t
  Tensor& output() { return t[static_cast<size_t>(out)]; }
  // Frees everything but the output, last allocated first.
  void drop_saved();
};

// A layer's running statistics (mlp +bn): updated by a forward unless null
// (a recomputed forward must not count its micro-batch twice).
struct LayerNorms {
  void* running_mean = nullptr;
  void* running_var = nullptr;
};

// The rows a step trains on: inputs (fp32 values or int32 token ids) and the
// targets the loss compares the output with, made from (seed, step, row) alone
// so every strategy and world size sees the same global batch.
class Dataset {
 public:
  virtual ~Dataset() = default;
  // x_dev [rows, act_numel(0)], y_dev [rows, target_numel()] (device memory;
  // y_dev may be null when only inputs are needed). True when the rows were
  // made ahead, beside the step (a data loader, core/model/data_loader.h).
  virtual bool load(DeviceBackend& dev, int step, int row_begin, int rows, void* x_dev,
                    void* y_dev) const = 0;
  // The same into host memory, for --save-data.
  virtual void rows(int step, int row_begin, int rows, void* x, void* y) const = 0;
  virtual bool tokens() const = 0;  // int32 token ids (else fp32 values)
  virtual std::string describe() const = 0;
};

}  // namespace shardlab
