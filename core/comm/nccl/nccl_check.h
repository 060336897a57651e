// The NCCL forms of kernels/cuda/check.h's error checks, worded the same way with
// NCCL's last message for the communicator, which says what went wrong (the code
// alone says "unhandled system error"):
//   SHARDLAB_NCCL_ERROR(call, comm)      the text as a value, "" on success
//   SHARDLAB_NCCL_FAILED(r, comm, what)  the text for a failed result already in hand,
//                                        once the caller has ruled out ncclInProgress
//   SHARDLAB_NCCL_IGNORE(call)           cleanup: the result is dropped
// `comm` may be null. NCCL's errors are reported as CommErrors by the communicator,
// so there is no throwing form.
#pragma once
#include <nccl.h>

#include <string>

#include "core/comm/comm_common.h"
#include "kernels/cuda/check.h"

namespace shardlab::check_detail {

inline std::string nccl_failure(ncclResult_t r, ncclComm_t comm, const std::string& what,
                                const char* file, int line) {
  std::string error = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') error += std::string(": ") + last;
  return failure_text(what, one_line(error), "", file, line);
}

inline std::string nccl_error(ncclResult_t r, ncclComm_t comm, const char* what, const char* file,
                              int line) {
  return r == ncclSuccess ? std::string() : nccl_failure(r, comm, what, file, line);
}

}  // namespace shardlab::check_detail

#define SHARDLAB_NCCL_ERROR(call, comm) \
  ::shardlab::check_detail::nccl_error((call), (comm), #call, __FILE__, __LINE__)

#define SHARDLAB_NCCL_FAILED(r, comm, what) \
  ::shardlab::check_detail::nccl_failure((r), (comm), (what), __FILE__, __LINE__)

#define SHARDLAB_NCCL_IGNORE(call) static_cast<void>(call)
