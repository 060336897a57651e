// Recordings: a finished run saved whole (settings, placement, every span and
// allocation, memory, losses, step times, traffic, final weights, and where it
// ran), so it can be shown again anywhere without running it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/parallel/run_result.h"

namespace shardlab {

// Where and when a recording was made.
struct RecordingOrigin {
  std::string device;             // one line for the UI: "cpu (AMD EPYC 7B13)"
  std::string cpu;                // the CPU's model name; empty when unknown
  std::vector<std::string> gpus;  // the GPUs the run used, by name; empty on the CPU
  std::string date;               // UTC, ISO 8601: "2026-11-23T16:40:05Z"
  std::string shardlab;           // the program and recording format that wrote it
};

struct Recording {
  RunResult run;  // recorders re-created from the file, times as recorded
  RecordingOrigin origin;
  bool from_trace = false;  // read from a Chrome trace: no final weights, no buffer names
};

// The format version this build writes and reads.
inline constexpr int kRecordingVersion = 1;
// Larger files, recordings or traces, are refused before they are read.
inline constexpr int64_t kRecordingMaxBytes = int64_t{64} << 20;

// This machine, now, for a run that just finished here.
RecordingOrigin describe_origin(const RunResult& run);

// The file's content. Throws std::runtime_error when the run cannot be recorded
// (recording was off, or it would not load back).
nlohmann::json recording_to_json(const RunResult& run, const RecordingOrigin& origin);
// Checks everything (see recording_read.cpp); throws ConfigError "recording 'FILE': ..."
// (one line) on anything wrong. `file` only names the source in messages.
Recording recording_from_json(const nlohmann::json& j, const std::string& file);

// Fails early (ConfigError, one line) when `path` cannot take a recording: a
// directory, a FIFO or other non-regular file, a symbolic link, a missing or
// unwritable directory. Never opens `path`, so it never blocks.
void check_recording_path(const std::string& path);

// Writes atomically: a fresh temporary file beside `path` (created exclusively,
// so never through a link), synced, renamed over `path`, then the directory is
// synced. `path` itself must be absent or a regular file; a symbolic link there
// is refused, never followed or replaced. On failure the old file is untouched
// and the temporary removed. Throws ConfigError for a bad path, std::runtime_error
// for a failed write.
void save_recording(const std::string& path, const RunResult& run, const RecordingOrigin& origin);
void save_recording(const std::string& path, const RunResult& run);  // origin: this machine, now

// What a trace's metadata carries as "run" (see core/record/trace.h): the recording's
// content without spans, allocations and final weights (the trace's events hold
// the first two); `only_rank` >= 0 keeps that rank's report alone, as one
// process of a multi-process run writes.
nlohmann::json trace_run_json(const RunResult& run, const RecordingOrigin& origin,
                              int only_rank = -1);

// A trace's whole "metadata": the run's main settings at the top (model,
// strategy, world, batch, steps, seed: what a person reading it in Perfetto
// looks for) and "run" above.
nlohmann::json trace_metadata(const RunResult& run, const RecordingOrigin& origin,
                              int only_rank = -1);
nlohmann::json trace_metadata(const RunResult& run, int only_rank = -1);  // this machine, now

// A Chrome trace that 'shardlab run --trace' wrote (the whole run, or one
// process's) or that 'shardlab trace merge' made, read back as a recording:
// spans from its slices, memory from its counters (each category's total as one
// buffer: totals and peaks exact, no buffer names), the rest from the metadata's
// "run" (each merged file's reports). No final weights (final_params empty).
// Throws ConfigError "trace 'FILE': ..." (one line).
Recording recording_from_trace(const nlohmann::json& trace, const std::string& file);

// A recording or a trace, told apart by content (what 'gui --open' and
// 'project' take). Either is refused over kRecordingMaxBytes without being read.
Recording load_run_file(const std::string& path);

// Reads and checks a recording. Non-regular files (directories, FIFOs, devices)
// are refused without reading or blocking; so are files over kRecordingMaxBytes.
Recording load_recording(const std::string& path);

}  // namespace shardlab
