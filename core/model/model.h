// The model as a value the strategies do not know: a table of layers, each
// with named parameters of any shape (PyTorch's names), the activation that
// crosses each boundary between layers, and the family (core/model/model_family.h)
// that runs a layer's forward and backward. One table feeds allocation,
// sharding, checkpoints, pipeline partitioning and the memory panel.
//
// Families (core/models/*.cpp, registered by name like strategies):
//   mlp:LxD[+bn]  L Linear(D,D) layers, exact GELU between them, MSE on synthetic data
//   gpt:LxCxH     nanoGPT's GPT-2 (L blocks, C channels, H heads), cross-entropy on text
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace shardlab {

class ModelFamily;
struct RunConfig;

struct ModelSpec {
  int layers = 0;          // mlp: Linear layers; gpt: transformer blocks
  int dim = 0;             // mlp: width D; gpt: channels C
  bool batchnorm = false;  // mlp `+bn`
  std::string family = "mlp";
  int heads = 0;           // gpt: attention heads H
  int seq = 0;             // gpt: context length T (--seq; not part of the name)
  int vocab = 0;           // gpt: vocabulary size V (from the tokenizer; not part of the name)
  std::string vocabulary;  // gpt: the tokenizer's characters in id order (UTF-8)
  bool flash_attention = false;  // gpt: --attention flash (no [T,T] matrix kept; not in the name)
  // gpt: --sequence-parallel (not in the name); only a tensor-parallel slice
  // (ModelLayout's TensorSlice) holds its tokens split.
  bool sequence_parallel = false;
  // Parses any registered family's name ("mlp:8x256", "mlp:8x256+bn",
  // "gpt:2x64x4"); throws ConfigError naming the bad spec and the valid forms.
  static ModelSpec parse(const std::string& text);
  std::string str() const;
};

// One named tensor of the model state, with PyTorch's name and shape.
struct ParamInfo {
  std::string name;  // layers.3.weight, transformer.h.0.attn.c_attn.weight, ...
  std::vector<int64_t> shape;
  size_t offset = 0;  // in the flat state vector (parameters first, then buffers)
  size_t numel = 0;
  int layer = 0;
  // num_batches_tracked: an int64 scalar in PyTorch's state_dict and in
  // checkpoints; a float in the flat vector (exact up to 2^24).
  bool int64 = false;
  // A tied parameter (gpt's lm_head.weight, tied to transformer.wte.weight):
  // the index in params() of the tensor it is the same as, else -1. The layer
  // that uses it holds its own copy while training (as Megatron's last stage
  // holds the embedding), the two gradients are summed before every update
  // (sum_tied_grads), so the copies stay equal; checkpoints store it once.
  int tied_to = -1;
  // Tensor parallelism (TensorSlice): the dimension of the full tensor this
  // layout holds 1/T of (-1: every tp rank holds all of it), the full shape,
  // and where the full tensor starts in the full model's flat vector. Without
  // tensor parallelism full_shape == shape and full_offset == offset.
  int split_dim = -1;
  // The split dimension is `split_parts` tensors side by side, each cut into
  // T slices (gpt's c_attn: q, k and v, each split by heads): slice r holds
  // the r-th slice of every part, in part order.
  int split_parts = 1;
  // The split dimension padded by this many entries to a multiple of T before
  // the cut (gpt's vocabulary, as Megatron pads it): the last slices hold the
  // padding, zeros no run of for_each_slice_run reaches, so they are never
  // read from a full vector, exported or checkpointed.
  int64_t split_pad = 0;
  std::vector<int64_t> full_shape{};
  size_t full_offset = 0;
};

// Which slice of the model a layout describes: tp rank `rank` of `size`
// (Megatron's tensor parallelism). A family splits each tensor along the
// dimension it names (ModelLayout::add_param); size 1 is the whole model.
struct TensorSlice {
  int size = 1;
  int rank = 0;
};

// One row of the layer table.
struct LayerInfo {
  std::string name;  // "layers.3" (mlp), "transformer.wte+wpe", "transformer.h.0", "lm_head"
  std::string kind;  // "linear", "embedding", "block", "head"
  int first_param = 0, param_count = 0;
};

// The flat state vector of a model is [parameters | buffers]: parameters
// (trained, sharded, in the optimizer) at [0, total()), in layer order, each
// layer contiguous; then the buffers (BatchNorm's running statistics) at
// [total(), state_total()).
class ModelLayout {
 public:
  explicit ModelLayout(ModelSpec spec);  // builds the table through the spec's family
  // The table of tp rank slice.rank's part of the model: every split tensor
  // 1/slice.size of its full shape, activations as that rank holds them.
  ModelLayout(ModelSpec spec, TensorSlice slice);
  const ModelSpec& spec() const { return spec_; }
  const TensorSlice& slice() const { return slice_; }
  bool tensor_parallel() const { return slice_.size > 1; }
  // The full model's state vector length (state_total() without tensor parallelism).
  size_t full_state_total() const { return full_state_total_; }
  const ModelFamily& family() const { return *family_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const std::vector<LayerInfo>& layers() const { return layers_; }
  int dim() const { return spec_.dim; }
  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<ParamInfo>& buffers() const { return buffers_; }
  size_t total() const { return total_; }              // parameters, tied copies included
  size_t state_total() const { return state_total_; }  // parameters + buffers
  // Ψ: the model's distinct parameters (a tied copy counted once), what
  // nanoGPT's get_num_params counts with the position embedding included.
  size_t unique_total() const;
  bool has_buffers() const { return !buffers_.empty(); }
  bool has_tied() const;

  // Flat range of layers [0, layer)'s parameters ends where layer `layer`'s
  // begins; layer_begin(num_layers()) == total().
  size_t layer_begin(int layer) const { return layer_offset_[layer]; }
  size_t layer_numel(int layer) const { return layer_offset_[layer + 1] - layer_offset_[layer]; }
  // The same for buffers: layer `layer`'s are at [buffer_begin(layer), buffer_begin(layer + 1)).
  size_t buffer_begin(int layer) const { return buffer_offset_[layer]; }
  // Index in params() of the layer's first parameter, and how many it has.
  int first_param(int layer) const { return layers_[layer].first_param; }
  int param_count(int layer) const { return layers_[layer].param_count; }

  // The activation crossing boundary b (the input of layer b; boundary
  // num_layers() is the model's output), per row of the batch: a row is one
  // sample (mlp) or one sequence (gpt). Boundary 0 holds int32 token ids
  // when input_is_tokens(), else fp32 values.
  const std::vector<int64_t>& act_shape(int boundary) const { return act_shape_[boundary]; }
  size_t act_numel(int boundary) const;
  bool input_is_tokens() const { return input_tokens_; }
  // Per row: what the loss compares the output with (mlp: D fp32 values;
  // gpt: T int32 next-token ids).
  size_t target_numel() const { return target_numel_; }

  // ---- mlp only (the mlp family and its tests read these)
  const ParamInfo& weight(int layer) const { return params_[first_param(layer)]; }
  const ParamInfo& bias(int layer) const { return params_[first_param(layer) + 1]; }
  bool has_gelu(int layer) const { return layer + 1 < num_layers(); }
  bool has_bn(int layer) const { return spec_.batchnorm && has_gelu(layer); }
  const ParamInfo& bn_weight(int layer) const { return params_[first_param(layer) + 2]; }
  const ParamInfo& bn_bias(int layer) const { return params_[first_param(layer) + 3]; }
  const ParamInfo& running_mean(int layer) const { return buffers_[first_buffer_[layer]]; }
  const ParamInfo& running_var(int layer) const { return buffers_[first_buffer_[layer] + 1]; }
  const ParamInfo& num_batches_tracked(int layer) const {
    return buffers_[first_buffer_[layer] + 2];
  }

  // ---- building the table (a family's build() calls these, in order)
  void begin_layer(std::string name, std::string kind);
  // shape is the full tensor's; under tensor parallelism dimension split_dim
  // (if >= 0) is cut into slice().size equal parts (it must divide: the family
  // checks its settings in resolve()), or with `pad` first padded to a
  // multiple of them (ParamInfo::split_pad).
  void add_param(std::string name, std::vector<int64_t> shape, int tied_to = -1, int split_dim = -1,
                 int split_parts = 1, bool pad = false);
  void end_params();  // after the last layer's parameters: buffers follow
  void begin_layer_buffers(int layer);
  void add_buffer(std::string name, std::vector<int64_t> shape, bool int64 = false,
                  int split_dim = -1);
  void end_buffers();
  void set_activations(std::vector<std::vector<int64_t>> per_boundary, bool input_tokens,
                       size_t target_numel);

 private:
  ParamInfo sliced(std::string name, std::vector<int64_t> shape, int split_dim, int split_parts,
                   bool pad, size_t offset, size_t full_offset) const;
  ModelSpec spec_;
  TensorSlice slice_;
  const ModelFamily* family_ = nullptr;
  std::vector<LayerInfo> layers_;
  std::vector<ParamInfo> params_, buffers_;
  std::vector<int> first_buffer_;  // per layer, plus one past the end
  std::vector<size_t> layer_offset_, buffer_offset_;
  std::vector<std::vector<int64_t>> act_shape_;
  bool input_tokens_ = false;
  size_t target_numel_ = 0;
  size_t total_ = 0;
  size_t state_total_ = 0;
  size_t full_total_ = 0, full_state_total_ = 0;
};

// Every tensor of a sliced layout (parameters, then buffers) as runs of
// contiguous values: fn(at, full_at, n) says that n values at `at` of the
// slice's flat vector are the full flat vector's values at `full_at`. A
// replicated tensor is one run; a tensor split on dimension d of [a0, .., ak]
// is one run per index of the dimensions before d (and per part of d). A
// padded tensor's padding (ParamInfo::split_pad) is in no run: a gap.
void for_each_slice_run(const ModelLayout& slice,
                        const std::function<void(size_t at, size_t full_at, size_t n)>& fn);

// The flat state vector (size state_total()), initialised as the family's
// PyTorch module would be, from a generator seeded with `seed`.
std::vector<float> init_params(const ModelLayout& layout, uint64_t seed);

// The model a run trains: cfg.model with what the run adds to it (gpt: --seq,
// and the vocabulary of --data or the default corpus).
ModelSpec resolve_model(const RunConfig& cfg);
ModelLayout make_layout(const RunConfig& cfg);

}  // namespace shardlab
