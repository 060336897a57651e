// A data-parallel strategy (ddp, zero1, zero2, zero3, fsdp) on a device mesh
// of dp × tp: tensor parallelism inside, the strategy over the dp axis — the
// "2D" layout of FSDP2 with DTensor's TP, or ZeRO with Megatron's TP. The
// strategy runs unchanged on a view of the rank: its world is the dp group,
// its model this rank's tp slice, its layers talking to the tp group.
#pragma once
#include <memory>

#include "core/comm/comm.h"
#include "core/parallel/strategy.h"

namespace shardlab {

// The checks a data-parallel strategy adds on --mesh (each throws ConfigError
// with one line): the mesh parses and has --world ranks; no pp axis (a
// data-parallel strategy has no stages); a dp axis of 2 or more; tp fits the
// model; --batch splits over dp; --sequence-parallel only with tp. Nothing to
// check without --mesh.
void validate_data_parallel_mesh(const RunConfig& cfg);

// The model one rank of a data-parallel strategy holds before any ZeRO
// sharding: the whole model, or on a mesh with tp ≥ 2 its tp slice (every
// slice has the same size; this is slice 0). Assumes cfg validated.
ModelLayout data_parallel_rank_layout(const RunConfig& cfg);

// The strategy object one rank runs: `info`'s own, or, for a data-parallel
// strategy on a mesh with tp ≥ 2, the same wrapped so that it sees the dp
// group as its world and its tp slice as its model.
std::unique_ptr<Strategy> make_rank_strategy(const StrategyInfo& info, const RunConfig& cfg);

// Collective over a tp group: every rank sends its slice's flat state vector
// `mine` (`slice`'s state_total values; null on a meta device) to the group's
// first rank, which returns the whole model's state vector, each slice's
// values where for_each_slice_run puts them ({} elsewhere, and on a meta device).
std::vector<float> gather_tensor_slices(Comm& tp, Allocator& alloc, const ModelLayout& slice,
                                        const float* mine);

}  // namespace shardlab
