// torch.optim.AdamW on the GPU: one kernels/math.h adamw_update per element, with
// the per-step constants computed once on the host (adamw_scalars).
#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math.h"

namespace shardlab::kernels::cuda {

namespace {

// Passed by value: the scalars travel in the kernel's parameter space.
__global__ void adamw_kernel(float* __restrict__ param, const float* __restrict__ grad,
                             float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq, size_t n,
                             AdamWScalars sc) {
  for (size_t i = detail::global_index(); i < n; i += detail::grid_stride()) {
    float p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
    adamw_update(p, grad[i], m, v, sc);
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

}  // namespace

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                const AdamWScalars& sc, cudaStream_t s) {
  if (n == 0) return;
  adamw_kernel<<<detail::grid_for(n), detail::kBlock, 0, s>>>(param, grad, exp_avg, exp_avg_sq, n,
                                                              sc);
  SHARDLAB_CUDA_CHECK_LAUNCH("adamw_kernel");
}

}  // namespace shardlab::kernels::cuda
