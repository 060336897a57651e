// Fused causal attention on the GPU (FlashAttention-2, Dao 2023), the same
// algorithm as the CPU's kernels/flash_attention.h: tiles of q, k and v in
// shared memory, an online softmax, and no [T,T] matrix in device memory;
// backward recomputes each tile's probabilities from forward's logsumexp.
//
// Written for correctness first: fp32 math on CUDA cores (2-byte inputs are
// upcast as they are loaded, outputs rounded once), sums in a fixed order, and
// backward in two kernels — one per key tile for dk and dv, one per query tile
// for dq — so no gradient is summed with atomics and the bits do not depend on
// scheduling. A production kernel would use tensor cores, one backward pass
// with an fp32 dq accumulator, and warp-level tiles.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/storage.h"
#include "kernels/transformer_math.h"

namespace shardlab::kernels::cuda {

namespace {

constexpr int kThreads = 128;
// Shared memory a block may use without opting in (every GPU since Kepler).
constexpr size_t kDefaultSmem = 48 * 1024;

// Rows of a t×hs block in shared memory lie pitch(hs) = hs + 1 floats apart:
// the score loops read one row of k per thread, and with a pitch of hs (a
// multiple of 32 for the usual head sizes) a warp's rows would all sit in one
// memory bank and be read one after another.
__host__ __device__ inline int pitch(int hs) {
  return hs + 1;
}

// A block's shared memory, in floats, for tile height t and head size hs:
// `per_tile_hs` blocks of t rows (q, k, v, accumulators …), `per_tile_tile`
// blocks of t×t (scores, probabilities) and `per_tile` vectors of t (row statistics).
struct SmemShape {
  int per_tile_hs, per_tile_tile, per_tile;
  size_t bytes(int t, int hs) const {
    const size_t ts = static_cast<size_t>(t);
    return sizeof(float) * (per_tile_hs * ts * static_cast<size_t>(pitch(hs)) +
                            per_tile_tile * ts * ts + per_tile * ts);
  }
};
constexpr SmemShape kForwardSmem{4, 1, 3};  // q, k, v, acc; scores; m, ℓ, correction
constexpr SmemShape kDkDvSmem{6, 2, 2};     // k, v, dk, dv, q, dy; P, dS; lse, delta
constexpr SmemShape kDqSmem{5, 1, 2};       // q, dy, dq, k, v; dS; lse, delta

struct Plan {
  int tile;
  size_t smem;
};

// The tallest tile (32, 16, … 1) whose shared memory fits the default 48 KiB;
// for heads too wide even for one row, a single row with more memory, which
// the launch opts in to (up to what the GPU allows per block).
Plan plan_for(const SmemShape& shape, int hs) {
  for (int t = 32; t >= 1; t /= 2)
    if (shape.bytes(t, hs) <= kDefaultSmem) return {t, shape.bytes(t, hs)};
  return {1, shape.bytes(1, hs)};
}

template <typename Kernel>
void allow_smem(Kernel kernel, size_t smem, const char* name, int hs) {
  if (smem <= kDefaultSmem) return;
  int device = 0, limit = 0;
  SHARDLAB_CUDA_CHECK(cudaGetDevice(&device));
  SHARDLAB_CUDA_CHECK(
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (smem > static_cast<size_t>(limit))
    throw std::invalid_argument(
        std::string(name) + ": a head of " + std::to_string(hs) + " channels needs " +
        std::to_string(smem / 1024) + " KiB of shared memory per block, this GPU allows " +
        std::to_string(limit / 1024) + " (valid: --attention naive, or more heads)");
  SHARDLAB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
}

// rows×hs values of one head (row stride ld in storage) into fp32 shared
// memory, rows pitch(hs) apart.
template <typename S>
__device__ void load_rows(float* dst, const S* src, int rows, int hs, int ld) {
  for (int i = threadIdx.x; i < rows * hs; i += blockDim.x)
    dst[(i / hs) * pitch(hs) + i % hs] = load(src[static_cast<size_t>(i / hs) * ld + i % hs]);
}

// rows×hs zeros, rows pitch(hs) apart.
__device__ void zero_rows(float* dst, int rows, int hs) {
  for (int i = threadIdx.x; i < rows * hs; i += blockDim.x) dst[(i / hs) * pitch(hs) + i % hs] = 0;
}

__device__ float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

// Block (b·H + h, query tile): y and lse of the tile's rows. Grid x is every
// (batch row, head), y the query tiles.
template <typename S>
__global__ void flash_forward_kernel(S* y, float* lse, const S* qkv, int T, int C, int H, int tile,
                                     float scale) {
  extern __shared__ float smem[];
  const int hs = C / H, ld = 3 * C, p = pitch(hs);
  const int b = blockIdx.x / H, h = blockIdx.x % H;
  const int i0 = blockIdx.y * tile, rows = min(tile, T - i0);
  float* sq = smem;
  float* sk = sq + tile * p;
  float* sv = sk + tile * p;
  float* acc = sv + tile * p;
  float* ss = acc + tile * p;
  float* sm = ss + tile * tile;
  float* sl = sm + tile;
  float* corr = sl + tile;
  const S* head = qkv + static_cast<size_t>(b) * T * ld + static_cast<size_t>(h) * hs;
  load_rows(sq, head + static_cast<size_t>(i0) * ld, rows, hs, ld);
  zero_rows(acc, rows, hs);
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    sm[r] = -INFINITY;
    sl[r] = 0.0f;
  }
  for (int j0 = 0; j0 < i0 + rows; j0 += tile) {
    const int cols = min(tile, T - j0);
    __syncthreads();  // the previous tile's k, v and probabilities are spent
    load_rows(sk, head + C + static_cast<size_t>(j0) * ld, cols, hs, ld);
    load_rows(sv, head + 2 * C + static_cast<size_t>(j0) * ld, cols, hs, ld);
    __syncthreads();
    for (int i = threadIdx.x; i < rows * cols; i += blockDim.x)
      ss[i] = scale * dot(sq + (i / cols) * p, sk + (i % cols) * p, hs);
    __syncthreads();
    // The online softmax, one thread per row: new max, rescale, probabilities.
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      float* sr = ss + r * cols;
      const int live = min(cols, i0 + r - j0 + 1);  // keys at or before the row
      if (live <= 0) {
        for (int c = 0; c < cols; ++c) sr[c] = 0.0f;
        corr[r] = 1.0f;
        continue;
      }
      float mt = sm[r];
      for (int c = 0; c < live; ++c) mt = fmaxf(mt, sr[c]);
      const float f = math_detail::exp(sm[r] - mt);  // 0 on the first tile (m = −inf)
      float sum = 0.0f;
      for (int c = 0; c < live; ++c) {
        sr[c] = math_detail::exp(sr[c] - mt);
        sum += sr[c];
      }
      for (int c = live; c < cols; ++c) sr[c] = 0.0f;
      sl[r] = sl[r] * f + sum;
      sm[r] = mt;
      corr[r] = f;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < rows * hs; i += blockDim.x) {
      const int r = i / hs, e = i % hs;
      float a = 0.0f;
      for (int c = 0; c < cols; ++c) a += ss[r * cols + c] * sv[c * p + e];
      acc[r * p + e] = acc[r * p + e] * corr[r] + a;
    }
  }
  __syncthreads();
  S* yb = y + (static_cast<size_t>(b) * T + i0) * C + static_cast<size_t>(h) * hs;
  for (int i = threadIdx.x; i < rows * hs; i += blockDim.x) {
    const int r = i / hs, e = i % hs;
    store(yb[static_cast<size_t>(r) * C + e], acc[r * p + e] * (1.0f / sl[r]));
  }
  float* lb = lse + (static_cast<size_t>(b) * H + h) * T + i0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) lb[r] = sm[r] + ::logf(sl[r]);
}

