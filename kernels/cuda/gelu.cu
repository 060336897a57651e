// Exact-erf GELU forward and backward, element-wise with kernels/math.h's
// gelu_scalar / gelu_grad_scalar (the CPU's formulas).
#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math.h"

namespace shardlab::kernels::cuda {

namespace {

// No __restrict__: out may alias in (each element is read before it is written).
__global__ void gelu_forward_kernel(float* out, const float* in, size_t n) {
  for (size_t i = detail::global_index(); i < n; i += detail::grid_stride())
    out[i] = gelu_scalar(in[i]);
}

// No __restrict__: din may alias dout.
__global__ void gelu_backward_kernel(float* din, const float* dout, const float* in, size_t n) {
  for (size_t i = detail::global_index(); i < n; i += detail::grid_stride())
    din[i] = dout[i] * gelu_grad_scalar(in[i]);
}

}  // namespace

void gelu_forward(float* out, const float* in, size_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_forward_kernel<<<detail::grid_for(n), detail::kBlock, 0, s>>>(out, in, n);
  SHARDLAB_CUDA_CHECK_LAUNCH("gelu_forward_kernel");
}

void gelu_backward(float* din, const float* dout, const float* in, size_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_backward_kernel<<<detail::grid_for(n), detail::kBlock, 0, s>>>(din, dout, in, n);
  SHARDLAB_CUDA_CHECK_LAUNCH("gelu_backward_kernel");
}

}  // namespace shardlab::kernels::cuda
