// The settings of `shardlab run` read from its options: shared by the command
// line, the GUI's headless mode and lesson files (whose `run` tables use the
// same keys and get the same messages).
#pragma once
#include <set>
#include <string>
#include <vector>

#include "core/config.h"

namespace shardlab::app {

class Args;

// `shardlab run`'s options (with a value) and flags (without one).
const std::set<std::string>& run_options();
const std::set<std::string>& run_flags();

// Run settings from `shardlab run`'s options; throws ConfigError naming the option.
RunConfig config_from(const Args& a);
// "3,2,2,1" -> {3,2,2,1}; throws ConfigError naming `what`.
std::vector<int> parse_int_list(const std::string& text, const std::string& what);

}  // namespace shardlab::app
