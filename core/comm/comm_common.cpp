// What the Gloo and NCCL communicators share: error wording, traffic counts,
// message numbering, and the bookkeeping of broken comms and unwaited Works.
#include "core/comm/comm_common.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <thread>

namespace shardlab {

// ---------------------------------------------------------------------------
// An op and the wording of its errors

std::string op_prefix(int rank, const OpInfo& op) {
  std::ostringstream os;
  os << "rank " << rank << ": " << to_string(op.kind) << " of " << op.bytes << " bytes";
  if (is_p2p(op.kind)) os << " (tag " << op.tag << ")";
  return os.str();
}

void check_rank(int rank, int world, const OpInfo& op, int r, const char* what) {
  if (r < 0 || r >= world) {
    throw CommError(op_prefix(rank, op) + ": " + what + " " + std::to_string(r) +
                    " is not a rank of a group of " + std::to_string(world));
  }
}

void check_counts(int rank, int world, const char* name, const std::vector<size_t>& counts) {
  if (counts.size() != static_cast<size_t>(world)) {
    throw CommError("rank " + std::to_string(rank) + ": " + name + " needs " +
                    std::to_string(world) + " counts, got " + std::to_string(counts.size()));
  }
}

void check_p2p(int rank, int world, const OpInfo& op) {
  check_rank(rank, world, op, op.peer, "peer");
  if (op.peer == rank) throw CommError(op_prefix(rank, op) + ": peer is this rank");
  if (op.tag < 0) throw CommError(op_prefix(rank, op) + ": tag must be >= 0");
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string CommErrors::others(const OpInfo& op, uint64_t seq) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (!board_.any() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string others = board_.describe();
  // The board counts the world's collectives only (a group's have their own numbers).
  const std::string stalled = op.peer < 0 && seq && group_.id == 0 ? board_.behind(seq) : "";
  if (!others.empty()) return " (" + others + ")";
  if (!stalled.empty()) return " waiting for " + stalled;
  return " (no rank reported a failure)";
}

std::string CommErrors::prefix(const OpInfo& op) const {
  std::string s = op_prefix(global(rank_), op);
  if (group_.id == 0) return s;
  const size_t colon = s.find(':');
  return s.substr(0, colon) + " in " + group_.name + s.substr(colon);
}

std::string CommErrors::timed_out(const OpInfo& op, uint64_t seq) const {
  std::ostringstream os;
  os << prefix(op) << " timed out after " << timeout_.count() << " ms";
  if (op.peer >= 0) os << " waiting for rank " << global(op.peer);
  return os.str() + others(op, seq);
}

std::string CommErrors::failed(const OpInfo& op, uint64_t seq, const std::string& detail) const {
  std::ostringstream os;
  os << prefix(op);
  if (op.peer >= 0)
    os << (op.kind == SpanKind::send ? " to" : " from") << " rank " << global(op.peer);
  os << " failed: " << detail;
  return os.str() + others(op, seq);
}

std::string CommErrors::peer_failed(const OpInfo& op,
                                    std::chrono::steady_clock::time_point since) const {
  std::ostringstream os;
  os << prefix(op) << " aborted after "
     << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                              since)
            .count()
     << " ms";
  if (op.peer >= 0) os << " waiting for rank " << global(op.peer);
  os << " (" << board_.describe() << ")";
  return os.str();
}

std::string CommErrors::after_failure(const OpInfo& op, const char* what,
                                      const std::string& why) const {
  return prefix(op) + ": " + what + ", an earlier op failed: " + why;
}

std::string CommErrors::destroyed_first(const OpInfo& op) const {
  return prefix(op) + ": not run, the comm was destroyed first";
}

std::string CommErrors::being_destroyed(const OpInfo& op) const {
  return prefix(op) + ": comm is being destroyed";
}

// ---------------------------------------------------------------------------
// Traffic

int64_t all_reduce_sent(int world, int64_t bytes) {
  return world == 1 || bytes == 0 ? 0 : 2 * (world - 1) * bytes / world;
}

int64_t reduce_scatter_sent(int rank, int world, const std::vector<size_t>& counts, size_t es) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  return world > 1 && total > 0 ? static_cast<int64_t>((total - counts[rank]) * es) : 0;
}

