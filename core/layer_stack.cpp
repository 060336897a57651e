// Forward and backward of a stack of MLP layers; the backward loop mirrors the forward loop.
#include "core/layer_stack.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu.h"

namespace shardlab {

namespace {
std::string act_name(int layer, const char* what, int mb) {
  std::string s = "layers." + std::to_string(layer) + "." + what;
  if (mb >= 0) s += "[mb " + std::to_string(mb) + "]";
  return s;
}
}  // namespace

LayerStack::LayerStack(const ModelLayout& layout, int first, int last, Allocator& alloc,
                       Recorder* rec, const std::vector<float>& init_flat)
    : layout_(layout), first_(first), last_(last), alloc_(alloc), rec_(rec) {
  for (int l = first; l < last; ++l) {
    for (const ParamInfo* p : {&layout.weight(l), &layout.bias(l)}) {
      Tensor t = alloc.alloc(p->name, MemCategory::params, p->shape);
      std::memcpy(t.data<float>(), init_flat.data() + p->offset, p->numel * sizeof(float));
      params_.push_back(std::move(t));
      grads_.push_back(alloc.alloc(p->name + ".grad", MemCategory::grads, p->shape));
    }
  }
}

const float* LayerStack::forward(const float* in, int rows, int mb) {
  Saved& s = saved_[mb];
  if (!s.out.empty()) throw std::logic_error("LayerStack::forward: micro-batch already in flight");
  s.input = in;
  s.rows = rows;
  return forward_saving(s, mb);
}

const float* LayerStack::forward_saving(Saved& s, int mb) {
  const int d = layout_.dim();
  const int rows = s.rows;
  const size_t n = static_cast<size_t>(rows) * d;
  const float* x = s.input;
  for (int l = first_; l < last_; ++l) {
    ScopedSpan span(rec_, Lane::compute, SpanKind::forward, l, mb);
    // out = gelu(x · Wᵀ + b); the last model layer has no GELU and keeps no pre-activation.
    Tensor out = alloc_.alloc(act_name(l, "output", mb), MemCategory::activations, {rows, d});
    if (layout_.has_gelu(l)) {
      Tensor pre = alloc_.alloc(act_name(l, "pre_gelu", mb), MemCategory::activations, {rows, d});
      kernels::linear_forward(pre.data<float>(), x, weight(l), bias(l), rows, d, d);
      kernels::gelu_forward(out.data<float>(), pre.data<float>(), n);
      s.pre.push_back(std::move(pre));
    } else {
      kernels::linear_forward(out.data<float>(), x, weight(l), bias(l), rows, d, d);
      s.pre.emplace_back();
    }
    x = out.data<float>();
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
  const size_t n = static_cast<size_t>(rows) * d;
  Tensor prev;  // the previous layer's output: freed once this layer has read it
  const float* x = in;
  for (int l = first_; l < last_; ++l) {
    ScopedSpan span(rec_, Lane::compute, SpanKind::forward, l, mb);
    Tensor out = alloc_.alloc(act_name(l, "output", mb), MemCategory::activations, {rows, d});
    if (layout_.has_gelu(l)) {
      Tensor pre = alloc_.alloc(act_name(l, "pre_gelu", mb), MemCategory::activations, {rows, d});
      kernels::linear_forward(pre.data<float>(), x, weight(l), bias(l), rows, d, d);
      kernels::gelu_forward(out.data<float>(), pre.data<float>(), n);
    } else {
      kernels::linear_forward(out.data<float>(), x, weight(l), bias(l), rows, d, d);
    }
    prev = std::move(out);
    x = prev.data<float>();
  }
  return prev;
}

void LayerStack::recompute(int mb) {
  auto it = saved_.find(mb);
  if (it == saved_.end() || !it->second.input || !it->second.out.empty())
    throw std::logic_error("LayerStack::recompute: no forward_keep_input for this micro-batch");
  forward_saving(it->second, mb);
}

Tensor LayerStack::backward(const float* dout, int mb, bool want_dinput,
                            const std::function<void(int)>& on_layer_done) {
  auto it = saved_.find(mb);
  if (it == saved_.end() || it->second.out.empty())
    throw std::logic_error("LayerStack::backward: no forward for this micro-batch");
  Saved& s = it->second;
  const int d = layout_.dim();
  const int rows = s.rows;
  const size_t n = static_cast<size_t>(rows) * d;

  // g holds the gradient flowing backward: first of this stack's output, then of each layer's
  // input.
  Tensor g =
      alloc_.alloc(act_name(last_ - 1, "grad_output", mb), MemCategory::temporary, {rows, d});
  std::memcpy(g.data<float>(), dout, n * sizeof(float));
  for (int l = last_ - 1; l >= first_; --l) {
    ScopedSpan span(rec_, Lane::compute, SpanKind::backward, l, mb);
    const int i = l - first_;
    if (layout_.has_gelu(l))
      kernels::gelu_backward(g.data<float>(), g.data<float>(), s.pre[i].data<float>(), n);
    const float* input = i == 0 ? s.input : s.out[i - 1].data<float>();
    Tensor din;
    if (l > first_ || want_dinput)
      din = alloc_.alloc(act_name(l, "grad_input", mb), MemCategory::temporary, {rows, d});
    kernels::linear_backward(din.empty() ? nullptr : din.data<float>(), weight_grad(l),
                             bias_grad(l), g.data<float>(), input, weight(l), rows, d, d);
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
  for (Tensor& g : grads_) std::memset(g.raw(), 0, g.bytes());
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

std::vector<float*> LayerStack::grad_ptrs_mut() {
  std::vector<float*> v;
  for (Tensor& t : grads_) v.push_back(t.data<float>());
  return v;
}

void LayerStack::copy_params_to(std::vector<float>& flat) const {
  size_t k = 0;
  for (int l = first_; l < last_; ++l)
    for (const ParamInfo* p : {&layout_.weight(l), &layout_.bias(l)}) {
      std::memcpy(flat.data() + p->offset, params_[k].data<float>(), p->numel * sizeof(float));
      ++k;
    }
}

}  // namespace shardlab
