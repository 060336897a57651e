// Plain SGD and in-place scaling (gradient averaging, loss-scale undo).
#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math.h"

namespace shardlab::kernels::cuda {

namespace {

__global__ void sgd_kernel(float* __restrict__ param, const float* __restrict__ grad, size_t n,
                           float lr) {
  for (size_t i = detail::global_index(); i < n; i += detail::grid_stride())
    param[i] = sgd_update(param[i], grad[i], lr);
}

__global__ void scale_kernel(float* x, size_t n, float factor) {
  for (size_t i = detail::global_index(); i < n; i += detail::grid_stride()) x[i] *= factor;
}

}  // namespace

void sgd_step(float* param, const float* grad, size_t n, float lr, cudaStream_t s) {
  if (n == 0) return;
  sgd_kernel<<<detail::grid_for(n), detail::kBlock, 0, s>>>(param, grad, n, lr);
  SHARDLAB_CUDA_CHECK_LAUNCH("sgd_kernel");
}

void scale(float* x, size_t n, float factor, cudaStream_t s) {
  if (n == 0) return;
  scale_kernel<<<detail::grid_for(n), detail::kBlock, 0, s>>>(x, n, factor);
  SHARDLAB_CUDA_CHECK_LAUNCH("scale_kernel");
}

}  // namespace shardlab::kernels::cuda
