// Chrome Trace Event JSON export (opens in Perfetto and chrome://tracing):
// one process per rank, compute and comm tracks, memory counters, send->recv flows.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/recorder.h"

namespace shardlab {

// `ranks[i]` is rank i's snapshot; times are written in microseconds since `t0_ns`.
// `metadata` (run settings) goes into the top-level "metadata" object.
nlohmann::json trace_to_json(const std::vector<Recorder::Snapshot>& ranks, int64_t t0_ns,
                             const nlohmann::json& metadata = nlohmann::json::object());

// Writes through core/atomic_file (the old file stays whole until the new one is
// complete). Throws std::runtime_error("cannot write trace to '<path>': <reason>").
void write_trace(const std::string& path, const std::vector<Recorder::Snapshot>& ranks,
                 int64_t t0_ns, const nlohmann::json& metadata = nlohmann::json::object());

}  // namespace shardlab
