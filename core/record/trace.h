// Chrome Trace Event JSON export (opens in Perfetto and chrome://tracing):
// one process per rank, compute and comm tracks, memory counters, send->recv flows.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/record/recorder.h"

namespace shardlab {

// `ranks[i]` is rank i's snapshot; times are written in microseconds since `t0_ns`.
// `metadata` (run settings) goes into the top-level "metadata" object. With
// `only_rank` >= 0 the trace holds that rank alone: one process of a run whose
// ranks are processes writes its own (merge_traces joins them).
nlohmann::json trace_to_json(const std::vector<Recorder::Snapshot>& ranks, int64_t t0_ns,
                             const nlohmann::json& metadata = nlohmann::json::object(),
                             int only_rank = -1);

// One trace from the traces the processes of one run wrote, a process per
// rank: events concatenated (their times already share rank 0's clock: each
// process's t0 is rank 0's, read through the offset measured at rendezvous),
// send->recv arrows rebuilt across files from the spans' flow ids, metadata
// from the file holding rank 0 (else the first) with "ranks" listing each file's. Throws
// std::runtime_error naming the file for a file that is not a Shardlab trace, two files with the
// same rank, files of different world sizes, or naming the rank no file holds (every rank
// 0..world-1 must be there; the world from the metadata, else the highest rank given).
nlohmann::json merge_traces(const std::vector<nlohmann::json>& traces,
                            const std::vector<std::string>& names);

// Writes through core/atomic_file (the old file stays whole until the new one is
// complete). Throws std::runtime_error("cannot write trace to '<path>': <reason>").
void write_trace(const std::string& path, const std::vector<Recorder::Snapshot>& ranks,
                 int64_t t0_ns, const nlohmann::json& metadata = nlohmann::json::object(),
                 int only_rank = -1);
// Writes `trace` (already built) the same way.
void write_trace_json(const std::string& path, const nlohmann::json& trace);

}  // namespace shardlab
