// The layer table (model.h) and the model family registry (model_family.h).
#include "core/model/model.h"

#include <algorithm>
#include <stdexcept>

#include "core/config.h"
#include "core/device/device.h"
#include "core/model/model_family.h"

namespace shardlab {

// Defined in core/models/*.cpp, one per family.
const ModelFamily& mlp_family();
const ModelFamily& gpt_family();

const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> all{&mlp_family(), &gpt_family()};
  return all;
}

const ModelFamily& find_family(const std::string& name) {
  for (const ModelFamily* f : model_families())
    if (f->name() == name) return *f;
  throw std::logic_error("no model family '" + name + "'");
}

ModelSpec ModelSpec::parse(const std::string& text) {
  for (const ModelFamily* f : model_families())
    if (std::optional<ModelSpec> s = f->parse(text)) return *s;
  std::string forms;
  for (const ModelFamily* f : model_families()) forms += (forms.empty() ? "" : "; ") + f->forms();
  throw ConfigError("unknown model '" + text + "' (valid: " + forms + ")");
}

std::string ModelSpec::str() const {
  if (family == "gpt")
    return "gpt:" + std::to_string(layers) + "x" + std::to_string(dim) + "x" +
           std::to_string(heads);
  return "mlp:" + std::to_string(layers) + "x" + std::to_string(dim) + (batchnorm ? "+bn" : "");
}

ModelLayout::ModelLayout(ModelSpec spec) : ModelLayout(std::move(spec), TensorSlice{}) {}

ModelLayout::ModelLayout(ModelSpec spec, TensorSlice slice)
    : spec_(std::move(spec)), slice_(slice) {
  if (slice_.size < 1 || slice_.rank < 0 || slice_.rank >= slice_.size)
    throw std::logic_error("ModelLayout: tp rank " + std::to_string(slice_.rank) + " of " +
                           std::to_string(slice_.size));
  family_ = &find_family(spec_.family);
  family_->build(*this);
}

ParamInfo ModelLayout::sliced(std::string name, std::vector<int64_t> shape, int split_dim,
                              int split_parts, bool pad, size_t offset, size_t full_offset) const {
  ParamInfo p;
  p.name = std::move(name);
  p.full_shape = shape;
  if (slice_.size > 1 && split_dim >= 0) {
    if (pad && split_parts == 1 && split_dim < static_cast<int>(shape.size())) {
      const int64_t T = slice_.size;
      p.split_pad = (T - shape[split_dim] % T) % T;
      shape[split_dim] += p.split_pad;
    }
    if (split_dim >= static_cast<int>(shape.size()) || split_parts < 1 ||
        shape[split_dim] % (static_cast<int64_t>(slice_.size) * split_parts) != 0)
      throw std::logic_error("ModelLayout: " + p.name + " cannot be cut into " +
                             std::to_string(slice_.size) + " slices on dimension " +
                             std::to_string(split_dim));
    shape[split_dim] /= slice_.size;
    p.split_dim = split_dim;
    p.split_parts = split_parts;
  }
  p.shape = std::move(shape);
  p.numel = 1;
  for (int64_t d : p.shape) p.numel *= static_cast<size_t>(d);
  p.offset = offset;
  p.full_offset = full_offset;
  return p;
}

void for_each_slice_run(const ModelLayout& slice,
                        const std::function<void(size_t, size_t, size_t)>& fn) {
  const int r = slice.slice().rank;
  for (const auto* list : {&slice.params(), &slice.buffers()})
    for (const ParamInfo& p : *list) {
      if (p.split_dim < 0) {
        fn(p.offset, p.full_offset, p.numel);
        continue;
      }
      size_t outer = static_cast<size_t>(p.split_parts), inner = 1;
      for (int d = 0; d < p.split_dim; ++d) outer *= static_cast<size_t>(p.shape[d]);
      for (size_t d = p.split_dim + 1; d < p.shape.size(); ++d)
        inner *= static_cast<size_t>(p.shape[d]);
      // This slice's run of one part: its share of the split dimension, less
      // any padding (a padded part's last slices hold fewer real entries).
      const int64_t rows = p.shape[p.split_dim] / p.split_parts;
      const int64_t full_rows = p.full_shape[p.split_dim] / p.split_parts, begin = r * rows;
      const int64_t real = std::clamp<int64_t>(full_rows - begin, 0, rows);
      if (real == 0) continue;
      for (size_t o = 0; o < outer; ++o)
        fn(p.offset + o * static_cast<size_t>(rows) * inner,
           p.full_offset +
               (o * static_cast<size_t>(full_rows) + static_cast<size_t>(begin)) * inner,
           static_cast<size_t>(real) * inner);
    }
}

size_t ModelLayout::unique_total() const {
  size_t n = total_;
  for (const ParamInfo& p : params_)
    if (p.tied_to >= 0) n -= p.numel;
  return n;
}

