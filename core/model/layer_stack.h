// A run of consecutive layers [first, last) of the layer table (core/model/model.h)
// held in full on this rank: their parameters and gradients (one accounted
// tensor per PyTorch parameter), the BatchNorm buffers of a +bn model, and the
// activations each micro-batch keeps between its forward and backward. The
// math of each layer is the model family's (core/model/model_family.h). `single` and `ddp` hold the
// whole model; a pipeline stage holds a slice. Under mixed precision (dtype bf16/f16) parameters,
// gradients and activations are stored in 2 bytes; the float accessors below are for fp32 only.
// BatchNorm is fp32 only.
//
// BatchNorm1d sees exactly the rows of one forward call: the whole batch in
// `single`, one micro-batch in a pipeline stage. Each forward (not a
// recompute) updates the running statistics once, as PyTorch's module would
// when called once per micro-batch.
#pragma once
#include <functional>
#include <map>
#include <vector>

#include "core/device/memory.h"
#include "core/model/layer_call.h"
#include "core/model/model.h"
#include "core/model/optimizer.h"
#include "core/model/param_source.h"
#include "core/rank_state.h"
#include "core/record/recorder.h"

namespace shardlab {

class LayerStack {
 public:
  // init_flat: the model's flat state vector (ModelLayout: parameters, then
  // buffers); the stack takes its own layers' part. Under tensor parallelism
  // `layout` is this rank's slice (and init its state vector) and `tp` the
  // communicator of its tp group, which the layers' forward and backward use.
  LayerStack(const ModelLayout& layout, int first, int last, Allocator& alloc, Recorder* rec,
             const ParamSource& init, DType dtype = DType::f32, Comm* tp = nullptr);

  int first() const { return first_; }
  int last() const { return last_; }

  // Runs the layers on in[rows, act_numel(first)] (fp32, or int32 token ids
  // when the stack starts at a token input). `in` must stay valid until
  // backward(mb). Returns the output [rows, act_numel(last)], kept until
  // backward(mb) frees it (in the stack's dtype).
  const void* forward(const void* in, int rows, int mb = -1);
  const void* output(int mb = -1) const;

  // dout[rows, act_numel(last)] is the gradient of the output of forward(mb). Parameter
  // gradients accumulate (+=). Each layer's activations are freed as soon as
  // its backward is done, then on_layer_done(layer) runs: that is where DDP
  // starts the all-reduce of a full bucket. Returns the gradient of the
  // input when want_dinput (a pipeline stage sends it back), else an empty tensor.
  Tensor backward(const void* dout, int mb, bool want_dinput,
                  const std::function<void(int layer)>& on_layer_done = {});

  // The zero-bubble split of backward(mb) (Qi et al., 2024) in two calls:
  // backward_input is B — the gradient of the input, which the previous
  // stage waits for — and leaves the linears' weight gradients for
  // backward_weights(mb), W, which nobody waits for. Between the two the
  // micro-batch keeps each linear's input and a copy of its output gradient
  // (the rest of its activations is freed by B); `in` from forward(mb) must
  // stay valid until W. B then W add the same gradients as backward(mb).
  // fp32 only.
  Tensor backward_input(const void* dout, int mb, bool want_dinput);
  void backward_weights(int mb);

  // Activation recomputation (a pipeline stage with --recompute). Runs the
  // layers keeping only `in` (valid until backward(mb)): each layer's
  // activations are freed as soon as the next layer has read them. Returns the
  // output, owned by the caller.
  Tensor forward_keep_input(const void* in, int rows, int mb);
  // Inference: runs the layers on `in` keeping nothing for backward (each
  // layer's activations are freed once the next has read them); returns the
  // output, owned by the caller. Running statistics are not updated.
  Tensor evaluate(const void* in, int rows);
  // Runs forward(mb) again from its kept input, so that backward(mb) finds
  // every activation; the spans are forward spans of mb, a second time.
  void recompute(int mb);

