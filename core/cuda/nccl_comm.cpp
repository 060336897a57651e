// The NCCL backend of Comm: one communicator per rank (a thread with its own GPU), its work
// on a dedicated comm stream, timed by CUDA events. The only file that includes nccl.h.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/comm.h"
#include "core/cuda/cuda_backend.h"
#include "core/gpu.h"
#include "core/work_state.h"

namespace shardlab {

namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// Staged regions start on this boundary, so every dtype is aligned inside a slot.
constexpr size_t kStageAlign = 256;
// The smallest staging slot: a 1-element vote and its like fit many times over.
constexpr size_t kMinSlotBytes = 4096;

// Polling pauses: yields for the first 50 us (a small collective finishes in tens of
// microseconds, less than one sleep takes), then sleeps that grow to 1 ms, so that a long
// wait does not keep a core busy.
class Backoff {
 public:
  void sleep() {
    if (SteadyClock::now() - start_ < microseconds(50)) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, microseconds(1000));
  }

 private:
  SteadyClock::time_point start_ = SteadyClock::now();
  microseconds delay_{20};
};

// NCCL's and CUDA's messages may carry newlines; a CommError is one readable line.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string cuda_text(const char* call, cudaError_t e) {
  (void)cudaGetLastError();  // clear it, so the next call does not report it again
  return std::string(call) + ": " + cudaGetErrorString(e);
}

// The code's text plus NCCL's last message, which says what went wrong (the code alone
// says "unhandled system error"). `comm` may be null.
std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += std::string(": ") + last;
  return one_line(s);
}

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
  }
  return ncclFloat32;
}

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
  std::optional<Entry> post(int src, int dst, const Entry& mine) {
    std::lock_guard<std::mutex> lock(mu_);
    std::deque<Entry>& q = pending_[{src, dst}];
    if (!q.empty() && q.front().is_send != mine.is_send) {
      const Entry other = q.front();
      q.pop_front();
      if (other.tag != mine.tag || other.bytes != mine.bytes || other.n != mine.n) return other;
      return std::nullopt;
    }
    q.push_back(mine);
    return std::nullopt;
  }

 private:
  std::mutex mu_;
  std::map<std::pair<int, int>, std::deque<Entry>> pending_;  // (src, dst) -> the side ahead
};

