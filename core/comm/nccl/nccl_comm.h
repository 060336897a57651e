// The NCCL backend of Comm, inside core/comm/nccl: one communicator per rank (a thread with
// its own GPU), its work on a dedicated comm stream, timed by CUDA events. The class is
// declared here and defined by concern:
//   nccl_group.cpp        the group: NCCL's unique id, joining it (rendezvous)
//   nccl_lifecycle.cpp    one comm's setup and shutdown
//   nccl_collectives.cpp  all_reduce, reduce_scatter, all_gather, broadcast, reduce, barrier
//   nccl_p2p.cpp          send/recv, their numbering, and the cross-rank order check
//   nccl_staging.cpp      host buffers staged through pinned and device slots
//   nccl_issue.cpp        issuing: the caller's side, then the issuer thread that puts
//                         ops on the comm stream
//   nccl_wait.cpp         completion: waiting, stats, host-timed spans
//   nccl_failure.cpp      the first failure, which breaks (aborts) the comm
// Only core/comm/nccl includes nccl.h; the rest of Shardlab sees core/comm/nccl_group.h.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/comm/comm.h"
#include "core/comm/comm_common.h"
#include "core/comm/nccl/nccl_check.h"
#include "core/comm/work_state.h"
#include "core/device/cuda/cuda_backend.h"

namespace shardlab::nccl {

using SteadyClock = std::chrono::steady_clock;

// Polling pauses: yields for the first 50 us (a small collective finishes in tens of
// microseconds, less than one sleep takes), then sleeps that grow to 1 ms, so that a long
// wait does not keep a core busy.
class Backoff {
 public:
  void sleep() {
    if (SteadyClock::now() - start_ < std::chrono::microseconds(50)) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::microseconds(1000));
  }

 private:
  SteadyClock::time_point start_ = SteadyClock::now();
  std::chrono::microseconds delay_{20};
};

// ---------------------------------------------------------------------------
// Point-to-point order, checked across the ranks of the group

// NCCL has no tags: it pairs the n-th send from a to b with the n-th recv at b from a.
// Gloo pairs by tag, so a program that posts two tags in different orders on the two
// sides works there and gets the wrong data (or hangs) here. The ranks are threads of
// one process, so the group can compare each pair as it is posted and fail a mismatch
// with a message that says so.
class P2PLedger {
 public:
  struct Entry {
    bool is_send = false;
    uint64_t n = 0;
    int tag = -1;
    size_t bytes = 0;
  };

  // The other side's n-th op when it disagrees with this one; nullopt when they agree
  // or when the other side has not posted its n-th yet (it then checks against ours).
  std::optional<Entry> post(int src, int dst, const Entry& mine);

 private:
  std::mutex mu_;
  std::map<std::pair<int, int>, std::deque<Entry>> pending_;  // (src, dst) -> the side ahead
};

// ---------------------------------------------------------------------------
// Staging

// Staged regions start on this boundary, so every dtype is aligned inside a slot.
constexpr size_t kStageAlign = 256;

// A device buffer and its pinned host mirror, for ops given host pointers. NCCL needs
// device memory; the pinned side lets every copy be asynchronous, so that issuing an op
// never waits for earlier ones (a pageable copy would).
struct Slot {
  void* dev = nullptr;
  void* host = nullptr;
  size_t capacity = 0;
  Tensor tensor;  // owns `dev` when the allocator provided it (accounted as comm_buffers)
};

// A host buffer staged through a slot: its offset there and, for outputs, where it goes.
struct Staged {
  void* user = nullptr;
  size_t offset = 0;
  size_t bytes = 0;
};

// The comm's slots. Slots are never freed before the comm is destroyed: freeing device
// or pinned memory synchronizes the device, which could wait on a collective that waits
// on the very thread that frees.
class StagingSlots {
 public:
  explicit StagingSlots(Allocator* alloc) : alloc_(alloc) {}
  // A free slot of at least `bytes`, or a new one; throws std::runtime_error with what
  // failed.
  Slot* acquire(size_t bytes);
  void release(Slot* slot);
  // At the comm's destruction, once the comm stream has run dry.
  void free_all();
  // At the comm's destruction, when the stream may still write them: leaked rather than
  // freed under it.
  void leak_all();

