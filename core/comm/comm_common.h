// What the communicator implementations (Gloo, NCCL) share besides a Work's
// state: an op's description and the wording of its errors, the bytes each
// collective puts on the wire, per-peer message numbers and flow ids, the
// counters behind stats(), the first failure that breaks a comm, and the Works
// never waited on. Compiled in every build: no Gloo, CUDA or NCCL here.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/comm/comm.h"
#include "core/comm/work_state.h"

namespace shardlab {

// ---------------------------------------------------------------------------
// An op and the wording of its errors

// A fresh id for a communication op, unique within this process (so within a rank).
uint64_t next_comm_op_id();

// One operation as a communicator records and reports it. An op is described
// where it is issued, on the issuing thread: the id and issue stamps below are
// taken then (default member initialisers run at that aggregate initialisation).
struct OpInfo {
  SpanKind kind = SpanKind::other;
  int64_t bytes = 0;  // this rank's payload, as recorded on the span
  CommMeta meta;
  int peer = -1;  // send/recv only
  int tag = -1;
  uint64_t flow_id = 0;
  uint64_t id = next_comm_op_id();
  int64_t issued_ns = now_ns();
  int64_t issued_cpu_ns = thread_cpu_ns();
};

// Marks the op's issue on `recorder` (when not null) and has the first wait on
// `state` marked there too. Call where the op's Work is made.
void track_issue(Recorder* recorder, const OpInfo& op, Work::State& state);

inline bool is_p2p(SpanKind kind) {
  return kind == SpanKind::send || kind == SpanKind::recv;
}

// "rank R: all_reduce of N bytes" (with the tag for send/recv).
std::string op_prefix(int rank, const OpInfo& op);
// Throws CommError unless 0 <= r < world ("... peer 5 is not a rank of a group of 4").
void check_rank(int rank, int world, const OpInfo& op, int r, const char* what);
// Throws CommError unless there is one count per rank.
void check_counts(int rank, int world, const char* name, const std::vector<size_t>& counts);
// Throws CommError unless a send/recv names another rank of the group and a tag >= 0.
void check_p2p(int rank, int world, const OpInfo& op);

// Backends' messages may carry newlines; a CommError is one readable line.
std::string one_line(std::string s);

// The one-line errors of one rank's comm, worded the same by every backend.
// `seq` is the collective's number in the issue order (0 when unknown or p2p):
// with no failure reported, the message names the ranks that never issued it.
class CommErrors {
 public:
  // `rank` within `group`; messages name the run's ranks and the group.
  CommErrors(int rank, std::chrono::milliseconds timeout, const FailureBoard& board,
             CommGroup group = {})
      : rank_(rank), timeout_(timeout), board_(board), group_(std::move(group)) {}

  // "rank R: all_reduce of N bytes (tag T)", with " in tp group 1 (ranks 2, 3)"
  // for a group other than the world.
  std::string prefix(const OpInfo& op) const;
  // "<prefix> timed out after T ms [waiting for rank P]" and what the others know.
  std::string timed_out(const OpInfo& op, uint64_t seq) const;
  // "<prefix> [to|from rank P] failed: <detail>" and what the others know.
  std::string failed(const OpInfo& op, uint64_t seq, const std::string& detail) const;
  // A peer reported a failure while this op waited: "<prefix> aborted after N ms
  // [waiting for rank P] (rank Q failed: ...)".
  std::string peer_failed(const OpInfo& op, std::chrono::steady_clock::time_point since) const;
  // "<prefix>: <what>, an earlier op failed: <why>" for an op the broken comm
  // refused or gave up (`what`: "not run", "not posted", "aborted").
  std::string after_failure(const OpInfo& op, const char* what, const std::string& why) const;
  // "<prefix>: not run, the comm was destroyed first" (still queued at destruction).
  std::string destroyed_first(const OpInfo& op) const;
  // "<prefix>: comm is being destroyed" (issued during destruction).
  std::string being_destroyed(const OpInfo& op) const;

 private:
  // What the other ranks know: the first failure, else the ranks that never issued
  // this collective. Waits briefly for a report first, since the peer that died
  // usually reports just after this rank notices.
  std::string others(const OpInfo& op, uint64_t seq) const;

  // The run's rank of this group's rank `r`.
  int global(int r) const { return group_.global(r); }

