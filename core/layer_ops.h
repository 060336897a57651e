// Forward and backward of MLP layers on weights the caller supplies, with the
// activations each layer keeps for its backward. ZeRO-3 and FSDP compute on
// freshly gathered buffers, dp on per-step replicas: the weights are not owned here.
#pragma once
#include <vector>

#include "core/memory.h"
#include "core/model.h"
#include "core/recorder.h"

namespace shardlab {

class LayerTape {
 public:
  LayerTape(const ModelLayout& layout, Allocator& alloc, Recorder* rec);

  // Starts a pass over `rows` rows; `input` [rows, D] must stay valid until the
  // last backward. The first layer run forward gets no input gradient.
  void begin(const float* input, int rows);

  // Layer `layer`, in order: out = gelu(x · Wᵀ + b) (no GELU on the model's
  // last layer). x is the previous layer's output, or the input. Keeps what
  // backward needs; returns the output [rows, D].
  const float* forward(int layer, const float* weight, const float* bias);
  const float* output() const;  // the last forward's output

  // dout [rows, D] is the gradient of the last forward's output.
  void begin_backward(const float* dout);
  // Layer `layer`, in reverse order: dweight and dbias accumulate (+=); the
  // layer's activations are freed as soon as it is done.
  void backward(int layer, const float* weight, float* dweight, float* dbias);
  bool done() const { return layers_.empty(); }

 private:
  struct Saved {
    int layer;
    Tensor pre;  // pre-GELU values (empty for the model's last layer)
    Tensor out;
  };
  const ModelLayout& layout_;
  Allocator& alloc_;
  Recorder* rec_;
  const float* input_ = nullptr;
  int rows_ = 0;
  std::vector<Saved> layers_;  // in forward order
  Tensor grad_;                // gradient flowing backward: of the next layer's output
};

}  // namespace shardlab
