// `mlp:LxD[+bn]`: L Linear(D,D) layers with exact GELU between them (none
// after the last) and an MSE loss on synthetic regression data (core/device/data.h);
// `+bn` puts a BatchNorm1d(D) between each hidden Linear and its GELU
// (Linear → BatchNorm1d → GELU; the output Linear stays plain). The model the
// first lessons use: every layer the same size, so sharding and pipeline
// pictures stay simple.
//
// Tensor parallelism (a mesh with tp = T), as Megatron splits a transformer's
// MLP: the layers go in pairs. The first of a pair is column-parallel — each
// tp rank holds D/T of its output features (rows of the weight, the bias and
// BatchNorm's features) and computes them from the whole input; the second is
// row-parallel — each holds the D/T input features it is given (columns of the
// weight) and computes a partial sum of every output, which one all-reduce
// completes. The operators Megatron calls f and g: f (before the column layer)
// is the identity forward and an all-reduce of the input's gradient backward;
// g (after the row layer) is the all-reduce forward and the identity backward.
// So a pair costs one all-reduce of [rows, D] each way, and GELU and BatchNorm
// run on the slice between them with no communication. An odd last layer is
// replicated: every tp rank computes it whole, from the same input.
#include <algorithm>
#include <cmath>
#include <regex>

#include "core/comm/comm.h"
#include "core/config.h"
#include "core/device/data.h"
#include "core/model/layer_ops.h"
#include "core/model/model_family.h"
#include "core/model/precision.h"
#include "core/rng.h"

namespace shardlab {
namespace {

// How a layer is cut under tensor parallelism (see the top of this file).
enum class TpRole { whole, column, row };
TpRole tp_role(const ModelLayout& m, int l) {
  if (!m.tensor_parallel()) return TpRole::whole;
  if (l % 2 == 1) return TpRole::row;
  return l + 1 < m.spec().layers ? TpRole::column : TpRole::whole;  // (the table may be half built)
}

// The regression rows of core/device/data.h behind the Dataset interface.
class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(int dim, uint64_t seed) : data_(dim, seed) {}
  bool load(DeviceBackend& dev, int step, int row_begin, int rows, void* x_dev,
            void* y_dev) const override {
    load_rows(dev, data_, step, row_begin, rows, static_cast<float*>(x_dev),
              static_cast<float*>(y_dev));
    return false;
  }
  void rows(int step, int row_begin, int rows, void* x, void* y) const override {
    data_.rows(step, row_begin, rows, static_cast<float*>(x), static_cast<float*>(y));
  }
  bool tokens() const override { return false; }
  std::string describe() const override { return "shardlab synthetic: x~N(0,1), y=tanh(x T)"; }

 private:
  SyntheticData data_;
};

class Mlp final : public ModelFamily {
 public:
  std::string name() const override { return "mlp"; }
  std::string forms() const override {
    return "mlp:LxD with L layers of width D, e.g. mlp:8x256, or mlp:LxD+bn with BatchNorm1d "
           "after each hidden Linear";
  }

  std::optional<ModelSpec> parse(const std::string& text) const override {
    if (text.rfind("mlp:", 0) != 0) return std::nullopt;
    static const std::regex re(R"(mlp:(\d{1,6})x(\d{1,6})(\+.*)?)");
    std::smatch m;
    if (!std::regex_match(text, m, re))
      throw ConfigError("unknown model '" + text + "' (valid: " + forms() + ")");
    ModelSpec s;
    s.layers = std::stoi(m[1]);
    s.dim = std::stoi(m[2]);
    const std::string plain = "mlp:" + std::string(m[1]) + "x" + std::string(m[2]);
    if (m[3].matched) {
      if (m[3] != "+bn")
        throw ConfigError("model '" + text + "' has unknown suffix '" + std::string(m[3]) +
                          "' (valid: " + plain + ", or " + plain +
                          "+bn with BatchNorm1d after each hidden Linear)");
      s.batchnorm = true;
    }
    if (s.layers < 1 || s.layers > 1024)
      throw ConfigError("model '" + text + "' has " + std::to_string(s.layers) +
                        " layers (valid: 1 to 1024)");
    if (s.dim < 1 || s.dim > 16384)
      throw ConfigError("model '" + text + "' has width " + std::to_string(s.dim) +
                        " (valid: 1 to 16384)");
    if (s.batchnorm && s.layers < 2)
      throw ConfigError("model '" + text +
                        "' has no hidden layer for BatchNorm1d (the output Linear has none; valid: "
                        "mlp:LxD+bn with L of 2 or more, or " +
                        plain + ")");
    return s;
  }

