// Forward and backward of a stack of MLP layers; the backward loop mirrors the forward loop.
#include "core/layer_stack.h"

#include <cmath>
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

// The layer's parameters in model order (ModelLayout: weight, bias[, bn.weight, bn.bias]).
std::vector<const ParamInfo*> layer_params(const ModelLayout& layout, int l) {
  std::vector<const ParamInfo*> v;
  for (int i = 0; i < layout.param_count(l); ++i)
    v.push_back(&layout.params()[layout.first_param(l) + i]);
  return v;
}
}  // namespace

LayerStack::LayerStack(const ModelLayout& layout, int first, int last, Allocator& alloc,
                       Recorder* rec, const std::vector<float>& init_flat, DType dtype)
    : layout_(layout), first_(first), last_(last), alloc_(alloc), rec_(rec), dtype_(dtype) {
  if (layout.spec().batchnorm && dtype != DType::f32)
    throw std::logic_error("LayerStack: BatchNorm1d runs in fp32 only");
  if (init_flat.size() < (layout.has_buffers() ? layout.state_total() : layout.total()))
    throw std::logic_error("LayerStack: the initial state vector is too short for the model");
  for (int l = first; l < last; ++l) {
    first_param_.push_back(static_cast<int>(params_.size()));
    for (const ParamInfo* p : layer_params(layout, l)) {
      Tensor t = alloc.alloc(p->name, MemCategory::params, p->shape, dtype);
      alloc.backend().upload(t.raw(), dtype, init_flat.data() + p->offset, p->numel);
      params_.push_back(std::move(t));
      grads_.push_back(alloc.alloc(p->name + ".grad", MemCategory::grads, p->shape, dtype));
    }
    Norm n;
    if (layout.has_bn(l)) {
      // Buffers, not parameters: model state the optimizer never sees.
      for (auto [info, t] : {std::pair{&layout.running_mean(l), &n.running_mean},
                             std::pair{&layout.running_var(l), &n.running_var}}) {
        *t = alloc.alloc(info->name, MemCategory::params, info->shape);
        alloc.backend().upload(t->raw(), DType::f32, init_flat.data() + info->offset, info->numel);
      }
      n.batches_tracked =
          static_cast<int64_t>(std::llround(init_flat[layout.num_batches_tracked(l).offset]));
    }
    norms_.push_back(std::move(n));
  }
}

