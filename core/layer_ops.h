// Forward and backward of MLP layers on weights the caller supplies, with the
// activations each layer keeps for its backward. ZeRO-3 and FSDP compute on
// freshly gathered buffers, dp on per-step replicas: the weights are not owned here.
#pragma once
#include <vector>

#include "core/memory.h"
#include "core/model.h"
#include "core/recorder.h"

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

// pre = x · Wᵀ + b; out = gelu(pre). Without GELU (pre == nullptr): out = x · Wᵀ + b.
// With BatchNorm (bn given, pre required): pre = bn(x · Wᵀ + b) over the rows; out = gelu(pre).
// x, pre, out are [rows, d]; w [d, d]; b [d].
void layer_forward(Allocator& alloc, DType dt, void* out, void* pre, const void* x, const void* w,
                   const void* b, int rows, int d, const BatchNormArgs* bn = nullptr);
// g [rows, d]: the gradient of the layer's output, overwritten (through GELU when
// pre is given, then through BatchNorm when bn is). dw, db (and bn's dweight,
// dbias) accumulate (+=); din [rows, d] is overwritten (may be null).
void layer_backward(Allocator& alloc, DType dt, void* g, const void* pre, void* din, void* dw,
                    void* db, const void* x, const void* w, int rows, int d,
                    const BatchNormArgs* bn = nullptr);

// Layers that compute on gathered or replicated weights (the data-parallel
// family); BatchNorm's running statistics would need per-rank buffers there,
// so a +bn layout is refused (validation names the strategies that support it).
class LayerTape {
 public:
  // `dt`: how weights, activations and gradients are stored (f32, or bf16/f16
  // under mixed precision; then every pointer below points at 2-byte values).
  LayerTape(const ModelLayout& layout, Allocator& alloc, Recorder* rec, DType dt = DType::f32);

  // Starts a pass over `rows` rows; `input` [rows, D] (fp32, the batch) must stay
  // valid until the last backward. In mixed precision it is first cast to the
  // tape's dtype (an activation). The first layer gets no input gradient.
  void begin(const float* input, int rows);

  // Layer `layer`, in order: out = gelu(x · Wᵀ + b) (no GELU on the model's
  // last layer). x is the previous layer's output, or the input. Keeps what
  // backward needs; returns the output [rows, D].
  const void* forward(int layer, const void* weight, const void* bias);
  const void* output() const;  // the last forward's output

  // dout [rows, D] is the gradient of the last forward's output.
  void begin_backward(const void* dout);
  // Layer `layer`, in reverse order: dweight and dbias accumulate (+=); the
  // layer's activations are freed as soon as it is done.
  void backward(int layer, const void* weight, void* dweight, void* dbias);
  bool done() const { return layers_.empty(); }
  DType dtype() const { return dt_; }

 private:
  struct Saved {
    int layer;
    Tensor pre;  // pre-GELU values (empty for the model's last layer)
    Tensor out;
  };
  const ModelLayout& layout_;
  Allocator& alloc_;
  Recorder* rec_;
  DType dt_;
  const void* input_ = nullptr;
  Tensor cast_input_;  // mixed precision: the input in dt_
  int rows_ = 0;
  std::vector<Saved> layers_;  // in forward order
  Tensor grad_;                // gradient flowing backward: of the next layer's output
};

}  // namespace shardlab