  ModelSpec resolve(ModelSpec spec, const RunConfig& cfg) const override {
    if (cfg.seq != 0)
      throw ConfigError("--seq " + std::to_string(cfg.seq) + " is invalid for model " + cfg.model +
                        " (valid: only with gpt:LxCxH models; an MLP has no sequence)");
    if (!cfg.attention.empty())
      throw ConfigError("--attention " + cfg.attention + " is invalid for model " + cfg.model +
                        " (valid: only with gpt:LxCxH models; an MLP has no attention)");
    if (cfg.sequence_parallel)
      throw ConfigError("--sequence-parallel is invalid for model " + cfg.model +
                        " (valid: only with gpt:LxCxH models; an MLP has no sequence)");
    if (!cfg.data.empty())
      throw ConfigError("--data '" + cfg.data + "' is invalid for model " + cfg.model +
                        " (valid: only with gpt:LxCxH models; an MLP trains on synthetic rows)");
    return spec;
  }

  void check_tensor_parallel(const ModelSpec& spec, int tp,
                             const std::string& given) const override {
    if (tp > 1 && spec.dim % tp != 0)
      throw ConfigError(given + ": tp=" + std::to_string(tp) + " does not divide the width " +
                        std::to_string(spec.dim) + " of " + spec.str() +
                        " (valid: a tp that divides " + std::to_string(spec.dim) +
                        ": each tp rank holds width/tp features of a split layer)");
    if (tp > 1 && spec.layers < 2)
      throw ConfigError(given + ": " + spec.str() +
                        " has one layer, which tensor parallelism would not split (valid: tp=1, "
                        "or 2 or more layers: a column-parallel layer, then a row-parallel one)");
  }

  void build(ModelLayout& m) const override {
    const int64_t d = m.spec().dim;
    const int L = m.spec().layers;
    // The dimension each tensor is cut on (-1: whole on every tp rank). A
    // weight is [out, in]: a column layer cuts its outputs (dimension 0) and
    // with them its bias and BatchNorm's features; a row layer its inputs (1).
    auto cut = [&](int l, bool weight) {
      switch (tp_role(m, l)) {
        case TpRole::column:
          return 0;
        case TpRole::row:
          return weight ? 1 : -1;
        case TpRole::whole:
          return -1;
      }
      return -1;
    };
    for (int l = 0; l < L; ++l) {
      const std::string prefix = "layers." + std::to_string(l);
      m.begin_layer(prefix, "linear");
      m.add_param(prefix + ".weight", {d, d}, -1, cut(l, true));
      m.add_param(prefix + ".bias", {d}, -1, cut(l, false));
      if (m.spec().batchnorm && l + 1 < L) {
        m.add_param(prefix + ".bn.weight", {d}, -1, cut(l, false));
        m.add_param(prefix + ".bn.bias", {d}, -1, cut(l, false));
      }
    }
    m.end_params();
    for (int l = 0; l < L; ++l) {
      m.begin_layer_buffers(l);
      if (!m.has_bn(l)) continue;
      const std::string prefix = "layers." + std::to_string(l) + ".bn.";
      m.add_buffer(prefix + "running_mean", {d}, false, cut(l, false));
      m.add_buffer(prefix + "running_var", {d}, false, cut(l, false));
      m.add_buffer(prefix + "num_batches_tracked", {}, true);
    }
    m.end_buffers();
    // Every boundary carries [D], but a column layer's output, which is D/T.
    std::vector<std::vector<int64_t>> acts(L + 1, {d});
    for (int l = 0; l < L; ++l)
      if (tp_role(m, l) == TpRole::column) acts[l + 1] = {d / m.slice().size};
    m.set_activations(std::move(acts), false, static_cast<size_t>(d));
  }

  // PyTorch's default nn.Linear init (weight and bias uniform in ±1/√in_features),
  // drawn in parameter order; BatchNorm1d's weight 1 and bias 0 draw nothing, so
  // +bn leaves the Linear weights of the same seed unchanged; running_mean 0,
  // running_var 1, num_batches_tracked 0.
  std::vector<float> init(const ModelLayout& layout, uint64_t seed) const override {
    if (layout.tensor_parallel())
      throw std::logic_error("mlp init: initialise the whole model, then slice it (SlicedParams)");
    std::vector<float> flat(layout.state_total(), 0.0f);
    Rng rng(mix_seed(seed, 0x1417));
    const double bound = 1.0 / std::sqrt(static_cast<double>(layout.dim()));
    for (int l = 0; l < layout.num_layers(); ++l) {
      for (const ParamInfo* p : {&layout.weight(l), &layout.bias(l)})
        for (size_t i = 0; i < p->numel; ++i)
          flat[p->offset + i] = static_cast<float>(rng.uniform(-bound, bound));
      if (!layout.has_bn(l)) continue;
      std::fill_n(flat.begin() + layout.bn_weight(l).offset, layout.bn_weight(l).numel, 1.0f);
      std::fill_n(flat.begin() + layout.running_var(l).offset, layout.running_var(l).numel, 1.0f);
    }
    return flat;
  }

