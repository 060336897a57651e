// --offload nvme:DIR's disk traffic (ZeRO-Infinity's model states in a file
// per rank) by formula, beside what a recording's disk spans measured
// (bytes_per_step of disk_read / disk_write spans, core/record/recorder.h).
#pragma once
#include <optional>

#include "core/config.h"

namespace shardlab {

// One rank's offload file, by formula.
struct DiskTraffic {
  double held = 0;     // bytes the file holds: the rank's disk pool
  double read = 0;     // bytes read from it per optimizer step
  double written = 0;  // and written
};

// What a rank's offload file holds and moves per step. The optimizer state
// of the rank's shard of every flat group (AdamW's two moments, and the fp32
// master in mixed precision: 8 or 12 B a parameter; SGD in fp32 keeps none)
// is read and written once a step. With --offload-params the parameter
// shards (4 B, or 2 in mixed precision) are there too: read before each
// all-gather (twice a step, once with --no-reshard), read for the update in
// fp32 (in mixed precision it is rounded from the master, not read) and
// written by it. Shards are padded to divide by the world. nullopt without
// --offload nvme:DIR, and on a mesh (not modelled here).
std::optional<DiskTraffic> predict_disk_traffic(const RunConfig& cfg, int rank);

}  // namespace shardlab