// delta[b,h,t] = Σ_e dy·y over the head's channels: one thread per row.
template <typename S>
__global__ void flash_delta_kernel(float* delta, const S* dy, const S* y, int B, int T, int C,
                                   int H) {
  const int hs = C / H;
  const size_t n = static_cast<size_t>(B) * H * T;
  for (size_t i = detail::global_index(); i < n; i += detail::grid_stride()) {
    const size_t t = i % T, bh = i / T, b = bh / H, h = bh % H;
    const size_t at = (b * T + t) * C + h * hs;
    float s = 0.0f;
    for (int e = 0; e < hs; ++e) s += load(dy[at + e]) * load(y[at + e]);
    delta[i] = s;
  }
}

// P and dS of query rows i0… (sq, sdy, row statistics) against keys j0…
// (sk, sv), masked entries 0: P = exp(q·k·scale − lse), dS = P·(dy·v − delta).
__device__ void probabilities(float* sp, float* sds, const float* sq, const float* sdy,
                              const float* sk, const float* sv, const float* slse,
                              const float* sdelta, int i0, int rows, int j0, int cols, int hs,
                              float scale) {
  const int p = pitch(hs);
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    const int r = i / cols, c = i % cols;
    float prob = 0.0f, ds = 0.0f;
    if (j0 + c <= i0 + r) {
      prob = math_detail::exp(scale * dot(sq + r * p, sk + c * p, hs) - slse[r]);
      ds = softmax_grad(prob, dot(sdy + r * p, sv + c * p, hs), sdelta[r]);
    }
    if (sp) sp[i] = prob;
    sds[i] = ds;
  }
}

