// The causal self-attention core (kernels/transformer.h's attention_forward /
// attention_backward) on cuBLAS strided-batched GEMMs over the heads of one
// batch row, reading each head in place from qkv[B,T,3C] and writing it in
// place into y[B,T,C] (leading dimensions do the split and the merge), with
// warp-per-row kernels for the masked softmax and its backward.
#include <cublas_v2.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/storage.h"
#include "kernels/transformer_math.h"

namespace shardlab::kernels::cuda {

namespace {

using detail::kWarp;

template <typename S>
constexpr cudaDataType_t data_type() {
  if constexpr (sizeof(S) == 4) {
    return CUDA_R_32F;
  } else if constexpr (std::is_same_v<S, bf16>) {
    return CUDA_R_16BF;
  } else {
    return CUDA_R_16F;
  }
}

// A typed view of an untyped buffer, `offset` elements in.
template <typename S>
S* at(void* p, size_t offset) {
  return static_cast<S*>(p) + offset;
}
template <typename S>
const S* at(const void* p, size_t offset) {
  return static_cast<const S*>(p) + offset;
}

// One operand of a strided-batched GEMM: the matrix of batch 0, its row stride
// (row-major leading dimension) and the distance between batches, in elements.
struct Operand {
  const void* p;
  cudaDataType_t type;
  int ld;
  long long stride;
};

// Row-major, like kernels::gemm_ld, for `batch` matrices at once:
// C_i = alpha·op(A_i)·op(B_i) + beta·C_i. cuBLAS is column-major, so it
// computes C_iᵀ = op(B_i)ᵀ·op(A_i)ᵀ, which is the same memory.
void gemm_batched(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                  Operand A, Operand B, float beta, void* C, cudaDataType_t c_type, int ldc,
                  long long stride_c, int batch) {
  const bool fp32 = A.type == CUDA_R_32F && B.type == CUDA_R_32F && c_type == CUDA_R_32F;
  // fp32: plain FP32 (no TF32), as kernels::cuda::gemm. 2-byte inputs multiply
  // exactly into fp32 accumulators; the output is rounded once.
  const cublasComputeType_t compute = fp32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
  SHARDLAB_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
      B.p, B.type, B.ld, B.stride, A.p, A.type, A.ld, A.stride, &beta, C, c_type, ldc, stride_c,
      batch, compute, CUBLAS_GEMM_DEFAULT));
}

// p = softmax over s[0..t] of each row (t = row % T), 0 beyond; one warp per
// row. No __restrict__: p may alias s (fp32, in place).
template <typename In, typename Out>
__global__ void causal_softmax_kernel(Out* p, const In* s, size_t rows, int T) {
  const int lane = threadIdx.x % kWarp;
  const size_t warps = blockDim.x / kWarp, Ts = static_cast<size_t>(T);
  for (size_t r = blockIdx.x * warps + threadIdx.x / kWarp; r < rows; r += gridDim.x * warps) {
    const int t = static_cast<int>(r % Ts);
    const In* sr = s + r * Ts;
    Out* pr = p + r * Ts;
    float m = load(sr[0]);
    for (int j = lane; j <= t; j += kWarp) {
      const float v = load(sr[j]);
      m = m < v ? v : m;
    }
    m = detail::warp_max(m);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += kWarp) sum += math_detail::exp(load(sr[j]) - m);
    const float inv = 1.0f / detail::warp_sum(sum);
    for (int j = lane; j < T; j += kWarp)
      store(pr[j], j <= t ? math_detail::exp(load(sr[j]) - m) * inv : 0.0f);
  }
}

// ds = p ⊙ (dp − Σ p·dp) per causal row, 0 beyond; one warp per row. No
// __restrict__: ds aliases dp (fp32) or p (2-byte, written over att).
template <typename S, typename Out>
__global__ void causal_softmax_backward_kernel(Out* ds, const S* p, const float* dp, size_t rows,
                                               int T) {
  const int lane = threadIdx.x % kWarp;
  const size_t warps = blockDim.x / kWarp, Ts = static_cast<size_t>(T);
  for (size_t r = blockIdx.x * warps + threadIdx.x / kWarp; r < rows; r += gridDim.x * warps) {
    const int t = static_cast<int>(r % Ts);
    const S* pr = p + r * Ts;
    const float* dpr = dp + r * Ts;
    Out* dsr = ds + r * Ts;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += kWarp) dot += load(pr[j]) * dpr[j];
    dot = detail::warp_sum(dot);
    for (int j = lane; j < T; j += kWarp)
      store(dsr[j], j <= t ? softmax_grad(load(pr[j]), dpr[j], dot) : 0.0f);
  }
}

void check_shape(const char* op, int C, int H) {
  if (H <= 0 || C % H != 0)
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(C) +
                                " channels do not split into " + std::to_string(H) + " heads");
}

cudaStream_t stream_of(cublasHandle_t h) {
  cublasPointerMode_t mode;
  SHARDLAB_CUBLAS_CHECK(cublasGetPointerMode(h, &mode));
  if (mode != CUBLAS_POINTER_MODE_HOST)
    throw std::runtime_error("cuda::attention: the cuBLAS handle must be in host pointer mode");
  cudaStream_t s;
  SHARDLAB_CUBLAS_CHECK(cublasGetStream(h, &s));
  return s;
}

