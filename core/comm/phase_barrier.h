// A barrier for ranks that share memory instead of a communicator (dp's
// controller and its devices): they meet after each phase of a step. A party
// that fails wakes the others with an error, and one that stalls makes the
// others time out naming it, instead of leaving them waiting forever.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace shardlab {

class PhaseBarrier {
 public:
  // `name` prefixes the errors' phase: "rank 1: dp gather: device 0 left the run".
  PhaseBarrier(std::string name, int parties, std::chrono::milliseconds timeout);

  // Waits until every party has arrived (the last to arrive opens it for all).
  // `then_busy`: after this barrier the parties work on shared memory again
  // (false for a step's last barrier; see drain). Throws CommError when a
  // party left, or none arrived within the timeout (naming the missing ones).
  void arrive_and_wait(int rank, const char* phase, bool then_busy = true);

  // This party will not arrive again: every later or pending wait fails at once.
  void leave(int rank);

  // Waits (at most the timeout) until no other party is between two barriers,
  // where it may still be copying from or into memory `rank` is about to free.
  void drain(int rank);

 private:
  const std::string name_;
  const int parties_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
  uint64_t generation_ = 0;
  std::vector<bool> arrived_;
  std::vector<bool> busy_;  // past a barrier and not yet at the next one
  std::string broken_;
};

}  // namespace shardlab
