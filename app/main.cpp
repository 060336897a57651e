// `shardlab` command line: dispatches to the subcommands and turns errors into
// one line and an exit code (2 for bad input, 1 for a failed run).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "app/commands.h"
#include "app/gui/gui.h"
#include "core/config.h"
#include "core/gpu.h"
#include "core/strategy.h"
#include "strategies/registry.h"

namespace {
const char* kHelp = R"(usage: shardlab <command> [options]

Shardlab trains small real models under parallel training strategies, with
ranks as threads talking through Gloo, and shows what each strategy costs.

commands:
  demo     run every strategy on the default model, print a comparison, write traces
  run      train one configuration and print a summary (see 'shardlab run --help')
  gui      the desktop app: timelines, memory, cluster view, replay, compare (see 'shardlab gui --help')
  lesson   step through the lessons on real runs: list, show, run, check (see 'shardlab lesson')
  estimate predicted memory and traffic per rank from the ZeRO paper's formulas
  bench    benchmarks: 'shardlab bench comm' times collectives, 'shardlab bench step' step times,
           'shardlab bench strategies' every strategy on one device (e.g. --device cuda)
  devices  the devices this build can use: the CPU, and GPUs when built with CUDA

strategies: %s
)";
}  // namespace

int main(int argc, char** argv) {
  try {
    shardlab::register_builtin_strategies();
    if (argc < 2) return shardlab::app::cmd_demo(1, argv);
    const std::string sub = argv[1];
    if (sub == "--help" || sub == "-h" || sub == "help") {
      std::printf(kHelp, shardlab::strategy_names().c_str());
      return 0;
    }
    if (sub == "run") return shardlab::app::cmd_run(argc - 1, argv + 1);
    if (sub == "demo") return shardlab::app::cmd_demo(argc - 1, argv + 1);
    if (sub == "gui") return shardlab::app::cmd_gui(argc - 1, argv + 1);
    if (sub == "bench") return shardlab::app::cmd_bench(argc - 1, argv + 1);
    if (sub == "lesson") return shardlab::app::cmd_lesson(argc - 1, argv + 1);
    if (sub == "estimate") return shardlab::app::cmd_estimate(argc - 1, argv + 1);
    if (sub == "devices") {
      // Line 2 is machine-readable for scripts: "gpus N".
      std::printf("cpu: yes (ranks as threads, Gloo over TCP on 127.0.0.1)\n");
      std::printf("gpus %d\n", shardlab::cuda_device_count());
      std::printf("cuda: %s (%s)\n", shardlab::cuda_compiled() ? "compiled in" : "not compiled in",
                  shardlab::cuda_status().c_str());
      return 0;
    }
    std::fprintf(
        stderr,
        "error: unknown command '%s' (valid: demo, run, gui, lesson, estimate, bench, devices; see "
        "'shardlab --help')\n",
        sub.c_str());
    return 2;
  } catch (const shardlab::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