const float* LayerStack::forward(const float* in, int rows, int mb) {
  Saved& s = saved_[mb];
  if (!s.out.empty()) throw std::logic_error("LayerStack::forward: micro-batch already in flight");
  s.input = in;
  s.rows = rows;
  return static_cast<const float*>(forward_saving(s, mb, true));
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

void LayerStack::layer(int l, const void* x, Tensor& out, Tensor& pre, Tensor& xhat, Tensor& invstd,
                       int rows, int mb, bool update_stats) {
  const int d = layout_.dim();
  const int i = l - first_;
  // out = gelu(x · Wᵀ + b), or gelu(bn(x · Wᵀ + b)) under +bn; the last model
  // layer has no GELU (nor BN) and keeps no pre-activation.
  out = alloc_.alloc(act_name(l, "output", mb), MemCategory::activations, {rows, d}, dtype_);
  if (layout_.has_gelu(l))
    pre = alloc_.alloc(act_name(l, "pre_gelu", mb), MemCategory::activations, {rows, d}, dtype_);
  BatchNormArgs bn;
  if (layout_.has_bn(l)) {
    xhat = alloc_.alloc(act_name(l, "bn.xhat", mb), MemCategory::activations, {rows, d});
    invstd = alloc_.alloc(act_name(l, "bn.invstd", mb), MemCategory::activations,
                          std::vector<int64_t>{d});
    const int p = param_index(l);
    Norm& n = norms_[i];
    bn.weight = params_[p + 2].raw();
    bn.bias = params_[p + 3].raw();
    bn.xhat = xhat.raw();
    bn.invstd = invstd.raw();
    if (update_stats) {
      bn.running_mean = n.running_mean.raw();
      bn.running_var = n.running_var.raw();
      ++n.batches_tracked;
    }
  }
  layer_forward(alloc_, dtype_, out.raw(), pre.empty() ? nullptr : pre.raw(), x,
                params_[param_index(l)].raw(), params_[param_index(l) + 1].raw(), rows, d,
                layout_.has_bn(l) ? &bn : nullptr);
}

const void* LayerStack::forward_saving(Saved& s, int mb, bool update_stats) {
  const void* x = stack_input(s, mb);
  for (int l = first_; l < last_; ++l) {
    ScopedSpan span(rec_, Lane::compute, SpanKind::forward, l, mb);
    Tensor out, pre, xhat, invstd;
    layer(l, x, out, pre, xhat, invstd, s.rows, mb, update_stats);
    s.pre.push_back(std::move(pre));
    s.xhat.push_back(std::move(xhat));
    s.invstd.push_back(std::move(invstd));
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
  Tensor prev;  // the previous layer's output: freed once this layer has read it
  const void* x = stack_input(s, mb);
  for (int l = first_; l < last_; ++l) {
    ScopedSpan span(rec_, Lane::compute, SpanKind::forward, l, mb);
    Tensor out, pre, xhat, invstd;
    layer(l, x, out, pre, xhat, invstd, rows, mb, true);
    prev = std::move(out);
    x = prev.raw();
  }
  return prev;
}

void LayerStack::recompute(int mb) {
  auto it = saved_.find(mb);
  if (it == saved_.end() || !it->second.input || !it->second.out.empty())
    throw std::logic_error("LayerStack::recompute: no forward_keep_input for this micro-batch");
  // The running statistics were updated by the first forward of this micro-batch.
  forward_saving(it->second, mb, false);
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
    const int p = param_index(l);
    const void* input = i == 0 ? stack_input(s, mb) : s.out[i - 1].raw();
    Tensor din;
    if (l > first_ || want_dinput)
      din = alloc_.alloc(act_name(l, "grad_input", mb), MemCategory::temporary, {rows, d}, dtype_);
    BatchNormArgs bn;
    if (layout_.has_bn(l)) {
      bn.weight = params_[p + 2].raw();
      bn.xhat = s.xhat[i].raw();
      bn.invstd = s.invstd[i].raw();
      bn.dweight = grads_[p + 2].raw();
      bn.dbias = grads_[p + 3].raw();
    }
    layer_backward(alloc_, dtype_, g.raw(), s.pre[i].empty() ? nullptr : s.pre[i].raw(),
                   din.empty() ? nullptr : din.raw(), grads_[p].raw(), grads_[p + 1].raw(), input,
                   params_[p].raw(), rows, d, layout_.has_bn(l) ? &bn : nullptr);
    // This layer's saved activations are no longer needed: the memory panel
    // shows them draining as backward walks toward the input.
    s.pre[i].reset();
    s.out[i].reset();
    s.xhat[i].reset();
    s.invstd[i].reset();
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
    for (const ParamInfo* p : layer_params(layout_, l)) r.push_back({p->name, p->numel});
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
  if (flat.size() < (layout_.has_buffers() ? layout_.state_total() : layout_.total()))
    throw std::logic_error("LayerStack::copy_params_to: flat vector shorter than the model state");
  copy_state_slices(flat.data() + layout_.layer_begin(first_),
                    flat.data() + layout_.buffer_begin(first_));
}

void LayerStack::copy_state_slices(float* params, float* buffers) const {
  size_t k = 0;
  for (int l = first_; l < last_; ++l)
    for (const ParamInfo* p : layer_params(layout_, l)) {
      alloc_.backend().download(params + (p->offset - layout_.layer_begin(first_)),
                                params_[k].raw(), dtype_, p->numel);
      ++k;
    }
  for (int l = first_; l < last_; ++l) {
    if (!layout_.has_bn(l)) continue;
    const Norm& n = norms_[l - first_];
    auto at = [&](const ParamInfo& b) {
      return buffers + (b.offset - layout_.buffer_begin(first_));
    };
    alloc_.backend().download(at(layout_.running_mean(l)), n.running_mean.raw(), DType::f32,
                              layout_.dim());
    alloc_.backend().download(at(layout_.running_var(l)), n.running_var.raw(), DType::f32,
                              layout_.dim());
    *at(layout_.num_batches_tracked(l)) = static_cast<float>(n.batches_tracked);
  }
}

}  // namespace shardlab
