// `shardlab estimate`: model-state memory and traffic per rank from the ZeRO paper (filled in with
// ZeRO).
#include <cstdio>

#include "app/commands.h"

namespace shardlab::app {

int cmd_estimate(int, char**) {
  std::fprintf(stderr, "error: 'shardlab estimate' is not implemented yet\n");
  return 1;
}

}  // namespace shardlab::app
