// LayerTape and the one-layer math of LayerStack, on caller-supplied weights.
#include "core/model/layer_ops.h"

#include <optional>
#include <stdexcept>
#include <string>

#include "core/model/model_family.h"
#include "core/model/precision.h"

namespace shardlab {

namespace {
std::string act_name(int layer, const char* what) {
  return "layers." + std::to_string(layer) + "." + what;
}

float* as_f32(void* p) {
  return static_cast<float*>(p);
}
const float* as_f32(const void* p) {
  return static_cast<const float*>(p);
}
void require_fp32_batchnorm(DType dt, const void* pre) {
  if (dt != DType::f32 || !pre)
    throw std::logic_error("BatchNorm1d runs in fp32, on a layer with GELU");
}
}  // namespace

void layer_forward(Allocator& alloc, DType dt, void* out, void* pre, const void* x, const void* w,
                   const void* b, int rows, int in_dim, int out_dim, const BatchNormArgs* bn,
                   const AfterLinear& after_linear) {
  const size_t n = static_cast<size_t>(rows) * out_dim;
  DeviceBackend& dev = alloc.backend();
  if (bn) require_fp32_batchnorm(dt, pre);
  if (dt == DType::f32) {
    auto* o = static_cast<float*>(out);
    auto* p = static_cast<float*>(pre);
    const auto* xf = static_cast<const float*>(x);
    const auto* wf = static_cast<const float*>(w);
    const auto* bf = static_cast<const float*>(b);
    if (p) {
      dev.linear_forward(p, xf, wf, bf, rows, in_dim, out_dim);
      if (after_linear) after_linear(p, DType::f32);
      // Linear → BatchNorm1d → GELU: normalised in place, over this call's rows
      // (a pipeline's micro-batch: that is where its statistics come from).
      if (bn)
        dev.batchnorm_forward(p, as_f32(bn->xhat), as_f32(bn->invstd), p, as_f32(bn->weight),
                              as_f32(bn->bias), as_f32(bn->running_mean), as_f32(bn->running_var),
                              rows, out_dim, kernels::BatchNormParams{});
      dev.gelu_forward(o, p, n);
    } else {
      dev.linear_forward(o, xf, wf, bf, rows, in_dim, out_dim);
      if (after_linear) after_linear(o, DType::f32);
    }
    return;
  }
  if (dev.native_2byte_math()) {
    // Tensor cores: 2-byte operands, fp32 sums, each output rounded once — the
    // upcast path's math below without its fp32 copies.
    dev.linear_forward_2byte(dt, pre ? pre : out, x, w, b, rows, in_dim, out_dim);
    if (after_linear) after_linear(pre ? pre : out, dt);
    if (pre) dev.gelu_forward_2byte(dt, out, pre, n);
    return;
  }
  AsF32 x32(alloc, "upcast.input", x, dt, static_cast<size_t>(rows) * in_dim);
  AsF32 w32(alloc, "upcast.weight", w, dt, static_cast<size_t>(in_dim) * out_dim);
  std::optional<AsF32> b32;
  if (b) b32.emplace(alloc, "upcast.bias", b, dt, static_cast<size_t>(out_dim));
  AsF32 y = AsF32::scratch(alloc, "upcast.output", out, dt, n);
  dev.linear_forward(y.get(), x32.get(), w32.get(), b32 ? b32->get() : nullptr, rows, in_dim,
                     out_dim);
  if (after_linear) after_linear(y.get(), DType::f32);
  if (pre) {
    // The linear's output is rounded to storage before GELU reads it, as
    // autocast's bf16 matmul output would be; backward sees the same values.
    dev.cast(pre, dt, y.get(), DType::f32, n);
    dev.cast(y.get(), DType::f32, pre, dt, n);
    dev.gelu_forward(y.get(), y.get(), n);
  }
  y.store(out);
}

bool defer_weight_grad(const LayerCall& c, int layer, const char* what, const void* dout,
                       const void* x, void* dw, void* db, int rows, int in, int out,
                       bool copy_later) {
  if (!c.defer) return false;
  if (c.dt != DType::f32)
    throw std::logic_error(
        "defer_weight_grad: the B/W split is fp32 only (pipelines train in fp32)");
  DeferredWeightGrad d;
  d.dout_name = c.name(layer, what);
  d.copy_from = dout;
  d.x = x;
  d.dw = dw;
  d.db = db;
  d.layer = layer;
  d.rows = rows;
  d.in = in;
  d.out = out;
  c.defer->push_back(std::move(d));
  if (!copy_later) copy_deferred_outputs(c.alloc, *c.defer);
  return true;
}

void copy_deferred_outputs(Allocator& alloc, std::vector<DeferredWeightGrad>& deferred) {
  for (DeferredWeightGrad& d : deferred) {
    if (!d.copy_from) continue;
    // Kept from B to W like an activation: the memory panel counts it with them.
    d.dout = alloc.alloc(d.dout_name, MemCategory::activations,
                         {d.rows, static_cast<int64_t>(d.out)}, DType::f32);
    alloc.backend().copy(d.dout.raw(), d.copy_from, d.dout.bytes(), CopyKind::device_to_device);
    d.copy_from = nullptr;
  }
}

void run_weight_grad(DeviceBackend& dev, DeferredWeightGrad& d) {
  dev.linear_backward(nullptr, static_cast<float*>(d.dw), static_cast<float*>(d.db),
                      d.dout.data<float>(), static_cast<const float*>(d.x), nullptr, d.rows, d.in,
                      d.out);
  d.dout.reset();
}

void layer_backward(Allocator& alloc, DType dt, void* g, const void* pre, void* din, void* dw,
                    void* db, const void* x, const void* w, int rows, int in_dim, int out_dim,
                    const BatchNormArgs* bn, const LayerCall* defer, int layer) {
  const size_t n = static_cast<size_t>(rows) * out_dim;
  const size_t n_in = static_cast<size_t>(rows) * in_dim;
  const size_t n_w = static_cast<size_t>(in_dim) * out_dim;
  DeviceBackend& dev = alloc.backend();
  if (bn) require_fp32_batchnorm(dt, pre);
  if (dt == DType::f32) {
    auto* gf = static_cast<float*>(g);
    if (pre) dev.gelu_backward(gf, gf, static_cast<const float*>(pre), n);
    if (bn)
      dev.batchnorm_backward(gf, as_f32(bn->dweight), as_f32(bn->dbias), gf, as_f32(bn->xhat),
                             as_f32(bn->invstd), as_f32(bn->weight), rows, out_dim);
    // A zero-bubble B: the weight gradient of g (GELU's and BatchNorm's
    // backward already applied) waits for W; only din is computed now.
    if (defer &&
        defer_weight_grad(*defer, layer, "linear.grad_output", g, x, dw, db, rows, in_dim, out_dim,
                          /*copy_later=*/true))
      dw = db = nullptr;
    dev.linear_backward(static_cast<float*>(din), static_cast<float*>(dw), static_cast<float*>(db),
                        gf, static_cast<const float*>(x), static_cast<const float*>(w), rows,
                        in_dim, out_dim);
    return;
  }
  if (defer && defer->defer)
    throw std::logic_error("layer_backward: the B/W split is fp32 only (pipelines train in fp32)");
  if (dev.native_2byte_math()) {
    if (pre) dev.gelu_backward_2byte(dt, g, g, pre, n);
    dev.linear_backward_2byte(dt, din, dw, db, g, x, w, rows, in_dim, out_dim);
    return;
  }
  AsF32 g32(alloc, "upcast.grad_output", g, dt, n);
  if (pre) {
    AsF32 pre32(alloc, "upcast.pre_gelu", pre, dt, n);
    dev.gelu_backward(g32.get(), g32.get(), pre32.get(), n);
    // The linear's output gradient is rounded to storage before its GEMMs read it,
    // as a 2-byte GEMM (a GPU's tensor cores, autocast's bf16 matmul) takes it.
    dev.cast(g, dt, g32.get(), DType::f32, n);
    dev.cast(g32.get(), DType::f32, g, dt, n);
  }
  AsF32 x32(alloc, "upcast.input", x, dt, n_in);
  AsF32 w32(alloc, "upcast.weight", w, dt, n_w);
  // The parameter gradients accumulate in fp32 and are rounded once per layer.
  AsF32 dw32(alloc, "upcast.weight_grad", dw, dt, n_w);
  AsF32 db32(alloc, "upcast.bias_grad", db, dt, static_cast<size_t>(out_dim));
  std::optional<AsF32> dx;
  if (din) dx.emplace(AsF32::scratch(alloc, "upcast.grad_input", din, dt, n_in));
  dev.linear_backward(dx ? dx->get() : nullptr, dw32.get(), db32.get(), g32.get(), x32.get(),
                      w32.get(), rows, in_dim, out_dim);
  dw32.store(dw);
  db32.store(db);
  if (dx) dx->store(din);
}

LayerTape::LayerTape(const ModelLayout& layout, Allocator& alloc, Recorder* rec, DType dt, Comm* tp)
    : layout_(layout), alloc_(alloc), rec_(rec), dt_(dt), tp_(tp) {
  if (layout.has_buffers())
    throw std::logic_error("LayerTape: " + layout.spec().str() +
                           " has BatchNorm1d, which only LayerStack keeps statistics for");
}

void LayerTape::begin(const void* input, int rows) {
  if (!layers_.empty()) throw std::logic_error("LayerTape::begin: previous pass not finished");
  rows_ = rows;
  grad_.reset();
  input_ = input;
  if (dt_ != DType::f32 && !layout_.input_is_tokens()) {
    cast_input_ =
        alloc_.alloc(std::string("batch.x[") + to_string(dt_) + "]", MemCategory::activations,
                     {rows, static_cast<int64_t>(layout_.act_numel(0))}, dt_);
    alloc_.backend().cast(cast_input_.raw(), dt_, input, DType::f32, cast_input_.numel());
    input_ = cast_input_.raw();
  }
}

const void* LayerTape::forward(int layer, const void* params) {
  return forward_on(layer, layer_param_ptrs(layout_, layer, params, dt_));
}

const void* LayerTape::forward(int layer, const std::vector<void*>& params) {
  return forward_on(layer, {params.begin(), params.end()});
}

const void* LayerTape::forward_on(int layer, const std::vector<const void*>& params) {
  if (!layers_.empty() && layers_.back().layer + 1 != layer)
    throw std::logic_error("LayerTape::forward: layers must run in order");
  ScopedSpan span(rec_, Lane::compute, SpanKind::forward, layer);
  const void* x = layers_.empty() ? input_ : layers_.back().keep.output().raw();
  Saved s{layer, LayerKeep{}};
  const LayerCall call{alloc_, dt_, rows_, -1, tp_};
  layout_.family().forward(call, layout_, layer, params, x, s.keep, nullptr);
  layers_.push_back(std::move(s));
  return layers_.back().keep.output().raw();
}

const void* LayerTape::output() const {
  if (layers_.empty()) throw std::logic_error("LayerTape::output: no forward");
  const LayerKeep& k = layers_.back().keep;
  return k.t[static_cast<size_t>(k.out)].raw();
}

void LayerTape::begin_backward(const void* dout) {
  if (layers_.empty()) throw std::logic_error("LayerTape::begin_backward: no forward");
  const int last = layers_.back().layer;
  grad_ = alloc_.alloc(act_name(last, "grad_output"), MemCategory::temporary,
                       {rows_, static_cast<int64_t>(layout_.act_numel(last + 1))}, dt_);
  alloc_.backend().copy(grad_.raw(), dout, grad_.bytes(), CopyKind::device_to_device);
}

void LayerTape::backward(int layer, const void* params, void* grads) {
  backward_on(layer, layer_param_ptrs(layout_, layer, params, dt_),
              layer_param_ptrs(layout_, layer, grads, dt_));
}

void LayerTape::backward(int layer, const std::vector<void*>& params,
                         const std::vector<void*>& grads) {
  backward_on(layer, {params.begin(), params.end()}, grads);
}

void LayerTape::backward_on(int layer, const std::vector<const void*>& params,
                            const std::vector<void*>& grads) {
  if (layers_.empty() || layers_.back().layer != layer || grad_.empty())
    throw std::logic_error("LayerTape::backward: layers must run in reverse order of forward");
  ScopedSpan span(rec_, Lane::compute, SpanKind::backward, layer);
  Saved& s = layers_.back();
  const bool first = layers_.size() == 1;
  const void* input = first ? input_ : layers_[layers_.size() - 2].keep.output().raw();
  Tensor din;
  if (!first)
    din = alloc_.alloc(act_name(layer, "grad_input"), MemCategory::temporary,
                       {rows_, static_cast<int64_t>(layout_.act_numel(layer))}, dt_);
  const LayerCall call{alloc_, dt_, rows_, -1, tp_};
  layout_.family().backward(call, layout_, layer, params, grads, input, s.keep, grad_.raw(),
                            first ? nullptr : din.raw());
  for (Tensor& t : s.keep.t) t.reset();
  layers_.pop_back();  // this layer's activations drain as backward walks to the input
  grad_ = std::move(din);
}

}  // namespace shardlab
