// Where a tensor-parallel slice's values lie in each whole layer (slice_map.h).
#include "app/gui/logic/slice_map.h"

#include <algorithm>

namespace shardlab::gui {

SliceMap::SliceMap(const ModelLayout& slice) {
  if (!slice.tensor_parallel()) return;
  const ModelLayout whole(slice.spec());
  const int L = slice.num_layers();
  layers_.resize(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    layers_[l].slice_len = slice.layer_begin(l + 1) - slice.layer_begin(l);
    layers_[l].full_len = whole.layer_begin(l + 1) - whole.layer_begin(l);
  }
  // Each run of the state vector belongs to one tensor, so to one layer (the
  // buffers, after every parameter, to none drawn here).
  int l = 0;
  for_each_slice_run(slice, [&](size_t at, size_t full_at, size_t n) {
    if (at >= slice.total()) return;
    while (l + 1 < L && at >= slice.layer_begin(l + 1)) ++l;
    layers_[l].runs.push_back({at - slice.layer_begin(l), full_at - whole.layer_begin(l), n});
  });
  for (const ParamInfo& p : slice.params()) {
    size_t full = 1;
    for (int64_t d : p.full_shape) full *= static_cast<size_t>(d);
    params_.push_back({p.name, p.layer, p.offset - slice.layer_begin(p.layer), p.numel, full});
  }
}

LayerParts SliceMap::place(int layer, size_t lo, size_t hi) const {
  LayerParts out;
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) return out;
  const Layer& L = layers_[layer];
  if (L.full_len == 0) return out;
  const double full = static_cast<double>(L.full_len);
  for (const Run& r : L.runs) {
    const size_t a = std::max(lo, r.at), b = std::min(hi, r.at + r.n);
    if (a >= b) continue;
    const double begin = static_cast<double>(r.full_at + (a - r.at)) / full;
    const double end = static_cast<double>(r.full_at + (b - r.at)) / full;
    out.emplace_back(begin, end);
  }
  std::sort(out.begin(), out.end());
  LayerParts merged;
  for (const auto& p : out)
    if (!merged.empty() && p.first <= merged.back().second + 1e-12)
      merged.back().second = std::max(merged.back().second, p.second);
    else
      merged.push_back(p);
  return merged;
}

LayerParts SliceMap::layer_part(int layer, double begin, double end) const {
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) return {};
  const double n = static_cast<double>(layers_[layer].slice_len);
  // A shard's end past the layer is its padding: nothing of the model.
  const size_t lo = static_cast<size_t>(std::clamp(begin, 0.0, 1.0) * n + 0.5);
  const size_t hi = static_cast<size_t>(std::clamp(end, 0.0, 1.0) * n + 0.5);
  return place(layer, lo, hi);
}

LayerParts SliceMap::param_part(std::string_view base, int layer, double* share) const {
  const Param* best = nullptr;
  for (const Param& p : params_) {
    if (p.layer != layer || base.substr(0, p.name.size()) != p.name) continue;
    if (base.size() > p.name.size() && base[p.name.size()] != '.') continue;
    if (!best || p.name.size() > best->name.size()) best = &p;
  }
  if (!best) return {};
  if (share) *share = best->full_numel ? static_cast<double>(best->numel) / best->full_numel : 1.0;
  return place(layer, best->at, best->at + best->numel);
}

}  // namespace shardlab::gui
