// The recording file's format, shared by its writer (recording_write.cpp), its
// reader (recording_read.cpp) and the trace importer (recording_trace.cpp):
// names, column lists, bounds and the encodings of the final weights. Not for
// use outside core/run/recording_*.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device/memory.h"
#include "core/io/json_check.h"
#include "core/run/recording.h"

namespace shardlab::recording_format {

inline constexpr const char* kFormat = "shardlab-recording";
// A trace's metadata "run": a recording without events or weights.
inline constexpr const char* kTraceRunFormat = "shardlab-trace-run";
inline constexpr int64_t kMaxTimeNs = int64_t{1} << 52;     // ~52 days after the run start
inline constexpr int64_t kMaxBytes = int64_t{1} << 50;      // 1 PiB: far above any real buffer
inline constexpr int64_t kMaxClockZero = int64_t{1} << 62;  // steady clocks start near boot
inline constexpr int kMaxDepth = 32;                        // the format itself needs 6
inline constexpr double kMaxStepMs = 1e9;                   // 11 days
inline constexpr int64_t kMaxRanks = 1 << 20;               // far above any world size
inline const std::vector<std::string> kSpanColumns = {
    "t_begin_ns", "t_end_ns", "lane",    "kind",         "layer",      "micro_batch", "step",
    "bytes",      "peer",     "flow_id", "cpu_begin_ns", "cpu_end_ns", "op",          "made_ahead",
    "group",      "staleness"};
// Files written before spans had CPU clocks and op ids: the first ten columns;
// before batches were made ahead, thirteen; before communicator groups (every
// span's group the world's, 0), fourteen; before a parameter server's
// staleness (every span's -1), fifteen.
inline constexpr size_t kSpanColumnsV1 = 10;
inline constexpr size_t kSpanColumnsV2 = 13;
inline constexpr size_t kSpanColumnsV3 = 14;
inline constexpr size_t kSpanColumnsV4 = 15;
// The most groups a run's communicators form (a mesh of the largest world has
// fewer: core/mesh.h).
inline constexpr int64_t kMaxGroups = int64_t{1} << 22;
inline const std::vector<std::string> kMarkColumns = {"kind",     "id",           "t_begin_ns",
                                                      "t_end_ns", "cpu_begin_ns", "cpu_end_ns"};
inline const std::vector<std::string> kAllocColumns = {"t_ns",     "delta_bytes", "buffer_id",
                                                       "category", "pool",        "name"};

// The final weights: base64 (RFC 4648, padded) with a CRC-32 (IEEE 802.3, as
// zlib's crc32): the weights have no range to check, so a flipped bit in them
// would otherwise load silently.
std::string base64_encode(const unsigned char* p, size_t n);
bool base64_decode(const std::string& s, std::vector<unsigned char>& out);  // false: malformed
uint32_t crc32(const unsigned char* p, size_t n);
std::string hex32(uint32_t v);  // "0a1b2c3d"

// YYYY-MM-DDTHH:MM:SSZ, as the writer's clock writes it.
bool is_utc_date(const std::string& s);

nlohmann::json pool_json(const PoolStats& p);
// A loss can be NaN or infinite (a diverged run); JSON has no literal for them.
nlohmann::json loss_json(double v);

// A recording's content, checked (recording_from_json's work); a trace's run
// read back has no final weights (`weights` false).
Recording from_json(const nlohmann::json& j, const JsonChecker& ck, bool weights);

}  // namespace shardlab::recording_format
