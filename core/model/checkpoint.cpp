// Checkpoint and data files on top of the safetensors reader/writer.
#include "core/model/checkpoint.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "core/config.h"
#include "core/io/atomic_file.h"
#include "core/io/safetensors.h"

namespace shardlab {

namespace {
std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

// What a checkpoint holds, as PyTorch's state_dict: parameters, then buffers.
// A tied parameter is stored once, under its home's name (safetensors keeps
// shared tensors once; nanoGPT's lm_head.weight is transformer.wte.weight).
std::vector<const ParamInfo*> state_entries(const ModelLayout& layout) {
  std::vector<const ParamInfo*> v;
  for (const ParamInfo& p : layout.params())
    if (p.tied_to < 0) v.push_back(&p);
  for (const ParamInfo& b : layout.buffers()) v.push_back(&b);
  return v;
}
}  // namespace

void save_params(const std::string& path, const ModelLayout& layout,
                 const std::vector<float>& flat) {
  if (flat.size() != layout.state_total())
    throw std::logic_error("save_params: " + std::to_string(flat.size()) + " values for " +
                           layout.spec().str() + ", which has " +
                           std::to_string(layout.state_total()));
  std::vector<NamedTensor> tensors;
  for (const ParamInfo* p : state_entries(layout))
    tensors.push_back(
        {p->name, p->shape,
         std::vector<float>(flat.begin() + p->offset, flat.begin() + p->offset + p->numel),
         p->int64});
  save_safetensors(path, tensors, checkpoint_metadata(layout.spec()));
}

std::vector<float> load_params(const std::string& path, const ModelLayout& layout,
                               bool allow_nonfinite) {
  // Names and shapes are checked against the model from the header, before the
  // data is read: a file of the wrong model costs its header, whatever its size.
  const std::vector<const ParamInfo*> entries = state_entries(layout);
  auto check = [&](const std::vector<TensorHeader>& header,
                   const std::map<std::string, std::string>&) {
    std::map<std::string, const TensorHeader*> by_name;
    for (const TensorHeader& t : header) by_name[t.name] = &t;
    for (const ParamInfo* p : entries) {
      auto it = by_name.find(p->name);
      if (it == by_name.end())
        throw ConfigError("--init-from '" + path + "' has no tensor '" + p->name + "' (model " +
                          layout.spec().str() + " needs " + p->name + " " + shape_str(p->shape) +
                          ")");
      if (it->second->shape != p->shape)
        throw ConfigError("--init-from '" + path + "': tensor '" + p->name + "' has shape " +
                          shape_str(it->second->shape) + ", model " + layout.spec().str() +
                          " needs " + shape_str(p->shape));
      by_name.erase(it);
    }
    if (!by_name.empty())
      throw ConfigError("--init-from '" + path + "' has tensor '" + by_name.begin()->first +
                        "' that model " + layout.spec().str() + " does not have");
  };
  std::vector<NamedTensor> tensors;
  try {
    std::map<std::string, std::string> metadata;
    tensors = load_safetensors(path, metadata, check);
  } catch (const SafetensorsError& e) {
    throw ConfigError(std::string("--init-from: ") + e.what());
  }
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& t : tensors) by_name[t.name] = &t;
  std::vector<float> flat(layout.state_total());
  for (const ParamInfo* p : entries)
    std::copy(by_name.at(p->name)->data.begin(), by_name.at(p->name)->data.end(),
              flat.begin() + static_cast<std::ptrdiff_t>(p->offset));
  for (const ParamInfo& p : layout.params())  // a tied copy starts equal to its home
    if (p.tied_to >= 0)
      std::copy_n(flat.begin() + layout.params()[p.tied_to].offset, p.numel,
                  flat.begin() + p.offset);
  // Here, not in the reader: a safetensors file may rightly hold NaN or Inf (a
  // mask, a probe), but weights that do would train to a NaN loss.
  if (!allow_nonfinite)
    if (const std::string bad = find_nonfinite(tensors); !bad.empty())
      throw ConfigError("--init-from '" + path + "': " + bad +
                        "; training from it would give NaN (valid: finite weights, or "
                        "--allow-nonfinite to load them anyway)");
  return flat;
}

std::map<std::string, std::string> checkpoint_metadata(const ModelSpec& spec) {
  std::map<std::string, std::string> m{{"model", spec.str()}, {"format", "pt"}};
  if (spec.seq > 0) m["seq"] = std::to_string(spec.seq);
  if (!spec.vocabulary.empty()) m["vocabulary"] = spec.vocabulary;
  return m;
}

void save_data(const std::string& path, const ModelLayout& layout, const Dataset& data, int steps,
               int batch) {
  const auto in = static_cast<int64_t>(layout.act_numel(0));
  const auto out = static_cast<int64_t>(layout.target_numel());
  // Token ids are stored as I64, PyTorch's dtype for indices.
  NamedTensor x{"x", {steps, batch, in}, {}, data.tokens()};
  NamedTensor y{"y", {steps, batch, out}, {}, data.tokens()};
  x.data.resize(static_cast<size_t>(steps) * batch * in);
  y.data.resize(static_cast<size_t>(steps) * batch * out);
  std::vector<int32_t> xi, yi;
  for (int s = 0; s < steps; ++s) {
    float* xs = x.data.data() + static_cast<size_t>(s) * batch * in;
    float* ys = y.data.data() + static_cast<size_t>(s) * batch * out;
    if (!data.tokens()) {
      data.rows(s, 0, batch, xs, ys);
      continue;
    }
    xi.resize(static_cast<size_t>(batch) * in);
    yi.resize(static_cast<size_t>(batch) * out);
    data.rows(s, 0, batch, xi.data(), yi.data());
    std::copy(xi.begin(), xi.end(), xs);
    std::copy(yi.begin(), yi.end(), ys);
  }
  save_safetensors(path, {x, y}, {{"generator", data.describe()}});
}

void check_writable(const std::string& path, const std::string& what) {
  // Nothing is created, truncated or removed here: a device such as /dev/null, a
  // FIFO or a directory is refused, not opened (the writer would refuse it too,
  // but only after the whole run).
  std::string reason;
  if (!check_file_writable(path, &reason))
    throw ConfigError("cannot write " + what + " '" + path + "': " + reason);
}

}  // namespace shardlab
