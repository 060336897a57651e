// One steady clock for every rank of a process, so spans from different ranks
// line up on one timeline; and each thread's CPU clock, which counts only the
// time that thread really ran (what a span costs whoever shares the core).
#pragma once
#include <time.h>

#include <chrono>
#include <cstdint>

namespace shardlab {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU time this thread has consumed (CLOCK_THREAD_CPUTIME_ID), or -1 where the
// clock is unavailable. A span's CPU time is the same whether its thread had a
// core to itself or shared one with three others; its wall time is not.
inline int64_t thread_cpu_ns() {
  timespec ts{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

}  // namespace shardlab
