// Reading what a named buffer is from its allocation name alone:
// "layers.3.weight", "layers.3.flat[shard 1/4].grad", "layers.2-3.flat[gathered]",
// "layers.2.output[mb 1]" (the scheme is described in core/parallel/sharding.h).
// Strategies choose the names; the GUI never asks them.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardlab::gui {

// full: persistent, whole; shard: a rank's 1/N slice; the rest are full-size
// copies that live only around one layer's compute: gathered parameters,
// unreduced gradients (before reduce-scatter), dp's per-step replicas.
enum class HoldKind { full, shard, gathered, unreduced, replica };
inline bool is_temporary(HoldKind k) {
  return k == HoldKind::gathered || k == HoldKind::unreduced || k == HoldKind::replica;
}
const char* to_string(HoldKind k);

// Which model state a buffer is, from its suffix: ".grad", ".exp_avg"/".exp_avg_sq".
enum class Role { param, grad, optimizer };

struct BufferName {
  int layer = -1;       // from "layers.N" anywhere in the name; -1 when none
  int layer_last = -1;  // "layers.2-3" names a unit of layers 2..3; else == layer
  HoldKind kind = HoldKind::full;
  int shard_index = 0;  // 0-based; -1 when the name's index made no sense
  int shard_count = 1;
  int micro_batch = -1;  // "[mb 2]"
  Role role = Role::param;
  std::string base;  // the name without its [...] groups

  // The part of the layer this buffer covers, as a fraction of it.
  double fraction_begin() const;
  double fraction_end() const;
};

// Never throws: anything unrecognised leaves the defaults (a full buffer of no layer).
// Shard indices are read as 0-based ("shard 0/4" .. "shard 3/4"); "shard 4/4" can
// only be 1-based and is read as the last shard.
BufferName parse_buffer_name(std::string_view name);

// A model's parameter names and the table layer of each ("transformer.h.0.ln_1.weight"
// is layer 1 of a gpt), for names that do not say "layers.N": gpt's tensors keep
// PyTorch's names wherever a strategy holds them whole (single, ddp, dp, pipelines).
using ParamLayers = std::vector<std::pair<std::string, int>>;
// As above; when the name has no "layers.N", the layer of the parameter whose
// name the base starts with, followed by its end or a '.' (".grad", ".exp_avg").
BufferName parse_buffer_name(std::string_view name, const ParamLayers& params);

}  // namespace shardlab::gui