int64_t all_gather_sent(int rank, int world, const std::vector<size_t>& byte_counts) {
  size_t total = 0;
  for (size_t c : byte_counts) total += c;
  return world == 1 || total == 0 ? 0
                                  : static_cast<int64_t>(total - byte_counts[(rank + 1) % world]);
}

int64_t broadcast_sent(int rank, int root, int world, int64_t bytes) {
  return world == 1 || bytes == 0 ? 0 : broadcast_tree_sends(rank, root, world) * bytes;
}

int64_t reduce_sent(int rank, int root, int world, int64_t bytes) {
  return world == 1 || bytes == 0
             ? 0
             : (world - 1) * bytes / world + (rank == root ? 0 : bytes / world);
}

int64_t broadcast_tree_sends(int rank, int root, int world) {
  const size_t vsize = world;
  const size_t vrank = (rank - root + world) % world;
  size_t dim = 0;
  while ((size_t{1} << dim) < vsize) ++dim;
  size_t mask = (size_t{1} << dim) - 1;
  int64_t sends = 0;
  for (size_t i = 0; i < dim; ++i) {
    mask ^= size_t{1} << i;
    if ((vrank & mask) != 0) continue;
    const size_t vpeer = vrank ^ (size_t{1} << i);
    if (vpeer >= vsize) continue;
    if ((vrank & (size_t{1} << i)) == 0) ++sends;
  }
  return sends;
}

// ---------------------------------------------------------------------------
// State every comm keeps

void UnwaitedWorks::add(const std::shared_ptr<Work::State>& state, std::string error) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(works_, [](const auto& w) { return w.first.expired(); });
  works_.emplace_back(state, std::move(error));
}

void UnwaitedWorks::cancel_all() {
  std::vector<std::pair<std::shared_ptr<Work::State>, std::string>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [weak, error] : works_) {
      if (auto s = weak.lock()) pending.emplace_back(std::move(s), std::move(error));
    }
    works_.clear();
  }
  for (auto& [s, error] : pending) {
    // Destroyed after the lock is released: it may hold the last references to
    // the op's buffers.
    std::function<std::string()> dropped;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->finished) continue;
      dropped = std::move(s->complete);
      s->complete = nullptr;
      s->error = error;
      s->finished = true;
    }
    s->cv.notify_all();
  }
}

void UnwaitedWorks::abandon_all(const std::string& error,
                                std::vector<std::shared_ptr<void>>& keep) {
  std::vector<std::shared_ptr<Work::State>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [weak, unused] : works_)
      if (auto s = weak.lock()) pending.push_back(std::move(s));
    works_.clear();
  }
  for (auto& s : pending) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->finished || !s->complete) continue;
      keep.push_back(std::make_shared<std::function<std::string()>>(std::move(s->complete)));
      s->complete = nullptr;
      s->error = error;
      s->finished = true;
    }
    s->cv.notify_all();
  }
}

uint64_t next_comm_op_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void track_issue(Recorder* recorder, const OpInfo& op, Work::State& state) {
  if (!recorder || !recorder->enabled()) return;
  Mark m;
  m.kind = MarkKind::issue;
  m.id = op.id;
  m.t_begin_ns = m.t_end_ns = op.issued_ns;
  m.cpu_begin_ns = m.cpu_end_ns = op.issued_cpu_ns;
  recorder->add_mark(m);
  std::lock_guard<std::mutex> lock(state.mu);
  state.recorder = recorder;
  state.op = op.id;
}

Span comm_span(const CommGroup& group, int rank, const OpInfo& op) {
  Span span;
  span.rank = group.global(rank);
  span.group = group.id;
  span.lane = Lane::comm;
  span.kind = op.kind;
  span.layer = op.meta.layer;
  span.micro_batch = op.meta.micro_batch;
  span.bytes = op.bytes;
  span.peer = group.global(op.peer);
  span.flow_id = op.flow_id;
  span.op = op.id;
  return span;
}

}  // namespace shardlab
