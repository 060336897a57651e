// Model spec parsing, the parameter and buffer size table and PyTorch-style init.
#include "core/model.h"

#include <algorithm>
#include <cmath>
#include <regex>

#include "core/config.h"
#include "core/rng.h"

namespace shardlab {

ModelSpec ModelSpec::parse(const std::string& text) {
  static const std::regex re(R"(mlp:(\d{1,6})x(\d{1,6})(\+.*)?)");
  std::smatch m;
  if (!std::regex_match(text, m, re))
    throw ConfigError("unknown model '" + text +
                      "' (valid: mlp:LxD with L layers of width D, e.g. mlp:8x256, or mlp:LxD+bn "
                      "with BatchNorm1d after each hidden Linear)");
  ModelSpec s{std::stoi(m[1]), std::stoi(m[2])};
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

ModelLayout::ModelLayout(ModelSpec spec) : spec_(spec) {
  const int64_t d = spec.dim;
  const size_t n = static_cast<size_t>(d);
  auto add = [&](std::vector<ParamInfo>& to, size_t& offset, std::string name,
                 std::vector<int64_t> shape, size_t numel, int layer, bool int64 = false) {
    to.push_back({std::move(name), std::move(shape), offset, numel, layer, int64});
    offset += numel;
  };
  for (int l = 0; l < spec.layers; ++l) {
    const std::string prefix = "layers." + std::to_string(l);
    first_param_.push_back(static_cast<int>(params_.size()));
    layer_offset_.push_back(total_);
    add(params_, total_, prefix + ".weight", {d, d}, n * n, l);
    add(params_, total_, prefix + ".bias", {d}, n, l);
    if (has_bn(l)) {
      add(params_, total_, prefix + ".bn.weight", {d}, n, l);
      add(params_, total_, prefix + ".bn.bias", {d}, n, l);
    }
  }
  first_param_.push_back(static_cast<int>(params_.size()));
  layer_offset_.push_back(total_);
  // Buffers follow every parameter, so the parameters stay one contiguous range.
  state_total_ = total_;
  for (int l = 0; l < spec.layers; ++l) {
    const std::string prefix = "layers." + std::to_string(l) + ".bn.";
    first_buffer_.push_back(static_cast<int>(buffers_.size()));
    buffer_offset_.push_back(state_total_);
    if (!has_bn(l)) continue;
    add(buffers_, state_total_, prefix + "running_mean", {d}, n, l);
    add(buffers_, state_total_, prefix + "running_var", {d}, n, l);
    add(buffers_, state_total_, prefix + "num_batches_tracked", {}, 1, l, true);
  }
  first_buffer_.push_back(static_cast<int>(buffers_.size()));
  buffer_offset_.push_back(state_total_);
}

std::vector<float> init_params(const ModelLayout& layout, uint64_t seed) {
  std::vector<float> flat(layout.state_total(), 0.0f);
  Rng rng(mix_seed(seed, 0x1417));
  const double bound = 1.0 / std::sqrt(static_cast<double>(layout.dim()));  // 1/√in_features
  for (int l = 0; l < layout.num_layers(); ++l) {
    for (const ParamInfo* p : {&layout.weight(l), &layout.bias(l)})
      for (size_t i = 0; i < p->numel; ++i)
        flat[p->offset + i] = static_cast<float>(rng.uniform(-bound, bound));
    if (!layout.has_bn(l)) continue;
    // nn.BatchNorm1d: weight 1, bias 0; running_mean 0, running_var 1, num_batches_tracked 0.
    std::fill_n(flat.begin() + layout.bn_weight(l).offset, layout.bn_weight(l).numel, 1.0f);
    std::fill_n(flat.begin() + layout.running_var(l).offset, layout.running_var(l).numel, 1.0f);
  }
  return flat;
}

}  // namespace shardlab
