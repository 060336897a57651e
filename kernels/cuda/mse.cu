// MSELoss forward and backward in one pass: the gradient element-wise, the sum
// of squares reduced in double in one block, so the result is deterministic.
#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"

namespace shardlab::kernels::cuda {

namespace {

// One block: a model's output (batch x out_dim) is small, and a single block
// needs no scratch buffer or atomics and always sums in the same order.
constexpr int kMseThreads = 1024;

__global__ void mse_kernel(float* dpred, const float* pred, const float* target, size_t n,
                           float grad_scale, double* sum_out) {
  __shared__ double partial[kMseThreads];
  double acc = 0.0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float d = pred[i] - target[i];
    acc += static_cast<double>(d) * static_cast<double>(d);
    if (dpred) dpred[i] = grad_scale * d;
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *sum_out = partial[0];
}

}  // namespace

void mse_forward_backward(float* dpred, const float* pred, const float* target, size_t n,
                          size_t divisor, double* sum_out, cudaStream_t s) {
  if (n == 0) {
    // Still overwrite the sum: an empty slice contributes 0 (all-zero bits are 0.0).
    SHARDLAB_CUDA_CHECK(cudaMemsetAsync(sum_out, 0, sizeof(double), s));
    return;
  }
  // The same float as kernels::mse_forward_backward's scale, so dpred matches the CPU.
  const float grad_scale = 2.0f / static_cast<float>(divisor);
  mse_kernel<<<1, kMseThreads, 0, s>>>(dpred, pred, target, n, grad_scale, sum_out);
  SHARDLAB_CUDA_CHECK_LAUNCH("mse_kernel");
}

}  // namespace shardlab::kernels::cuda
