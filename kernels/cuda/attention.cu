// The causal self-attention core (kernels/transformer.h's attention_forward /
// attention_backward) on cuBLAS GEMMs batched over every (batch row, head) in
// one call each, reading each head in place from qkv[B,T,3C] and writing it in
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

// One operand of a GEMM batched over every (batch row b, head h): the matrix of
// (0, 0), its row stride (row-major leading dimension), and the distances between
// batch rows and between heads, in elements.
struct Operand {
  const void* p;
  cudaDataType_t type;
  int ld;
  long long b_stride;
  long long h_stride;
};

size_t type_size(cudaDataType_t t) {
  return t == CUDA_R_32F ? 4 : 2;
}

// The matrix of every (b, h), i = b·H + h, for A, B and C at once: cuBLAS's batched
// GEMM takes arrays of pointers, which the (b, h) layout needs (two strides).
struct HeadBases {
  const char* base[3];
  long long b_bytes[3];
  long long h_bytes[3];
};
__global__ void head_pointers_kernel(const void** ptrs, HeadBases hb, int B, int H) {
  const int n = B * H;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < 3 * n; i += gridDim.x * blockDim.x) {
    const int which = i / n, j = i % n;
    ptrs[i] = hb.base[which] + (j / H) * hb.b_bytes[which] + (j % H) * hb.h_bytes[which];
  }
}

// Row-major, like kernels::gemm_ld, for the B·H matrices at once:
// C_i = alpha·op(A_i)·op(B_i) + beta·C_i. cuBLAS is column-major, so it computes
// C_iᵀ = op(B_i)ᵀ·op(A_i)ᵀ, which is the same memory. `ptrs`: device room for
// 3·B·H pointers (written here, read by the GEMM: stream order keeps them apart).
void gemm_heads(cublasHandle_t h, const void** ptrs, cudaStream_t s, bool trans_a, bool trans_b,
                int M, int N, int K, float alpha, Operand A, Operand B, float beta, Operand C,
                int Bn, int H) {
  HeadBases hb{};
  const Operand* ops[3] = {&A, &B, &C};
  for (int k = 0; k < 3; ++k) {
    const long long es = static_cast<long long>(type_size(ops[k]->type));
    hb.base[k] = static_cast<const char*>(ops[k]->p);
    hb.b_bytes[k] = ops[k]->b_stride * es;
    hb.h_bytes[k] = ops[k]->h_stride * es;
  }
  const int n = 3 * Bn * H;
  head_pointers_kernel<<<(n + detail::kBlock - 1) / detail::kBlock, detail::kBlock, 0, s>>>(
      ptrs, hb, Bn, H);
  SHARDLAB_CUDA_CHECK_LAUNCH("head_pointers_kernel");
  const bool fp32 = A.type == CUDA_R_32F && B.type == CUDA_R_32F && C.type == CUDA_R_32F;
  // fp32: plain FP32 (no TF32), as kernels::cuda::gemm. 2-byte inputs multiply
  // exactly into fp32 accumulators; the output is rounded once.
  const cublasComputeType_t compute = fp32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
  const int count = Bn * H;
  SHARDLAB_CUBLAS_CHECK(cublasGemmBatchedEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                                            ptrs + count, B.type, B.ld, ptrs, A.type, A.ld, &beta,
                                            const_cast<void* const*>(ptrs + 2 * count), C.type,
                                            C.ld, count, compute, CUBLAS_GEMM_DEFAULT));
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
void forward(cublasHandle_t h, void* y, void* att, const void* qkv, float* scratch,
             const void** ptrs, int B, int T, int C, int H) {
  constexpr bool fp32 = sizeof(S) == 4;
  constexpr cudaDataType_t st = data_type<S>();
  const cudaStream_t s = stream_of(h);
  const int hs = C / H, ld = 3 * C;
  const float scale = static_cast<float>(attention_scale(hs));
  const size_t TT = static_cast<size_t>(T) * T, HTT = static_cast<size_t>(H) * TT;
  // Scores: fp32 straight into att, or into the fp32 scratch under 2 bytes.
  void* scores = fp32 ? att : static_cast<void*>(scratch);
  const long long qkv_b = static_cast<long long>(T) * ld, y_b = static_cast<long long>(T) * C;
  const long long att_b = static_cast<long long>(HTT), att_h = static_cast<long long>(TT);
  gemm_heads(h, ptrs, s, false, true, T, T, hs, scale, {at<S>(qkv, 0), st, ld, qkv_b, hs},
             {at<S>(qkv, C), st, ld, qkv_b, hs}, 0.0f, {scores, CUDA_R_32F, T, att_b, att_h}, B, H);
  const size_t rows = static_cast<size_t>(B) * H * T;
  causal_softmax_kernel<float, S>
      <<<detail::grid_for_rows(rows, detail::kBlock), detail::kBlock, 0, s>>>(
          static_cast<S*>(att), static_cast<const float*>(scores), rows, T);
  SHARDLAB_CUDA_CHECK_LAUNCH("causal_softmax_kernel");
  gemm_heads(h, ptrs, s, false, false, T, hs, T, 1.0f, {att, st, T, att_b, att_h},
             {at<S>(qkv, 2 * C), st, ld, qkv_b, hs}, 0.0f, {y, st, C, y_b, hs}, B, H);
}