// ---------------------------------------------------------------------------
// The comm

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
    if (ready) (void)cudaEventDestroy(ready);
    if (done) (void)cudaEventDestroy(done);
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
  NcclComm(int rank, int world, ncclComm_t comm, CudaBackend& cuda, GpuTimer* timer,
           milliseconds timeout, FailureBoard& board, P2PLedger& ledger, Recorder* recorder,
           Allocator* alloc)
      : rank_(rank),
        world_(world),
        index_(cuda.index()),
        cuda_(cuda),
        timer_(timer),
        timeout_(timeout),
        board_(board),
        ledger_(ledger),
        recorder_(recorder),
        alloc_(alloc),
        sent_to_(world, 0),
        received_from_(world, 0),
        comm_(comm) {
    ScopedDevice guard(index_);
    const char* call = "cudaStreamCreateWithFlags";
    cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e == cudaSuccess) {
      call = "cudaMalloc";
      e = cudaMalloc(&barrier_word_, sizeof(int32_t));
    }
    if (e == cudaSuccess) {
      call = "cudaMemset";
      e = cudaMemset(barrier_word_, 0, sizeof(int32_t));
    }
    if (e != cudaSuccess) {
      const std::string what = "setting up the comm: " + cuda_text(call, e);
      if (barrier_word_) (void)cudaFree(barrier_word_);
      if (stream_) (void)cudaStreamDestroy(stream_);
      (void)ncclCommAbort(comm_);
      throw CommError("rank " + std::to_string(rank_) + ": " + what);
    }
    issuer_ = std::thread([this] { issuer_loop(); });
  }

  ~NcclComm() override {
    ScopedDevice guard(index_);
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      stopping_.store(true);
    }
    queue_cv_.notify_all();
    issuer_.join();
    cancel_unwaited();

    // A healthy comm with nothing in flight is finalized (NCCL's clean shutdown); any
    // other is aborted, which also stops kernels still waiting for a peer, so that
    // nothing here waits longer than the timeout.
    const bool idle = wait_idle(/*give_up_on_failure=*/true);
    bool clean = idle && broken().empty() && !board_.any();
    {
      std::lock_guard<std::mutex> lock(nccl_mu_);
      if (comm_) {
        if (clean) clean = finalize_locked();
        if (clean) {
          (void)ncclCommDestroy(comm_);
        } else {
          (void)ncclCommAbort(comm_);
        }
        comm_ = nullptr;
      }
    }
    // Memory the stream may still write is leaked rather than freed under it.
    if (idle || wait_idle(/*give_up_on_failure=*/false)) {
      for (auto& slot : slots_) {
        if (slot->host) (void)cudaFreeHost(slot->host);
        if (slot->dev && slot->tensor.empty()) (void)cudaFree(slot->dev);
        slot->tensor.reset();
      }
      if (barrier_word_) (void)cudaFree(barrier_word_);
    } else {
      for (auto& slot : slots_) (void)slot.release();
    }
    (void)cudaStreamDestroy(stream_);  // returns at once; CUDA frees it when it drains
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend_name() const override { return "nccl"; }
  milliseconds timeout() const override { return timeout_; }
  CommStats stats() const override {
    return CommStats{bytes_sent_.load(std::memory_order_relaxed),
                     ops_.load(std::memory_order_relaxed)};
  }

  Work all_reduce_async(void* buf, size_t count, DType dt, CommMeta meta) override {
    const int64_t bytes = static_cast<int64_t>(count * dtype_size(dt));
    OpInfo op{SpanKind::all_reduce, bytes, meta};
    // Ring: a reduce-scatter then an all-gather, each sending (W-1)/W of the buffer.
    const int64_t sent = world_ == 1 || count == 0 ? 0 : 2 * (world_ - 1) * bytes / world_;
    const ncclDataType_t t = nccl_type(dt);
    return submit(op, sent, {Buf{buf, static_cast<size_t>(bytes), true, true}},
                  [count, t](const std::vector<void*>& p) -> Launch {
                    if (count == 0) return {};
                    return [count, t, b = p[0]](ncclComm_t c, cudaStream_t s) {
                      return ncclAllReduce(b, b, count, t, ncclSum, c, s);
                    };
                  });
  }

  Work reduce_scatter_async(void* in_full, void* out_chunk, std::vector<size_t> counts, DType dt,
                            CommMeta meta) override {
    check_counts("reduce_scatter", counts);
    const size_t es = dtype_size(dt);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    OpInfo op{SpanKind::reduce_scatter, static_cast<int64_t>(total * es), meta};
    // Gloo's ring sends every chunk but this rank's own once.
    const int64_t sent =
        world_ > 1 && total > 0 ? static_cast<int64_t>((total - counts[rank_]) * es) : 0;
    const ncclDataType_t t = nccl_type(dt);
    const bool equal =
        std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; });
    std::vector<size_t> offsets(world_, 0);
    for (int r = 1; r < world_; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
    const int me = rank_;
    return submit(
        op, sent,
        {Buf{in_full, total * es, true, false}, Buf{out_chunk, counts[rank_] * es, false, true}},
        [=](const std::vector<void*>& p) -> Launch {
          if (total == 0) return {};
          auto* in = static_cast<char*>(p[0]);
          void* out = p[1];
          if (equal) {
            return [=](ncclComm_t c, cudaStream_t s) {
              return ncclReduceScatter(in, out, counts[0], t, ncclSum, c, s);
            };
          }
          // Uneven chunks: one reduce per chunk, rooted at the rank that keeps it. A
          // reduce writes its output only on the root, so the other ranks pass their
          // input slice there too (a valid pointer that stays untouched).
          return [=](ncclComm_t c, cudaStream_t s) {
            ncclResult_t first = ncclGroupStart();
            if (first != ncclSuccess) return first;
            for (int r = 0; r < static_cast<int>(counts.size()); ++r) {
              if (counts[r] == 0) continue;
              char* slice = in + offsets[r] * es;
              const ncclResult_t e =
                  ncclReduce(slice, r == me ? out : slice, counts[r], t, ncclSum, r, c, s);
              if (e != ncclSuccess && e != ncclInProgress && first == ncclSuccess) first = e;
            }
            const ncclResult_t end = ncclGroupEnd();  // always closes the group
            return first != ncclSuccess ? first : end;
          };
        });
  }

  Work all_gather_async(const void* in_chunk, void* out_full, std::vector<size_t> counts, DType dt,
                        CommMeta meta) override {
    check_counts("all_gather", counts);
    const size_t es = dtype_size(dt);
    std::vector<size_t> byte_counts(counts.size());
    for (size_t i = 0; i < counts.size(); ++i) byte_counts[i] = counts[i] * es;
    const size_t total = std::accumulate(byte_counts.begin(), byte_counts.end(), size_t{0});
    OpInfo op{SpanKind::all_gather, static_cast<int64_t>(total), meta};
    // Gloo's ring: every chunk but the next rank's own passes through this rank once.
    const int64_t sent = world_ == 1 || total == 0
                             ? 0
                             : static_cast<int64_t>(total - byte_counts[(rank_ + 1) % world_]);
    const bool equal = std::all_of(byte_counts.begin(), byte_counts.end(),
                                   [&](size_t c) { return c == byte_counts[0]; });
    std::vector<size_t> offsets(world_, 0);
    for (int r = 1; r < world_; ++r) offsets[r] = offsets[r - 1] + byte_counts[r - 1];
    const int me = rank_;
    // Bytes as ncclUint8: a gather only copies, whatever the dtype. `in_chunk` may be this
    // rank's slot in `out_full` (ZeRO gathers in place); NCCL allows exactly that alias.
    return submit(
        op, sent,
        {Buf{in_chunk, byte_counts[rank_], true, false}, Buf{out_full, total, false, true}},
        [=](const std::vector<void*>& p) -> Launch {
          if (total == 0) return {};
          const void* in = p[0];
          auto* out = static_cast<char*>(p[1]);
          if (equal) {
            return [=](ncclComm_t c, cudaStream_t s) {
              return ncclAllGather(in, out, byte_counts[0], ncclUint8, c, s);
            };
          }
          // Uneven chunks: each rank broadcasts its chunk into its place; grouped, so NCCL
          // runs them as one operation.
          return [=](ncclComm_t c, cudaStream_t s) {
            ncclResult_t first = ncclGroupStart();
            if (first != ncclSuccess) return first;
            for (int r = 0; r < static_cast<int>(byte_counts.size()); ++r) {
              if (byte_counts[r] == 0) continue;
              char* slot = out + offsets[r];
              const void* src = r == me ? in : slot;  // the source is read on the root only
              const ncclResult_t e = ncclBroadcast(src, slot, byte_counts[r], ncclUint8, r, c, s);
              if (e != ncclSuccess && e != ncclInProgress && first == ncclSuccess) first = e;
            }
            const ncclResult_t end = ncclGroupEnd();
            return first != ncclSuccess ? first : end;
          };
        });
  }

  Work broadcast_async(void* buf, size_t count, DType dt, int root, CommMeta meta) override {
    const size_t bytes = count * dtype_size(dt);
    OpInfo op{SpanKind::broadcast, static_cast<int64_t>(bytes), meta};
    check_rank(op, root, "root");
    const int64_t sent = world_ == 1 || bytes == 0 ? 0
                                                   : broadcast_tree_sends(rank_, root, world_) *
                                                         static_cast<int64_t>(bytes);
    const bool is_root = rank_ == root;
    return submit(op, sent, {Buf{buf, bytes, is_root, !is_root}},
                  [bytes, root](const std::vector<void*>& p) -> Launch {
                    if (bytes == 0) return {};
                    return [bytes, root, b = p[0]](ncclComm_t c, cudaStream_t s) {
                      return ncclBroadcast(b, b, bytes, ncclUint8, root, c, s);
                    };
                  });
  }

  Work reduce_async(void* buf, size_t count, DType dt, int root, CommMeta meta) override {
    const int64_t bytes = static_cast<int64_t>(count * dtype_size(dt));
    OpInfo op{SpanKind::reduce, bytes, meta};
    check_rank(op, root, "root");
    // Gloo's reduce: a ring reduce-scatter, then every non-root sends its chunk to the root.
    const int64_t sent = world_ == 1 || count == 0
                             ? 0
                             : (world_ - 1) * bytes / world_ + (rank_ == root ? 0 : bytes / world_);
    const ncclDataType_t t = nccl_type(dt);
    // In place: NCCL writes the output on the root only, so other ranks' buffers stay as
    // they were, as the contract asks.
    return submit(op, sent, {Buf{buf, static_cast<size_t>(bytes), true, rank_ == root}},
                  [count, t, root](const std::vector<void*>& p) -> Launch {
                    if (count == 0) return {};
                    return [count, t, root, b = p[0]](ncclComm_t c, cudaStream_t s) {
                      return ncclReduce(b, b, count, t, ncclSum, root, c, s);
                    };
                  });
  }

  Work barrier_async() override {
    OpInfo op{SpanKind::barrier, 0, {}};
    // An all-reduce of one int: it completes once every rank has issued it. Its value
    // means nothing (it may wrap), so it needs no reset.
    void* word = barrier_word_;
    return submit(op, 0, {}, [word](const std::vector<void*>&) -> Launch {
      return [word](ncclComm_t c, cudaStream_t s) {
        return ncclAllReduce(word, word, 1, ncclInt32, ncclSum, c, s);
      };
    });
  }

  Work send_async(const void* buf, size_t bytes, int dst, int tag, CommMeta meta) override {
    return post_p2p(SpanKind::send, buf, bytes, dst, tag, meta);
  }

  Work recv_async(void* buf, size_t bytes, int src, int tag, CommMeta meta) override {
    return post_p2p(SpanKind::recv, buf, bytes, src, tag, meta);
  }

 private:
  // ---- messages, as GlooComm words them ------------------------------------

  std::string op_prefix(const OpInfo& op) const { return shardlab::op_prefix(rank_, op); }

  void check_rank(const OpInfo& op, int r, const char* what) const {
    shardlab::check_rank(rank_, world_, op, r, what);
  }

  void check_counts(const char* name, const std::vector<size_t>& counts) const {
    shardlab::check_counts(rank_, world_, name, counts);
  }

  // What the other ranks know: the first failure, else the ranks that never issued this
  // collective. Waits briefly for a report first, since the peer that died usually
  // reports just after this rank notices.
  std::string others_suffix(const OpInfo& op, uint64_t seq) const {
    const auto deadline = SteadyClock::now() + milliseconds(200);
    while (!board_.any() && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    const std::string others = board_.describe();
    const std::string stalled = op.peer < 0 && seq ? board_.behind(seq) : "";
    if (!others.empty()) return " (" + others + ")";
    if (!stalled.empty()) return " waiting for " + stalled;
    return " (no rank reported a failure)";
  }

  std::string describe_timeout(const OpInfo& op, uint64_t seq) const {
    std::ostringstream os;
    os << op_prefix(op) << " timed out after " << timeout_.count() << " ms";
    if (op.peer >= 0) os << " waiting for rank " << op.peer;
    return os.str() + others_suffix(op, seq);
  }

  std::string describe_error(const OpInfo& op, uint64_t seq, const std::string& detail) const {
    std::ostringstream os;
    os << op_prefix(op);
    if (op.peer >= 0) os << (op.kind == SpanKind::send ? " to" : " from") << " rank " << op.peer;
    os << " failed: " << detail;
    return os.str() + others_suffix(op, seq);
  }

  // A peer reported a failure while this op waited: stop now rather than at the timeout,
  // since the run is over and the peer may never issue its side.
  std::string describe_peer_failure(const OpInfo& op, SteadyClock::time_point since) const {
    std::ostringstream os;
    os << op_prefix(op) << " aborted after "
       << std::chrono::duration_cast<milliseconds>(SteadyClock::now() - since).count() << " ms";
    if (op.peer >= 0) os << " waiting for rank " << op.peer;
    os << " (" << board_.describe() << ")";
    return os.str();
  }

  // ---- failure ----------------------------------------------------------------

  std::string broken() const {
    std::lock_guard<std::mutex> lock(state_mu_);
    return broken_;
  }

  // The first failure breaks the comm: after it the ranks' op sequences no longer line
  // up, so every later op is refused. Aborting stops this rank's kernels that wait for
  // peers. Reporting lets the peers stop waiting for this rank at once; only the first
  // failure of the run is reported here, since a peer's failure is already on the board
  // and the caller that catches this error reports it too.
  void fail_comm(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      if (!broken_.empty()) return;
      broken_ = why;
    }
    {
      std::lock_guard<std::mutex> lock(nccl_mu_);
      if (comm_) {
        (void)ncclCommAbort(comm_);  // may return ncclInProgress: the comm is gone either way
        comm_ = nullptr;
      }
    }
    if (!board_.any()) board_.report(rank_, why);
  }

  // NCCL's asynchronous error, "" while there is none (ncclInProgress is an op still
  // being enqueued by the issuer, not an error).
  std::string async_error() {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (!comm_) return "";
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess || state == ncclInProgress) return "";
    return "ncclCommGetAsyncError: " + nccl_text(state, comm_);
  }

  // ---- issuing ------------------------------------------------------------------

  Work post_p2p(SpanKind kind, const void* buf, size_t bytes, int peer, int tag, CommMeta meta) {
    const bool is_send = kind == SpanKind::send;
    OpInfo op{kind, static_cast<int64_t>(bytes), meta, peer, tag};
    check_rank(op, peer, "peer");
    if (peer == rank_) throw CommError(op_prefix(op) + ": peer is this rank");
    if (tag < 0) throw CommError(op_prefix(op) + ": tag must be >= 0");
    // Bytes as ncclUint8. Each send or recv is its own NCCL call, matched with the peer's
    // in issue order (see the class comment).
    return submit(op, is_send ? static_cast<int64_t>(bytes) : 0,
                  {Buf{buf, bytes, is_send, !is_send}},
                  [bytes, peer, is_send](const std::vector<void*>& p) -> Launch {
                    if (bytes == 0) return {};
                    if (is_send) {
                      return [bytes, peer, b = p[0]](ncclComm_t c, cudaStream_t s) {
                        return ncclSend(b, bytes, ncclUint8, peer, c, s);
                      };
                    }
                    return [bytes, peer, b = p[0]](ncclComm_t c, cudaStream_t s) {
                      return ncclRecv(b, bytes, ncclUint8, peer, c, s);
                    };
                  });
  }

  // False for memory NCCL cannot use in place: host memory (pageable or pinned), which
  // is staged. Throws for another GPU's memory, which is a caller's mistake.
  bool usable_in_place(const OpInfo& op, const void* p) const {
    cudaPointerAttributes a{};
    const cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // older runtimes reject plain host pointers this way
      return false;
    }
    if (a.type == cudaMemoryTypeManaged) return true;
    if (a.type != cudaMemoryTypeDevice) return false;
    if (a.device != index_) {
      throw CommError(op_prefix(op) + ": a buffer is on GPU " + std::to_string(a.device) +
                      ", but this rank's GPU is " + std::to_string(index_));
    }
    return true;
  }

  // A free slot of at least `bytes`, or a new one; throws std::runtime_error with what
  // failed. Slots are never freed before the comm is destroyed: freeing device or pinned
  // memory synchronizes the device, which could wait on a collective that waits on this
  // very thread.
  Slot* acquire_slot(size_t bytes) {
    std::lock_guard<std::mutex> lock(slot_mu_);
    Slot* best = nullptr;
    for (Slot* s : free_slots_) {
      if (s->capacity >= bytes && (!best || s->capacity < best->capacity)) best = s;
    }
    if (best) {
      free_slots_.erase(std::find(free_slots_.begin(), free_slots_.end(), best));
      return best;
    }
    auto slot = std::make_unique<Slot>();
    const size_t capacity = std::bit_ceil(std::max(bytes, kMinSlotBytes));
    cudaError_t e = cudaMallocHost(&slot->host, capacity);
    if (e != cudaSuccess) {
      throw std::runtime_error("staging a host buffer: " + cuda_text("cudaMallocHost", e));
    }
    if (alloc_) {
      try {
        slot->tensor =
            alloc_->alloc("comm.nccl.staging", MemCategory::comm_buffers, capacity / 4, DType::f32);
      } catch (const std::exception& ex) {
        (void)cudaFreeHost(slot->host);
        throw std::runtime_error("staging a host buffer: " + one_line(ex.what()));
      }
      slot->dev = slot->tensor.raw();
    } else {
      e = cudaMalloc(&slot->dev, capacity);
      if (e != cudaSuccess) {
        (void)cudaFreeHost(slot->host);
        throw std::runtime_error("staging a host buffer: " + cuda_text("cudaMalloc", e));
      }
    }
    slot->capacity = capacity;
    Slot* raw = slot.get();
    slots_.push_back(std::move(slot));
    return raw;
  }

  void release_slot(Slot* slot) {
    if (!slot) return;
    std::lock_guard<std::mutex> lock(slot_mu_);
    free_slots_.push_back(slot);
  }

  // Everything an op needs from the caller's thread: checks, its number, where its
  // buffers live, and an event on the compute stream marking its data ready. Then the
  // issuer launches it.
  Work submit(OpInfo info, int64_t sent, const std::vector<Buf>& bufs,
              const std::function<Launch(const std::vector<void*>&)>& make_launch) {
    ScopedDevice guard(index_);
    const bool p2p = is_p2p(info.kind);
    auto op = std::make_shared<Op>();
    std::lock_guard<std::mutex> issue_lock(issue_mu_);  // numbering and queue order agree
    if (stopping_.load()) throw CommError(op_prefix(info) + ": comm is being destroyed");
    if (const std::string b = broken(); !b.empty()) {
      return finished_work(op_prefix(info) + (p2p ? ": not posted" : ": not run") +
                           ", an earlier op failed: " + b);
    }

    // Where each buffer lives; nothing is numbered yet, so a bad pointer leaves no trace.
    std::vector<bool> staged(bufs.size(), false);
    size_t stage_bytes = 0;
    for (size_t i = 0; i < bufs.size(); ++i) {
      if (bufs[i].bytes == 0 || usable_in_place(info, bufs[i].ptr)) continue;
      staged[i] = true;
      stage_bytes = (stage_bytes + kStageAlign - 1) / kStageAlign * kStageAlign + bufs[i].bytes;
    }

    uint64_t seq = 0;
    if (p2p) {
      // The message number is taken under the same lock as the queueing, so numbering
      // and NCCL's in-order matching agree; the flow id pairs the two spans in the trace.
      const bool is_send = info.kind == SpanKind::send;
      const int src = is_send ? rank_ : info.peer;
      const int dst = is_send ? info.peer : rank_;
      const uint64_t n = is_send ? ++sent_to_[info.peer] : ++received_from_[info.peer];
      info.flow_id = (static_cast<uint64_t>(src + 1) << 48) |
                     (static_cast<uint64_t>(dst + 1) << 32) | (n & 0xFFFFFFFFull);
      const P2PLedger::Entry mine{is_send, n, info.tag, static_cast<size_t>(info.bytes)};
      if (const auto other = ledger_.post(src, dst, mine)) {
        std::ostringstream os;
        os << op_prefix(info) << (is_send ? " to" : " from") << " rank " << info.peer
           << " does not match rank " << info.peer << "'s " << (other->is_send ? "send" : "recv")
           << " #" << other->n << " (tag " << other->tag << ", " << other->bytes
           << " bytes): NCCL pairs the sends and recvs of two ranks in the order they are "
              "posted, so both ranks must post them in the same order";
        const std::string error = os.str();
        fail_comm(error);
        throw CommError(error);
      }
    } else {
      // Every rank issues collectives in the same order, so equal numbers name the same
      // collective on every rank; a rank that times out names those that never got here.
      seq = next_seq_++;
      board_.note_issued(rank_, seq);
    }

    // From here the op is numbered: peers expect it, so a failure breaks the comm.
    auto fail = [&](const std::string& detail) -> CommError {
      const std::string error = describe_error(info, seq, detail);
      fail_comm(error);
      return CommError(error);
    };
    std::vector<void*> ptrs(bufs.size());
    try {
      if (stage_bytes > 0) op->slot = acquire_slot(stage_bytes);
    } catch (const std::exception& e) {
      throw fail(e.what());
    }
    size_t offset = 0;
    for (size_t i = 0; i < bufs.size(); ++i) {
      ptrs[i] = const_cast<void*>(bufs[i].ptr);
      if (!staged[i]) continue;
      offset = (offset + kStageAlign - 1) / kStageAlign * kStageAlign;
      ptrs[i] = static_cast<char*>(op->slot->dev) + offset;
      const Staged s{const_cast<void*>(bufs[i].ptr), offset, bufs[i].bytes};
      // The host value is taken now, as a device buffer's would be by the ready event.
      if (bufs[i].in) std::memcpy(static_cast<char*>(op->slot->host) + offset, s.user, s.bytes);
      if (bufs[i].in) op->ins.push_back(s);
      if (bufs[i].out) op->outs.push_back(s);
      offset += bufs[i].bytes;
    }

    cudaError_t e = cudaEventCreateWithFlags(&op->ready, cudaEventDisableTiming);
    if (e != cudaSuccess) throw fail(cuda_text("cudaEventCreateWithFlags", e));
    e = cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming);
    if (e != cudaSuccess) throw fail(cuda_text("cudaEventCreateWithFlags", e));
    // The caller produced the data (or last used the output) on the compute stream.
    e = cudaEventRecord(op->ready, cuda_.stream());
    if (e != cudaSuccess) throw fail(cuda_text("cudaEventRecord", e));

    op->info = info;
    op->seq = seq;
    op->sent = sent;
    op->step = recorder_ ? recorder_->step() : -1;
    op->t_issue_ns = now_ns();
    op->launch = make_launch(ptrs);

    auto state = std::make_shared<Work::State>();
    state->complete = [this, op] { return wait_op(*op); };
    op->state = state;
    {
      std::lock_guard<std::mutex> lock(track_mu_);
      std::erase_if(unwaited_, [](const auto& w) { return w.first.expired(); });
      unwaited_.emplace_back(state, op_prefix(info));
    }
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      queue_.push_back(op);
    }
    queue_cv_.notify_one();
    return Work(state);
  }

  // ---- the issuer thread --------------------------------------------------------

  // Launches queued ops in order and, while some are in flight, finishes those whose
  // done event has happened, so that Work::done() turns true without a wait() (ZeRO and
  // FSDP free a gradient as soon as its reduce-scatter is done, as with Gloo).
  void issuer_loop() {
    (void)cudaSetDevice(index_);
    std::deque<std::shared_ptr<Op>> in_flight;  // launched, Work not finished yet
    for (;;) {
      std::shared_ptr<Op> op;
      bool stop = false;
      {
        std::unique_lock<std::mutex> lock(queue_mu_);
        auto ready = [&] { return stopping_.load() || !queue_.empty(); };
        if (in_flight.empty()) {
          queue_cv_.wait(lock, ready);
        } else {
          queue_cv_.wait_for(lock, microseconds(200), ready);
        }
        if (stopping_.load()) {
          // Destroyed with work still queued: it never ran, and says so.
          for (auto& q : queue_) {
            q->fail(op_prefix(q->info) + ": not run, the comm was destroyed first");
          }
          queue_.clear();
          stop = true;
        } else if (!queue_.empty()) {
          op = std::move(queue_.front());
          queue_.pop_front();
        }
      }
      if (op && launch(*op)) in_flight.push_back(std::move(op));
      reap(in_flight);  // last time when stopping: ops already done are not cancelled
      if (stop) return;
    }
  }

  // True when the op is on the stream; otherwise it has failed with its error.
  bool launch(Op& op) {
    if (const std::string b = broken(); !b.empty()) {
      op.fail(op_prefix(op.info) + ": not run, an earlier op failed: " + b);
      return false;
    }
    std::string error;
    try {
      error = enqueue(op);
    } catch (const std::exception& e) {  // GpuTimer reports CUDA errors by throwing
      error = describe_error(op.info, op.seq, one_line(e.what()));
    }
    if (!error.empty()) {
      fail_comm(error);
      op.fail(error);
      return false;
    }
    op.set_launched();
    return true;
  }

  // Finishes the Works of in-flight ops that are done, oldest first (events on one stream
  // complete in order). Failures are left to wait(), which composes their message.
  void reap(std::deque<std::shared_ptr<Op>>& in_flight) {
    while (!in_flight.empty()) {
      Op& op = *in_flight.front();
      std::shared_ptr<Work::State> state = op.state.lock();
      if (!state) {  // its last Work was dropped, which waited for it
        in_flight.pop_front();
        continue;
      }
      auto keep = [&] {
        if (state.use_count() == 1) op.orphan = state;
      };
      const cudaError_t q = cudaEventQuery(op.done);
      if (q == cudaErrorNotReady) return keep();
      if (q != cudaSuccess) {
        (void)cudaGetLastError();
        return keep();
      }
      if (!broken().empty()) {
        // Done after an abort proves nothing: every wait() fails these with the reason.
        in_flight.clear();
        return;
      }
      std::function<std::string()> complete;
      {
        // A waiter holds the lock while it waits, and finishes the op itself.
        std::unique_lock<std::mutex> lock(state->mu, std::try_to_lock);
        if (!lock.owns_lock()) return keep();
        if (!state->finished && state->complete) {
          complete = std::move(state->complete);
          state->complete = nullptr;
          state->error = finish_ok(op);
          state->finished = true;
        }
      }
      state->cv.notify_all();
      in_flight.pop_front();
    }
  }

  Span span_of(const Op& op) const {
    Span span;
    span.rank = rank_;
    span.lane = Lane::comm;
    span.kind = op.info.kind;
    span.layer = op.info.meta.layer;
    span.micro_batch = op.info.meta.micro_batch;
    span.step = op.step;  // resolved later, when the recorder may be on the next step
    span.bytes = op.info.bytes;
    span.peer = op.info.peer;
    span.flow_id = op.info.flow_id;
    return span;
  }

  // Puts the op on the comm stream: wait for its data, copy staged inputs in, the NCCL
  // call(s) inside a timed span, copy staged outputs out, mark done. "" on success.
  std::string enqueue(Op& op) {
    auto cuda_failed = [&](const char* call, cudaError_t e) {
      return describe_error(op.info, op.seq, cuda_text(call, e));
    };
    cudaError_t e = cudaStreamWaitEvent(stream_, op.ready, 0);
    if (e != cudaSuccess) return cuda_failed("cudaStreamWaitEvent", e);
    for (const Staged& s : op.ins) {
      e = cudaMemcpyAsync(static_cast<char*>(op.slot->dev) + s.offset,
                          static_cast<char*>(op.slot->host) + s.offset, s.bytes,
                          cudaMemcpyHostToDevice, stream_);
      if (e != cudaSuccess) return cuda_failed("cudaMemcpyAsync", e);
    }
    const int token = timer_ ? timer_->begin(stream_) : -1;
    // A zero-byte op calls nothing (NCCL would not move anything either) but still shows.
    const std::string error = op.launch ? run_nccl(op) : "";
    // Ended even after a failure: an open span would hold back every later one.
    if (token >= 0) timer_->end(token, stream_, span_of(op));
    if (!error.empty()) return error;
    for (const Staged& s : op.outs) {
      e = cudaMemcpyAsync(static_cast<char*>(op.slot->host) + s.offset,
                          static_cast<char*>(op.slot->dev) + s.offset, s.bytes,
                          cudaMemcpyDeviceToHost, stream_);
      if (e != cudaSuccess) return cuda_failed("cudaMemcpyAsync", e);
    }
    e = cudaEventRecord(op.done, stream_);
    if (e != cudaSuccess) return cuda_failed("cudaEventRecord", e);
    return "";
  }

  // A nonblocking communicator may answer ncclInProgress: the op is still being
  // enqueued (by NCCL's own thread, e.g. connecting to a peer). Nothing else may be
  // issued on the comm until its state is ncclSuccess, and nothing after it may be put
  // on the stream (the done event would come before the op).
  std::string run_nccl(Op& op) {
    ncclResult_t r = ncclSuccess;
    std::string detail;
    bool aborted = false;
    {
      std::lock_guard<std::mutex> lock(nccl_mu_);
      if (!comm_) {
        aborted = true;
      } else {
        r = op.launch(comm_, stream_);
        if (r != ncclSuccess && r != ncclInProgress) detail = nccl_text(r, comm_);
      }
    }
    if (aborted) return op_prefix(op.info) + ": not run, an earlier op failed: " + broken();
    if (r == ncclSuccess) return "";
    if (r != ncclInProgress) return describe_error(op.info, op.seq, detail);

    const auto start = SteadyClock::now();
    const auto deadline = start + timeout_;
    Backoff backoff;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(nccl_mu_);
        if (!comm_) {
          aborted = true;
        } else {
          ncclResult_t state = ncclInProgress;
          const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
          if (q != ncclSuccess) state = q;
          if (state == ncclSuccess) return "";
          if (state != ncclInProgress) detail = nccl_text(state, comm_);
        }
      }
      if (aborted) return op_prefix(op.info) + ": aborted, an earlier op failed: " + broken();
      if (!detail.empty()) return describe_error(op.info, op.seq, detail);
      if (stopping_.load()) {
        return op_prefix(op.info) + ": still being issued when the comm was destroyed";
      }
      if (board_.any()) return describe_peer_failure(op.info, start);
      if (SteadyClock::now() >= deadline) return describe_timeout(op.info, op.seq);
      backoff.sleep();
    }
  }

  // ---- waiting --------------------------------------------------------------------

  // Run by Work::wait() (or when the last Work handle is dropped). Polls the done event
  // rather than synchronizing, so that it can give up: at the timeout, on an NCCL error,
  // or when a peer reports a failure. Any of those aborts the communicator.
  std::string wait_op(Op& op) {
    ScopedDevice guard(index_);
    const auto start = SteadyClock::now();
    const auto deadline = start + timeout_;
    Backoff backoff;
    std::string error;
    for (;;) {
      const Op::Phase phase = op.phase();
      if (phase == Op::Phase::failed) {
        error = op.error();
        break;
      }
      if (phase == Op::Phase::launched) {
        const cudaError_t q = cudaEventQuery(op.done);
        if (q == cudaSuccess) {
          // An abort lets aborted kernels return, so the event also completes after one.
          // The abort marks the comm broken before it happens: seen done and not broken
          // after that means done before any abort.
          const std::string b = broken();
          if (b.empty()) return finish_ok(op);
          error = op_prefix(op.info) + ": aborted, an earlier op failed: " + b;
          break;
        }
        if (q != cudaErrorNotReady) {
          error = describe_error(op.info, op.seq, cuda_text("cudaEventQuery", q));
          fail_comm(error);
          break;
        }
      }
      if (const std::string b = broken(); !b.empty()) {
        error = op_prefix(op.info) + (phase == Op::Phase::queued ? ": not run" : ": aborted") +
                ", an earlier op failed: " + b;
        break;
      }
      if (const std::string detail = async_error(); !detail.empty()) {
        error = describe_error(op.info, op.seq, detail);
        fail_comm(error);
        break;
      }
      if (board_.any()) {
        error = describe_peer_failure(op.info, start);
        fail_comm(error);
        break;
      }
      if (SteadyClock::now() >= deadline) {
        error = describe_timeout(op.info, op.seq);
        fail_comm(error);
        break;
      }
      backoff.sleep();
    }
    // The op's slot is not reused: the stream may still write it (it is freed with the comm).
    record_host_span(op);
    return error;
  }

  std::string finish_ok(Op& op) {
    // Later kernels on the compute stream come after the op even without a host sync.
    const cudaError_t e = cudaStreamWaitEvent(cuda_.stream(), op.done, 0);
    if (e != cudaSuccess) {
      const std::string error =
          describe_error(op.info, op.seq, cuda_text("cudaStreamWaitEvent", e));
      fail_comm(error);
      record_host_span(op);
      return error;
    }
    for (const Staged& s : op.outs) {
      std::memcpy(s.user, static_cast<const char*>(op.slot->host) + s.offset, s.bytes);
    }
    release_slot(op.slot);
    op.slot = nullptr;
    bytes_sent_.fetch_add(op.sent, std::memory_order_relaxed);
    ops_.fetch_add(1, std::memory_order_relaxed);
    record_host_span(op);
    return "";
  }

  // Without a GPU timer (recording off in the backend) but with a recorder, the span is
  // timed on the host: from issue to the moment its completion was seen.
  void record_host_span(const Op& op) {
    if (timer_ || !recorder_) return;
    Span span = span_of(op);
    span.t_begin_ns = op.t_issue_ns;
    span.t_end_ns = now_ns();
    recorder_->add_span(span);
  }

  // ---- shutdown -------------------------------------------------------------------

  // Works that were issued but never waited on point at this comm: fail them now so a
  // late wait() cannot touch it.
  void cancel_unwaited() {
    std::vector<std::pair<std::shared_ptr<Work::State>, std::string>> pending;
    {
      std::lock_guard<std::mutex> lock(track_mu_);
      for (auto& [weak, prefix] : unwaited_) {
        if (auto s = weak.lock()) pending.emplace_back(std::move(s), prefix);
      }
      unwaited_.clear();
    }
    for (auto& [s, prefix] : pending) {
      std::function<std::string()> dropped;
      {
        std::lock_guard<std::mutex> lock(s->mu);
        if (s->finished) continue;
        dropped = std::move(s->complete);
        s->complete = nullptr;
        s->error = prefix + ": never waited on before the comm was destroyed";
        s->finished = true;
      }
      s->cv.notify_all();
    }
  }

  // Waits, at most the timeout, for the comm stream to run dry.
  bool wait_idle(bool give_up_on_failure) {
    const auto deadline = SteadyClock::now() + timeout_;
    Backoff backoff;
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return true;
      if (q != cudaErrorNotReady) {
        (void)cudaGetLastError();
        return false;
      }
      if (give_up_on_failure && (board_.any() || !broken().empty())) return false;
      if (SteadyClock::now() >= deadline) return false;
      backoff.sleep();
    }
  }

  // NCCL's clean shutdown for a nonblocking comm: finalize, then wait (at most the
  // timeout) until its state is ncclSuccess. Called with nccl_mu_ held.
  bool finalize_locked() {
    const ncclResult_t r = ncclCommFinalize(comm_);
    if (r != ncclSuccess && r != ncclInProgress) return false;
    const auto deadline = SteadyClock::now() + timeout_;
    Backoff backoff;
    for (;;) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
      if (q != ncclSuccess) return false;
      if (state == ncclSuccess) return true;
      if (state != ncclInProgress) return false;
      if (SteadyClock::now() >= deadline) return false;
      backoff.sleep();
    }
  }

  const int rank_;
  const int world_;
  const int index_;  // this rank's GPU
  CudaBackend& cuda_;
  GpuTimer* const timer_;  // null when the backend records nothing
  const milliseconds timeout_;
  FailureBoard& board_;
  P2PLedger& ledger_;
  Recorder* const recorder_;
  Allocator* const alloc_;

  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> ops_{0};

  // Lock order: a Work's own mutex (held while wait_op runs, and by reap) and issue_mu_
  // come first; then any one of the mutexes below, none of which is held while taking
  // another.
  std::mutex issue_mu_;  // numbering (seq, per-peer counts) and queueing, as one step
  uint64_t next_seq_ = 1;
  std::vector<uint64_t> sent_to_;        // sends posted to each rank
  std::vector<uint64_t> received_from_;  // recvs posted from each rank

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<std::shared_ptr<Op>> queue_;
  std::atomic<bool> stopping_{false};

  mutable std::mutex state_mu_;
  std::string broken_;  // the first failure; "" while the comm is healthy

  // Every NCCL call on comm_, which an abort nulls: NCCL calls on one communicator must
  // not overlap, and an aborted communicator may already be freed.
  std::mutex nccl_mu_;
  ncclComm_t comm_ = nullptr;

  std::mutex track_mu_;
  std::vector<std::pair<std::weak_ptr<Work::State>, std::string>> unwaited_;

  std::mutex slot_mu_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Slot*> free_slots_;

  cudaStream_t stream_ = nullptr;  // the comm stream
  void* barrier_word_ = nullptr;   // one device int for barrier_async

  std::thread issuer_;  // last: starts after everything above exists
};

