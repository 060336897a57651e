// Reading a JSON file that may be hostile (recordings, traces): a regular file
// only (a FIFO or a device is refused without blocking), bounded in size and
// nesting, and one line naming the file for anything wrong.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace shardlab {

// Throws ConfigError("<what> '<path>': <reason>"): cannot open, not a regular
// file, empty, over `max_bytes`, changed size while read, nested deeper than
// `max_depth`, or not valid JSON (with the parser's line and column).
nlohmann::json read_json_file(const std::string& path, const std::string& what, int64_t max_bytes,
                              int max_depth);

}  // namespace shardlab
