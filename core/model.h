// The model: `mlp:LxD` is L Linear(D,D) layers with exact GELU between them
// (none after the last) and an MSE loss. One size table (ModelLayout) feeds
// allocation, sharding, checkpoints and the memory panel.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardlab {

struct ModelSpec {
  int layers = 0;
  int dim = 0;
  // Parses "mlp:8x256"; throws ConfigError naming the bad spec and the valid form.
  static ModelSpec parse(const std::string& text);
  std::string str() const { return "mlp:" + std::to_string(layers) + "x" + std::to_string(dim); }
};

struct ParamInfo {
  std::string name;  // PyTorch name: layers.3.weight, layers.3.bias
  std::vector<int64_t> shape;
  size_t offset = 0;  // in the flat parameter vector
  size_t numel = 0;
  int layer = 0;
};

class ModelLayout {
 public:
  explicit ModelLayout(ModelSpec spec);
  const ModelSpec& spec() const { return spec_; }
  int num_layers() const { return spec_.layers; }
  int dim() const { return spec_.dim; }
  const std::vector<ParamInfo>& params() const { return params_; }
  size_t total() const { return total_; }  // parameters in the whole model
  // Flat range of one layer (weight then bias).
  size_t layer_begin(int layer) const { return params_[2 * layer].offset; }
  size_t layer_numel(int layer) const {
    return params_[2 * layer].numel + params_[2 * layer + 1].numel;
  }
  const ParamInfo& weight(int layer) const { return params_[2 * layer]; }
  const ParamInfo& bias(int layer) const { return params_[2 * layer + 1]; }
  bool has_gelu(int layer) const { return layer + 1 < spec_.layers; }

 private:
  ModelSpec spec_;
  std::vector<ParamInfo> params_;
  size_t total_ = 0;
};

// PyTorch's default nn.Linear init (weight and bias uniform in ±1/√in_features),
// drawn in parameter order from a generator seeded with `seed`.
std::vector<float> init_params(const ModelLayout& layout, uint64_t seed);

}  // namespace shardlab