  const int rank_;
  const std::chrono::milliseconds timeout_;
  const FailureBoard& board_;
  const CommGroup group_;
};

// ---------------------------------------------------------------------------
// Traffic: bytes this rank sends in each collective, by Gloo's algorithms. NCCL's
// rings and chains count the same, so the two backends' numbers compare like with
// like. Zero for a group of one or an empty buffer.

// Ring: a reduce-scatter then an all-gather, each sending (W-1)/W of the buffer.
int64_t all_reduce_sent(int world, int64_t bytes);
// Ring: every chunk but this rank's own is sent once (`es`: element size).
int64_t reduce_scatter_sent(int rank, int world, const std::vector<size_t>& counts, size_t es);
// Ring: every chunk but the next rank's own passes through this rank once.
int64_t all_gather_sent(int rank, int world, const std::vector<size_t>& byte_counts);
// Binomial tree (see broadcast_tree_sends).
int64_t broadcast_sent(int rank, int root, int world, int64_t bytes);
// A ring reduce-scatter ((W-1)/W of the buffer), then every non-root sends its
// reduced chunk (1/W) to the root.
int64_t reduce_sent(int rank, int root, int world, int64_t bytes);

// Sends made by `rank` in Gloo's options-style broadcast. gloo/broadcast.cc is a
// binomial tree (not one-to-all): the root sends ceil(log2 W) times, inner ranks
// forward, leaves send nothing, W-1 sends in all. NCCL's broadcast is a chain,
// but counts the same, so the two backends' numbers compare like with like.
int64_t broadcast_tree_sends(int rank, int root, int world);

// ---------------------------------------------------------------------------
// State every comm keeps

// The counters behind Comm::stats(); updated from any thread.
class CommCounters {
 public:
  void add_sent(int64_t bytes) { bytes_sent_.fetch_add(bytes, std::memory_order_relaxed); }
  void add_op() { ops_.fetch_add(1, std::memory_order_relaxed); }
  CommStats stats() const {
    return CommStats{bytes_sent_.load(std::memory_order_relaxed),
                     ops_.load(std::memory_order_relaxed)};
  }

 private:
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> ops_{0};
};

// Per-peer numbers of the sends and recvs this rank posts. Not locked: the comm
// takes them under the lock that also orders its posts, so that the numbering
// and the backend's in-order matching agree.
class P2PCounters {
 public:
  explicit P2PCounters(int world) : sent_to_(world, 0), received_from_(world, 0) {}
  // The number (from 1) of this send to / recv from `peer`.
  uint64_t next(bool is_send, int peer) {
    return is_send ? ++sent_to_[peer] : ++received_from_[peer];
  }

 private:
  std::vector<uint64_t> sent_to_;        // sends posted to each rank
  std::vector<uint64_t> received_from_;  // recvs posted from each rank
};

// Pairs the spans of the n-th message from `src` to `dst`: its send and its recv
// get the same id, which no other pair has.
inline uint64_t p2p_flow_id(int src, int dst, uint64_t n) {
  return (static_cast<uint64_t>(src + 1) << 48) | (static_cast<uint64_t>(dst + 1) << 32) |
         (n & 0xFFFFFFFFull);
}

// The first failure of a comm, which breaks it: after it the ranks' op sequences
// no longer line up (a later op could match stale messages), so every op that
// follows is refused.
class BrokenState {
 public:
  // Records `why` if it is the first failure; true when it was.
  bool set(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!why_.empty()) return false;
    why_ = why;
    return true;
  }
  // The first failure, "" while the comm is healthy.
  std::string get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return why_;
  }

 private:
  mutable std::mutex mu_;
  std::string why_;
};

// Works issued but perhaps never waited on. Each points at its comm (its wait
// runs the comm's code), so the comm fails those still pending when it is
// destroyed, and a late wait() then cannot touch it.
class UnwaitedWorks {
 public:
  // `error` is what a wait() after the comm's destruction throws.
  void add(const std::shared_ptr<Work::State>& state, std::string error);
  // Finishes every pending Work with its error; its completion is dropped unrun.
  void cancel_all();
  // The same for a comm whose connections were closed after a failure (the
  // comm lives on): each pending Work finishes with `error`, so that dropping
  // it does not wait for a peer that will never answer, and its completion
  // (holding the transport's buffer) goes to `keep`, unrun and never freed
  // under the transport.
  void abandon_all(const std::string& error, std::vector<std::shared_ptr<void>>& keep);

 private:
  std::mutex mu_;
  std::vector<std::pair<std::weak_ptr<Work::State>, std::string>> works_;
};

// The span of an op on the rank's comm lane, all but its times and step:
// `rank` (and the op's peer) within `group`, recorded as the run's ranks.
Span comm_span(const CommGroup& group, int rank, const OpInfo& op);

}  // namespace shardlab
