// Forward and backward of layers on weights the caller supplies, with the
// activations each layer keeps for its backward. ZeRO-3 and FSDP compute on
// freshly gathered buffers, dp on per-step replicas: the weights are not owned
// here. Also the MLP layer's math (core/models/mlp.cpp uses it).
#pragma once
#include <functional>
#include <vector>

#include "core/device/memory.h"
#include "core/model/layer_call.h"
#include "core/model/model.h"
#include "core/record/recorder.h"

namespace shardlab {

// One layer's math with every buffer stored in `dt`, shared by LayerTape and
// LayerStack. fp32 runs the float kernels on the buffers themselves; bf16/fp16
// upcast the inputs into fp32 temporaries, run the same kernels and round the
// results back to 2 bytes (compute in fp32, storage and traffic in 2 bytes).
//
// A layer's BatchNorm1d under `mlp:LxD+bn` (fp32 only), all device pointers.
// Forward reads weight and bias [d], writes xhat [rows, d] and invstd [d] (kept
// for backward) and updates running_mean/var [d], unless they are null: a
// recomputed forward must not count its micro-batch twice. Backward reads
// weight, xhat and invstd and accumulates into dweight and dbias.
struct BatchNormArgs {
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* running_mean = nullptr;
  void* running_var = nullptr;
  void* xhat = nullptr;
  void* invstd = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;
};

// Runs on the linear's output y [rows, out] before BatchNorm and GELU read it,
// as it is held then (fp32 while 2-byte storage is upcast): a row-parallel
// layer's all-reduce (core/models/mlp.cpp).
using AfterLinear = std::function<void(void* y, DType dt)>;

// pre = x · Wᵀ + b; out = gelu(pre). Without GELU (pre == nullptr): out = x · Wᵀ + b.
// With BatchNorm (bn given, pre required): pre = bn(x · Wᵀ + b) over the rows; out = gelu(pre).
// x is [rows, in], pre and out [rows, out]; w [out, in]; b [out] (may be null: no bias).
void layer_forward(Allocator& alloc, DType dt, void* out, void* pre, const void* x, const void* w,
                   const void* b, int rows, int in_dim, int out_dim,
                   const BatchNormArgs* bn = nullptr, const AfterLinear& after_linear = {});
// g [rows, out]: the gradient of the layer's output, overwritten (through GELU when
// pre is given, then through BatchNorm when bn is). dw, db (and bn's dweight,
// dbias) accumulate (+=); din [rows, in] is overwritten (may be null).
// defer (a zero-bubble B, fp32, of layer `layer`): when defer->defer is set, dw
// and db are left for W (defer_weight_grad).
void layer_backward(Allocator& alloc, DType dt, void* g, const void* pre, void* din, void* dw,
                    void* db, const void* x, const void* w, int rows, int in_dim, int out_dim,
                    const BatchNormArgs* bn = nullptr, const LayerCall* defer = nullptr,
                    int layer = -1);

// The zero-bubble split (layer_call.h). When c.defer is set, appends to it a
// linear's weight gradient — dw += doutᵀ·x, db += Σ dout — with a copy of
// dout named `what`, and returns true: the caller computes din alone. fp32
// only; otherwise returns false and the caller computes everything now.
// `copy_later`: dout outlives the layer's backward (it is the stack's gradient
// buffer), so the copy waits for copy_deferred_outputs, after the layer's
// saved activations are freed.
bool defer_weight_grad(const LayerCall& c, int layer, const char* what, const void* dout,
                       const void* x, void* dw, void* db, int rows, int in, int out,
                       bool copy_later = false);
// Makes the copies defer_weight_grad left for later (copy_later).
void copy_deferred_outputs(Allocator& alloc, std::vector<DeferredWeightGrad>& deferred);
// W of one deferred weight gradient; frees its copy of dout when done.
void run_weight_grad(DeviceBackend& dev, DeferredWeightGrad& d);

// Layers that compute on gathered or replicated weights (the data-parallel
// family), through the model family's forward and backward; BatchNorm's
// running statistics would need per-rank buffers there, so a +bn layout is
// refused (validation names the strategies that support it).
class LayerTape {
 public:
  // `dt`: how weights, activations and gradients are stored (f32, or bf16/f16
  // under mixed precision; then every pointer below points at 2-byte values).
  // `tp`: under tensor parallelism, the communicator of this rank's tp group
  // (then `layout` is its slice), which the layers' f and g operators use.
  LayerTape(const ModelLayout& layout, Allocator& alloc, Recorder* rec, DType dt = DType::f32,
            Comm* tp = nullptr);

  // Starts a pass over `rows` rows; `input` [rows, act_numel(0)] (fp32 values
  // or int32 token ids, the batch) must stay valid until the last backward. In
  // mixed precision fp32 values are first cast to the tape's dtype (an
  // activation). The first layer gets no input gradient.
  void begin(const void* input, int rows);

  // Layer `layer`, in order, on its parameters: `params` holds them
  // contiguously in table order (a flat group's slice). x is the previous
  // layer's output, or the input. Keeps what backward needs; returns the output.
  const void* forward(int layer, const void* params);
  // The same with one pointer per parameter (dp's replicas are separate tensors).
  const void* forward(int layer, const std::vector<void*>& params);
  const void* output() const;  // the last forward's output

  // dout [rows, act_numel(L)] is the gradient of the last forward's output.
  void begin_backward(const void* dout);
  // Layer `layer`, in reverse order: its gradients (contiguous like params)
  // accumulate (+=); the layer's activations are freed as soon as it is done.
  void backward(int layer, const void* params, void* grads);
  void backward(int layer, const std::vector<void*>& params, const std::vector<void*>& grads);
  bool done() const { return layers_.empty(); }
  DType dtype() const { return dt_; }

 private:
  struct Saved {
    int layer;
    LayerKeep keep;
  };
  const void* forward_on(int layer, const std::vector<const void*>& params);
  void backward_on(int layer, const std::vector<const void*>& params,
                   const std::vector<void*>& grads);
  const ModelLayout& layout_;
  Allocator& alloc_;
  Recorder* rec_;
  DType dt_;
  Comm* tp_;
  const void* input_ = nullptr;
  Tensor cast_input_;  // mixed precision: the input in dt_
  int rows_ = 0;
  std::vector<Saved> layers_;  // in forward order
  Tensor grad_;                // gradient flowing backward: of the next layer's output
};

}  // namespace shardlab
