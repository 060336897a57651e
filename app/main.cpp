// `shardlab` command line: dispatches to the subcommands.
#include <cstdio>
#include <cstring>
#include <string>

#include "app/commands.h"

int main(int argc, char** argv) {
  if (argc < 2) return shardlab::app::cmd_demo(argc - 1, argv + 1);
  const std::string sub = argv[1];
  if (sub == "bench") return shardlab::app::cmd_bench(argc - 1, argv + 1);
  std::fprintf(stderr, "error: unknown command '%s' (valid: run, demo, bench)\n", sub.c_str());
  return 2;
}
int shardlab::app::cmd_demo(int, char**) { return 0; }
int shardlab::app::cmd_run(int, char**) { return 0; }
