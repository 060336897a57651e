// Issuing an NCCL comm's ops: submit() does on the caller's thread what must happen in
// issue order (checks, numbering, staging inputs, an event marking the data ready) and
// queues the op; the issuer thread launches queued ops in order on the comm stream and
// finishes the Works of those that are done.
#include <cstring>

#include "core/clock.h"
#include "core/comm/nccl/nccl_comm.h"

namespace shardlab::nccl {

using std::chrono::microseconds;

// Everything an op needs from the caller's thread: checks, its number, where its
// buffers live, and an event on the compute stream marking its data ready. Then the
// issuer launches it.
Work NcclComm::submit(OpInfo info, int64_t sent, const std::vector<Buf>& bufs,
                      const std::function<Launch(const std::vector<void*>&)>& make_launch) {
  ScopedDevice guard(index_);
  const bool p2p = is_p2p(info.kind);
  auto op = std::make_shared<Op>();
  std::lock_guard<std::mutex> issue_lock(issue_mu_);  // numbering and queue order agree
  if (stopping_.load()) throw CommError(errors_.being_destroyed(info));
  if (const std::string b = broken(); !b.empty()) {
    return finished_work(errors_.after_failure(info, p2p ? "not posted" : "not run", b));
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
    number_p2p(info);
  } else {
    // Every rank issues collectives in the same order, so equal numbers name the same
    // collective on every rank; a rank that times out names those that never got here.
    seq = next_seq_++;
    board_.note_issued(rank_, seq);
  }

  // From here the op is numbered: peers expect it, so a failure breaks the comm.
  auto fail = [&](const std::string& detail) -> CommError {
    const std::string error = errors_.failed(info, seq, detail);
    fail_comm(error);
    return CommError(error);
  };
  auto check = [&](const std::string& cuda_error) {
    if (!cuda_error.empty()) throw fail(cuda_error);
  };
  std::vector<void*> ptrs(bufs.size());
  try {
    if (stage_bytes > 0) op->slot = slots_.acquire(stage_bytes);
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

  check(SHARDLAB_CUDA_ERROR(cudaEventCreateWithFlags(&op->ready, cudaEventDisableTiming)));
  check(SHARDLAB_CUDA_ERROR(cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming)));
  // The caller produced the data (or last used the output) on the compute stream.
  check(SHARDLAB_CUDA_ERROR(cudaEventRecord(op->ready, cuda_.stream())));

  op->info = info;
  op->seq = seq;
  op->sent = sent;
  op->step = recorder_ ? recorder_->step() : -1;
  op->t_issue_ns = now_ns();
  op->launch = make_launch(ptrs);

  auto state = std::make_shared<Work::State>();
  state->complete = [this, op] { return wait_op(*op); };
  track_issue(recorder_, info, *state);
  op->state = state;
  unwaited_.add(state, errors_.prefix(info) + ": never waited on before the comm was destroyed");
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.push_back(op);
  }
  queue_cv_.notify_one();
  return Work(state);
}

// ---------------------------------------------------------------------------
// The issuer thread

