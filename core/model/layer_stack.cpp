// Forward and backward of a stack of layers through the model family; the
// backward loop mirrors the forward loop.
#include "core/model/layer_stack.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/comm/comm.h"
#include "core/model/layer_ops.h"
#include "core/model/model_family.h"

namespace shardlab {

namespace {
std::string act_name(int layer, const char* what, int mb) {
  std::string s = "layers." + std::to_string(layer) + "." + what;
  if (mb >= 0) s += "[mb " + std::to_string(mb) + "]";
  return s;
}

// The layer's parameters in model order (ModelLayout: weight, bias[, bn.weight, bn.bias]).
std::vector<const ParamInfo*> table_params(const ModelLayout& layout, int l) {
  std::vector<const ParamInfo*> v;
  for (int i = 0; i < layout.param_count(l); ++i)
    v.push_back(&layout.params()[layout.first_param(l) + i]);
  return v;
}
}  // namespace

LayerStack::LayerStack(const ModelLayout& layout, int first, int last, Allocator& alloc,
                       Recorder* rec, const ParamSource& init, DType dtype, Comm* tp)
    : layout_(layout),
      first_(first),
      last_(last),
      alloc_(alloc),
      rec_(rec),
      dtype_(dtype),
      tp_(tp) {
  if (layout.tensor_parallel() && (!tp || tp->world() != layout.slice().size))
    throw std::logic_error("LayerStack: a tensor-parallel slice needs its tp group's communicator");
  if (layout.has_buffers() && dtype != DType::f32)
    throw std::logic_error("LayerStack: BatchNorm1d runs in fp32 only");
  if (init.size() < (layout.has_buffers() ? layout.state_total() : layout.total()))
    throw std::logic_error("LayerStack: the initial state vector is too short for the model");
  for (int l = first; l < last; ++l) {
    first_param_.push_back(static_cast<int>(params_.size()));
    for (const ParamInfo* p : table_params(layout, l)) {
      Tensor t = alloc.alloc(p->name, MemCategory::params, p->shape, dtype);
      init.write_to(alloc.backend(), t, 0, p->offset, p->numel);
      params_.push_back(std::move(t));
      grads_.push_back(alloc.alloc(p->name + ".grad", MemCategory::grads, p->shape, dtype));
    }
    Norm n;
    if (layout.has_bn(l)) {
      // Buffers, not parameters: model state the optimizer never sees.
      for (auto [info, t] : {std::pair{&layout.running_mean(l), &n.running_mean},
                             std::pair{&layout.running_var(l), &n.running_var}}) {
        *t = alloc.alloc(info->name, MemCategory::params, info->shape);
        init.write_to(alloc.backend(), *t, 0, info->offset, info->numel);
      }
      n.batches_tracked =
          static_cast<int64_t>(std::llround(init.value(layout.num_batches_tracked(l).offset)));
    }
    norms_.push_back(std::move(n));
  }
}

const void* LayerStack::forward(const void* in, int rows, int mb) {
  Saved& s = saved_[mb];
  if (!s.keep.empty()) throw std::logic_error("LayerStack::forward: micro-batch already in flight");
  s.input = in;
  s.rows = rows;
  return forward_saving(s, mb, true);
}

const void* LayerStack::output(int mb) const {
  auto it = saved_.find(mb);
  if (it == saved_.end() || it->second.keep.empty() || it->second.keep.back().out < 0)
    throw std::logic_error("LayerStack::output: no forward for this micro-batch");
  const LayerKeep& k = it->second.keep.back();
  return k.t[static_cast<size_t>(k.out)].raw();
}

const void* LayerStack::stack_input(Saved& s, int mb) {
  // Token ids are never cast; fp32 runs on the input itself.
  if (dtype_ == DType::f32 || (first_ == 0 && layout_.input_is_tokens())) return s.input;
  // Mixed precision: the first layer reads a 2-byte copy of the input (an activation).
  if (s.cast_input.empty()) {
    s.cast_input = alloc_.alloc(act_name(first_, "input", mb), MemCategory::activations,
                                {s.rows, static_cast<int64_t>(layout_.act_numel(first_))}, dtype_);
    alloc_.backend().cast(s.cast_input.raw(), dtype_, s.input, DType::f32, s.cast_input.numel());
  }
  return s.cast_input.raw();
}

std::vector<const void*> LayerStack::layer_params(int l) const {
  std::vector<const void*> v;
  for (int k = 0; k < layout_.param_count(l); ++k) v.push_back(params_[param_index(l) + k].raw());
  return v;
}

std::vector<void*> LayerStack::layer_grads(int l) {
  std::vector<void*> v;
  for (int k = 0; k < layout_.param_count(l); ++k) v.push_back(grads_[param_index(l) + k].raw());
  return v;
}

void LayerStack::layer(int l, const void* x, LayerKeep& keep, int rows, int mb, bool update_stats) {
  LayerNorms norms;
  const LayerNorms* n = nullptr;
  if (layout_.has_bn(l) && update_stats) {
    Norm& norm = norms_[l - first_];
    norms.running_mean = norm.running_mean.raw();
    norms.running_var = norm.running_var.raw();
    ++norm.batches_tracked;
    n = &norms;
  }
  const LayerCall call{alloc_, dtype_, rows, mb, tp_};
  layout_.family().forward(call, layout_, l, layer_params(l), x, keep, n);
}

const void* LayerStack::forward_saving(Saved& s, int mb, bool update_stats) {
  const void* x = stack_input(s, mb);
  for (int l = first_; l < last_; ++l) {
    ScopedSpan span(rec_, Lane::compute, SpanKind::forward, l, mb);
    LayerKeep keep;
    layer(l, x, keep, s.rows, mb, update_stats);
    x = keep.output().raw();
    s.keep.push_back(std::move(keep));
  }
  return x;
}

Tensor LayerStack::forward_keep_input(const void* in, int rows, int mb) {
  Saved& s = saved_[mb];
  if (s.input || !s.keep.empty())
    throw std::logic_error("LayerStack::forward_keep_input: micro-batch already in flight");
  s.input = in;
  s.rows = rows;
  Tensor prev;  // the previous layer's output: freed once this layer has read it
  const void* x = stack_input(s, mb);
  for (int l = first_; l < last_; ++l) {
    ScopedSpan span(rec_, Lane::compute, SpanKind::forward, l, mb);
    LayerKeep keep;
    layer(l, x, keep, rows, mb, true);
    prev = std::move(keep.output());
    keep.drop_saved();
    x = prev.raw();
  }
  return prev;
}

Tensor LayerStack::evaluate(const void* in, int rows) {
  Saved s;  // only for the input cast; never entered in saved_
  s.input = in;
  s.rows = rows;
  Tensor prev;
  const void* x = stack_input(s, -1);
  for (int l = first_; l < last_; ++l) {
    LayerKeep keep;
    layer(l, x, keep, rows, -1, false);
    prev = std::move(keep.output());
    keep.drop_saved();
    x = prev.raw();
  }
  return prev;
}

void LayerStack::recompute(int mb) {
  auto it = saved_.find(mb);
  if (it == saved_.end() || !it->second.input || !it->second.keep.empty())
    throw std::logic_error("LayerStack::recompute: no forward_keep_input for this micro-batch");
  // The running statistics were updated by the first forward of this micro-batch.
  forward_saving(it->second, mb, false);
}

Tensor LayerStack::backward(const void* dout, int mb, bool want_dinput,
                            const std::function<void(int)>& on_layer_done) {
  return backward_pass(dout, mb, want_dinput, false, on_layer_done);
}

Tensor LayerStack::backward_input(const void* dout, int mb, bool want_dinput) {
  if (dtype_ != DType::f32)
    throw std::logic_error("LayerStack::backward_input: the B/W split is fp32 only");
  return backward_pass(dout, mb, want_dinput, true, {});
}

void LayerStack::backward_weights(int mb) {
  auto it = saved_.find(mb);
  if (it == saved_.end() || !it->second.awaiting_w)
    throw std::logic_error("LayerStack::backward_weights: no B for this micro-batch");
  Saved& s = it->second;
  // One W span per layer, from the last layer to the first as B recorded them.
  for (size_t i = 0; i < s.deferred.size();) {
    const int l = s.deferred[i].layer;
    ScopedSpan span(rec_, Lane::compute, SpanKind::weight, l, mb);
    for (; i < s.deferred.size() && s.deferred[i].layer == l; ++i)
      run_weight_grad(alloc_.backend(), s.deferred[i]);
  }
  saved_.erase(it);  // the inputs the W read go with it
}

Tensor LayerStack::backward_pass(const void* dout, int mb, bool want_dinput, bool split,
                                 const std::function<void(int)>& on_layer_done) {
  auto it = saved_.find(mb);
  if (it == saved_.end() || it->second.keep.empty() || it->second.awaiting_w)
    throw std::logic_error("LayerStack::backward: no forward for this micro-batch");
  Saved& s = it->second;
  const int rows = s.rows;
  auto shape = [&](int boundary) {
    std::vector<int64_t> v{rows};
    for (int64_t d : layout_.act_shape(boundary)) v.push_back(d);
    return v;
  };

  // g holds the gradient flowing backward: first of this stack's output, then of each layer's
  // input.
  Tensor g = alloc_.alloc(act_name(last_ - 1, "grad_output", mb), MemCategory::temporary,
                          shape(last_), dtype_);
  alloc_.backend().copy(g.raw(), dout, g.bytes(), CopyKind::device_to_device);
  LayerCall call{alloc_, dtype_, rows, mb, tp_};
  if (split) call.defer = &s.deferred;
  for (int l = last_ - 1; l >= first_; --l) {
    ScopedSpan span(rec_, Lane::compute, SpanKind::backward, l, mb);
    const int i = l - first_;
    const void* input = i == 0 ? stack_input(s, mb) : s.keep[i - 1].output().raw();
    // Token ids have no gradient: the embedding is where backward ends.
    const bool tokens_in = l == 0 && layout_.input_is_tokens();
    Tensor din;
    if ((l > first_ || want_dinput) && !tokens_in)
      din = alloc_.alloc(act_name(l, "grad_input", mb), MemCategory::temporary, shape(l), dtype_);
    layout_.family().backward(call, layout_, l, layer_params(l), layer_grads(l), input, s.keep[i],
                              g.raw(), din.empty() ? nullptr : din.raw());
    // This layer's saved activations are no longer needed: the memory panel
    // shows them draining as backward walks toward the input. In a split
    // backward the inputs of the deferred weight gradients stay, for W.
    for (Tensor& t : s.keep[i].t)
      if (!split || std::none_of(s.deferred.begin(), s.deferred.end(),
                                 [&](const DeferredWeightGrad& d) { return d.x == t.raw(); }))
        t.reset();
    // Now that they are gone, W's copy of this layer's output gradient (g,
    // which the next line frees) takes their place.
    if (split) copy_deferred_outputs(alloc_, s.deferred);
    g = std::move(din);
    span.end();
    if (on_layer_done) on_layer_done(l);
  }
  if (split)
    s.awaiting_w = true;
  else
    saved_.erase(it);
  return g;
}

void LayerStack::zero_grads() {
  for (Tensor& g : grads_) alloc_.backend().fill_zero(g.raw(), g.bytes());
}

void* LayerStack::grad_of(int index) {
  const int first = layout_.first_param(first_);
  const int end = first + static_cast<int>(grads_.size());
  return index >= first && index < end ? grads_[static_cast<size_t>(index - first)].raw() : nullptr;
}

void LayerStack::sum_tied_grads() {
  shardlab::sum_tied_grads(layout_, alloc_.backend(), dtype_, [&](int i) { return grad_of(i); });
}

std::vector<Optimizer::Range> LayerStack::ranges() const {
  std::vector<Optimizer::Range> r;
  for (int l = first_; l < last_; ++l)
    for (const ParamInfo* p : table_params(layout_, l)) r.push_back({p->name, p->numel});
  return r;
}

RankState LayerStack::rank_state(Optimizer* optimizer, MixedPrecision* precision) {
  RankState st;
  st.optimizer = optimizer;
  st.precision = precision;
  size_t k = 0;
  for (int l = first_; l < last_; ++l)
    for (const ParamInfo* p : table_params(layout_, l)) {
      st.offset.push_back(p->offset);
      st.count.push_back(p->numel);
      st.weight.push_back(&params_[k++]);
      st.weight_at.push_back(0);
    }
  // A +bn model's running statistics live on the stack that runs the layer.
  if (!layout_.has_buffers()) return st;
  st.buffer_offset = layout_.buffer_begin(first_);
  st.buffer_count = layout_.buffer_begin(last_) - st.buffer_offset;
  if (st.buffer_count > 0)
    st.read_buffers = [this](float* dst) {
      std::vector<float> params(layout_.layer_begin(last_) - layout_.layer_begin(first_));
      copy_state_slices(params.data(), dst);
    };
  return st;
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

void LayerStack::copy_params_to(ExportBuffer& flat) const {
  if (!flat.keeps()) return;
  copy_state_slices(flat.at(layout_.layer_begin(first_),
                            layout_.layer_begin(last_) - layout_.layer_begin(first_)),
                    flat.at(layout_.buffer_begin(first_),
                            layout_.buffer_begin(last_) - layout_.buffer_begin(first_)));
}

std::vector<float> LayerStack::export_params(size_t values, const Optimizer& opt) const {
  ExportBuffer flat(alloc_, values);
  copy_params_to(flat);
  if (opt.mixed() && flat.keeps())  // the model's weights are the fp32 masters
    for (size_t i = 0; i < layout_.params().size(); ++i) {
      const ParamInfo& p = layout_.params()[i];
      opt.read_master(i, flat.at(p.offset, p.numel));
    }
  return flat.take();
}

void LayerStack::copy_state_slices(float* params, float* buffers) const {
  size_t k = 0;
  for (int l = first_; l < last_; ++l)
    for (const ParamInfo* p : table_params(layout_, l)) {
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
                              layout_.running_mean(l).numel);
    alloc_.backend().download(at(layout_.running_var(l)), n.running_var.raw(), DType::f32,
                              layout_.running_var(l).numel);
    *at(layout_.num_batches_tracked(l)) = static_cast<float>(n.batches_tracked);
  }
}

}  // namespace shardlab
