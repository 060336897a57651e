// Entry points of the `shardlab` subcommands; main() only dispatches.
#pragma once

namespace shardlab::app {

// Each returns the process exit code: 0 ok, 1 runtime failure, 2 bad input.
int cmd_run(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_bench(int argc, char** argv);   // `shardlab bench comm|step ...`
int bench_step(int argc, char** argv);  // argv[0] == "step"

}  // namespace shardlab::app
