// Memory predicted by running the real strategy on meta devices (core/device/meta_backend.h)
// under the real Allocator and a meta communicator: the prediction is the
// implementation, not a hand-kept twin of it (core/predict/memory_estimate.h's plans).
#pragma once
#include <vector>

#include "core/comm/comm.h"
#include "core/config.h"
#include "core/device/memory.h"
#include "core/device/meta_backend.h"
#include "core/mesh.h"
#include "core/record/recorder.h"

namespace shardlab {

struct MetaRankMemory {
  int rank = 0;
  // The allocator's stats, per pool (device/host): peak in use, each category's
  // own peak, peak reserved. The Allocator keeps no per-category split at the
  // moment of the total's peak, so none is reported.
  MemStats at_report;  // after the steps, as RankReport::memory holds a real run's
  MemStats at_end;     // after export_params too (the run's last allocations)
  CommStats comm;      // what the meta communicator counted, setup and export included
  // Host memory beside the allocator at its peak (an export's flat vector:
  // Allocator::note_outside).
  int64_t outside_peak = 0;
  // What a recorder gets in the first step (MetaOptions::count_records; else 0):
  // the per-step growth of a real run's records.
  Recorder::Counts records_per_step;
  // MetaOptions::keep_ops: the rank's ordered operation list, setup to export.
  std::vector<MetaOp> ops;
  // As RankReport::bytes_sent_per_step: the steps' bytes (dp's device copies too)
  // over the steps run.
  double bytes_sent_per_step = 0;
  SentByAxis sent_by_axis_per_step{};  // of those, each mesh axis's group's (by MeshAxis)
};

struct MetaMemory {
  std::vector<MetaRankMemory> ranks;
  DeviceKind device = DeviceKind::cpu;  // what the meta devices stood for
  int steps = 0;  // steps run: min(cfg.steps, 2, or the strategy's filling steps + 1)
};

struct MetaOptions {
  // Give each rank a recorder that counts what it would record (Recorder::CountOnly).
  bool count_records = false;
  // Keep each rank's operation list (MetaRankMemory::ops): compute spans with
  // their FLOPs, communication ops where issued and waited for.
  bool keep_ops = false;
};

// Runs cfg's strategy on every rank (threads, as the embedded runner does):
// setup from a state vector that holds no values (MetaParams: no weight is
// made), min(cfg.steps, 2) steps, then the final export. Throws ConfigError for what validate()
// refuses, and rethrows the first rank's failure.
MetaMemory predict_memory_meta(const RunConfig& cfg, const MetaOptions& options = {});

}  // namespace shardlab
