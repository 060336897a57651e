// How the NCCL comm fails: the first failure breaks it for good (the ranks' op sequences
// no longer line up), aborts the NCCL communicator so that kernels waiting for peers
// stop, and tells the other ranks through the failure board.
#include "core/comm/nccl/nccl_comm.h"

namespace shardlab::nccl {

// Reporting lets the peers stop waiting for this rank at once; only the first failure
// of the run is reported here, since a peer's failure is already on the board and the
// caller that catches this error reports it too.
void NcclComm::fail_comm(const std::string& why) {
  if (!broken_.set(why)) return;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (comm_) {
      // May return ncclInProgress: the comm is gone either way.
      SHARDLAB_NCCL_IGNORE(ncclCommAbort(comm_));
      comm_ = nullptr;
    }
  }
  if (!board_.any()) board_.report(rank_, why);
}

// ncclInProgress is an op still being enqueued by the issuer, not an error.
std::string NcclComm::async_error() {
  std::lock_guard<std::mutex> lock(nccl_mu_);
  if (!comm_) return "";
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) state = r;
  if (state == ncclSuccess || state == ncclInProgress) return "";
  return SHARDLAB_NCCL_FAILED(state, comm_, "ncclCommGetAsyncError");
}

}  // namespace shardlab::nccl
