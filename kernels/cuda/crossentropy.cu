// Softmax cross-entropy forward and backward in one pass (kernels/transformer.h's
// crossentropy_forward_backward): a block per row for the max, the sum of
// exponentials and the gradient; the row losses are summed in double, per
// block in row order and then over the blocks in order, so the result is
// deterministic.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/storage.h"
#include "kernels/transformer_math.h"

namespace shardlab::kernels::cuda {

namespace {

using detail::kWarp;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;

// Block-wide max or sum: warps reduce, lane 0s publish, warp 0 combines in
// order; every thread returns the result. Ends with the block synchronised.
template <bool is_max>
__device__ float block_reduce(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = is_max ? detail::warp_max(v) : detail::warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < kWarps ? shared[lane] : shared[0];
    if (!is_max && lane >= kWarps) w = 0.0f;
    w = is_max ? detail::warp_max(w) : detail::warp_sum(w);
    if (lane == 0) shared[kWarps] = w;
  }
  __syncthreads();
  const float result = shared[kWarps];
  __syncthreads();  // `shared` may be reused right after
  return result;
}

// No __restrict__: dlogits may alias logits (the target logit is read before
// the barrier that precedes the first write, every other element by the
// thread that overwrites it).
template <typename S>
__global__ void crossentropy_kernel(S* dlogits, const S* logits, const int32_t* targets, int rows,
                                    int V, float scale, double* partials) {
  __shared__ float shared[kWarps + 1];
  __shared__ float target_logit;
  const size_t Vs = static_cast<size_t>(V);
  double block_loss = 0.0;  // thread 0's, in row order
  // The loop bound depends on blockIdx only, so every thread reaches each barrier.
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const S* x = logits + r * Vs;
    const int32_t t = targets[r];
    if (t == kIgnoreTarget) {
      if (dlogits)
        for (size_t c = threadIdx.x; c < Vs; c += kThreads) store(dlogits[r * Vs + c], 0.0f);
      continue;
    }
    const bool bad = t < 0 || t >= V;  // cannot throw: the row turns NaN
    if (threadIdx.x == 0) target_logit = bad ? 0.0f : load(x[t]);
    float m = load(x[0]);
    for (size_t c = threadIdx.x; c < Vs; c += kThreads) {
      const float v = load(x[c]);
      m = m < v ? v : m;
    }
    m = block_reduce<true>(m, shared);
    float sum = 0.0f;
    for (size_t c = threadIdx.x; c < Vs; c += kThreads) sum += math_detail::exp(load(x[c]) - m);
    sum = block_reduce<false>(sum, shared);  // also orders target_logit's read before the writes
    const float nan = __int_as_float(0x7fc00000);
    if (threadIdx.x == 0)
      block_loss +=
          bad ? static_cast<double>(nan) : static_cast<double>(logf(sum) - (target_logit - m));
    if (dlogits)
      for (size_t c = threadIdx.x; c < Vs; c += kThreads)
        store(dlogits[r * Vs + c], bad ? nan
                                       : crossentropy_grad(math_detail::exp(load(x[c]) - m), sum,
                                                           c == static_cast<size_t>(t), scale));
    __syncthreads();  // target_logit is rewritten by the next row
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = block_loss;
}

__global__ void sum_partials_kernel(const double* partials, int n, double* sum_out) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += partials[i];
  *sum_out = s;
}

template <typename S>
void launch(void* dlogits, const void* logits, const int32_t* targets, int rows, int V,
            size_t divisor, double* partials, double* sum_out, cudaStream_t s) {
  const int blocks = rows < kCrossEntropyBlocks ? rows : kCrossEntropyBlocks;
  // The same float as the CPU's scale, so the gradients match.
  const float scale = 1.0f / static_cast<float>(divisor);
  crossentropy_kernel<S><<<blocks, kThreads, 0, s>>>(
      static_cast<S*>(dlogits), static_cast<const S*>(logits), targets, rows, V, scale, partials);
  SHARDLAB_CUDA_CHECK_LAUNCH("crossentropy_kernel");
  sum_partials_kernel<<<1, 1, 0, s>>>(partials, blocks, sum_out);
  SHARDLAB_CUDA_CHECK_LAUNCH("sum_partials_kernel");
}