  // out = gelu(x · Wᵀ + b), or gelu(bn(x · Wᵀ + b)) under +bn; the last layer
  // has no GELU (nor BN) and keeps no pre-activation. keep: pre, out, xhat, invstd.
  // Under tensor parallelism the weight is this rank's slice ([out, in] as
  // held), and a row layer's linear gives a partial sum, completed by g.
  void forward(const LayerCall& c, const ModelLayout& m, int l,
               const std::vector<const void*>& params, const void* x, LayerKeep& keep,
               const LayerNorms* norms) const override {
    const int out_dim = static_cast<int>(m.weight(l).shape[0]);
    const int in_dim = static_cast<int>(m.weight(l).shape[1]);
    Tensor out =
        c.alloc.alloc(c.name(l, "output"), MemCategory::activations, {c.rows, out_dim}, c.dt);
    Tensor pre, xhat, invstd;
    if (m.has_gelu(l))
      pre = c.alloc.alloc(c.name(l, "pre_gelu"), MemCategory::activations, {c.rows, out_dim}, c.dt);
    BatchNormArgs bn;
    if (m.has_bn(l)) {
      xhat = c.alloc.alloc(c.name(l, "bn.xhat"), MemCategory::activations, {c.rows, out_dim});
      invstd = c.alloc.alloc(c.name(l, "bn.invstd"), MemCategory::activations,
                             std::vector<int64_t>{out_dim});
      bn.weight = params[2];
      bn.bias = params[3];
      bn.xhat = xhat.raw();
      bn.invstd = invstd.raw();
      if (norms) {
        bn.running_mean = norms->running_mean;
        bn.running_var = norms->running_var;
      }
    }
    // A row layer: this rank's input features' share of every output; g, the
    // all-reduce, sums the shares before BatchNorm and GELU. Its bias is added
    // once, by tp rank 0. (A column layer needs nothing: f is the identity.)
    const bool row = tp_role(m, l) == TpRole::row;
    AfterLinear g;
    if (row)
      g = [&](void* y, DType dt) {
        c.tp->all_reduce(y, static_cast<size_t>(c.rows) * out_dim, dt, CommMeta{l, c.mb});
      };
    layer_forward(c.alloc, c.dt, out.raw(), pre.empty() ? nullptr : pre.raw(), x, params[0],
                  row && c.tp->rank() != 0 ? nullptr : params[1], c.rows, in_dim, out_dim,
                  m.has_bn(l) ? &bn : nullptr, g);
    keep.t.clear();
    keep.t.push_back(std::move(pre));
    keep.t.push_back(std::move(out));
    keep.t.push_back(std::move(xhat));
    keep.t.push_back(std::move(invstd));
    keep.out = 1;
  }

  void backward(const LayerCall& c, const ModelLayout& m, int l,
                const std::vector<const void*>& params, const std::vector<void*>& grads,
                const void* x, LayerKeep& keep, void* g, void* din) const override {
    BatchNormArgs bn;
    if (m.has_bn(l)) {
      bn.weight = params[2];
      bn.xhat = keep.t[2].raw();
      bn.invstd = keep.t[3].raw();
      bn.dweight = grads[2];
      bn.dbias = grads[3];
    }
    const int out_dim = static_cast<int>(m.weight(l).shape[0]);
    const int in_dim = static_cast<int>(m.weight(l).shape[1]);
    // A row layer's output gradient is the same on every tp rank (g's backward
    // is the identity), so its bias gradient is too: each rank keeps it whole.
    layer_backward(c.alloc, c.dt, g, keep.t[0].empty() ? nullptr : keep.t[0].raw(), din, grads[0],
                   grads[1], x, params[0], c.rows, in_dim, out_dim, m.has_bn(l) ? &bn : nullptr, &c,
                   l);
    // f's backward: each tp rank's output features contributed to every input's
    // gradient; the all-reduce adds the contributions.
    if (din && tp_role(m, l) == TpRole::column)
      c.tp->all_reduce(din, static_cast<size_t>(c.rows) * in_dim, c.dt, CommMeta{l, c.mb});
  }

  std::unique_ptr<Dataset> dataset(const ModelLayout& m, uint64_t seed,
                                   const RunConfig&) const override {
    return std::make_unique<SyntheticDataset>(m.dim(), seed);
  }

  // MSE: Σ (pred − y)² / (divisor_rows · D). Under tensor parallelism the last
  // layer is whole on every tp rank: each computes the same loss, alone.
  double loss(Allocator& alloc, const MixedPrecision& mp, const ModelLayout& m, void* dout,
              const void* output, const void* targets, int rows, int divisor_rows, Comm*,
              int) const override {
    const size_t d = static_cast<size_t>(m.dim());
    return mp.mse_loss(alloc, dout, output, static_cast<const float*>(targets), rows * d,
                       static_cast<size_t>(divisor_rows) * d);
  }
  int64_t data_bytes(const ModelLayout& m, const RunConfig&) const override {
    const int64_t d = m.dim();
    return d * d * static_cast<int64_t>(sizeof(float));  // the generator's T
  }
};

}  // namespace

const ModelFamily& mlp_family() {
  static const Mlp family;
  return family;
}

}  // namespace shardlab
