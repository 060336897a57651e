// --offload nvme:DIR's disk traffic (ZeRO-Infinity's optimizer state in a
// file per rank) by formula, beside what a recording's disk spans measured.
#pragma once
#include <optional>
#include <vector>

#include "core/config.h"
#include "core/record/recorder.h"

namespace shardlab {

// Bytes a rank's offload file holds, and so reads and writes once each per
// optimizer step: the optimizer state of the rank's shard of every flat group
// (AdamW's two moments, and the fp32 master in mixed precision: 8 or 12 B a
// parameter; SGD in fp32 keeps none), shards padded to divide by the world.
// nullopt without --offload nvme:DIR, and on a mesh (not modelled here).
std::optional<double> predict_disk_state_bytes(const RunConfig& cfg, int rank);

// Bytes of `kind` (disk_read or disk_write) spans within the steps, over
// `steps` (at least 1).
double disk_bytes_per_step(const std::vector<Span>& spans, int steps, SpanKind kind);

}  // namespace shardlab