// Block (b·H + h, key tile): dk and dv of the tile's keys, over every query
// tile that sees them.
template <typename S>
__global__ void flash_dkdv_kernel(S* dqkv, const float* delta, const S* dy, const S* qkv,
                                  const float* lse, int T, int C, int H, int tile, float scale) {
  extern __shared__ float smem[];
  const int hs = C / H, ld = 3 * C, p = pitch(hs);
  const int b = blockIdx.x / H, h = blockIdx.x % H;
  const int j0 = blockIdx.y * tile, cols = min(tile, T - j0);
  float* sk = smem;
  float* sv = sk + tile * p;
  float* sdk = sv + tile * p;
  float* sdv = sdk + tile * p;
  float* sq = sdv + tile * p;
  float* sdy = sq + tile * p;
  float* sp = sdy + tile * p;
  float* sds = sp + tile * tile;
  float* slse = sds + tile * tile;
  float* sdelta = slse + tile;
  const size_t head = static_cast<size_t>(b) * T * ld + static_cast<size_t>(h) * hs;
  const S* dyhead = dy + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * hs;
  const size_t stats = (static_cast<size_t>(b) * H + h) * T;
  load_rows(sk, qkv + head + C + static_cast<size_t>(j0) * ld, cols, hs, ld);
  load_rows(sv, qkv + head + 2 * C + static_cast<size_t>(j0) * ld, cols, hs, ld);
  zero_rows(sdk, cols, hs);
  zero_rows(sdv, cols, hs);
  for (int i0 = j0; i0 < T; i0 += tile) {  // earlier query tiles see none of these keys
    const int rows = min(tile, T - i0);
    __syncthreads();
    load_rows(sq, qkv + head + static_cast<size_t>(i0) * ld, rows, hs, ld);
    load_rows(sdy, dyhead + static_cast<size_t>(i0) * C, rows, hs, C);
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      slse[r] = lse[stats + i0 + r];
      sdelta[r] = delta[stats + i0 + r];
    }
    __syncthreads();
    probabilities(sp, sds, sq, sdy, sk, sv, slse, sdelta, i0, rows, j0, cols, hs, scale);
    __syncthreads();
    for (int i = threadIdx.x; i < cols * hs; i += blockDim.x) {
      const int c = i / hs, e = i % hs;
      float dv = 0.0f, dk = 0.0f;
      for (int r = 0; r < rows; ++r) {
        dv += sp[r * cols + c] * sdy[r * p + e];
        dk += sds[r * cols + c] * sq[r * p + e];
      }
      sdv[c * p + e] += dv;
      sdk[c * p + e] += scale * dk;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < cols * hs; i += blockDim.x) {
    const int c = i / hs, e = i % hs;
    const size_t at = head + static_cast<size_t>(j0 + c) * ld + e;
    store(dqkv[at + C], sdk[c * p + e]);
    store(dqkv[at + 2 * C], sdv[c * p + e]);
  }
}

// Block (b·H + h, query tile): dq of the tile's rows, over every key tile they see.
template <typename S>
__global__ void flash_dq_kernel(S* dqkv, const float* delta, const S* dy, const S* qkv,
                                const float* lse, int T, int C, int H, int tile, float scale) {
  extern __shared__ float smem[];
  const int hs = C / H, ld = 3 * C, p = pitch(hs);
  const int b = blockIdx.x / H, h = blockIdx.x % H;
  const int i0 = blockIdx.y * tile, rows = min(tile, T - i0);
  float* sq = smem;
  float* sdy = sq + tile * p;
  float* sdq = sdy + tile * p;
  float* sk = sdq + tile * p;
  float* sv = sk + tile * p;
  float* sds = sv + tile * p;
  float* slse = sds + tile * tile;
  float* sdelta = slse + tile;
  const size_t head = static_cast<size_t>(b) * T * ld + static_cast<size_t>(h) * hs;
  const size_t stats = (static_cast<size_t>(b) * H + h) * T;
  load_rows(sq, qkv + head + static_cast<size_t>(i0) * ld, rows, hs, ld);
  load_rows(sdy, dy + (static_cast<size_t>(b) * T + i0) * C + static_cast<size_t>(h) * hs, rows, hs,
            C);
  zero_rows(sdq, rows, hs);
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    slse[r] = lse[stats + i0 + r];
    sdelta[r] = delta[stats + i0 + r];
  }
  for (int j0 = 0; j0 < i0 + rows; j0 += tile) {
    const int cols = min(tile, T - j0);
    __syncthreads();
    load_rows(sk, qkv + head + C + static_cast<size_t>(j0) * ld, cols, hs, ld);
    load_rows(sv, qkv + head + 2 * C + static_cast<size_t>(j0) * ld, cols, hs, ld);
    __syncthreads();
    probabilities(nullptr, sds, sq, sdy, sk, sv, slse, sdelta, i0, rows, j0, cols, hs, scale);
    __syncthreads();
    for (int i = threadIdx.x; i < rows * hs; i += blockDim.x) {
      const int r = i / hs, e = i % hs;
      float dq = 0.0f;
      for (int c = 0; c < cols; ++c) dq += sds[r * cols + c] * sk[c * p + e];
      sdq[r * p + e] += scale * dq;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows * hs; i += blockDim.x) {
    const int r = i / hs, e = i % hs;
    store(dqkv[head + static_cast<size_t>(i0 + r) * ld + e], sdq[r * p + e]);
  }
}

