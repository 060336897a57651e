// The synthetic regression batch made on the GPU: the CPU's counter-based
// normal draws (kernels/math.h's normal_pair), one thread per pair of elements,
// and tanh element-wise. The x·T GEMM between them is cuda::gemm.
#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math.h"

namespace shardlab::kernels::cuda {

namespace {

__global__ void synthetic_normals_kernel(float* __restrict__ x, uint64_t seed, uint64_t step,
                                         uint64_t row_begin, size_t rows, size_t dim) {
  const size_t pairs_per_row = (dim + 1) / 2, total = rows * pairs_per_row;
  for (size_t i = detail::global_index(); i < total; i += detail::grid_stride()) {
    const size_t r = i / pairs_per_row, p = i % pairs_per_row;
    // Recomputed per pair: three multiplications, cheaper than a second pass.
    const uint64_t key = mix_keys(seed, step, row_begin + r);
    float first, second;
    normal_pair(key, p, &first, &second);
    float* xr = x + r * dim;
    xr[2 * p] = first;
    if (2 * p + 1 < dim) xr[2 * p + 1] = second;
  }
}

// No __restrict__: out may alias in.
__global__ void tanh_kernel(float* out, const float* in, size_t n) {
  for (size_t i = detail::global_index(); i < n; i += detail::grid_stride())
    out[i] = math_detail::tanh(in[i]);
}

}  // namespace

void synthetic_normals(float* x, uint64_t seed, int64_t step, int64_t row_begin, int rows, int dim,
                       cudaStream_t s) {
  if (rows <= 0 || dim <= 0) return;
  const size_t total = static_cast<size_t>(rows) * ((static_cast<size_t>(dim) + 1) / 2);
  synthetic_normals_kernel<<<detail::grid_for(total), detail::kBlock, 0, s>>>(
      x, seed, static_cast<uint64_t>(step), static_cast<uint64_t>(row_begin),
      static_cast<size_t>(rows), static_cast<size_t>(dim));
  SHARDLAB_CUDA_CHECK_LAUNCH("synthetic_normals_kernel");
}

void tanh_forward(float* out, const float* in, size_t n, cudaStream_t s) {
  if (n == 0) return;
  tanh_kernel<<<detail::grid_for(n), detail::kBlock, 0, s>>>(out, in, n);
  SHARDLAB_CUDA_CHECK_LAUNCH("tanh_kernel");
}

}  // namespace shardlab::kernels::cuda
