// Model spec parsing, the parameter size table and PyTorch-style init.
#include "core/model.h"

#include <cmath>
#include <regex>

#include "core/config.h"
#include "core/rng.h"

namespace shardlab {

ModelSpec ModelSpec::parse(const std::string& text) {
  static const std::regex re(R"(mlp:(\d{1,6})x(\d{1,6}))");
  std::smatch m;
  if (!std::regex_match(text, m, re))
    throw ConfigError("unknown model '" + text +
                      "' (valid: mlp:LxD with L layers of width D, e.g. mlp:8x256)");
  ModelSpec s{std::stoi(m[1]), std::stoi(m[2])};
  if (s.layers < 1 || s.layers > 1024)
    throw ConfigError("model '" + text + "' has " + std::to_string(s.layers) +
                      " layers (valid: 1 to 1024)");
  if (s.dim < 1 || s.dim > 16384)
    throw ConfigError("model '" + text + "' has width " + std::to_string(s.dim) +
                      " (valid: 1 to 16384)");
  return s;
}

ModelLayout::ModelLayout(ModelSpec spec) : spec_(spec) {
  const int64_t d = spec.dim;
  for (int l = 0; l < spec.layers; ++l) {
    const std::string prefix = "layers." + std::to_string(l);
    params_.push_back({prefix + ".weight", {d, d}, total_, static_cast<size_t>(d * d), l});
    total_ += static_cast<size_t>(d * d);
    params_.push_back({prefix + ".bias", {d}, total_, static_cast<size_t>(d), l});
    total_ += static_cast<size_t>(d);
  }
}

std::vector<float> init_params(const ModelLayout& layout, uint64_t seed) {
  std::vector<float> flat(layout.total());
  Rng rng(mix_seed(seed, 0x1417));
  for (const ParamInfo& p : layout.params()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(layout.dim()));  // 1/√in_features
    for (size_t i = 0; i < p.numel; ++i)
      flat[p.offset + i] = static_cast<float>(rng.uniform(-bound, bound));
  }
  return flat;
}

}  // namespace shardlab
