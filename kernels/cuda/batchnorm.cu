// BatchNorm1d in training mode (forward with the running-statistics update, and
// backward), with kernels/math.h's formulas: the same math as kernels/cpu.h.
#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math.h"

namespace shardlab::kernels::cuda {

namespace {

// As bias_grad_kernel: a block owns 32 columns (x lanes, coalesced along a row)
// and its 32 y lanes split the rows; partial sums are combined by lane 0 in a
// fixed order, so results do not depend on scheduling. Column statistics need
// the whole column before any output is written, hence the barriers between passes.
constexpr int kTile = 32;

// No __restrict__: y may alias x (each element is read before it is written).
__global__ void batchnorm_forward_kernel(float* y, float* xhat, float* invstd, const float* x,
                                         const float* weight, const float* bias,
                                         float* running_mean, float* running_var, int rows,
                                         int cols, double momentum, double eps) {
  __shared__ double partial[kTile][kTile + 1];
  __shared__ double mean_s[kTile], invstd_s[kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const size_t C = static_cast<size_t>(cols);
  // The loop bound depends on blockIdx only, so every thread reaches each barrier.
  for (int c0 = blockIdx.x * kTile; c0 < cols; c0 += gridDim.x * kTile) {
    const int c = c0 + tx;
    double acc = 0.0;
    if (c < cols)
      for (int r = ty; r < rows; r += kTile) acc += static_cast<double>(x[r * C + c]);
    partial[ty][tx] = acc;
    __syncthreads();
    if (ty == 0) {
      double sum = 0.0;
      for (int k = 0; k < kTile; ++k) sum += partial[k][tx];
      mean_s[tx] = sum / rows;
    }
    __syncthreads();
    const double mean = mean_s[tx];
    acc = 0.0;
    if (c < cols)
      for (int r = ty; r < rows; r += kTile) {
        const double d = static_cast<double>(x[r * C + c]) - mean;
        acc += d * d;
      }
    partial[ty][tx] = acc;
    __syncthreads();
    if (ty == 0) {
      double sum = 0.0;
      for (int k = 0; k < kTile; ++k) sum += partial[k][tx];
      const double var = sum / rows;
      const double is = bn_invstd(var, eps);
      invstd_s[tx] = is;
      if (c < cols) {
        invstd[c] = static_cast<float>(is);
        if (running_mean) running_mean[c] = bn_running_mean(running_mean[c], mean, momentum);
        if (running_var) running_var[c] = bn_running_var(running_var[c], var, rows, momentum);
      }
    }
    __syncthreads();
    if (c < cols) {
      const double is = invstd_s[tx];
      const float w = weight[c], b = bias[c];
      for (int r = ty; r < rows; r += kTile) {
        const size_t i = r * C + c;
        const float xh = static_cast<float>((static_cast<double>(x[i]) - mean) * is);
        xhat[i] = xh;
        y[i] = w * xh + b;
      }
    }
    __syncthreads();  // shared memory is reused by the next tile
  }
}

// No __restrict__: dx may alias dy.
__global__ void batchnorm_backward_kernel(float* dx, float* dweight, float* dbias, const float* dy,
                                          const float* xhat, const float* invstd,
                                          const float* weight, int rows, int cols) {
  __shared__ double partial_dy[kTile][kTile + 1];
  __shared__ double partial_dy_xhat[kTile][kTile + 1];
  __shared__ double sum_dy_s[kTile], sum_dy_xhat_s[kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const size_t C = static_cast<size_t>(cols);
  for (int c0 = blockIdx.x * kTile; c0 < cols; c0 += gridDim.x * kTile) {
    const int c = c0 + tx;
    double a = 0.0, b = 0.0;
    if (c < cols)
      for (int r = ty; r < rows; r += kTile) {
        const double g = static_cast<double>(dy[r * C + c]);
        a += g;
        b += g * static_cast<double>(xhat[r * C + c]);
      }
    partial_dy[ty][tx] = a;
    partial_dy_xhat[ty][tx] = b;
    __syncthreads();
    if (ty == 0) {
      double s1 = 0.0, s2 = 0.0;
      for (int k = 0; k < kTile; ++k) {
        s1 += partial_dy[k][tx];
        s2 += partial_dy_xhat[k][tx];
      }
      sum_dy_s[tx] = s1;
      sum_dy_xhat_s[tx] = s2;
      if (c < cols) {
        dweight[c] += static_cast<float>(s2);
        dbias[c] += static_cast<float>(s1);
      }
    }
    __syncthreads();
    if (c < cols) {
      const double s1 = sum_dy_s[tx], s2 = sum_dy_xhat_s[tx];
      const double w = weight[c], is = invstd[c];
      for (int r = ty; r < rows; r += kTile) {
        const size_t i = r * C + c;
        dx[i] = static_cast<float>(bn_grad_input(
            static_cast<double>(dy[i]), static_cast<double>(xhat[i]), s1, s2, w, is, rows));
      }
    }
    __syncthreads();
  }
}

unsigned tiles_grid(int cols) {
  const size_t tiles = (static_cast<size_t>(cols) + kTile - 1) / kTile;
  return static_cast<unsigned>(tiles < detail::kMaxBlocks ? tiles : detail::kMaxBlocks);
}

}  // namespace

void batchnorm_forward(float* y, float* xhat, float* invstd, const float* x, const float* weight,
                       const float* bias, float* running_mean, float* running_var, int rows,
                       int cols, const BatchNormParams& p, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  batchnorm_forward_kernel<<<tiles_grid(cols), dim3(kTile, kTile), 0, s>>>(
      y, xhat, invstd, x, weight, bias, running_mean, running_var, rows, cols, p.momentum, p.eps);
  SHARDLAB_CUDA_CHECK_LAUNCH("batchnorm_forward_kernel");
}

void batchnorm_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* xhat,
                        const float* invstd, const float* weight, int rows, int cols,
                        cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  batchnorm_backward_kernel<<<tiles_grid(cols), dim3(kTile, kTile), 0, s>>>(
      dx, dweight, dbias, dy, xhat, invstd, weight, rows, cols);
  SHARDLAB_CUDA_CHECK_LAUNCH("batchnorm_backward_kernel");
}

}  // namespace shardlab::kernels::cuda
