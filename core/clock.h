// One steady clock for every rank of a process, so spans from different ranks
// line up on one timeline.
#pragma once
#include <chrono>
#include <cstdint>

namespace shardlab {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace shardlab
