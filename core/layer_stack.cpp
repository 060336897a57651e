// Forward and backward of a stack of MLP layers; the backward loop mirrors the forward loop.
#include "core/layer_stack.h"

#include <stdexcept>
#include <string>

#include "core/layer_ops.h"

namespace shardlab {

namespace {
std::string act_name(int layer, const char* what, int mb) {
  std::string s = "layers." + std::to_string(layer) + "." + what;
  if (mb >= 0) s += "[mb " + std::to_string(mb) + "]";
  return s;
}
}  // namespace

LayerStack::LayerStack(const ModelLayout& layout, int first, int last, Allocator& alloc,
                       Recorder* rec, const std::vector<float>& init_flat, DType dtype)
    : layout_(layout), first_(first), last_(last), alloc_(alloc), rec_(rec), dtype_(dtype) {
  for (int l = first; l < last; ++l) {
    for (const ParamInfo* p : {&layout.weight(l), &layout.bias(l)}) {
      Tensor t = alloc.alloc(p->name, MemCategory::params, p->shape, dtype);
      alloc.backend().upload(t.raw(), dtype, init_flat.data() + p->offset, p->numel);
      params_.push_back(std::move(t));
      grads_.push_back(alloc.alloc(p->name + ".grad", MemCategory::grads, p->shape, dtype));
    }
  }
}

const float* LayerStack::forward(const float* in, int rows, int mb) {
  Saved& s = saved_[mb];
  if (!s.out.empty()) throw std::logic_error("LayerStack::forward: micro-batch already in flight");
  s.input = in;
  s.rows = rows;
  return static_cast<const float*>(forward_saving(s, mb));
}

const void* LayerStack::output(int mb) const {
  auto it = saved_.find(mb);
  if (it == saved_.end() || it->second.out.empty() || it->second.out.back().empty())
    throw std::logic_error("LayerStack::output: no forward for this micro-batch");
  return it->second.out.back().raw();
}

const void* LayerStack::stack_input(Saved& s, int mb) {
  if (dtype_ == DType::f32) return s.input;
  // Mixed precision: the first layer reads a 2-byte copy of the input (an activation).
  if (s.cast_input.empty()) {
    s.cast_input = alloc_.alloc(act_name(first_, "input", mb), MemCategory::activations,
                                {s.rows, layout_.dim()}, dtype_);
    alloc_.backend().cast(s.cast_input.raw(), dtype_, s.input, DType::f32, s.cast_input.numel());
  }
  return s.cast_input.raw();
}

const void* LayerStack::forward_saving(Saved& s, int mb) {
  const int d = layout_.dim();
  const int rows = s.rows;
  const void* x = stack_input(s, mb);
  for (int l = first_; l < last_; ++l) {
    ScopedSpan span(rec_, Lane::compute, SpanKind::forward, l, mb);
    // out = gelu(x · Wᵀ + b); the last model layer has no GELU and keeps no pre-activation.
    Tensor out =
        alloc_.alloc(act_name(l, "output", mb), MemCategory::activations, {rows, d}, dtype_);
    Tensor pre;
    if (layout_.has_gelu(l))
      pre = alloc_.alloc(act_name(l, "pre_gelu", mb), MemCategory::activations, {rows, d}, dtype_);
    layer_forward(alloc_, dtype_, out.raw(), pre.empty() ? nullptr : pre.raw(), x,
                  params_[2 * (l - first_)].raw(), params_[2 * (l - first_) + 1].raw(), rows, d);
    s.pre.push_back(std::move(pre));
    x = out.raw();
    s.out.push_back(std::move(out));
  }
  return x;
}

Tensor LayerStack::forward_keep_input(const float* in, int rows, int mb) {
  Saved& s = saved_[mb];
  if (s.input || !s.out.empty())
    throw std::logic_error("LayerStack::forward_keep_input: micro-batch already in flight");
  s.input = in;
  s.rows = rows;
  const int d = layout_.dim();
  Tensor prev;  // the previous layer's output: freed once this layer has read it
  const void* x = stack_input(s, mb);
  for (int l = first_; l < last_; ++l) {
    ScopedSpan span(rec_, Lane::compute, SpanKind::forward, l, mb);
    Tensor out =
        alloc_.alloc(act_name(l, "output", mb), MemCategory::activations, {rows, d}, dtype_);
    Tensor pre;
    if (layout_.has_gelu(l))
      pre = alloc_.alloc(act_name(l, "pre_gelu", mb), MemCategory::activations, {rows, d}, dtype_);
    layer_forward(alloc_, dtype_, out.raw(), pre.empty() ? nullptr : pre.raw(), x,
                  params_[2 * (l - first_)].raw(), params_[2 * (l - first_) + 1].raw(), rows, d);
    prev = std::move(out);
    x = prev.raw();
  }
  return prev;
}

void LayerStack::recompute(int mb) {
  auto it = saved_.find(mb);
  if (it == saved_.end() || !it->second.input || !it->second.out.empty())
    throw std::logic_error("LayerStack::recompute: no forward_keep_input for this micro-batch");
  forward_saving(it->second, mb);
}

Tensor LayerStack::backward(const void* dout, int mb, bool want_dinput,
                            const std::function<void(int)>& on_layer_done) {
  auto it = saved_.find(mb);
  if (it == saved_.end() || it->second.out.empty())
    throw std::logic_error("LayerStack::backward: no forward for this micro-batch");
  Saved& s = it->second;
  const int d = layout_.dim();
  const int rows = s.rows;

  // g holds the gradient flowing backward: first of this stack's output, then of each layer's
  // input.
  Tensor g = alloc_.alloc(act_name(last_ - 1, "grad_output", mb), MemCategory::temporary, {rows, d},
                          dtype_);
  alloc_.backend().copy(g.raw(), dout, g.bytes(), CopyKind::device_to_device);
  for (int l = last_ - 1; l >= first_; --l) {
    ScopedSpan span(rec_, Lane::compute, SpanKind::backward, l, mb);
    const int i = l - first_;
    const void* input = i == 0 ? stack_input(s, mb) : s.out[i - 1].raw();
    Tensor din;
    if (l > first_ || want_dinput)
      din = alloc_.alloc(act_name(l, "grad_input", mb), MemCategory::temporary, {rows, d}, dtype_);
    layer_backward(alloc_, dtype_, g.raw(), s.pre[i].empty() ? nullptr : s.pre[i].raw(),
                   din.empty() ? nullptr : din.raw(), grads_[2 * i].raw(), grads_[2 * i + 1].raw(),
                   input, params_[2 * i].raw(), rows, d);
    // This layer's saved activations are no longer needed: the memory panel
    // shows them draining as backward walks toward the input.
    s.pre[i].reset();
    s.out[i].reset();
    g = std::move(din);
    span.end();
    if (on_layer_done) on_layer_done(l);
  }
  saved_.erase(it);
  return g;
}

void LayerStack::zero_grads() {
  for (Tensor& g : grads_) alloc_.backend().fill_zero(g.raw(), g.bytes());
}

std::vector<Optimizer::Range> LayerStack::ranges() const {
  std::vector<Optimizer::Range> r;
  for (int l = first_; l < last_; ++l)
    for (const ParamInfo* p : {&layout_.weight(l), &layout_.bias(l)})
      r.push_back({p->name, p->numel});
  return r;
}

std::vector<float*> LayerStack::param_ptrs() {
  std::vector<float*> v;
  for (Tensor& t : params_) v.push_back(t.data<float>());
  return v;
}

std::vector<const float*> LayerStack::grad_ptrs() const {
  std::vector<const float*> v;
  for (const Tensor& t : grads_) v.push_back(t.data<float>());
  return v;
}

std::vector<void*> LayerStack::param_raw() {
  std::vector<void*> v;
  for (Tensor& t : params_) v.push_back(t.raw());
  return v;
}

std::vector<void*> LayerStack::grad_raw() {
  std::vector<void*> v;
  for (Tensor& t : grads_) v.push_back(t.raw());
  return v;
}

std::vector<float*> LayerStack::grad_ptrs_mut() {
  std::vector<float*> v;
  for (Tensor& t : grads_) v.push_back(t.data<float>());
  return v;
}

void LayerStack::copy_params_to(std::vector<float>& flat) const {
  size_t k = 0;
  for (int l = first_; l < last_; ++l)
    for (const ParamInfo* p : {&layout_.weight(l), &layout_.bias(l)}) {
      alloc_.backend().download(flat.data() + p->offset, params_[k].raw(), dtype_, p->numel);
      ++k;
    }
}

}  // namespace shardlab
