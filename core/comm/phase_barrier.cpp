// The phase barrier of ranks that share memory (see phase_barrier.h).
#include "core/comm/phase_barrier.h"

#include <algorithm>

#include "core/comm/comm.h"

namespace shardlab {

PhaseBarrier::PhaseBarrier(std::string name, int parties, std::chrono::milliseconds timeout)
    : name_(std::move(name)),
      parties_(parties),
      timeout_(timeout),
      arrived_(parties, false),
      busy_(parties, false) {}

void PhaseBarrier::arrive_and_wait(int rank, const char* phase, bool then_busy) {
  std::unique_lock<std::mutex> lock(mu_);
  busy_[rank] = false;
  const std::string where = "rank " + std::to_string(rank) + ": " + name_ + " " + phase;
  if (!broken_.empty()) {
    cv_.notify_all();  // a drain may be waiting for this party to stop
    throw CommError(where + ": " + broken_);
  }
  const uint64_t generation = generation_;
  arrived_[rank] = true;
  if (++count_ == parties_) {  // the last to arrive opens the barrier for everyone
    count_ = 0;
    ++generation_;
    std::fill(arrived_.begin(), arrived_.end(), false);
    std::fill(busy_.begin(), busy_.end(), then_busy);
    cv_.notify_all();
    return;
  }
  const bool woken =
      cv_.wait_for(lock, timeout_, [&] { return generation_ != generation || !broken_.empty(); });
  if (generation_ != generation) return;
  if (woken) throw CommError(where + ": " + broken_);
  std::string missing;
  for (int r = 0; r < parties_; ++r)
    if (!arrived_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  broken_ = "timed out after " + std::to_string(timeout_.count()) + " ms waiting for device(s) " +
            missing;
  cv_.notify_all();
  throw CommError(where + ": " + broken_);
}

void PhaseBarrier::leave(int rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_[rank] = false;
    if (broken_.empty()) broken_ = "device " + std::to_string(rank) + " left the run";
  }
  cv_.notify_all();
}

void PhaseBarrier::drain(int rank) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout_, [&] {
    for (int r = 0; r < parties_; ++r)
      if (r != rank && busy_[r]) return false;
    return true;
  });
}

}  // namespace shardlab