 private:
  Allocator* const alloc_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Slot*> free_slots_;
};

// ---------------------------------------------------------------------------
// An op

using Launch = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;

// One issued op, shared by the issuer thread (which launches it) and its Work (which
// waits for it).
struct Op {
  enum class Phase { queued, launched, failed };

  OpInfo info;
  uint64_t seq = 0;  // collectives: their number in the issue order; p2p: 0
  int64_t sent = 0;  // added to bytes_sent once it completes
  int step = -1;     // the recorder's step when issued
  int64_t t_issue_ns = 0;
  Launch launch;  // empty: nothing to move (zero bytes), the op only marks the stream
  Slot* slot = nullptr;
  std::vector<Staged> ins;           // pinned -> device before the op
  std::vector<Staged> outs;          // device -> pinned after it, pinned -> user once it is done
  cudaEvent_t ready = nullptr;       // on the compute stream at issue: the data is there
  cudaEvent_t done = nullptr;        // on the comm stream after the op and its copies
  std::weak_ptr<Work::State> state;  // its Work, which the issuer finishes once it is done
  // Set when the issuer held the last reference to a dropped, unfinished Work:
  // destroying it there would wait for the op on the issuer thread (State's
  // destructor completes it), stalling every op queued behind it.
  std::shared_ptr<Work::State> orphan;

  Op() = default;
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;
  ~Op() {
    // Destroying an event whose record is still pending is allowed; CUDA frees it later.
    if (ready) SHARDLAB_CUDA_IGNORE(cudaEventDestroy(ready));
    if (done) SHARDLAB_CUDA_IGNORE(cudaEventDestroy(done));
  }

  Phase phase() {
    std::lock_guard<std::mutex> lock(mu_);
    return phase_;
  }
  std::string error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  void set_launched() {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ == Phase::queued) phase_ = Phase::launched;
  }
  void fail(std::string e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ != Phase::queued) return;
    phase_ = Phase::failed;
    error_ = std::move(e);
  }

 private:
  std::mutex mu_;
  Phase phase_ = Phase::queued;
  std::string error_;
};

// A buffer argument of an op: `in` when the op reads it, `out` when it writes it.
struct Buf {
  const void* ptr = nullptr;
  size_t bytes = 0;
  bool in = false;
  bool out = false;
};

// ---------------------------------------------------------------------------
// The comm

// NCCL, unlike Gloo, runs all of a communicator's ops, collectives and sends/recvs alike,
// one after another in issue order on the GPU, and a send or recv does not finish until
// the peer's matching op runs. So every rank must issue collectives in the same order (as
// with Gloo), and also sends and recvs must be issued so that no rank waits on an op that
// its peer has queued behind one of its own: a recv posted early holds up every op issued
// after it until its send arrives (a ring where every rank posts its recv first
// deadlocks; Gloo would run it). The pipeline schedules (gpipe, 1f1b, naive_mp: recvs
// posted in micro-batch order, sends waited before the next compute) are deadlock-free
// under that rule. A program that is not hangs until the timeout, which aborts the
// communicator and names the rank it was waiting for.
//
// Issuing never blocks the caller: ops go to a queue that one issuer thread launches in
// order. A nonblocking communicator may still be connecting to a peer when an op is
// launched (NCCL connects lazily, and a first send waits for the peer's first recv), and
// that wait must not stop this rank from issuing the op the peer is waiting for.
class NcclComm final : public Comm {
 public:
  // Aborts `comm` itself if it fails.
  NcclComm(int rank, int world, ncclComm_t comm, CudaBackend& cuda, GpuTimer* timer,
           std::chrono::milliseconds timeout, FailureBoard& board, P2PLedger* ledger,
           Recorder* recorder, Allocator* alloc);
  ~NcclComm() override;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend_name() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  CommStats stats() const override { return counters_.stats(); }

