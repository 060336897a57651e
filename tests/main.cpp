// Entry point of shardlab_tests: registers the built-in strategies, as the
// shardlab executable's main() does, then runs the Catch2 tests.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "strategies/registry.h"

int main(int argc, char* argv[]) {
  shardlab::register_builtin_strategies();
  return Catch::Session().run(argc, argv);
}
