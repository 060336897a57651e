// Row-major GEMM on cuBLAS (column-major): C = op(A) op(B) is computed as
// Cᵀ = op(B)ᵀ op(A)ᵀ, which is the same memory read column-major. fp32 (exact
// or TF32) and 2-byte operands on tensor cores.
#include <cublas_v2.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"

namespace shardlab::kernels::cuda {

namespace {
size_t dtype_bytes(DType dt) {
  return dt == DType::f32 ? 4 : 2;
}
}  // namespace

namespace {
cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
  }
  throw std::invalid_argument("cuda::gemm: DType " + std::to_string(static_cast<int>(dt)) +
                              " is not f32, bf16 or f16");
}
}  // namespace

void gemm(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const float* A, const float* B, float beta, float* C, bool tf32) {
  gemm(h, DType::f32, trans_a, trans_b, M, N, K, alpha, A, B, beta, C, tf32);
}

void gemm(cublasHandle_t h, DType dt, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const void* A, const void* B, float beta, void* C, bool tf32) {
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
      SHARDLAB_CUDA_CHECK(cudaMemsetAsync(C, 0, n * dtype_bytes(dt), stream));
    else if (beta != 1.0f && dt == DType::f32)
      scale(static_cast<float*>(C), n, beta, stream);
    else if (beta != 1.0f)
      throw std::invalid_argument("cuda::gemm: K = 0 with beta " + std::to_string(beta) +
                                  " on 2-byte storage (valid: beta 0 or 1)");
    return;
  }
  // Row-major leading dimensions, as kernels::gemm passes them to cblas.
  const int lda = trans_a ? M : K;
  const int ldb = trans_b ? K : N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // fp32: PEDANTIC is plain FP32 whatever the handle's math mode or the environment
  // allows (no TF32, no BF16x9 emulation), so results match the CPU to ~1e-6; tf32
  // asks for tensor cores on 10-bit mantissas instead. 2-byte operands: tensor cores,
  // fp32 accumulation, C read and written in dt (so beta = 1 rounds once).
  const cudaDataType_t t = cuda_type(dt);
  const cublasComputeType_t compute =
      dt != DType::f32 ? CUBLAS_COMPUTE_32F
                       : (tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC);
  SHARDLAB_CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, N, M, K, &alpha, B, t, ldb, A, t, lda, &beta, C,
                                     t, N, compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace shardlab::kernels::cuda
