// Row-major GEMM on cuBLAS (column-major): C = op(A) op(B) is computed as
// Cᵀ = op(B)ᵀ op(A)ᵀ, which is the same memory read column-major.
#include <cublas_v2.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"

namespace shardlab::kernels::cuda {

void gemm(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const float* A, const float* B, float beta, float* C) {
  if (M <= 0 || N <= 0) return;
  // alpha and beta are host values; a handle left in device pointer mode would
  // read them as device addresses.
  cublasPointerMode_t mode;
  SHARDLAB_CUBLAS_CHECK(cublasGetPointerMode(h, &mode));
  if (mode != CUBLAS_POINTER_MODE_HOST)
    throw std::runtime_error("cuda::gemm: the cuBLAS handle must be in host pointer mode");
  if (K <= 0) {
    // An empty sum: C = beta * C, done here rather than trusting every cuBLAS
    // version with k == 0. As in BLAS, beta == 0 never reads C (it may be NaN).
    cudaStream_t stream;
    SHARDLAB_CUBLAS_CHECK(cublasGetStream(h, &stream));
    const size_t n = static_cast<size_t>(M) * static_cast<size_t>(N);
    if (beta == 0.0f)
      SHARDLAB_CUDA_CHECK(cudaMemsetAsync(C, 0, n * sizeof(float), stream));
    else if (beta != 1.0f)
      scale(C, n, beta, stream);
    return;
  }
  // Row-major leading dimensions, as kernels::gemm passes them to cblas.
  const int lda = trans_a ? M : K;
  const int ldb = trans_b ? K : N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // PEDANTIC: plain FP32 whatever the handle's math mode or the environment
  // allows (no TF32, no BF16x9 emulation), so results match the CPU to ~1e-6.
  SHARDLAB_CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, N, M, K, &alpha, B, CUDA_R_32F, ldb, A,
                                     CUDA_R_32F, lda, &beta, C, CUDA_R_32F, N,
                                     CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
}

}  // namespace shardlab::kernels::cuda
