// The Gloo backend of Comm: ranks are threads sharing one rendezvous store and
// one TCP device on 127.0.0.1. The only file that includes Gloo headers.
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/clock.h"
#include "core/comm/comm.h"
#include "core/comm/comm_common.h"
#include "core/comm/work_state.h"
#include "kernels/precision.h"

namespace shardlab {

namespace {

// Gloo builds its slots as (prefix << 56) | (tag << 24) with prefixes 0x01-0x08;
// our own algorithms use prefixes far from those so they can never match.
constexpr uint64_t kReduceScatterSlot = 0xF1ull << 56;
constexpr uint64_t kP2PSlot = 0xF2ull << 56;

void sum_f32(void* out, const void* a, const void* b, size_t n) {
  // No __restrict: Gloo passes out == a.
  float* o = static_cast<float*>(out);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

// bf16/fp16 travel as 2 bytes and are summed in fp32, rounded once per add.
void sum_bf16(void* out, const void* a, const void* b, size_t n) {
  kernels::sum_bf16(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
                    static_cast<const uint16_t*>(b), n);
}
void sum_fp16(void* out, const void* a, const void* b, size_t n) {
  kernels::sum_fp16(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
                    static_cast<const uint16_t*>(b), n);
}
using SumFn = void (*)(void*, const void*, const void*, size_t);
SumFn sum_for(DType dt) {
  switch (dt) {
    case DType::f32:
      return &sum_f32;
    case DType::bf16:
      return &sum_bf16;
    case DType::f16:
      return &sum_fp16;
  }
  return &sum_f32;
}

// Gloo messages carry "[/path/file.cc:123] " prefixes and sometimes newlines;
// a CommError is one readable line.
std::string clean_gloo_message(std::string msg) {
  for (size_t open = msg.find('['); open != std::string::npos; open = msg.find('[', open)) {
    const size_t close = msg.find("] ", open);
    if (close == std::string::npos) break;
    const std::string inside = msg.substr(open, close - open);
    if (inside.find(':') != std::string::npos && inside.find('/') != std::string::npos) {
      msg.erase(open, close + 2 - open);
    } else {
      open = close;
    }
  }
  return one_line(std::move(msg));
}

bool mentions_timeout(const std::string& msg) {
  std::string lower = msg;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

// A reusable scratch buffer: accounted in the allocator when there is one.
class Scratch {
 public:
  void* ensure(Allocator* alloc, const char* name, size_t bytes) {
    if (bytes <= capacity_) return ptr_;
    if (alloc) {
      // Gloo reads and writes it from the host: on a device whose memory the
      // host cannot touch (a GPU, the guarded CPU) it lives in the host pool.
      // (A GPU's is known up front: then no device block is ever made here, on
      // the comm's worker thread.)
      const Pool pool =
          alloc->backend().device().kind == DeviceKind::cuda ? Pool::host : Pool::device;
      tensor_ = alloc->alloc(name, MemCategory::comm_buffers, (bytes + 3) / 4, DType::f32, pool);
      if (pool == Pool::device && alloc->backend().is_device_pointer(tensor_.raw()))
        tensor_ =
            alloc->alloc(name, MemCategory::comm_buffers, (bytes + 3) / 4, DType::f32, Pool::host);
      ptr_ = tensor_.raw();
      capacity_ = tensor_.bytes();
    } else {
      vec_.assign(bytes, 0);
      ptr_ = vec_.data();
      capacity_ = bytes;
    }
    return ptr_;
  }

 private:
  Tensor tensor_;
  std::vector<uint8_t> vec_;
  void* ptr_ = nullptr;
  size_t capacity_ = 0;
};

class GlooComm final : public Comm {
 public:
  GlooComm(int rank, int world, std::shared_ptr<gloo::Context> ctx,
           std::chrono::milliseconds timeout, FailureBoard& board, Recorder* recorder,
           Allocator* alloc, const CommGroup& group)
      : Comm(group),
        rank_(rank),
        world_(world),
        ctx_(std::move(ctx)),
        timeout_(timeout),
        errors_(rank, timeout, board, group),
        board_(board),
        recorder_(recorder),
        alloc_(alloc),
        p2p_numbers_(world) {
    worker_ = std::thread([this] { worker_loop(); });
    listener_ = board_.add_listener([this] { abort_p2p_waits(); });
  }

  ~GlooComm() override {
    board_.remove_listener(listener_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
    // Sends/recvs that were posted but never waited on hold a Gloo buffer and a
    // pointer to this comm: fail them now so a late wait() cannot touch either.
    unwaited_p2p_.cancel_all();
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend_name() const override { return "gloo"; }

  // A rank of the run failed: every send and receive this rank is blocked in
  // returns (aborted), and none waits from now on. The run is ending; a peer
  // that stopped may never complete them.
  void abort_p2p_waits() {
    std::lock_guard<std::mutex> lock(waiting_mu_);
    p2p_aborted_ = true;
    for (const auto& [ubuf, is_send] : waiting_) {
      if (is_send)
        ubuf->abortWaitSend();
      else
        ubuf->abortWaitRecv();
    }
  }
  void close_connections() override {
    try {
      ctx_->closeConnections();
    } catch (const std::exception&) {
      // Already broken: nothing more to close.
    }
    // A send or receive posted ahead and never waited for (a pipeline's next
    // micro-batch) fails now rather than holding its owner's teardown until
    // the timeout; Gloo's buffer for it is kept, not freed.
    std::lock_guard<std::mutex> lock(kept_mu_);
    unwaited_p2p_.abandon_all(
        "rank " + std::to_string(group().global(rank_)) + ": connections closed after a failure",
        kept_);
  }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  CommStats stats() const override { return counters_.stats(); }

  Work all_reduce_async(void* buf, size_t count, DType dt, CommMeta meta) override {
    const int64_t bytes = static_cast<int64_t>(count * dtype_size(dt));
    OpInfo op{SpanKind::all_reduce, bytes, meta};
    return enqueue(op, [this, buf, count, bytes, dt](uint64_t seq) {
      if (world_ == 1 || count == 0) return;
      auto opts_owner = std::make_shared<gloo::AllreduceOptions>(ctx_);
      const KeepOnThrow keep(*this, opts_owner);
      auto& opts = *opts_owner;
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      if (dt == DType::f32)
        opts.setOutput(static_cast<float*>(buf), count);
      else
        opts.setOutput(static_cast<uint16_t*>(buf), count);
      opts.setReduceFunction(sum_for(dt));
      opts.setTag(static_cast<uint32_t>(seq));
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
      counters_.add_sent(all_reduce_sent(world_, bytes));
    });
  }

  Work reduce_scatter_async(void* in_full, void* out_chunk, std::vector<size_t> counts, DType dt,
                            CommMeta meta) override {
    check_counts("reduce_scatter", counts);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    OpInfo op{SpanKind::reduce_scatter, static_cast<int64_t>(total * dtype_size(dt)), meta};
    return enqueue(op, [this, in_full, out_chunk, dt, counts = std::move(counts)](uint64_t seq) {
      ring_reduce_scatter(static_cast<char*>(in_full), static_cast<char*>(out_chunk), counts, dt,
                          seq);
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
    return enqueue(
        op, [this, in_chunk, out_full, byte_counts = std::move(byte_counts), total](uint64_t seq) {
          auto* out = static_cast<uint8_t*>(out_full);
          const auto* in = static_cast<const uint8_t*>(in_chunk);
          const size_t offset =
              std::accumulate(byte_counts.begin(), byte_counts.begin() + rank_, size_t{0});
          const bool in_place = in == out + offset;
          if (world_ == 1) {
            if (!in_place && byte_counts[0] > 0) std::memmove(out, in, byte_counts[0]);
            return;
          }
          if (total == 0) return;
          // Gloo's allgatherv takes bytes as elements; the dtype does not matter to a copy.
          auto opts_owner = std::make_shared<gloo::AllgathervOptions>(ctx_);
          const KeepOnThrow keep(*this, opts_owner);
          auto& opts = *opts_owner;
          if (!in_place && byte_counts[rank_] > 0) {
            opts.setInput(const_cast<uint8_t*>(in), byte_counts[rank_]);
          }
          opts.setOutput(out, byte_counts);
          opts.setTag(static_cast<uint32_t>(seq));
          opts.setTimeout(timeout_);
          gloo::allgatherv(opts);
          counters_.add_sent(all_gather_sent(rank_, world_, byte_counts));
        });
  }

  Work broadcast_async(void* buf, size_t count, DType dt, int root, CommMeta meta) override {
    const size_t bytes = count * dtype_size(dt);
    OpInfo op{SpanKind::broadcast, static_cast<int64_t>(bytes), meta};
    check_rank(op, root, "root");
    return enqueue(op, [this, buf, bytes, root](uint64_t seq) {
      if (world_ == 1 || bytes == 0) return;
      auto opts_owner = std::make_shared<gloo::BroadcastOptions>(ctx_);
      const KeepOnThrow keep(*this, opts_owner);
      auto& opts = *opts_owner;
      opts.setOutput(static_cast<uint8_t*>(buf), bytes);
      opts.setRoot(root);
      opts.setTag(static_cast<uint32_t>(seq));
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
      counters_.add_sent(broadcast_sent(rank_, root, world_, static_cast<int64_t>(bytes)));
    });
  }

  Work reduce_async(void* buf, size_t count, DType dt, int root, CommMeta meta) override {
    const int64_t bytes = static_cast<int64_t>(count * dtype_size(dt));
    OpInfo op{SpanKind::reduce, bytes, meta};
    check_rank(op, root, "root");
    return enqueue(op, [this, buf, count, bytes, root, dt](uint64_t seq) {
      if (world_ == 1 || count == 0) return;
      auto opts_owner = std::make_shared<gloo::ReduceOptions>(ctx_);
      const KeepOnThrow keep(*this, opts_owner);
      auto& opts = *opts_owner;
      // Gloo's typed setters only record the element size: 2-byte types go as uint16_t.
      auto set = [&](auto* data, auto* scratch) {
        if (rank_ == root) {
          opts.setOutput(data, count);  // in place
        } else {
          // Gloo's reduce writes partial sums into the output on every rank; the
          // contract is that non-root buffers stay as they were, hence a scratch output.
          opts.setInput(data, count);
          opts.setOutput(scratch, count);
        }
      };
      void* scratch = rank_ == root ? nullptr
                                    : reduce_scratch_.ensure(alloc_, "comm.reduce.scratch",
                                                             count * dtype_size(dt));
      if (dt == DType::f32)
        set(static_cast<float*>(buf), static_cast<float*>(scratch));
      else
        set(static_cast<uint16_t*>(buf), static_cast<uint16_t*>(scratch));
      opts.setRoot(root);
      opts.setReduceFunction(sum_for(dt));
      opts.setTag(static_cast<uint32_t>(seq));
      opts.setTimeout(timeout_);
      gloo::reduce(opts);
      counters_.add_sent(reduce_sent(rank_, root, world_, bytes));
    });
  }

  Work barrier_async() override {
    OpInfo op{SpanKind::barrier, 0, {}};
    return enqueue(op, [this](uint64_t seq) {
      if (world_ == 1) return;
      auto opts_owner = std::make_shared<gloo::BarrierOptions>(ctx_);
      const KeepOnThrow keep(*this, opts_owner);
      auto& opts = *opts_owner;
      opts.setTag(static_cast<uint32_t>(seq));
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

  Work send_async(const void* buf, size_t bytes, int dst, int tag, CommMeta meta) override {
    return post_p2p(SpanKind::send, const_cast<void*>(buf), bytes, dst, tag, meta);
  }

  Work recv_async(void* buf, size_t bytes, int src, int tag, CommMeta meta) override {
    return post_p2p(SpanKind::recv, buf, bytes, src, tag, meta);
  }

 private:
  struct Task {
    std::shared_ptr<Work::State> state;
    OpInfo op;
    uint64_t seq = 0;
    std::function<void(uint64_t)> body;
  };

  std::string op_prefix(const OpInfo& op) const { return errors_.prefix(op); }

  void check_rank(const OpInfo& op, int r, const char* what) const {
    shardlab::check_rank(rank_, world_, op, r, what);
  }

  void check_counts(const char* name, const std::vector<size_t>& counts) const {
    shardlab::check_counts(rank_, world_, name, counts);
  }

  // Composes the one-line error for a failed op (Gloo reports a timeout as an
  // exception whose text says so).
  std::string describe_failure(const OpInfo& op, const std::string& detail) const {
    const uint64_t seq = running_seq_.load();
    return mentions_timeout(detail) ? errors_.timed_out(op, seq) : errors_.failed(op, seq, detail);
  }

  // Call inside a catch block: turns whatever Gloo threw into a CommError.
  std::string translate_current(const OpInfo& op) const {
    std::string detail;
    try {
      throw;
    } catch (const CommError& e) {
      return e.what();
    } catch (const gloo::IoException& e) {
      detail = e.what();
    } catch (const gloo::Exception& e) {
      detail = e.what();
    } catch (const gloo::EnforceNotMet& e) {
      detail = e.what();
    } catch (const std::exception& e) {
      detail = e.what();
    } catch (...) {
      detail = "unknown error";
    }
    return describe_failure(op, clean_gloo_message(detail));
  }

  void record(const OpInfo& op, int64_t t_begin, int64_t t_end) {
    if (!recorder_) return;
    Span span = comm_span(group(), rank_, op);
    span.t_begin_ns = t_begin;
    span.t_end_ns = t_end;
    recorder_->add_span(span);
  }

  // ---- collectives: FIFO on one worker thread, like a stream -------------

  Work enqueue(const OpInfo& op, std::function<void(uint64_t)> body) {
    auto state = std::make_shared<Work::State>();
    track_issue(recorder_, op, *state);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) throw CommError(errors_.being_destroyed(op));
      // Every rank issues collectives in the same order, so equal sequence
      // numbers (used as Gloo tags) name the same collective on every rank.
      // (The board counts the world's collectives: a group's have their own numbers.)
      if (group().id == 0) board_.note_issued(rank_, next_seq_);
      queue_.push_back(Task{state, op, next_seq_++, std::move(body)});
    }
    cv_.notify_one();
    return Work(state);
  }

  void worker_loop() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) {
          // Destroyed with work still queued: it never ran, and says so.
          for (auto& t : queue_) {
            t.state->finish(errors_.destroyed_first(t.op));
          }
          queue_.clear();
          return;
        }
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      run(task);
    }
  }

  void run(Task& task) {
    if (const std::string broken = broken_.get(); !broken.empty()) {
      task.state->finish(errors_.after_failure(task.op, "not run", broken));
      return;
    }
    std::string error;
    const int64_t t_begin = now_ns();
    running_seq_.store(task.seq);
    board_.note_comm(true);
    try {
      task.body(task.seq);
      counters_.add_op();
    } catch (...) {
      error = translate_current(task.op);
    }
    board_.note_comm(false);
    record(task.op, t_begin, now_ns());
    if (!error.empty()) broken_.set(error);
    task.body = nullptr;  // drop captured buffers before anyone is woken
    task.state->finish(error);
  }

  // Ring reduce-scatter on unbound buffers. Gloo has no options-style
  // reduce-scatter, and its old ReduceScatterHalvingDoubling class slows every
  // later call on the same context 20-100x. At step s rank r receives chunk
  // (r-s-2) from prev, sends its partial sum of chunk (r-s-1) to next, and adds
  // what it received; after W-1 steps chunk r holds the sum over all ranks.
  void ring_reduce_scatter(char* in, char* out, const std::vector<size_t>& counts, DType dt,
                           uint64_t seq) {
    const int w = world_;
    const size_t es = dtype_size(dt);
    const SumFn sum = sum_for(dt);
    std::vector<size_t> offsets(w, 0);
    for (int i = 1; i < w; ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
    const size_t total = offsets[w - 1] + counts[w - 1];
    if (w > 1 && total > 0) {
      const size_t max_chunk = *std::max_element(counts.begin(), counts.end());
      auto* scratch = static_cast<char*>(
          rs_scratch_.ensure(alloc_, "comm.reduce_scatter.scratch", max_chunk * es));
      std::shared_ptr<gloo::transport::UnboundBuffer> in_buf =
          ctx_->createUnboundBuffer(in, total * es);
      std::shared_ptr<gloo::transport::UnboundBuffer> tmp_buf =
          ctx_->createUnboundBuffer(scratch, max_chunk * es);
      const KeepOnThrow keep_in(*this, in_buf), keep_tmp(*this, tmp_buf);
      const int next = (rank_ + 1) % w;
      const int prev = (rank_ + w - 1) % w;
      for (int s = 0; s < w - 1; ++s) {
        const int recv_idx = ((rank_ - s - 2) % w + w) % w;
        const int send_idx = ((rank_ - s - 1) % w + w) % w;
        const uint64_t slot =
            kReduceScatterSlot | ((seq & 0xFFFFFFFFFFFFull) << 8) | static_cast<uint64_t>(s);
        const size_t recv_bytes = counts[recv_idx] * es;
        const size_t send_bytes = counts[send_idx] * es;
        // Empty chunks are skipped on both sides: both know every count.
        if (recv_bytes > 0) tmp_buf->recv(prev, slot, 0, recv_bytes);
        if (send_bytes > 0) in_buf->send(next, slot, offsets[send_idx] * es, send_bytes);
        if (recv_bytes > 0) {
          if (!tmp_buf->waitRecv(timeout_)) throw CommError(op_name_abort("recv"));
          char* acc = in + offsets[recv_idx] * es;
          sum(acc, acc, scratch, counts[recv_idx]);
        }
        if (send_bytes > 0) {
          if (!in_buf->waitSend(timeout_)) throw CommError(op_name_abort("send"));
          counters_.add_sent(static_cast<int64_t>(send_bytes));
        }
      }
    }
    const char* mine = in + offsets[rank_] * es;
    if (counts[rank_] > 0 && mine != out) std::memmove(out, mine, counts[rank_] * es);
  }

  std::string op_name_abort(const char* what) const {
    return "rank " + std::to_string(group().global(rank_)) + ": reduce_scatter " + what +
           " was aborted";
  }

  // ---- point-to-point: posted on the caller's thread ------------------------
  // Posting never blocks, so two ranks that both send and then receive do not
  // deadlock; the wait (and its timeout) happens in Work::wait().

  Work post_p2p(SpanKind kind, void* buf, size_t bytes, int peer, int tag, CommMeta meta) {
    const bool is_send = kind == SpanKind::send;
    OpInfo op{kind, static_cast<int64_t>(bytes), meta, peer, tag};
    check_p2p(rank_, world_, op);
    auto state = std::make_shared<Work::State>();
    if (const std::string broken = broken_.get(); !broken.empty()) {
      state->finish(errors_.after_failure(op, "not posted", broken));
      return Work(state);
    }
    std::shared_ptr<gloo::transport::UnboundBuffer> ubuf = ctx_->createUnboundBuffer(buf, bytes);
    const uint64_t slot = kP2PSlot | static_cast<uint32_t>(tag);
    const int64_t t_begin = now_ns();
    std::exception_ptr post_error;
    {
      // The message number is taken under the same lock as the post, so that
      // numbering and Gloo's in-order matching agree even with several posters.
      std::lock_guard<std::mutex> lock(p2p_mu_);
      // Flow ids name the run's ranks: two groups' messages never share one.
      const int src = group().global(is_send ? rank_ : peer);
      const int dst = group().global(is_send ? peer : rank_);
      op.flow_id = p2p_flow_id(src, dst, p2p_numbers_.next(is_send, peer));
      try {
        if (is_send) {
          ubuf->send(peer, slot);
        } else {
          ubuf->recv(peer, slot);
        }
      } catch (...) {
        post_error = std::current_exception();
      }
    }
    if (post_error) {
      std::string error;
      try {
        std::rethrow_exception(post_error);
      } catch (...) {
        error = translate_current(op);  // outside p2p_mu_: it may wait for a failure report
      }
      broken_.set(error);
      state->finish(error);
      return Work(state);
    }
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->complete = [this, ubuf, op, t_begin, is_send] {
        std::string error;
        board_.note_comm(true);
        try {
          // Registered while it waits, so that a failure anywhere in the run
          // wakes it (abort_p2p_waits): Gloo may never fail a send to a peer
          // that closed its connections.
          const auto since = std::chrono::steady_clock::now();
          bool listed = false;
          {
            std::lock_guard<std::mutex> lock(waiting_mu_);
            if (!p2p_aborted_) {
              waiting_.push_back({ubuf.get(), is_send});
              listed = true;
            }
          }
          // Off the list however the wait ends (it throws when a peer's
          // connection breaks): the list holds no buffer past its wait. (An
          // abort between listing and waiting makes the wait return at once.)
          struct Unlist {
            GlooComm& c;
            std::pair<gloo::transport::UnboundBuffer*, bool> entry;
            ~Unlist() {
              std::lock_guard<std::mutex> lock(c.waiting_mu_);
              auto it = std::find(c.waiting_.begin(), c.waiting_.end(), entry);
              if (it != c.waiting_.end()) c.waiting_.erase(it);
            }
          } unlist{*this, {ubuf.get(), is_send}};
          const bool ok = listed && (is_send ? ubuf->waitSend(timeout_) : ubuf->waitRecv(timeout_));
          if (!ok)  // woken by a failure in the run (abort_p2p_waits), or aborted
            throw CommError(board_.any() ? errors_.peer_failed(op, since)
                                         : op_prefix(op) + ": aborted");
          if (is_send) counters_.add_sent(op.bytes);
          counters_.add_op();
        } catch (...) {
          error = translate_current(op);
        }
        board_.note_comm(false);
        record(op, t_begin, now_ns());
        if (!error.empty()) broken_.set(error);
        return error;
      };
    }
    track_issue(recorder_, op, *state);
    unwaited_p2p_.add(state, "rank " + std::to_string(group().global(rank_)) +
                                 ": send/recv never waited on before the comm was destroyed");
    return Work(state);
  }

  // When a Gloo op throws (a peer closed its connection, a timeout), Gloo's
  // transport thread may still be signalling that op's buffers; freeing them at
  // once races with it (ThreadSanitizer saw pthread_cond_destroy against
  // UnboundBuffer::signalException). A failed op's buffers are therefore kept
  // until this communicator is destroyed; a failed comm runs nothing more.
  class KeepOnThrow {
   public:
    KeepOnThrow(GlooComm& comm, std::shared_ptr<void> held)
        : comm_(comm), held_(std::move(held)), unwinding_(std::uncaught_exceptions()) {}
    ~KeepOnThrow() {
      if (std::uncaught_exceptions() <= unwinding_) return;
      std::lock_guard<std::mutex> lock(comm_.kept_mu_);
      comm_.kept_.push_back(std::move(held_));
    }
    KeepOnThrow(const KeepOnThrow&) = delete;
    KeepOnThrow& operator=(const KeepOnThrow&) = delete;

   private:
    GlooComm& comm_;
    std::shared_ptr<void> held_;
    const int unwinding_;
  };
  std::mutex kept_mu_;
  // The sends and receives this rank is blocked in (abort_p2p_waits), and
  // whether a failure in the run has stopped them.
  std::mutex waiting_mu_;
  std::vector<std::pair<gloo::transport::UnboundBuffer*, bool>> waiting_;  // (buffer, is_send)
  std::atomic<bool> p2p_aborted_{false};
  int listener_ = -1;                        // on board_'s list
  std::vector<std::shared_ptr<void>> kept_;  // declared before ctx_: freed after it

  const int rank_;
  const int world_;
  std::shared_ptr<gloo::Context> ctx_;
  const std::chrono::milliseconds timeout_;
  const CommErrors errors_;
  FailureBoard& board_;
  std::atomic<uint64_t> running_seq_{
      0};  // the collective the worker is running, for error messages
  Recorder* const recorder_;
  Allocator* const alloc_;

  CommCounters counters_;
  BrokenState broken_;  // the first failure

  // Worker queue.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  uint64_t next_seq_ = 1;

  std::mutex p2p_mu_;        // numbering and posting, as one step
  P2PCounters p2p_numbers_;  // sends posted to and recvs posted from each rank
  UnwaitedWorks unwaited_p2p_;

  // Touched only by the worker thread.
  Scratch rs_scratch_;
  Scratch reduce_scratch_;

  std::thread worker_;  // last: starts after everything above exists
};

}  // namespace

// ---------------------------------------------------------------------------
// GlooGroup

namespace {

// Rendezvous waits in short slices and gives up as soon as any rank of the
// group has reported a failure: a rank that dies before connecting then fails
// its peers at once instead of after the whole timeout.
class FailFastStore final : public gloo::rendezvous::Store {
 public:
  FailFastStore(gloo::rendezvous::Store& inner, const FailureBoard& failures)
      : inner_(inner), failures_(failures) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    inner_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, kDefaultTimeout);
    return inner_.get(key);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      try {
        inner_.wait(keys,
                    std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(50)));
        return;
      } catch (const std::exception&) {
        if (failures_.any())
          throw CommError("a peer failed while connecting: " + failures_.describe());
        if (std::chrono::steady_clock::now() >= deadline) throw;
      }
    }
  }

 private:
  gloo::rendezvous::Store& inner_;
  const FailureBoard& failures_;
};

}  // namespace

struct GlooGroup::Impl {
  gloo::rendezvous::HashStore hash_store;  // used when the ranks are threads of this process
  std::unique_ptr<gloo::rendezvous::PrefixStore> prefixed;
  std::unique_ptr<FailFastStore> store;
  // One device means one event loop thread for every rank of the process.
  std::shared_ptr<gloo::transport::Device> device;
};

namespace {

void check_world(int world) {
  if (world <= 0)
    throw CommError("GlooGroup: world must be positive, got " + std::to_string(world));
  // Gloo writes to sockets without MSG_NOSIGNAL in places: when a failed rank
  // closes its connections, a peer's write would raise SIGPIPE and kill the
  // whole process instead of failing that rank's collective with an error.
  static std::once_flag ignore_sigpipe;
  std::call_once(ignore_sigpipe, [] { std::signal(SIGPIPE, SIG_IGN); });
}

std::shared_ptr<gloo::transport::Device> make_device(const std::string& host) {
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw CommError("GlooGroup: cannot create a TCP device on " + host + ": " +
                    clean_gloo_message(e.what()));
  }
}

}  // namespace