template <typename S>
void forward(cublasHandle_t h, void* y, void* att, const void* qkv, float* scratch, int B, int T,
             int C, int H) {
  constexpr bool fp32 = sizeof(S) == 4;
  constexpr cudaDataType_t st = data_type<S>();
  const cudaStream_t s = stream_of(h);
  const int hs = C / H, ld = 3 * C;
  const float scale = static_cast<float>(attention_scale(hs));
  const size_t TT = static_cast<size_t>(T) * T, HTT = static_cast<size_t>(H) * TT;
  // Scores: fp32 straight into att, or into the fp32 scratch under 2 bytes.
  void* scores = fp32 ? att : static_cast<void*>(scratch);
  for (int b = 0; b < B; ++b) {
    const size_t base = static_cast<size_t>(b) * T * ld;
    gemm_batched(h, false, true, T, T, hs, scale, {at<S>(qkv, base), st, ld, hs},
                 {at<S>(qkv, base + C), st, ld, hs}, 0.0f, at<float>(scores, b * HTT), CUDA_R_32F,
                 T, static_cast<long long>(TT), H);
  }
  const size_t rows = static_cast<size_t>(B) * H * T;
  causal_softmax_kernel<float, S>
      <<<detail::grid_for_rows(rows, detail::kBlock), detail::kBlock, 0, s>>>(
          static_cast<S*>(att), static_cast<const float*>(scores), rows, T);
  SHARDLAB_CUDA_CHECK_LAUNCH("causal_softmax_kernel");
  for (int b = 0; b < B; ++b) {
    const size_t base = static_cast<size_t>(b) * T * ld;
    gemm_batched(h, false, false, T, hs, T, 1.0f,
                 {at<S>(att, b * HTT), st, T, static_cast<long long>(TT)},
                 {at<S>(qkv, base + 2 * C), st, ld, hs}, 0.0f,
                 at<S>(y, static_cast<size_t>(b) * T * C), st, C, hs, H);
  }
}

template <typename S>
void backward(cublasHandle_t h, void* dqkv, void* att, float* scratch, const void* dy,
              const void* qkv, int B, int T, int C, int H) {
  constexpr bool fp32 = sizeof(S) == 4;
  constexpr cudaDataType_t st = data_type<S>();
  const cudaStream_t s = stream_of(h);
  const int hs = C / H, ld = 3 * C;
  const float scale = static_cast<float>(attention_scale(hs));
  const long long TT = static_cast<long long>(T) * T;
  const size_t HTT = static_cast<size_t>(H) * static_cast<size_t>(TT);
  // dP = dy·vᵀ into scratch; dv = Pᵀ·dy (before dS may overwrite att).
  for (int b = 0; b < B; ++b) {
    const size_t base = static_cast<size_t>(b) * T * ld;
    const size_t ybase = static_cast<size_t>(b) * T * C;
    gemm_batched(h, false, true, T, T, hs, 1.0f, {at<S>(dy, ybase), st, C, hs},
                 {at<S>(qkv, base + 2 * C), st, ld, hs}, 0.0f, scratch + b * HTT, CUDA_R_32F, T, TT,
                 H);
    gemm_batched(h, true, false, T, hs, T, 1.0f, {at<S>(att, b * HTT), st, T, TT},
                 {at<S>(dy, ybase), st, C, hs}, 0.0f, at<S>(dqkv, base + 2 * C), st, ld, hs, H);
  }
  // dS: in place over dP (fp32), or rounded over att (2-byte: GEMM operands share a type).
  const size_t rows = static_cast<size_t>(B) * H * T;
  void* ds = fp32 ? static_cast<void*>(scratch) : att;
  const unsigned grid = detail::grid_for_rows(rows, detail::kBlock);
  causal_softmax_backward_kernel<S, S><<<grid, detail::kBlock, 0, s>>>(
      static_cast<S*>(ds), static_cast<const S*>(att), scratch, rows, T);
  SHARDLAB_CUDA_CHECK_LAUNCH("causal_softmax_backward_kernel");
  // dq = dS·k·scale ; dk = dSᵀ·q·scale
  for (int b = 0; b < B; ++b) {
    const size_t base = static_cast<size_t>(b) * T * ld;
    const Operand dsb{at<S>(ds, b * HTT), st, T, TT};
    gemm_batched(h, false, false, T, hs, T, scale, dsb, {at<S>(qkv, base + C), st, ld, hs}, 0.0f,
                 at<S>(dqkv, base), st, ld, hs, H);
    gemm_batched(h, true, false, T, hs, T, scale, dsb, {at<S>(qkv, base), st, ld, hs}, 0.0f,
                 at<S>(dqkv, base + C), st, ld, hs, H);
  }
}

}  // namespace

void attention_forward(cublasHandle_t h, DType dt, void* y, void* att, const void* qkv,
                       float* scratch, int B, int T, int C, int H) {
  check_shape("attention", C, H);
  if (B <= 0 || T <= 0) return;
  if (dt != DType::f32 && !scratch)
    throw std::invalid_argument("cuda::attention_forward: a 2-byte dtype needs the fp32 scratch");
  with_storage(dt, [&](auto tag) { forward<decltype(tag)>(h, y, att, qkv, scratch, B, T, C, H); });
}

void attention_backward(cublasHandle_t h, DType dt, void* dqkv, void* att, float* scratch,
                        const void* dy, const void* qkv, int B, int T, int C, int H) {
  check_shape("attention backward", C, H);
  if (B <= 0 || T <= 0) return;
  if (!scratch) throw std::invalid_argument("cuda::attention_backward: scratch is required");
  with_storage(
      dt, [&](auto tag) { backward<decltype(tag)>(h, dqkv, att, scratch, dy, qkv, B, T, C, H); });
}

}  // namespace shardlab::kernels::cuda
