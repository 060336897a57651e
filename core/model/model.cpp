// The layer table (model.h) and the model family registry (model_family.h).
#include "core/model/model.h"

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

ModelLayout::ModelLayout(ModelSpec spec) : spec_(std::move(spec)) {
  family_ = &find_family(spec_.family);
  family_->build(*this);
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

void ModelLayout::add_param(std::string name, std::vector<int64_t> shape, int tied_to) {
  size_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<size_t>(d);
  const int layer = num_layers() - 1;
  params_.push_back({std::move(name), std::move(shape), total_, numel, layer, false, tied_to});
  ++layers_.back().param_count;
  total_ += numel;
}

void ModelLayout::end_params() {
  layer_offset_.push_back(total_);
  state_total_ = total_;  // buffers follow every parameter: the parameters stay one range
}

void ModelLayout::begin_layer_buffers(int layer) {
  while (static_cast<int>(first_buffer_.size()) <= layer) {
    first_buffer_.push_back(static_cast<int>(buffers_.size()));
    buffer_offset_.push_back(state_total_);
  }
}

void ModelLayout::add_buffer(std::string name, std::vector<int64_t> shape, bool int64) {
  size_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<size_t>(d);
  const int layer = static_cast<int>(first_buffer_.size()) - 1;
  buffers_.push_back({std::move(name), std::move(shape), state_total_, numel, layer, int64, -1});
  state_total_ += numel;
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
