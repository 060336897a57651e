// `shardlab` command line: dispatches to the subcommands and turns errors into
// one line and an exit code (2 for bad input, 1 for a failed run).
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "app/args.h"
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

namespace {

// `shardlab devices`: what this build can run on.
int cmd_devices(int argc, char** argv) {
  const shardlab::app::Args a(argc, argv, "devices", {}, {});
  if (a.help()) {
    std::printf(
        "usage: shardlab devices\n\n"
        "The devices this build can use: the CPU, and GPUs when built with CUDA.\n"
        "Line 2 is for scripts: \"gpus N\".\n");
    return 0;
  }
  // Line 2 is machine-readable for scripts: "gpus N".
  std::printf("cpu: yes (ranks as threads, Gloo over TCP on 127.0.0.1)\n");
  std::printf("gpus %d\n", shardlab::cuda_device_count());
  std::printf("cuda: %s (%s)\n", shardlab::cuda_compiled() ? "compiled in" : "not compiled in",
              shardlab::cuda_status().c_str());
  return 0;
}

// argv[0] is the command's name.
int dispatch(int argc, char** argv) {
  const std::string sub = argv[0];
  if (sub == "run") return shardlab::app::cmd_run(argc, argv);
  if (sub == "demo") return shardlab::app::cmd_demo(argc, argv);
  if (sub == "gui") return shardlab::app::cmd_gui(argc, argv);
  if (sub == "bench") return shardlab::app::cmd_bench(argc, argv);
  if (sub == "lesson") return shardlab::app::cmd_lesson(argc, argv);
  if (sub == "estimate") return shardlab::app::cmd_estimate(argc, argv);
  if (sub == "devices") return cmd_devices(argc, argv);
  throw shardlab::ConfigError("unknown command '" + sub +
                              "' (valid: demo, run, gui, lesson, estimate, bench, devices; see "
                              "'shardlab --help')");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    shardlab::register_builtin_strategies();
    if (argc < 2) return shardlab::app::cmd_demo(1, argv);
    const std::string sub = argv[1];
    if (sub == "--help" || sub == "-h" || sub == "help") {
      if (argc == 2) {
        std::printf(kHelp, shardlab::strategy_names().c_str());
        return 0;
      }
      // `shardlab help run` is `shardlab run --help`.
      if (argc > 3)
        throw shardlab::ConfigError("unexpected argument '" + std::string(argv[3]) +
                                    "' (valid: 'shardlab help COMMAND', e.g. 'shardlab help run')");
      char help_flag[] = "--help";
      char* help_argv[] = {argv[2], help_flag, nullptr};
      return dispatch(2, help_argv);
    }
    return dispatch(argc - 1, argv + 1);
  } catch (const shardlab::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    // The ranks name what they could not allocate; this is the rest: the initial
    // weights, --save-data's batches, the outputs written after the run.
    std::fprintf(stderr,
                 "error: out of host memory (std::bad_alloc) outside the training ranks "
                 "(initial weights, --save-data, traces or recordings); use a smaller model, "
                 "batch or --steps\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
