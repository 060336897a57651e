// Exact-erf GELU forward and backward, element-wise with kernels/math.h's
// gelu_scalar / gelu_grad_scalar (the CPU's formulas), on fp32 and on the
// 2-byte storage formats (math in fp32, each output rounded once).
#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math.h"
#include "kernels/storage.h"

namespace shardlab::kernels::cuda {

namespace {

// No __restrict__: out may alias in (each element is read before it is written).
template <typename S>
__global__ void gelu_forward_kernel(S* out, const S* in, size_t n) {
  for (size_t i = detail::global_index(); i < n; i += detail::grid_stride())
    store(out[i], gelu_scalar(load(in[i])));
}

// No __restrict__: din may alias dout.
template <typename S>
__global__ void gelu_backward_kernel(S* din, const S* dout, const S* in, size_t n) {
  for (size_t i = detail::global_index(); i < n; i += detail::grid_stride())
    store(din[i], load(dout[i]) * gelu_grad_scalar(load(in[i])));
}

template <typename S>
void launch_forward(S* out, const S* in, size_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_forward_kernel<S><<<detail::grid_for(n), detail::kBlock, 0, s>>>(out, in, n);
  SHARDLAB_CUDA_CHECK_LAUNCH("gelu_forward_kernel");
}

template <typename S>
void launch_backward(S* din, const S* dout, const S* in, size_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_backward_kernel<S><<<detail::grid_for(n), detail::kBlock, 0, s>>>(din, dout, in, n);
  SHARDLAB_CUDA_CHECK_LAUNCH("gelu_backward_kernel");
}

}  // namespace

void gelu_forward(float* out, const float* in, size_t n, cudaStream_t s) {
  launch_forward(out, in, n, s);
}

void gelu_backward(float* din, const float* dout, const float* in, size_t n, cudaStream_t s) {
  launch_backward(din, dout, in, n, s);
}

void gelu_forward(DType dt, void* out, const void* in, size_t n, cudaStream_t s) {
  with_storage(dt, [&](auto tag) {
    using S = decltype(tag);
    launch_forward(static_cast<S*>(out), static_cast<const S*>(in), n, s);
  });
}

void gelu_backward(DType dt, void* din, const void* dout, const void* in, size_t n,
                   cudaStream_t s) {
  with_storage(dt, [&](auto tag) {
    using S = decltype(tag);
    launch_backward(static_cast<S*>(din), static_cast<const S*>(dout), static_cast<const S*>(in), n,
                    s);
  });
}

}  // namespace shardlab::kernels::cuda
