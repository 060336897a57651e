// The model: `mlp:LxD` is L Linear(D,D) layers with exact GELU between them
// (none after the last) and an MSE loss; `mlp:LxD+bn` puts a BatchNorm1d(D)
// between each hidden Linear and its GELU (Linear → BatchNorm1d → GELU; the
// output Linear stays plain). One size table (ModelLayout) feeds allocation,
// sharding, checkpoints and the memory panel.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardlab {

struct ModelSpec {
  int layers = 0;
  int dim = 0;
  bool batchnorm = false;  // `+bn`
  // Parses "mlp:8x256" or "mlp:8x256+bn"; throws ConfigError naming the bad
  // spec and the valid forms.
  static ModelSpec parse(const std::string& text);
  std::string str() const {
    return "mlp:" + std::to_string(layers) + "x" + std::to_string(dim) + (batchnorm ? "+bn" : "");
  }
};

// One named tensor of the model state, with PyTorch's name and shape.
struct ParamInfo {
  std::string name;  // layers.3.weight, layers.3.bias, layers.3.bn.weight, layers.3.bn.running_var
  std::vector<int64_t> shape;
  size_t offset = 0;  // in the flat state vector (parameters first, then buffers)
  size_t numel = 0;
  int layer = 0;
  // num_batches_tracked: an int64 scalar in PyTorch's state_dict and in
  // checkpoints; a float in the flat vector (exact up to 2^24).
  bool int64 = false;
};

// The flat state vector of a model is [parameters | buffers]: parameters
// (trained, sharded, in the optimizer) at [0, total()), in layer order, each
// layer contiguous (weight, bias[, bn.weight, bn.bias]); then the BatchNorm
// buffers (running_mean, running_var, num_batches_tracked per BN layer, in
// layer order) at [total(), state_total()). Without +bn there are no buffers.
class ModelLayout {
 public:
  explicit ModelLayout(ModelSpec spec);
  const ModelSpec& spec() const { return spec_; }
  int num_layers() const { return spec_.layers; }
  int dim() const { return spec_.dim; }
  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<ParamInfo>& buffers() const { return buffers_; }
  size_t total() const { return total_; }              // parameters in the whole model
  size_t state_total() const { return state_total_; }  // parameters + buffers
  bool has_buffers() const { return !buffers_.empty(); }

  // Flat range of layers [0, layer)'s parameters ends where layer `layer`'s
  // begins; layer_begin(num_layers()) == total().
  size_t layer_begin(int layer) const { return layer_offset_[layer]; }
  size_t layer_numel(int layer) const { return layer_offset_[layer + 1] - layer_offset_[layer]; }
  // The same for buffers: layer `layer`'s are at [buffer_begin(layer), buffer_begin(layer + 1)).
  size_t buffer_begin(int layer) const { return buffer_offset_[layer]; }

  // Index in params() of the layer's first parameter, and how many it has (2 or 4).
  int first_param(int layer) const { return first_param_[layer]; }
  int param_count(int layer) const { return first_param_[layer + 1] - first_param_[layer]; }
  const ParamInfo& weight(int layer) const { return params_[first_param_[layer]]; }
  const ParamInfo& bias(int layer) const { return params_[first_param_[layer] + 1]; }
  bool has_gelu(int layer) const { return layer + 1 < spec_.layers; }
  // BatchNorm1d on every layer that has a GELU, under +bn.
  bool has_bn(int layer) const { return spec_.batchnorm && has_gelu(layer); }
  const ParamInfo& bn_weight(int layer) const { return params_[first_param_[layer] + 2]; }
  const ParamInfo& bn_bias(int layer) const { return params_[first_param_[layer] + 3]; }
  const ParamInfo& running_mean(int layer) const { return buffers_[first_buffer_[layer]]; }
  const ParamInfo& running_var(int layer) const { return buffers_[first_buffer_[layer] + 1]; }
  const ParamInfo& num_batches_tracked(int layer) const {
    return buffers_[first_buffer_[layer] + 2];
  }

 private:
  ModelSpec spec_;
  std::vector<ParamInfo> params_, buffers_;
  std::vector<int> first_param_, first_buffer_;  // per layer, plus one past the end
  std::vector<size_t> layer_offset_, buffer_offset_;
  size_t total_ = 0;
  size_t state_total_ = 0;
};

// The flat state vector (size state_total()): PyTorch's default nn.Linear init
// (weight and bias uniform in ±1/√in_features), drawn in parameter order from a
// generator seeded with `seed`; BatchNorm1d's weight 1 and bias 0 draw nothing,
// so +bn leaves the Linear weights of the same seed unchanged; running_mean 0,
// running_var 1, num_batches_tracked 0.
std::vector<float> init_params(const ModelLayout& layout, uint64_t seed);

}  // namespace shardlab
