// LayerTape: the MLP layer math of LayerStack, on caller-supplied weights.
#include "core/layer_ops.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu.h"

namespace shardlab {

namespace {
std::string act_name(int layer, const char* what) {
  return "layers." + std::to_string(layer) + "." + what;
}
}  // namespace

LayerTape::LayerTape(const ModelLayout& layout, Allocator& alloc, Recorder* rec)
    : layout_(layout), alloc_(alloc), rec_(rec) {}

void LayerTape::begin(const float* input, int rows) {
  if (!layers_.empty()) throw std::logic_error("LayerTape::begin: previous pass not finished");
  input_ = input;
  rows_ = rows;
  grad_.reset();
}

const float* LayerTape::forward(int layer, const float* weight, const float* bias) {
  if (!layers_.empty() && layers_.back().layer + 1 != layer)
    throw std::logic_error("LayerTape::forward: layers must run in order");
  ScopedSpan span(rec_, Lane::compute, SpanKind::forward, layer);
  const int d = layout_.dim();
  const size_t n = static_cast<size_t>(rows_) * d;
  const float* x = layers_.empty() ? input_ : layers_.back().out.data<float>();
  Saved s{layer, Tensor(),
          alloc_.alloc(act_name(layer, "output"), MemCategory::activations, {rows_, d})};
  if (layout_.has_gelu(layer)) {
    s.pre = alloc_.alloc(act_name(layer, "pre_gelu"), MemCategory::activations, {rows_, d});
    kernels::linear_forward(s.pre.data<float>(), x, weight, bias, rows_, d, d);
    kernels::gelu_forward(s.out.data<float>(), s.pre.data<float>(), n);
  } else {
    kernels::linear_forward(s.out.data<float>(), x, weight, bias, rows_, d, d);
  }
  layers_.push_back(std::move(s));
  return layers_.back().out.data<float>();
}

const float* LayerTape::output() const {
  if (layers_.empty()) throw std::logic_error("LayerTape::output: no forward");
  return layers_.back().out.data<float>();
}

void LayerTape::begin_backward(const float* dout) {
  if (layers_.empty()) throw std::logic_error("LayerTape::begin_backward: no forward");
  const int d = layout_.dim();
  grad_ = alloc_.alloc(act_name(layers_.back().layer, "grad_output"), MemCategory::temporary,
                       {rows_, d});
  std::memcpy(grad_.data<float>(), dout, grad_.bytes());
}

void LayerTape::backward(int layer, const float* weight, float* dweight, float* dbias) {
  if (layers_.empty() || layers_.back().layer != layer || grad_.empty())
    throw std::logic_error("LayerTape::backward: layers must run in reverse order of forward");
  ScopedSpan span(rec_, Lane::compute, SpanKind::backward, layer);
  const int d = layout_.dim();
  const size_t n = static_cast<size_t>(rows_) * d;
  Saved& s = layers_.back();
  float* g = grad_.data<float>();
  if (!s.pre.empty()) kernels::gelu_backward(g, g, s.pre.data<float>(), n);
  const bool first = layers_.size() == 1;
  const float* input = first ? input_ : layers_[layers_.size() - 2].out.data<float>();
  Tensor din;
  if (!first) din = alloc_.alloc(act_name(layer, "grad_input"), MemCategory::temporary, {rows_, d});
  kernels::linear_backward(first ? nullptr : din.data<float>(), dweight, dbias, g, input, weight,
                           rows_, d, d);
  layers_.pop_back();  // this layer's activations drain as backward walks to the input
  grad_ = std::move(din);
}

}  // namespace shardlab
