// Under tensor parallelism: where a rank's slice of each layer lies in the
// whole layer, so the cluster view draws a column-parallel weight as one block
// and a row-parallel one as a stripe per row — where its values really are.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/model/model.h"

namespace shardlab::gui {

// Parts of a whole layer, as fractions [begin, end) of it, in order.
using LayerParts = std::vector<std::pair<double, double>>;

class SliceMap {
 public:
  SliceMap() = default;  // no tensor parallelism: maps nothing
  explicit SliceMap(const ModelLayout& slice);

  bool empty() const { return layers_.empty(); }
  // Values [begin, end) of the slice's layer `layer` (fractions of the slice's
  // layer, as a flat group's shard names them) → where they lie in the whole
  // layer, touching parts merged; {} for a layer it does not know.
  LayerParts layer_part(int layer, double begin, double end) const;
  // A whole named parameter of the slice ("transformer.h.0.attn.c_attn.weight",
  // its ".grad" or ".exp_avg") → where its values lie in the whole layer, and
  // in `share` the part of the full tensor the slice holds (1/T split, 1
  // replicated); {} when no parameter has that name.
  LayerParts param_part(std::string_view base, int layer, double* share) const;

 private:
  struct Run {
    size_t at, full_at, n;  // in the layer: slice values [at, at + n) are full [full_at, ...)
  };
  struct Layer {
    size_t slice_len = 0, full_len = 0;
    std::vector<Run> runs;  // by `at`
  };
  struct Param {
    std::string name;
    int layer = 0;
    size_t at = 0, numel = 0, full_numel = 0;  // `at`: in the slice's layer
  };
  LayerParts place(int layer, size_t lo, size_t hi) const;
  std::vector<Layer> layers_;
  std::vector<Param> params_;
};

}  // namespace shardlab::gui