// Launches queued ops in order and, while some are in flight, finishes those whose
// done event has happened, so that Work::done() turns true without a wait() (ZeRO and
// FSDP free a gradient as soon as its reduce-scatter is done, as with Gloo).
void NcclComm::issuer_loop() {
  SHARDLAB_CUDA_IGNORE(cudaSetDevice(index_));
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
        for (auto& q : queue_) q->fail(errors_.destroyed_first(q->info));
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
bool NcclComm::launch(Op& op) {
  if (const std::string b = broken(); !b.empty()) {
    op.fail(errors_.after_failure(op.info, "not run", b));
    return false;
  }
  std::string error;
  try {
    error = enqueue(op);
  } catch (const std::exception& e) {  // GpuTimer reports CUDA errors by throwing
    error = errors_.failed(op.info, op.seq, one_line(e.what()));
  }
  if (!error.empty()) {
    fail_comm(error);
    op.fail(error);
    return false;
  }
  op.set_launched();
  return true;
}

// Puts the op on the comm stream: wait for its data, copy staged inputs in, the NCCL
// call(s) inside a timed span, copy staged outputs out, mark done. "" on success.
std::string NcclComm::enqueue(Op& op) {
  auto failed = [&](const std::string& cuda_error) {
    return errors_.failed(op.info, op.seq, cuda_error);
  };
  if (std::string e = SHARDLAB_CUDA_ERROR(cudaStreamWaitEvent(stream_, op.ready, 0)); !e.empty()) {
    return failed(e);
  }
  for (const Staged& s : op.ins) {
    if (std::string e =
            SHARDLAB_CUDA_ERROR(cudaMemcpyAsync(static_cast<char*>(op.slot->dev) + s.offset,
                                                static_cast<char*>(op.slot->host) + s.offset,
                                                s.bytes, cudaMemcpyHostToDevice, stream_));
        !e.empty()) {
      return failed(e);
    }
  }
  const int token = timer_ ? timer_->begin(stream_) : -1;
  // A zero-byte op calls nothing (NCCL would not move anything either) but still shows.
  const std::string error = op.launch ? run_nccl(op) : "";
  // Ended even after a failure: an open span would hold back every later one.
  if (token >= 0) timer_->end(token, stream_, span_of(op));
  if (!error.empty()) return error;
  for (const Staged& s : op.outs) {
    if (std::string e = SHARDLAB_CUDA_ERROR(cudaMemcpyAsync(
            static_cast<char*>(op.slot->host) + s.offset,
            static_cast<char*>(op.slot->dev) + s.offset, s.bytes, cudaMemcpyDeviceToHost, stream_));
        !e.empty()) {
      return failed(e);
    }
  }
  if (std::string e = SHARDLAB_CUDA_ERROR(cudaEventRecord(op.done, stream_)); !e.empty()) {
    return failed(e);
  }
  return "";
}

// A nonblocking communicator may answer ncclInProgress: the op is still being
// enqueued (by NCCL's own thread, e.g. connecting to a peer). Nothing else may be
// issued on the comm until its state is ncclSuccess, and nothing after it may be put
// on the stream (the done event would come before the op).
std::string NcclComm::run_nccl(Op& op) {
  ncclResult_t r = ncclSuccess;
  std::string detail;
  bool aborted = false;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (!comm_) {
      aborted = true;
    } else {
      r = op.launch(comm_, stream_);
      if (r != ncclSuccess && r != ncclInProgress) {
        detail = SHARDLAB_NCCL_FAILED(r, comm_, "the NCCL call");
      }
    }
  }
  if (aborted) return errors_.after_failure(op.info, "not run", broken());
  if (r == ncclSuccess) return "";
  if (r != ncclInProgress) return errors_.failed(op.info, op.seq, detail);

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
        if (state != ncclInProgress) {
          detail = SHARDLAB_NCCL_FAILED(state, comm_, "ncclCommGetAsyncError");
        }
      }
    }
    if (aborted) return errors_.after_failure(op.info, "aborted", broken());
    if (!detail.empty()) return errors_.failed(op.info, op.seq, detail);
    if (stopping_.load()) {
      return errors_.prefix(op.info) + ": still being issued when the comm was destroyed";
    }
    if (board_.any()) return errors_.peer_failed(op.info, start);
    if (SteadyClock::now() >= deadline) return errors_.timed_out(op.info, op.seq);
    backoff.sleep();
  }
}

// Finishes the Works of in-flight ops that are done, oldest first (events on one stream
// complete in order). Failures are left to wait(), which composes their message.
void NcclComm::reap(std::deque<std::shared_ptr<Op>>& in_flight) {
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
      SHARDLAB_CUDA_IGNORE(q);
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

}  // namespace shardlab::nccl