GlooGroup::GlooGroup(int world, GlooGroupOptions options)
    : world_(world),
      options_(options),
      failures_(options.failures ? *options.failures : own_failures_),
      impl_(std::make_unique<Impl>()) {
  check_world(world);
  // A unique prefix per group keeps keys apart if a store is ever shared.
  static std::atomic<uint64_t> next_group{0};
  impl_->prefixed = std::make_unique<gloo::rendezvous::PrefixStore>(
      "shardlab.group." + std::to_string(next_group.fetch_add(1)), impl_->hash_store);
  impl_->store = std::make_unique<FailFastStore>(*impl_->prefixed, failures_);
  impl_->device = make_device(options_.bind_host);
}

GlooGroup::GlooGroup(int world, GlooGroupOptions options, gloo::rendezvous::Store& store,
                     const std::string& prefix)
    : world_(world),
      options_(options),
      failures_(options.failures ? *options.failures : own_failures_),
      impl_(std::make_unique<Impl>()) {
  check_world(world);
  impl_->prefixed = std::make_unique<gloo::rendezvous::PrefixStore>(prefix, store);
  impl_->store = std::make_unique<FailFastStore>(*impl_->prefixed, failures_);
  impl_->device = make_device(options_.bind_host);
}

GlooGroup::~GlooGroup() = default;

