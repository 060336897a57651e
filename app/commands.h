// Entry points of the `shardlab` subcommands; main() only dispatches.
#pragma once

#include <string>
#include <vector>

#include "app/config_args.h"
#include "core/config.h"

namespace shardlab::app {

// Each returns the process exit code: 0 ok, 1 runtime failure, 2 bad input.
int cmd_run(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_bench(int argc, char** argv);         // `shardlab bench comm|step|strategies|gpu ...`
int bench_step(int argc, char** argv);        // argv[0] == "step"
int bench_strategies(int argc, char** argv);  // argv[0] == "strategies"
int bench_gpu(int argc, char** argv);         // argv[0] == "gpu" (app/bench_gpu.cpp)
int cmd_estimate(int argc, char** argv);
int cmd_sample(int argc, char** argv);  // `shardlab sample --from CHECKPOINT` (app/sample.cpp)
int cmd_trace(int argc, char** argv);   // `shardlab trace merge` (app/trace_cmd.cpp)
// `shardlab project RUN`: the run as on N dedicated devices (app/project_cmd.cpp).
int cmd_project(int argc, char** argv);
int cmd_schedule(int argc, char** argv);
// `shardlab launch ... -- COMMAND`: one process per rank (app/launch.cpp).
int cmd_launch(int argc, char** argv);
// Hidden: prints what detect_process_env() sees and misbehaves on request (app/launch_probe.cpp).
int cmd_launch_probe(int argc, char** argv);
int cmd_lesson(int argc,
               char** argv);  // `shardlab lesson list|show|run|check` (app/lesson_cmd.cpp)  //
                              // predicted model-state memory and traffic (ZeRO paper)

}  // namespace shardlab::app