void check_shape(const char* op, int B, int T, int C, int H) {
  if (H <= 0 || C % H != 0)
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(C) +
                                " channels do not split into " + std::to_string(H) + " heads");
  if (static_cast<long long>(B) * H > 0x7fffffffLL || T > 65535)
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(B) + " × " +
                                std::to_string(H) + " heads of " + std::to_string(T) +
                                " positions exceed the launch grid");
}

dim3 grid(int B, int H, int T, int tile) {
  return dim3(static_cast<unsigned>(B * H), static_cast<unsigned>((T + tile - 1) / tile));
}

}  // namespace

void flash_attention_forward(DType dt, void* y, float* lse, const void* qkv, int B, int T, int C,
                             int H, cudaStream_t s) {
  check_shape("flash attention", B, T, C, H);
  if (B <= 0 || T <= 0) return;
  const int hs = C / H;
  const float scale = static_cast<float>(attention_scale(hs));
  const Plan p = plan_for(kForwardSmem, hs);
  with_storage(dt, [&](auto tag) {
    using S = decltype(tag);
    allow_smem(flash_forward_kernel<S>, p.smem, "flash attention", hs);
    flash_forward_kernel<S><<<grid(B, H, T, p.tile), kThreads, p.smem, s>>>(
        static_cast<S*>(y), lse, static_cast<const S*>(qkv), T, C, H, p.tile, scale);
    SHARDLAB_CUDA_CHECK_LAUNCH("flash_forward_kernel");
  });
}

void flash_attention_backward(DType dt, void* dqkv, float* delta, const void* dy, const void* qkv,
                              const void* y, const float* lse, int B, int T, int C, int H,
                              cudaStream_t s) {
  check_shape("flash attention backward", B, T, C, H);
  if (B <= 0 || T <= 0) return;
  if (!delta) throw std::invalid_argument("cuda::flash_attention_backward: delta is required");
  const int hs = C / H;
  const float scale = static_cast<float>(attention_scale(hs));
  const Plan kv = plan_for(kDkDvSmem, hs), q = plan_for(kDqSmem, hs);
  with_storage(dt, [&](auto tag) {
    using S = decltype(tag);
    const size_t rows = static_cast<size_t>(B) * H * T;
    flash_delta_kernel<S><<<detail::grid_for(rows), detail::kBlock, 0, s>>>(
        delta, static_cast<const S*>(dy), static_cast<const S*>(y), B, T, C, H);
    SHARDLAB_CUDA_CHECK_LAUNCH("flash_delta_kernel");
    allow_smem(flash_dkdv_kernel<S>, kv.smem, "flash attention backward", hs);
    flash_dkdv_kernel<S><<<grid(B, H, T, kv.tile), kThreads, kv.smem, s>>>(
        static_cast<S*>(dqkv), delta, static_cast<const S*>(dy), static_cast<const S*>(qkv), lse, T,
        C, H, kv.tile, scale);
    SHARDLAB_CUDA_CHECK_LAUNCH("flash_dkdv_kernel");
    allow_smem(flash_dq_kernel<S>, q.smem, "flash attention backward", hs);
    flash_dq_kernel<S><<<grid(B, H, T, q.tile), kThreads, q.smem, s>>>(
        static_cast<S*>(dqkv), delta, static_cast<const S*>(dy), static_cast<const S*>(qkv), lse, T,
        C, H, q.tile, scale);
    SHARDLAB_CUDA_CHECK_LAUNCH("flash_dq_kernel");
  });
}

}  // namespace shardlab::kernels::cuda