bool ModelLayout::has_tied() const {
  for (const ParamInfo& p : params_)
    if (p.tied_to >= 0) return true;
  return false;
}

size_t ModelLayout::act_numel(int boundary) const {
  size_t n = 1;
  for (int64_t d : act_shape_[boundary]) n *= static_cast<size_t>(d);
  return n;
}

void ModelLayout::begin_layer(std::string name, std::string kind) {
  layers_.push_back({std::move(name), std::move(kind), static_cast<int>(params_.size()), 0});
  layer_offset_.push_back(total_);
}

void ModelLayout::add_param(std::string name, std::vector<int64_t> shape, int tied_to,
                            int split_dim, int split_parts, bool pad) {
  ParamInfo p =
      sliced(std::move(name), std::move(shape), split_dim, split_parts, pad, total_, full_total_);
  p.layer = num_layers() - 1;
  p.tied_to = tied_to;
  ++layers_.back().param_count;
  total_ += p.numel;
  size_t full = 1;
  for (int64_t d : p.full_shape) full *= static_cast<size_t>(d);
  full_total_ += full;
  params_.push_back(std::move(p));
}

void ModelLayout::end_params() {
  layer_offset_.push_back(total_);
  state_total_ = total_;  // buffers follow every parameter: the parameters stay one range
  full_state_total_ = full_total_;
}

void ModelLayout::begin_layer_buffers(int layer) {
  while (static_cast<int>(first_buffer_.size()) <= layer) {
    first_buffer_.push_back(static_cast<int>(buffers_.size()));
    buffer_offset_.push_back(state_total_);
  }
}

void ModelLayout::add_buffer(std::string name, std::vector<int64_t> shape, bool int64,
                             int split_dim) {
  ParamInfo b = sliced(std::move(name), std::move(shape), split_dim, 1, false, state_total_,
                       full_state_total_);
  b.layer = static_cast<int>(first_buffer_.size()) - 1;
  b.int64 = int64;
  state_total_ += b.numel;
  size_t full = 1;
  for (int64_t d : b.full_shape) full *= static_cast<size_t>(d);
  full_state_total_ += full;
  buffers_.push_back(std::move(b));
}

void ModelLayout::end_buffers() {
  begin_layer_buffers(num_layers());  // every layer, plus one past the end
}

void ModelLayout::set_activations(std::vector<std::vector<int64_t>> per_boundary, bool input_tokens,
                                  size_t target_numel) {
  if (per_boundary.size() != layers_.size() + 1)
    throw std::logic_error("ModelLayout: one activation shape per boundary");
  act_shape_ = std::move(per_boundary);
  input_tokens_ = input_tokens;
  target_numel_ = target_numel;
}

std::vector<float> init_params(const ModelLayout& layout, uint64_t seed) {
  return layout.family().init(layout, seed);
}

ModelSpec resolve_model(const RunConfig& cfg) {
  ModelSpec spec = ModelSpec::parse(cfg.model);
  return find_family(spec.family).resolve(spec, cfg);
}

ModelLayout make_layout(const RunConfig& cfg) {
  return ModelLayout(resolve_model(cfg));
}

// ---------------------------------------------------------------------------
// model_family.h

std::string LayerCall::name(int layer, const std::string& what) const {
  std::string s = "layers." + std::to_string(layer) + "." + what;
  if (mb >= 0) s += "[mb " + std::to_string(mb) + "]";
  return s;
}

void LayerKeep::drop_saved() {
  for (size_t i = t.size(); i-- > 0;)
    if (static_cast<int>(i) != out) t[i].reset();
}

std::vector<const void*> layer_param_ptrs(const ModelLayout& m, int layer, const void* base,
                                          DType dt) {
  std::vector<const void*> v;
  const size_t begin = m.layer_begin(layer);
  for (int i = 0; i < m.param_count(layer); ++i) {
    const ParamInfo& p = m.params()[m.first_param(layer) + i];
    v.push_back(static_cast<const char*>(base) + (p.offset - begin) * dtype_size(dt));
  }
  return v;
}

std::vector<void*> layer_param_ptrs(const ModelLayout& m, int layer, void* base, DType dt) {
  std::vector<void*> v;
  for (const void* p : layer_param_ptrs(m, layer, static_cast<const void*>(base), dt))
    v.push_back(const_cast<void*>(p));
  return v;
}

void sum_tied_grads(const ModelLayout& m, DeviceBackend& dev, DType dt,
                    const std::function<void*(int param)>& grad) {
  for (int i = 0; i < static_cast<int>(m.params().size()); ++i) {
    const ParamInfo& p = m.params()[i];
    if (p.tied_to < 0) continue;
    void* copy = grad(i);
    void* home = grad(p.tied_to);
    if (!copy || !home) continue;
    dev.add(home, copy, dt, p.numel);  // what PyTorch's shared .grad accumulates
    dev.copy(copy, home, p.numel * dtype_size(dt), CopyKind::device_to_device);
  }
}

}  // namespace shardlab
