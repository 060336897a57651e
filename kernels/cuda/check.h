// The one error check for CUDA runtime, cuBLAS and NCCL calls in kernels/cuda and
// core/device/cuda and core/comm/nccl. A failure reads, on one line, the call as written, the
// library's words for the error (and its name), and where the call is:
//   cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()): invalid argument
//   (cudaErrorInvalidValue, at core/device/cuda/cuda_backend.cpp:350)
//
//   SHARDLAB_CUDA_CHECK(call)        throws std::runtime_error with that text
//   SHARDLAB_CUDA_ERROR(call)        the text as a value, "" on success: for errors
//                                    that travel as values (a comm op's Work)
//   SHARDLAB_CUDA_FAILED(e, what)    the text for a failed result already in hand,
//                                    once the caller has ruled out the answers that
//                                    are not errors (cudaErrorNotReady); `what` names it
//   SHARDLAB_CUDA_IGNORE(call)       cleanup (destructors, paths already failing): the
//                                    error is dropped, nothing thrown; also takes a
//                                    result in hand
//   SHARDLAB_CUDA_CHECK_LAUNCH(name) right after a <<<launch>>>: throws naming the kernel
//   SHARDLAB_CUBLAS_CHECK(call)      throws with cuBLAS's status (include cublas_v2.h)
// core/comm/nccl/nccl_check.h adds the same forms for NCCL calls.
//
// A CUDA failure, reported or dropped, also clears CUDA's last-error slot, so that
// a later check does not report it as its own call's (a sticky error, which
// cannot be cleared, still shows there). Plain C++17: nvcc compiles it too.
#pragma once
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace shardlab::check_detail {

// The path from the project root ("core/comm/nccl/nccl_issue.cpp"), whatever form the
// compiler was given it in (absolute, or relative to the build directory).
inline const char* project_path(const char* file) {
  const char* found = file;
  for (const char* p = file; *p != '\0'; ++p) {
    if (p != file && p[-1] != '/') continue;
    if (std::strncmp(p, "core/", 5) == 0 || std::strncmp(p, "kernels/", 8) == 0) found = p;
  }
  return found;
}

// "<what>: <error> (<name>, at <file>:<line>)"; `name` may be empty.
inline std::string failure_text(const std::string& what, const std::string& error,
                                const std::string& name, const char* file, int line) {
  return what + ": " + error + " (" + (name.empty() ? "" : name + ", ") + "at " +
         project_path(file) + ":" + std::to_string(line) + ")";
}

inline std::string cuda_failure(cudaError_t e, const std::string& what, const char* file,
                                int line) {
  (void)cudaGetLastError();  // reported here: the next check must not blame its own call
  return failure_text(what, cudaGetErrorString(e), cudaGetErrorName(e), file, line);
}

inline std::string cuda_error(cudaError_t e, const char* what, const char* file, int line) {
  return e == cudaSuccess ? std::string() : cuda_failure(e, what, file, line);
}

inline void cuda_check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) throw std::runtime_error(cuda_failure(e, what, file, line));
}

inline void cuda_ignore(cudaError_t e) {
  if (e != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace shardlab::check_detail

#define SHARDLAB_CUDA_CHECK(call) \
  ::shardlab::check_detail::cuda_check((call), #call, __FILE__, __LINE__)

#define SHARDLAB_CUDA_ERROR(call) \
  ::shardlab::check_detail::cuda_error((call), #call, __FILE__, __LINE__)

#define SHARDLAB_CUDA_FAILED(e, what) \
  ::shardlab::check_detail::cuda_failure((e), (what), __FILE__, __LINE__)

#define SHARDLAB_CUDA_IGNORE(call) ::shardlab::check_detail::cuda_ignore(call)

#define SHARDLAB_CUDA_CHECK_LAUNCH(kernel) \
  ::shardlab::check_detail::cuda_check(cudaGetLastError(), (kernel), __FILE__, __LINE__)

// cuBLAS's types and calls are named only where this expands, so this header
// does not need cublas_v2.h.
#define SHARDLAB_CUBLAS_CHECK(call)                                          \
  do {                                                                       \
    const cublasStatus_t shardlab_cublas_status = (call);                    \
    if (shardlab_cublas_status != CUBLAS_STATUS_SUCCESS) {                   \
      throw std::runtime_error(::shardlab::check_detail::failure_text(       \
          #call, cublasGetStatusString(shardlab_cublas_status),              \
          cublasGetStatusName(shardlab_cublas_status), __FILE__, __LINE__)); \
    }                                                                        \
  } while (0)
