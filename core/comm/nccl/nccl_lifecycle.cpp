// One NCCL comm's setup (its stream, barrier word and issuer thread) and shutdown:
// queued work cancelled, then NCCL's clean finalize when healthy and idle, an abort
// otherwise, and nothing freed that the stream may still write.
#include "core/comm/nccl/nccl_comm.h"

namespace shardlab::nccl {

using std::chrono::milliseconds;

NcclComm::NcclComm(int rank, int world, ncclComm_t comm, CudaBackend& cuda, GpuTimer* timer,
                   milliseconds timeout, FailureBoard& board, P2PLedger* ledger, Recorder* recorder,
                   Allocator* alloc)
    : rank_(rank),
      world_(world),
      index_(cuda.index()),
      cuda_(cuda),
      timer_(timer),
      timeout_(timeout),
      board_(board),
      errors_(rank, timeout, board),
      ledger_(ledger),
      recorder_(recorder),
      p2p_numbers_(world),
      comm_(comm),
      slots_(alloc) {
  ScopedDevice guard(index_);
  std::string error =
      SHARDLAB_CUDA_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (error.empty()) error = SHARDLAB_CUDA_ERROR(cudaMalloc(&barrier_word_, sizeof(int32_t)));
  if (error.empty()) error = SHARDLAB_CUDA_ERROR(cudaMemset(barrier_word_, 0, sizeof(int32_t)));
  if (!error.empty()) {
    if (barrier_word_) SHARDLAB_CUDA_IGNORE(cudaFree(barrier_word_));
    if (stream_) SHARDLAB_CUDA_IGNORE(cudaStreamDestroy(stream_));
    SHARDLAB_NCCL_IGNORE(ncclCommAbort(comm_));
    throw CommError("rank " + std::to_string(rank_) + ": setting up the comm: " + error);
  }
  issuer_ = std::thread([this] { issuer_loop(); });
}

NcclComm::~NcclComm() {
  ScopedDevice guard(index_);
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_.store(true);
  }
  queue_cv_.notify_all();
  issuer_.join();
  // Works that were issued but never waited on point at this comm: fail them now so a
  // late wait() cannot touch it.
  unwaited_.cancel_all();

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
        SHARDLAB_NCCL_IGNORE(ncclCommDestroy(comm_));
      } else {
        SHARDLAB_NCCL_IGNORE(ncclCommAbort(comm_));
      }
      comm_ = nullptr;
    }
  }
  // Memory the stream may still write is leaked rather than freed under it.
  if (idle || wait_idle(/*give_up_on_failure=*/false)) {
    slots_.free_all();
    if (barrier_word_) SHARDLAB_CUDA_IGNORE(cudaFree(barrier_word_));
  } else {
    slots_.leak_all();
  }
  SHARDLAB_CUDA_IGNORE(cudaStreamDestroy(stream_));  // returns at once; freed once it drains
}

// Waits, at most the timeout, for the comm stream to run dry.
bool NcclComm::wait_idle(bool give_up_on_failure) {
  const auto deadline = SteadyClock::now() + timeout_;
  Backoff backoff;
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess) return true;
    if (q != cudaErrorNotReady) {
      SHARDLAB_CUDA_IGNORE(q);
      return false;
    }
    if (give_up_on_failure && (board_.any() || !broken().empty())) return false;
    if (SteadyClock::now() >= deadline) return false;
    backoff.sleep();
  }
}

// NCCL's clean shutdown for a nonblocking comm: finalize, then wait (at most the
// timeout) until its state is ncclSuccess. Called with nccl_mu_ held.
bool NcclComm::finalize_locked() {
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

}  // namespace shardlab::nccl