// The comm keeps a reference to the group's failure board, so the board (the
// run's, or the group's own) must outlive its comms (the device and contexts are shared_ptrs and
// need nothing).
std::unique_ptr<Comm> GlooGroup::connect(int rank, Recorder* recorder, Allocator* alloc,
                                         const CommGroup& group) {
  if (!group.ranks.empty() && group.ranks.size() != static_cast<size_t>(world_))
    throw CommError("GlooGroup::connect: " + group.name + " names " +
                    std::to_string(group.ranks.size()) + " ranks for a group of " +
                    std::to_string(world_));
  if (rank < 0 || rank >= world_) {
    throw CommError("GlooGroup::connect: rank " + std::to_string(rank) +
                    " is not a rank of a group of " + std::to_string(world_));
  }
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world_);
  ctx->setTimeout(options_.timeout);
  try {
    ctx->connectFullMesh(*impl_->store, impl_->device);
  } catch (const std::exception& e) {
    const std::string others = failures_.describe();
    throw CommError("rank " + std::to_string(group.global(rank)) + ": connecting to " +
                    (group.id ? group.name : "a group of " + std::to_string(world_)) + " failed: " +
                    clean_gloo_message(e.what()) + (others.empty() ? "" : " (" + others + ")"));
  }
  return std::make_unique<GlooComm>(rank, world_, std::move(ctx), options_.timeout, failures_,
                                    recorder, alloc, group);
}

}  // namespace shardlab
