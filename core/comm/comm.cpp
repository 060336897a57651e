// The parts of the communicator shared by every backend: the failure board,
// Work handles and even splits.
#include "core/comm/comm.h"

#include <optional>
#include <stdexcept>

#include "core/clock.h"
#include "core/comm/work_state.h"

namespace shardlab {

// ---------------------------------------------------------------------------
// FailureBoard, Work, even_counts

void FailureBoard::report(int rank, const std::string& what) {
  std::function<void(int, const std::string&)> publish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A rank's first report is its cause; a later one (the runner catching the
    // error the communicator already reported) would only echo it.
    for (const auto& f : failures_)
      if (f.first == rank) return;
    failures_.emplace_back(rank, what);
    publish = publish_;
  }
  if (publish) publish(rank, what);  // outside the lock: it may block on the store
  std::lock_guard<std::mutex> lock(listeners_mu_);
  for (auto& [id, on_failure] : listeners_) on_failure();
}

int FailureBoard::add_listener(std::function<void()> on_failure) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_[next_listener_] = std::move(on_failure);
  return next_listener_++;
}

void FailureBoard::remove_listener(int id) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_.erase(id);
}

void FailureBoard::set_remote(std::function<void(int, const std::string&)> publish,
                              std::function<std::string()> remote) {
  std::lock_guard<std::mutex> lock(mu_);
  publish_ = std::move(publish);
  remote_ = std::move(remote);
}

namespace {
// "rank 1 failed: rank 1: all_reduce …" says the rank twice: the op's own
// message already starts with it.
std::string failure_line(int rank, const std::string& what) {
  const std::string who = "rank " + std::to_string(rank);
  if (what.rfind(who + ": ", 0) == 0) return what;
  return who + " failed: " + what;
}
}  // namespace

std::string FailureBoard::describe() const {
  std::unique_lock<std::mutex> lock(mu_);
  if (failures_.empty() && remote_) {
    const auto remote = remote_;
    lock.unlock();
    return remote();
  }
  if (failures_.empty()) return "";
  // The first report is the root cause; later ones are usually its echoes.
  return failure_line(failures_.front().first, failures_.front().second);
}

std::string FailureBoard::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (failures_.empty()) return "";
  std::string out = failure_line(failures_.front().first, failures_.front().second);
  if (failures_.size() > 1) {
    out += " (then ";
    for (size_t i = 1; i < failures_.size(); ++i)
      out += (i > 1 ? ", " : "") + std::string("rank ") + std::to_string(failures_[i].first);
    out += " stopped too)";
  }
  return out;
}

void FailureBoard::note_issued(int rank, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  issued_[rank] = seq;
}

std::string FailureBoard::behind(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [rank, last] : issued_)
    if (last < seq)
      out += (out.empty() ? "" : ", ") + std::string("rank ") + std::to_string(rank) +
             " (it issued " + std::to_string(last) + " collectives, this is #" +
             std::to_string(seq) + ")";
  return out;
}

FailureBoard::FailureBoard() : changed_ns_(now_ns()) {}

void FailureBoard::note_comm(bool inside) {
  changed_ns_.store(now_ns());
  inside_.fetch_add(inside ? 1 : -1);
}

int64_t FailureBoard::outside_comm_ns() const {
  if (inside_.load() > 0) return 0;
  return now_ns() - changed_ns_.load();
}

bool FailureBoard::any() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !failures_.empty();
}

void Work::wait() {
  if (!state_) return;
  // The first wait is where the program needed the result: marked, so a
  // projection knows what the strategy overlapped and what it waited for.
  std::optional<ScopedMark> mark;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->recorder && !state_->waited)
      mark.emplace(state_->recorder, MarkKind::wait, state_->op);
    state_->waited = true;
  }
  std::unique_lock<std::mutex> lock(state_->mu);
  if (state_->complete) {
    // Completed under the lock so that a second waiter blocks until it is done.
    auto complete = std::move(state_->complete);
    state_->complete = nullptr;
    state_->error = complete();
    state_->finished = true;
    state_->cv.notify_all();
  }
  state_->cv.wait(lock, [&] { return state_->finished; });
  if (!state_->error.empty()) {
    if (mark) mark->cancel();
    throw CommError(state_->error);
  }
  lock.unlock();
  if (mark) mark->done();
}

// A send/recv reports done only once waited on: Gloo's unbound buffers have no
// non-blocking completion test.
bool Work::done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->finished;
}

std::vector<size_t> even_counts(size_t total, int world) {
  if (world <= 0) throw std::invalid_argument("even_counts: world must be positive");
  std::vector<size_t> counts(world, total / world);
  for (size_t i = 0; i < total % world; ++i) ++counts[i];
  return counts;
}

}  // namespace shardlab
