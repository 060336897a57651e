// Completion of an NCCL comm's ops: a wait() polls the op's done event (so that it can
// give up at the timeout, on an NCCL error, or when a peer fails), and a finished op
// hands its staged outputs back, counts its bytes, and records its span.
#include <cstring>

#include "core/clock.h"
#include "core/comm/nccl/nccl_comm.h"

namespace shardlab::nccl {

// Run by Work::wait() (or when the last Work handle is dropped). Polls the done event
// rather than synchronizing, so that it can give up: at the timeout, on an NCCL error,
// or when a peer reports a failure. Any of those aborts the communicator.
std::string NcclComm::wait_op(Op& op) {
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
        error = errors_.after_failure(op.info, "aborted", b);
        break;
      }
      if (q != cudaErrorNotReady) {
        error = errors_.failed(op.info, op.seq, SHARDLAB_CUDA_FAILED(q, "cudaEventQuery(op.done)"));
        fail_comm(error);
        break;
      }
    }
    if (const std::string b = broken(); !b.empty()) {
      error = errors_.after_failure(op.info, phase == Op::Phase::queued ? "not run" : "aborted", b);
      break;
    }
    if (const std::string detail = async_error(); !detail.empty()) {
      error = errors_.failed(op.info, op.seq, detail);
      fail_comm(error);
      break;
    }
    if (board_.any()) {
      error = errors_.peer_failed(op.info, start);
      fail_comm(error);
      break;
    }
    if (SteadyClock::now() >= deadline) {
      error = errors_.timed_out(op.info, op.seq);
      fail_comm(error);
      break;
    }
    backoff.sleep();
  }
  // The op's slot is not reused: the stream may still write it (it is freed with the comm).
  record_host_span(op);
  return error;
}

std::string NcclComm::finish_ok(Op& op) {
  // Later kernels on the compute stream come after the op even without a host sync.
  if (const std::string e = SHARDLAB_CUDA_ERROR(cudaStreamWaitEvent(cuda_.stream(), op.done, 0));
      !e.empty()) {
    const std::string error = errors_.failed(op.info, op.seq, e);
    fail_comm(error);
    record_host_span(op);
    return error;
  }
  for (const Staged& s : op.outs) {
    std::memcpy(s.user, static_cast<const char*>(op.slot->host) + s.offset, s.bytes);
  }
  slots_.release(op.slot);
  op.slot = nullptr;
  counters_.add_sent(op.sent);
  counters_.add_op();
  record_host_span(op);
  return "";
}

Span NcclComm::span_of(const Op& op) const {
  Span span = comm_span(group(), rank_, op.info);
  span.step = op.step;  // resolved later, when the recorder may be on the next step
  return span;
}

// Without a GPU timer (recording off in the backend) but with a recorder, the span is
// timed on the host: from issue to the moment its completion was seen.
void NcclComm::record_host_span(const Op& op) {
  if (timer_ || !recorder_) return;
  Span span = span_of(op);
  span.t_begin_ns = op.t_issue_ns;
  span.t_end_ns = now_ns();
  recorder_->add_span(span);
}

}  // namespace shardlab::nccl