template <typename S>
void backward(cublasHandle_t h, void* dqkv, void* att, float* scratch, const void** ptrs,
              const void* dy, const void* qkv, int B, int T, int C, int H) {
  constexpr bool fp32 = sizeof(S) == 4;
  constexpr cudaDataType_t st = data_type<S>();
  const cudaStream_t s = stream_of(h);
  const int hs = C / H, ld = 3 * C;
  const float scale = static_cast<float>(attention_scale(hs));
  const long long TT = static_cast<long long>(T) * T;
  const size_t HTT = static_cast<size_t>(H) * static_cast<size_t>(TT);
  const long long qkv_b = static_cast<long long>(T) * ld, y_b = static_cast<long long>(T) * C;
  const long long att_b = static_cast<long long>(HTT);
  // dP = dy·vᵀ into scratch; dv = Pᵀ·dy (before dS may overwrite att).
  gemm_heads(h, ptrs, s, false, true, T, T, hs, 1.0f, {dy, st, C, y_b, hs},
             {at<S>(qkv, 2 * C), st, ld, qkv_b, hs}, 0.0f, {scratch, CUDA_R_32F, T, att_b, TT}, B,
             H);
  gemm_heads(h, ptrs, s, true, false, T, hs, T, 1.0f, {att, st, T, att_b, TT}, {dy, st, C, y_b, hs},
             0.0f, {at<S>(dqkv, 2 * C), st, ld, qkv_b, hs}, B, H);
  // dS: in place over dP (fp32), or rounded over att (2-byte: GEMM operands share a type).
  const size_t rows = static_cast<size_t>(B) * H * T;
  void* ds = fp32 ? static_cast<void*>(scratch) : att;
  const unsigned grid = detail::grid_for_rows(rows, detail::kBlock);
  causal_softmax_backward_kernel<S, S><<<grid, detail::kBlock, 0, s>>>(
      static_cast<S*>(ds), static_cast<const S*>(att), scratch, rows, T);
  SHARDLAB_CUDA_CHECK_LAUNCH("causal_softmax_backward_kernel");
  // dq = dS·k·scale ; dk = dSᵀ·q·scale
  const Operand dso{ds, st, T, att_b, TT};
  gemm_heads(h, ptrs, s, false, false, T, hs, T, scale, dso, {at<S>(qkv, C), st, ld, qkv_b, hs},
             0.0f, {dqkv, st, ld, qkv_b, hs}, B, H);
  gemm_heads(h, ptrs, s, true, false, T, hs, T, scale, dso, {qkv, st, ld, qkv_b, hs}, 0.0f,
             {at<S>(dqkv, C), st, ld, qkv_b, hs}, B, H);
}

}  // namespace

void attention_forward(cublasHandle_t h, DType dt, void* y, void* att, const void* qkv,
                       float* scratch, void** pointers, int B, int T, int C, int H) {
  check_shape("attention", C, H);
  if (B <= 0 || T <= 0) return;
  if (dt != DType::f32 && !scratch)
    throw std::invalid_argument("cuda::attention_forward: a 2-byte dtype needs the fp32 scratch");
  with_storage(dt, [&](auto tag) {
    forward<decltype(tag)>(h, y, att, qkv, scratch, const_cast<const void**>(pointers), B, T, C, H);
  });
}

void attention_backward(cublasHandle_t h, DType dt, void* dqkv, void* att, float* scratch,
                        void** pointers, const void* dy, const void* qkv, int B, int T, int C,
                        int H) {
  check_shape("attention backward", C, H);
  if (B <= 0 || T <= 0) return;
  if (!scratch) throw std::invalid_argument("cuda::attention_backward: scratch is required");
  with_storage(dt, [&](auto tag) {
    backward<decltype(tag)>(h, dqkv, att, scratch, const_cast<const void**>(pointers), dy, qkv, B,
                            T, C, H);
  });
}

}  // namespace shardlab::kernels::cuda