  void zero_grads();
  // Sums the gradients of tied parameters held by this stack (gpt's lm_head
  // and token embedding), so both copies take the same update.
  void sum_tied_grads();
  // The gradient of parameter `index` (in layout.params()), null when the
  // stack does not hold it.
  void* grad_of(int index);
  // Parameter `k` of layer `layer` (table order), and its gradient; fp32 only.
  float* param(int layer, int k) { return params_[param_index(layer) + k].data<float>(); }
  float* grad(int layer, int k) { return grads_[param_index(layer) + k].data<float>(); }
  float* weight_grad(int layer) { return grad(layer, 0); }
  float* bias_grad(int layer) { return grad(layer, 1); }

  // Every parameter of the stack, in model order, for the optimizer.
  std::vector<Optimizer::Range> ranges() const;
  // The same ranges as a checkpoint sees them (strategy.h): each parameter's
  // offset in the flat vector and its tensor.
  RankState rank_state(Optimizer* optimizer, MixedPrecision* precision);
  std::vector<float*> param_ptrs();
  std::vector<const float*> grad_ptrs() const;
  std::vector<float*> grad_ptrs_mut();
  // The same, in the stack's dtype (2-byte values under mixed precision).
  std::vector<void*> param_raw();
  std::vector<void*> grad_raw();
  DType dtype() const { return dtype_; }
  // Writes this stack's parameters at their offsets of a full flat vector, and
  // its BatchNorm buffers too when the model has any (then flat has
  // layout.state_total() values).
  void copy_params_to(std::vector<float>& flat) const;
  // The same into an export (nothing on a meta device, whose values are none).
  void copy_params_to(ExportBuffer& flat) const;
  // A whole-model stack's weights for Strategy::export_params, as `values`
  // floats (layout.total(), or state_total() with BatchNorm's buffers), staged
  // through the allocator: where `opt` keeps fp32 masters (mixed precision),
  // those instead of the 2-byte weights. Empty on a meta device.
  std::vector<float> export_params(size_t values, const Optimizer& opt) const;
  // The same as two contiguous runs: params gets the flat vector's
  // [layer_begin(first), layer_begin(last)), buffers its
  // [buffer_begin(first), buffer_begin(last)) (may be null when that is empty).
  void copy_state_slices(float* params, float* buffers) const;

 private:
  struct Saved {                  // what one micro-batch keeps for backward
    const void* input = nullptr;  // the batch (fp32 or token ids), or the previous stage's output
    Tensor cast_input;            // mixed precision: a float input in the stack's dtype
    int rows = 0;
    std::vector<LayerKeep> keep;               // per layer: its output and what its backward reads
    std::vector<DeferredWeightGrad> deferred;  // after B, before W: the weight gradients left
    bool awaiting_w = false;                   // B has run, W has not
  };
  Tensor backward_pass(const void* dout, int mb, bool want_dinput, bool split,
                       const std::function<void(int layer)>& on_layer_done);
  // A BatchNorm layer's buffers: PyTorch's running_mean, running_var (device)
  // and num_batches_tracked (a count the host keeps: nothing on the device reads it).
  struct Norm {
    Tensor running_mean, running_var;
    int64_t batches_tracked = 0;
  };
  int param_index(int layer) const { return first_param_[layer - first_]; }
  // The layers' forward on s.input, keeping every activation in s. update_stats:
  // false for a recomputation, which must not count the micro-batch again.
  const void* forward_saving(Saved& s, int mb, bool update_stats);
  // One layer's forward on x into keep.
  void layer(int l, const void* x, LayerKeep& keep, int rows, int mb, bool update_stats);
  std::vector<const void*> layer_params(int l) const;
  std::vector<void*> layer_grads(int l);
  // What the first layer reads: s.input, or its 2-byte copy under mixed precision.
  const void* stack_input(Saved& s, int mb);

  const ModelLayout& layout_;
  int first_, last_;
  Allocator& alloc_;
  Recorder* rec_;
  DType dtype_;
  Comm* tp_;
  std::vector<Tensor> params_, grads_;  // model order: weight, bias[, bn.weight, bn.bias] per layer
  std::vector<int> first_param_;        // per layer of the stack: its weight's index in params_
  std::vector<Norm> norms_;             // per layer of the stack (empty tensors without BN)
  std::map<int, Saved> saved_;
};

}  // namespace shardlab
