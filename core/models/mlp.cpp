// `mlp:LxD[+bn]`: L Linear(D,D) layers with exact GELU between them (none
// after the last) and an MSE loss on synthetic regression data (core/device/data.h);
// `+bn` puts a BatchNorm1d(D) between each hidden Linear and its GELU
// (Linear → BatchNorm1d → GELU; the output Linear stays plain). The model the
// first lessons use: every layer the same size, so sharding and pipeline
// pictures stay simple.
#include <algorithm>
#include <cmath>
#include <regex>

#include "core/config.h"
#include "core/device/data.h"
#include "core/model/layer_ops.h"
#include "core/model/model_family.h"
#include "core/model/precision.h"
#include "core/rng.h"

namespace shardlab {
namespace {

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
    if (!cfg.data.empty())
      throw ConfigError("--data '" + cfg.data + "' is invalid for model " + cfg.model +
                        " (valid: only with gpt:LxCxH models; an MLP trains on synthetic rows)");
    return spec;
  }

  void build(ModelLayout& m) const override {
    const int64_t d = m.spec().dim;
    const int L = m.spec().layers;
    for (int l = 0; l < L; ++l) {
      const std::string prefix = "layers." + std::to_string(l);
      m.begin_layer(prefix, "linear");
      m.add_param(prefix + ".weight", {d, d});
      m.add_param(prefix + ".bias", {d});
      if (m.spec().batchnorm && l + 1 < L) {
        m.add_param(prefix + ".bn.weight", {d});
        m.add_param(prefix + ".bn.bias", {d});
      }
    }
    m.end_params();
    for (int l = 0; l < L; ++l) {
      m.begin_layer_buffers(l);
      if (!m.has_bn(l)) continue;
      const std::string prefix = "layers." + std::to_string(l) + ".bn.";
      m.add_buffer(prefix + "running_mean", {d});
      m.add_buffer(prefix + "running_var", {d});
      m.add_buffer(prefix + "num_batches_tracked", {}, true);
    }
    m.end_buffers();
    m.set_activations(std::vector<std::vector<int64_t>>(L + 1, {d}), false, static_cast<size_t>(d));
  }

  // PyTorch's default nn.Linear init (weight and bias uniform in ±1/√in_features),
  // drawn in parameter order; BatchNorm1d's weight 1 and bias 0 draw nothing, so
  // +bn leaves the Linear weights of the same seed unchanged; running_mean 0,
  // running_var 1, num_batches_tracked 0.
  std::vector<float> init(const ModelLayout& layout, uint64_t seed) const override {
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
  void forward(const LayerCall& c, const ModelLayout& m, int l,
               const std::vector<const void*>& params, const void* x, LayerKeep& keep,
               const LayerNorms* norms) const override {
    const int d = m.dim();
    Tensor out = c.alloc.alloc(c.name(l, "output"), MemCategory::activations, {c.rows, d}, c.dt);
    Tensor pre, xhat, invstd;
    if (m.has_gelu(l))
      pre = c.alloc.alloc(c.name(l, "pre_gelu"), MemCategory::activations, {c.rows, d}, c.dt);
    BatchNormArgs bn;
    if (m.has_bn(l)) {
      xhat = c.alloc.alloc(c.name(l, "bn.xhat"), MemCategory::activations, {c.rows, d});
      invstd =
          c.alloc.alloc(c.name(l, "bn.invstd"), MemCategory::activations, std::vector<int64_t>{d});
      bn.weight = params[2];
      bn.bias = params[3];
      bn.xhat = xhat.raw();
      bn.invstd = invstd.raw();
      if (norms) {
        bn.running_mean = norms->running_mean;
        bn.running_var = norms->running_var;
      }
    }
    layer_forward(c.alloc, c.dt, out.raw(), pre.empty() ? nullptr : pre.raw(), x, params[0],
                  params[1], c.rows, d, m.has_bn(l) ? &bn : nullptr);
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
    layer_backward(c.alloc, c.dt, g, keep.t[0].empty() ? nullptr : keep.t[0].raw(), din, grads[0],
                   grads[1], x, params[0], c.rows, m.dim(), m.has_bn(l) ? &bn : nullptr);
  }

  std::unique_ptr<Dataset> dataset(const ModelLayout& m, uint64_t seed,
                                   const RunConfig&) const override {
    return std::make_unique<SyntheticDataset>(m.dim(), seed);
  }

  // MSE: Σ (pred − y)² / (divisor_rows · D).
  double loss(Allocator& alloc, const MixedPrecision& mp, const ModelLayout& m, void* dout,
              const void* output, const void* targets, int rows, int divisor_rows) const override {
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