// One rank's slice of a vocabulary-parallel cross-entropy: a block per row.
__global__ void slice_stats_kernel(float* stats, const float* logits, const int32_t* targets,
                                   int rows, int cols, int valid, int v_begin) {
  __shared__ float shared[kWarps + 1];
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = logits + static_cast<size_t>(r) * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < valid; c += kThreads) m = m < x[c] ? x[c] : m;
    m = block_reduce<true>(m, shared);
    float sum = 0.0f;
    for (int c = threadIdx.x; c < valid; c += kThreads) sum += math_detail::exp(x[c] - m);
    sum = block_reduce<false>(sum, shared);
    if (threadIdx.x == 0) {
      const int t = targets[r], local = t - v_begin;
      stats[3 * r] = m;
      stats[3 * r + 1] = valid > 0 ? sum : 0.0f;
      stats[3 * r + 2] = t >= 0 && local >= 0 && local < valid ? x[local] : 0.0f;
    }
  }
}

__global__ void slice_grad_kernel(float* dlogits, const float* logits, const float* ms,
                                  const int32_t* targets, int rows, int cols, int valid,
                                  int v_begin, float scale) {
  const size_t total = static_cast<size_t>(rows) * cols;
  for (size_t i = detail::global_index(); i < total; i += detail::grid_stride()) {
    const int r = static_cast<int>(i / cols), c = static_cast<int>(i % cols);
    const int t = targets[r];
    dlogits[i] = t == kIgnoreTarget || c >= valid
                     ? 0.0f
                     : crossentropy_grad(math_detail::exp(logits[i] - ms[2 * r]), ms[2 * r + 1],
                                         c == t - v_begin, scale);
  }
}

}  // namespace

void crossentropy_slice_stats(float* stats, const float* logits, const int32_t* targets, int rows,
                              int cols, int valid, int v_begin, cudaStream_t s) {
  if (rows <= 0) return;
  const int blocks = rows < kCrossEntropyBlocks ? rows : kCrossEntropyBlocks;
  slice_stats_kernel<<<blocks, kThreads, 0, s>>>(stats, logits, targets, rows, cols, valid,
                                                 v_begin);
  SHARDLAB_CUDA_CHECK_LAUNCH("slice_stats_kernel");
}

void crossentropy_slice_grad(float* dlogits, const float* logits, const float* ms,
                             const int32_t* targets, int rows, int cols, int valid, int v_begin,
                             size_t divisor, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  if (divisor == 0)
    throw std::invalid_argument("cuda::crossentropy_slice_grad: divisor 0 for " +
                                std::to_string(rows) + " rows");
  const size_t total = static_cast<size_t>(rows) * cols;
  slice_grad_kernel<<<detail::grid_for(total), detail::kBlock, 0, s>>>(
      dlogits, logits, ms, targets, rows, cols, valid, v_begin, 1.0f / static_cast<float>(divisor));
  SHARDLAB_CUDA_CHECK_LAUNCH("slice_grad_kernel");
}

void crossentropy_forward_backward(DType dt, void* dlogits, const void* logits,
                                   const int32_t* targets, int rows, int V, size_t divisor,
                                   double* partials, double* sum_out, cudaStream_t s) {
  if (rows <= 0 || V <= 0) {
    // Still overwrite the sum: an empty slice contributes 0 (all-zero bits are 0.0).
    SHARDLAB_CUDA_CHECK(cudaMemsetAsync(sum_out, 0, sizeof(double), s));
    return;
  }
  if (divisor == 0)
    throw std::invalid_argument("cuda::crossentropy_forward_backward: divisor 0 for " +
                                std::to_string(rows) + " rows");
  with_storage(dt, [&](auto tag) {
    launch<decltype(tag)>(dlogits, logits, targets, rows, V, divisor, partials, sum_out, s);
  });
}

}  // namespace shardlab::kernels::cuda