  // nccl_collectives.cpp
  Work all_reduce_async(void* buf, size_t count, DType dt, CommMeta meta) override;
  Work reduce_scatter_async(void* in_full, void* out_chunk, std::vector<size_t> counts, DType dt,
                            CommMeta meta) override;
  Work all_gather_async(const void* in_chunk, void* out_full, std::vector<size_t> counts, DType dt,
                        CommMeta meta) override;
  Work broadcast_async(void* buf, size_t count, DType dt, int root, CommMeta meta) override;
  Work reduce_async(void* buf, size_t count, DType dt, int root, CommMeta meta) override;
  Work barrier_async() override;

  // nccl_p2p.cpp
  Work send_async(const void* buf, size_t bytes, int dst, int tag, CommMeta meta) override;
  Work recv_async(void* buf, size_t bytes, int src, int tag, CommMeta meta) override;

 private:
  // ---- nccl_failure.cpp ------------------------------------------------------
  std::string broken() const { return broken_.get(); }
  // The first failure breaks the comm (see BrokenState) and aborts it.
  void fail_comm(const std::string& why);
  // NCCL's asynchronous error, "" while there is none.
  std::string async_error();

  // ---- nccl_p2p.cpp ----------------------------------------------------------
  Work post_p2p(SpanKind kind, const void* buf, size_t bytes, int peer, int tag, CommMeta meta);
  // Numbers a send/recv and checks it against the peer's side; called by submit()
  // with issue_mu_ held.
  void number_p2p(OpInfo& info);

  // ---- nccl_staging.cpp ------------------------------------------------------
  // False for memory NCCL cannot use in place (host memory, which is staged).
  bool usable_in_place(const OpInfo& op, const void* p) const;

  // ---- nccl_issue.cpp --------------------------------------------------------
  Work submit(OpInfo info, int64_t sent, const std::vector<Buf>& bufs,
              const std::function<Launch(const std::vector<void*>&)>& make_launch);
  void issuer_loop();
  bool launch(Op& op);
  std::string enqueue(Op& op);
  std::string run_nccl(Op& op);
  void reap(std::deque<std::shared_ptr<Op>>& in_flight);

  // ---- nccl_wait.cpp ---------------------------------------------------------
  std::string wait_op(Op& op);
  std::string finish_ok(Op& op);
  Span span_of(const Op& op) const;
  void record_host_span(const Op& op);

  // ---- nccl_lifecycle.cpp ----------------------------------------------------
  bool wait_idle(bool give_up_on_failure);
  bool finalize_locked();

  const int rank_;
  const int world_;
  const int index_;  // this rank's GPU
  CudaBackend& cuda_;
  GpuTimer* const timer_;  // null when the backend records nothing
  const std::chrono::milliseconds timeout_;
  FailureBoard& board_;
  const CommErrors errors_;
  P2PLedger* ledger_;  // null with one process per rank (the peers' posts are elsewhere)
  Recorder* const recorder_;

  CommCounters counters_;

  // Lock order: a Work's own mutex (held while wait_op runs, and by reap) and issue_mu_
  // come first; then any one of the mutexes below (and those inside broken_, unwaited_
  // and slots_), none of which is held while taking another.
  std::mutex issue_mu_;  // numbering (seq, per-peer counts) and queueing, as one step
  uint64_t next_seq_ = 1;
  P2PCounters p2p_numbers_;  // sends posted to and recvs posted from each rank

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<std::shared_ptr<Op>> queue_;
  std::atomic<bool> stopping_{false};

  BrokenState broken_;  // the first failure; "" while the comm is healthy

  // Every NCCL call on comm_, which an abort nulls: NCCL calls on one communicator must
  // not overlap, and an aborted communicator may already be freed.
  std::mutex nccl_mu_;
  ncclComm_t comm_ = nullptr;

  UnwaitedWorks unwaited_;
  StagingSlots slots_;

  cudaStream_t stream_ = nullptr;  // the comm stream
  void* barrier_word_ = nullptr;   // one device int for barrier_async

  std::thread issuer_;  // last: starts after everything above exists
};

}  // namespace shardlab::nccl
