// Flat parameters cut into equal, padded shards (ZeRO, FSDP), and the naming
// scheme every sharded buffer follows so the UI can tell who holds what.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/config.h"
#include "core/device/memory.h"
#include "core/model/model.h"
#include "core/model/param_source.h"

namespace shardlab {

// ---------------------------------------------------------------------------
// Buffer names
//
//   <tensor>[<form>]<.role>
//
//   tensor  layers.L.weight | layers.L.bias   one PyTorch parameter of layer L
//           layers.L.flat                     layer L's weight then bias, one flat buffer
//           layers.A-B.flat                   layers A..B (inclusive), each weight then bias,
//                                             in model order: one FSDP unit's flat parameter
//   form    (none)          full size, persistent, the same on every rank (ddp, zero1/2 params)
//           [shard r/N]     the 1/N slice owned by rank r of N (r counts from 0, like ranks);
//                           every shard has the same length, the last ones end in zero padding
//           [gathered]      the full parameters assembled by an all-gather, freed after use
//           [unreduced]     this rank's full-size gradient, alive only until reduce-scattered
//           [replica]       dp: a device's copy of device 0's tensor, made anew every step
//   role    (none) the parameters, .grad, .exp_avg, .exp_avg_sq (AdamW state)
//
// Examples: layers.3.flat[shard 1/4], layers.3.flat[shard 1/4].grad,
// layers.3.flat[shard 1/4].exp_avg, layers.3.flat[gathered], layers.2-3.flat[unreduced].grad,
// layers.0.weight[replica].
//
// Categories: params, grads and optimizer_state hold only the model states a
// rank owns for the whole run (what the ZeRO paper's formulas count). Full-size
// copies that exist for one layer's compute ([gathered], [unreduced]) and the
// device-side staging of offloaded shards are comm_buffers: they are the inputs
// and outputs of collectives and copies. With CPU offload a shard lives in the
// host pool and its staged device copy has the same name in the device pool
// (AllocEvent::pool tells them apart).
// ---------------------------------------------------------------------------

// "layers.3" or "layers.2-5" for layers [first, last).
std::string layers_name(int first, int last);
std::string shard_tag(int rank, int world);  // "[shard 1/4]"
inline constexpr const char* kGathered = "[gathered]";
inline constexpr const char* kUnreduced = "[unreduced]";
inline constexpr const char* kReplica = "[replica]";

// A buffer name taken apart; parse_buffer_name returns nullopt for names outside the scheme
// (activations, comm scratch, ...).
struct BufferName {
  int first_layer = 0;  // inclusive
  int last_layer = 0;   // inclusive
  std::string tensor;   // "weight", "bias" or "flat"
  enum class Form { full, shard, gathered, unreduced, replica } form = Form::full;
  int shard = -1;    // form == shard: the owning rank
  int shards = 0;    // form == shard: N
  std::string role;  // "", "grad", "exp_avg", "exp_avg_sq"
};
std::optional<BufferName> parse_buffer_name(const std::string& name);

// ---------------------------------------------------------------------------
// Shards
// ---------------------------------------------------------------------------

// `numel` values cut into `world` shards of ceil(numel / world) each. Every
// shard has the same length, so collectives need no per-rank counts; the
// values past numel are padding, zero in parameters, gradients and state.
struct ShardPlan {
  size_t numel = 0;
  int world = 1;
  size_t shard = 0;  // values per shard, padding included

  ShardPlan() = default;
  ShardPlan(size_t numel, int world);
  size_t padded() const { return shard * static_cast<size_t>(world); }
  size_t padding() const { return padded() - numel; }
  size_t begin(int rank) const { return shard * static_cast<size_t>(rank); }
  // Real (non-padding) values in rank's shard.
  size_t real(int rank) const;
  std::vector<size_t> counts() const { return std::vector<size_t>(world, shard); }
};

// Consecutive layers [first, last) flattened into one buffer: each layer's
// parameters in table order, then padding to a multiple of N.
// Layer-wise ZeRO uses one group per layer; FSDP one group per unit.
struct FlatGroup {
  int index = 0;  // position among the groups
  int first = 0, last = 0;
  size_t offset = 0;  // of the first value in the model's flat parameter vector
  ShardPlan plan;
  std::string name;  // "layers.3.flat" / "layers.2-3.flat"

  size_t numel() const { return plan.numel; }
  // Where layer l's parameters start inside the group's flat buffer (they
  // follow in table order: a layer's forward takes them from there).
  size_t layer_offset(const ModelLayout& layout, int layer) const;
  std::string shard_name(int rank) const { return name + shard_tag(rank, plan.world); }
};

// Groups of `layers_per_group` consecutive layers (the last group may be
// shorter), each with its shard plan for `world` ranks.
std::vector<FlatGroup> make_flat_groups(const ModelLayout& layout, int layers_per_group, int world);

// Values each rank holds beyond its exact 1/N share of the groups (Σ shard − Σ numel / N):
// what padding adds to every sharded model state.
double padding_per_rank(const std::vector<FlatGroup>& groups);

// Writes values [begin, begin + count) of the group's padded flat buffer, read
// from the model's state vector, into t (from element 0, in t's dtype and pool)
// on `dev`; padding is written as zeros. No host copy of the values is made, so
// a meta run (MetaParams) makes none at all.
void write_group_values(DeviceBackend& dev, Tensor& t, const FlatGroup& g,
                        const ParamSource& model_flat, size_t begin, size_t count);

// Every data-parallel rank takes batch / world rows (batch / dp on --mesh, with
// the mesh's checks: data_parallel_mesh.h): throws ConfigError unless that divides.
void require_batch_divisible(const RunConfig& cfg);

// Collective: all-gathers every group from this rank's fp32 shards (shards[g],
// device memory, or in the host pool when shards_on_host, staged to the device
// for the all-gather) and returns the model's flat parameters on rank 0 (host
// memory), {} on the other ranks.
std::vector<float> gather_model_params(Comm& comm, Allocator& alloc, size_t total,
                                       const std::vector<FlatGroup>& groups,
                                       const std::vector<const float*>& shards,
                                       bool shards_on_host);

}  // namespace shardlab
