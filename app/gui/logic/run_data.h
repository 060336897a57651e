// The UI's own copy of one run: per rank, spans sorted per lane and allocation
// events, plus what every view derives from them (residency, memory series,
// flows, step starts, event times). Filled incrementally from the recorders once
// per frame; drawing code only reads it. Times are ns since the run's start.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "app/gui/logic/buffer_name.h"
#include "app/gui/logic/slice_map.h"
#include "core/config.h"
#include "core/mesh.h"
#include "core/record/memory_timeline.h"
#include "core/record/recorder.h"
#include "core/run/runner.h"

namespace shardlab::gui {

// One lane's spans, sorted by t_begin. max_end[i] is the latest end among
// spans[0..i]: monotonic, so the first span that can still be visible at time t
// is found by binary search even when spans overlap.
struct LaneData {
  std::vector<Span> spans;
  std::vector<int64_t> max_end;
  void insert(std::vector<Span> fresh);  // keeps both invariants
};

struct RankData {
  std::array<LaneData, kNumLanes> lanes;  // indexed by Lane
  // On a mesh of two or more axes: the comm lane's spans again, split by the
  // axis whose group carried them (as RunData::comm_axes); else empty.
  std::vector<LaneData> axis_lanes;
  std::vector<AllocEvent> allocs;  // in record order
  std::vector<Residency> residency;
  std::vector<CategorySample> device_series, host_series;
  // The offload file's bytes (--offload nvme:DIR): not memory, named beside it.
  std::vector<CategorySample> disk_series;
  size_t spans_read = 0, allocs_read = 0;  // how much of the recorder we hold
  int64_t t_last_span_end = 0;             // this rank's latest span end
  const LaneData& lane(Lane l) const { return lanes[static_cast<int>(l)]; }
};

// A send and its matching recv (same flow_id).
struct Flow {
  uint64_t id = 0;
  int from_rank = -1, to_rank = -1;
  int64_t t_send = 0, t_recv = 0;  // send's begin, recv's end
  int64_t bytes = 0;
  int micro_batch = -1, layer = -1;  // the send's: what a pipeline message carries
  int step = -1;                     // the send's; -1 outside the steps (the export)
};

struct RunData {
  RunConfig cfg;
  int world = 0;
  // The mesh axes that get a comm lane each (outermost first), on a mesh of
  // two or more axes; empty: one comm lane. group_axis: a span's group id ->
  // its index in comm_axes (-1: the world's, drawn on the first).
  std::vector<MeshAxis> comm_axes;
  std::vector<int> group_axis;
  // On a mesh: each group's ranks (global, by coordinate) and axis, by group
  // id (core/mesh.h); a collective's span names its group. Empty: the world.
  std::vector<std::vector<int>> group_ranks;
  std::vector<MeshAxis> group_axes;
  // On a mesh of two or more axes: each rank's coordinates ("pp1 dp0 tp1"),
  // and how many ranks share the outermost axis's coordinate (a row of the
  // cluster view's grid: a pipeline stage in Megatron's order); else 0.
  std::vector<std::string> rank_coords;
  int mesh_row_ranks = 0;
  // Tensor parallelism: each rank's slice map (where its slice of each layer
  // lies in the whole layer), by rank; empty without a tp axis.
  std::vector<SliceMap> rank_slices;
  int num_layers = 0;
  // The model's parameter names and layers (buffer_name.h), for names without "layers.N".
  ParamLayers param_layers;
  // Each table layer's kind ("embedding", "block", "head", "linear"), for row captions.
  std::vector<std::string> layer_kinds;
  int64_t t0_ns = 0;          // the run's clock zero (absolute), subtracted on ingest
  int64_t t_end = 0;          // the latest time seen (including the frees at teardown)
  int64_t t_first_span = -1;  // the earliest span begin (after the ranks connected), -1 = none
  std::vector<RankData> ranks;
  std::vector<Flow> flows;
  std::vector<int64_t> step_begin;   // per step: earliest span begin over ranks, -1 = none yet
  std::vector<int64_t> event_times;  // sorted, unique: span begins/ends and allocations
  std::array<bool, kNumSpanKinds> kinds_seen{};
  bool has_host_memory = false;
  bool has_disk = false;  // some rank has disk spans (--offload nvme:DIR): a disk lane
  uint64_t version = 0;   // bumps on every change, for caches keyed on it

  size_t span_count() const;
  // Where a live playhead rests: the earliest of the ranks' last span ends, so
  // that no rank has freed its buffers at teardown yet.
  int64_t t_live() const;
  // The interesting part of the run: from the first span (connecting the ranks
  // takes ~10 ms and records nothing) to the end.
  double view_begin() const { return t_first_span < 0 ? 0.0 : static_cast<double>(t_first_span); }
  // Where the training steps begin (after setup: connecting, the first broadcast,
  // which can take longer than the steps themselves); view_begin() before step 0.
  double steps_begin() const {
    return !step_begin.empty() && step_begin[0] >= 0 ? static_cast<double>(step_begin[0])
                                                     : view_begin();
  }
  int step_at(int64_t t) const;  // the step whose start is the latest <= t, -1 before step 0

  // Internal: halves of flows whose partner has not arrived yet.
  std::unordered_map<uint64_t, Flow> pending_flows;
};

void reset_run_data(RunData& d, const RunConfig& cfg, int world, int64_t t0_ns);

// Adds spans and allocation events of one rank (times already relative to t0)
// and updates everything derived. The bulk path for tests and the benchmark.
void append(RunData& d, int rank, std::vector<Span> spans, std::vector<AllocEvent> allocs);

// Pulls what the recorders gained since the last call. Returns true on change.
bool ingest(RunData& d, const std::vector<std::shared_ptr<Recorder>>& recorders);

// Replaces `d` with a whole finished run (a compare entry, an opened recording).
void ingest_result(RunData& d, const RunResult& r);

// The lanes each rank's row shows: compute, then one comm lane, or on a mesh
// of two or more axes one per axis (RunData::comm_axes).
// With offload to NVMe, a disk lane last.
inline int display_lanes(const RunData& d) {
  return 1 + std::max<int>(1, static_cast<int>(d.comm_axes.size())) + (d.has_disk ? 1 : 0);
}
// Whether row lane `l` is the disk lane.
inline bool is_disk_lane(const RunData& d, int l) {
  return d.has_disk && l == display_lanes(d) - 1;
}
// The ranks of group `group` (a collective's participants): the mesh group's,
// or every rank for group 0 and runs without a mesh.
std::vector<int> group_members(const RunData& d, int group);
// "tp", "pp" or "dp" for a mesh axis group of a run with two or more axes;
// nullptr for the world and one-axis runs (where "the group" says nothing new).
const char* group_axis_name(const RunData& d, int group);
// Row lane `l` of `rank`: 0 the compute lane, then the comm lane or its axes'.
const LaneData& display_lane(const RunData& d, int rank, int l);
// Where span `s` of an axis lane sits in the rank's comm lane (what waits are
// indexed by); -1 when it is not there.
int64_t comm_index_of(const RankData& r, const Span& s);

}  // namespace shardlab::gui
