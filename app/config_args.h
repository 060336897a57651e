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

// The strategy options' flags (core/run_options.h) that take a value
// ("micro-batches") or, with_value false, those that are flags ("no-overlap").
std::set<std::string> option_flags(bool with_value);
// The strategy options' lines of `shardlab run --help`, from their table rows
// (core/run_options.h): flag, placeholder, the strategies reading it, what it does.
std::string strategy_option_help();
// `shardlab run`'s options (with a value) and flags (without one).
const std::set<std::string>& run_options();
const std::set<std::string>& run_flags();

// --optimizer (default adamw), as `run` and `estimate` read it; throws
// ConfigError naming the value and the valid ones.
OptimizerKind optimizer_kind_from(const Args& a);

// Run settings from `shardlab run`'s options; throws ConfigError naming the option.
RunConfig config_from(const Args& a);

}  // namespace shardlab::app