// ---------------------------------------------------------------------------
// The group

class NcclGroupImpl final : public NcclGroup {
 public:
  NcclGroupImpl(int world, milliseconds timeout, FailureBoard& failures)
      : world_(world), timeout_(timeout), failures_(failures), joined_(world, false) {
    // Made once and shared by the rank threads: it names this group to NCCL's bootstrap.
    const ncclResult_t r = ncclGetUniqueId(&id_);
    if (r != ncclSuccess) {
      throw CommError("make_nccl_group: ncclGetUniqueId: " + nccl_text(r, nullptr));
    }
  }

  // The comm keeps references to the failure board and the p2p ledger, so the group
  // (and the board) must outlive its comms.
  std::unique_ptr<Comm> connect(int rank, DeviceBackend& device, Recorder* recorder,
                                Allocator* alloc) override {
    if (rank < 0 || rank >= world_) {
      throw CommError("NcclGroup::connect: rank " + std::to_string(rank) +
                      " is not a rank of a group of " + std::to_string(world_));
    }
    const std::string who = "rank " + std::to_string(rank) + ": ";
    const std::string joining = who + "connecting to a group of " + std::to_string(world_);
    auto* cuda = dynamic_cast<CudaBackend*>(&device);
    if (!cuda) {
      throw CommError(joining + " failed: NCCL needs a CUDA device, this rank has " +
                      device.device().str());
    }
    const cudaError_t ce = cudaSetDevice(cuda->index());
    if (ce != cudaSuccess) throw CommError(joining + " failed: " + cuda_text("cudaSetDevice", ce));
    // The backend has a timer only when it records; asking for it otherwise throws.
    GpuTimer* timer = nullptr;
    try {
      timer = &cuda->timer();
    } catch (const std::logic_error&) {
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      joined_[rank] = true;
    }

    // Nonblocking: init returns at once and is polled, so that it can give up at the
    // timeout or when a peer has failed, instead of waiting forever for a rank that
    // will never join.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    auto give_up = [&](const std::string& why) {
      if (comm) (void)ncclCommAbort(comm);
      return CommError(why);
    };
    ncclResult_t r = ncclCommInitRankConfig(&comm, world_, id_, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      throw give_up(joining + " failed: ncclCommInitRankConfig: " + nccl_text(r, comm) + others());
    }
    const auto deadline = SteadyClock::now() + timeout_;
    Backoff backoff;
    for (;;) {
      ncclResult_t state = ncclInProgress;
      r = ncclCommGetAsyncError(comm, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) {
        throw give_up(joining + " failed: " + nccl_text(state, comm) + others());
      }
      if (failures_.any()) {
        throw give_up(joining + " failed: a peer failed while connecting: " + failures_.describe());
      }
      if (SteadyClock::now() >= deadline) {
        const std::string missing = not_joined();
        throw give_up(joining + " timed out after " + std::to_string(timeout_.count()) + " ms" +
                      (missing.empty() ? "" : " (" + missing + " never connected)"));
      }
      backoff.sleep();
    }
    // The constructor aborts `comm` itself if it fails.
    return std::make_unique<NcclComm>(rank, world_, comm, *cuda, timer, timeout_, failures_,
                                      ledger_, recorder, alloc);
  }

 private:
  std::string others() const {
    const std::string d = failures_.describe();
    return d.empty() ? "" : " (" + d + ")";
  }

  // "rank 2, rank 3": the ranks that have not called connect yet.
  std::string not_joined() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (int r = 0; r < world_; ++r) {
      if (!joined_[r]) out += (out.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r);
    }
    return out;
  }

  const int world_;
  const milliseconds timeout_;
  FailureBoard& failures_;
  ncclUniqueId id_{};
  std::mutex mu_;
  std::vector<bool> joined_;
  P2PLedger ledger_;
};

}  // namespace

std::unique_ptr<NcclGroup> make_nccl_group(int world, std::chrono::milliseconds timeout,
                                           FailureBoard& failures) {
  if (world <= 0) {
    throw CommError("make_nccl_group: world must be positive, got " + std::to_string(world));
  }
  return std::make_unique<NcclGroupImpl>(world, timeout, failures);
}

}  // namespace shardlab
