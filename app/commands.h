// Entry points of the `shardlab` subcommands; main() only dispatches.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace shardlab::app {

// Run settings from `shardlab run`'s options (shared with the GUI's headless mode).
class Args;
RunConfig config_from(const Args& a);
// "3,2,2,1" -> {3,2,2,1}; throws ConfigError naming `what`.
std::vector<int> parse_int_list(const std::string& text, const std::string& what);

// Each returns the process exit code: 0 ok, 1 runtime failure, 2 bad input.
int cmd_run(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_bench(int argc, char** argv);     // `shardlab bench comm|step ...`
int bench_step(int argc, char** argv);    // argv[0] == "step"
int bench_strategies(int argc, char** argv);  // argv[0] == "strategies"
int cmd_estimate(int argc, char** argv);  // predicted model-state memory and traffic (ZeRO paper)

}  // namespace shardlab::app
