// nn.LayerNorm forward and backward with kernels/transformer_math.h's formulas
// (the CPU kernel's, kernels/transformer.h): one warp per row for the row
// statistics and the input gradient, 32x32 tiles for the column sums of the
// parameter gradients. Sums in double, in a fixed order.
#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/storage.h"
#include "kernels/transformer_math.h"

namespace shardlab::kernels::cuda {

namespace {

using detail::kWarp;

// No __restrict__: y may alias x (a lane reads its elements before writing them).
template <typename S>
__global__ void layernorm_forward_kernel(S* y, float* mean, float* rstd, const S* x,
                                         const S* weight, const S* bias, int rows, int cols,
                                         double eps) {
  const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  const size_t C = static_cast<size_t>(cols);
  // Warp-uniform loop: the shuffles see all 32 lanes.
  for (int r = blockIdx.x * warps + threadIdx.x / kWarp; r < rows; r += gridDim.x * warps) {
    const S* xr = x + r * C;
    double sum = 0.0;
    for (int c = lane; c < cols; c += kWarp) sum += static_cast<double>(load(xr[c]));
    const double m = detail::warp_sum(sum) / cols;
    double var = 0.0;
    for (int c = lane; c < cols; c += kWarp) {
      const double d = static_cast<double>(load(xr[c])) - m;
      var += d * d;
    }
    var = detail::warp_sum(var);
    const float mr = static_cast<float>(m);
    const float rr = static_cast<float>(ln_rstd(var / cols, eps));
    if (lane == 0) {
      mean[r] = mr;
      rstd[r] = rr;
    }
    S* yr = y + r * C;
    for (int c = lane; c < cols; c += kWarp) {
      const float xh = (load(xr[c]) - mr) * rr;
      store(yr[c], xh * load(weight[c]) + load(bias[c]));
    }
  }
}

// dweight[c] += Σ dy·xhat, dbias[c] += Σ dy, in two passes in a fixed order:
// blocks of 32 columns (x lanes, coalesced along a row) × 8 row lanes sum one
// chunk of rows each into partial[chunk][col] (Σdy) and partial[chunks + chunk][col]
// (Σdy·xhat); then a thread per column adds the chunks in order. The chunks give
// the GPU enough blocks: one block per 32 columns was 12 blocks for C = 384.
constexpr int kTile = 32, kRowLanes = 8;

template <typename S>
__global__ void layernorm_param_partial_kernel(double* partial, const S* dy, const S* x,
                                               const float* mean, const float* rstd, int rows,
                                               int cols, int rows_per_chunk) {
  __shared__ double part_dy[kRowLanes][kTile + 1];
  __shared__ double part_dy_xhat[kRowLanes][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const size_t C = static_cast<size_t>(cols);
  const int c = blockIdx.x * kTile + tx, chunk = blockIdx.y, chunks = gridDim.y;
  const int r0 = chunk * rows_per_chunk;
  const int r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  double a = 0.0, b = 0.0;
  if (c < cols)
    for (int r = r0 + ty; r < r1; r += kRowLanes) {
      const size_t i = r * C + c;
      const float xh = (load(x[i]) - mean[r]) * rstd[r];
      const double d = static_cast<double>(load(dy[i]));
      a += d;
      b += d * static_cast<double>(xh);
    }
  part_dy[ty][tx] = a;
  part_dy_xhat[ty][tx] = b;
  __syncthreads();
  if (ty == 0 && c < cols) {
    double s1 = 0.0, s2 = 0.0;
    for (int k = 0; k < kRowLanes; ++k) {
      s1 += part_dy[k][tx];
      s2 += part_dy_xhat[k][tx];
    }
    partial[static_cast<size_t>(chunk) * C + c] = s1;
    partial[static_cast<size_t>(chunks + chunk) * C + c] = s2;
  }
}

template <typename S>
__global__ void layernorm_param_finish_kernel(S* dweight, S* dbias, const double* partial,
                                              int chunks, int cols) {
  const size_t C = static_cast<size_t>(cols);
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
    double s1 = 0.0, s2 = 0.0;
    for (int k = 0; k < chunks; ++k) {
      s1 += partial[static_cast<size_t>(k) * C + c];
      s2 += partial[static_cast<size_t>(chunks + k) * C + c];
    }
    store(dweight[c], load(dweight[c]) + static_cast<float>(s2));
    store(dbias[c], load(dbias[c]) + static_cast<float>(s1));
  }
}

// dx per row. No __restrict__: dx may alias dy (the parameter gradients, which
// read dy, are summed by the kernel launched before this one).
template <typename S>
__global__ void layernorm_input_grad_kernel(S* dx, const S* dy, const S* x, const float* mean,
                                            const float* rstd, const S* weight, int rows, int cols,
                                            bool accumulate) {
  const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  const size_t C = static_cast<size_t>(cols);
  for (int r = blockIdx.x * warps + threadIdx.x / kWarp; r < rows; r += gridDim.x * warps) {
    const S* xr = x + r * C;
    const S* dyr = dy + r * C;
    const float mr = mean[r], rr = rstd[r];
    double sg = 0.0, sgx = 0.0;
    for (int c = lane; c < cols; c += kWarp) {
      const float xh = (load(xr[c]) - mr) * rr;
      const double g = static_cast<double>(load(dyr[c])) * static_cast<double>(load(weight[c]));
      sg += g;
      sgx += g * static_cast<double>(xh);
    }
    const double mean_g = detail::warp_sum(sg) / cols;
    const double mean_gx = detail::warp_sum(sgx) / cols;
    S* dxr = dx + r * C;
    for (int c = lane; c < cols; c += kWarp) {
      const float xh = (load(xr[c]) - mr) * rr;
      const double g = static_cast<double>(load(dyr[c])) * static_cast<double>(load(weight[c]));
      const float v = static_cast<float>(
          ln_grad_input(g, static_cast<double>(xh), mean_g, mean_gx, static_cast<double>(rr)));
      store(dxr[c], accumulate ? load(dxr[c]) + v : v);
    }
  }
}

template <typename S>
void launch_forward(void* y, float* mean, float* rstd, const void* x, const void* weight,
                    const void* bias, int rows, int cols, double eps, cudaStream_t s) {
  layernorm_forward_kernel<S>
      <<<detail::grid_for_rows(rows, detail::kBlock), detail::kBlock, 0, s>>>(
          static_cast<S*>(y), mean, rstd, static_cast<const S*>(x), static_cast<const S*>(weight),
          static_cast<const S*>(bias), rows, cols, eps);
  SHARDLAB_CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}

template <typename S>
void launch_backward(void* dx, void* dweight, void* dbias, const void* dy, const void* x,
                     const float* mean, const float* rstd, const void* weight, int rows, int cols,
                     bool accumulate, double* partial, cudaStream_t s) {
  const int chunks = column_sum_chunks(rows), per = (rows + chunks - 1) / chunks;
  const unsigned tiles = static_cast<unsigned>((cols + kTile - 1) / kTile);
  layernorm_param_partial_kernel<S>
      <<<dim3(tiles, static_cast<unsigned>(chunks)), dim3(kTile, kRowLanes), 0, s>>>(
          partial, static_cast<const S*>(dy), static_cast<const S*>(x), mean, rstd, rows, cols,
          per);
  SHARDLAB_CUDA_CHECK_LAUNCH("layernorm_param_partial_kernel");
  layernorm_param_finish_kernel<S>
      <<<detail::grid_for(static_cast<size_t>(cols)), detail::kBlock, 0, s>>>(
          static_cast<S*>(dweight), static_cast<S*>(dbias), partial, chunks, cols);
  SHARDLAB_CUDA_CHECK_LAUNCH("layernorm_param_finish_kernel");
  layernorm_input_grad_kernel<S>
      <<<detail::grid_for_rows(rows, detail::kBlock), detail::kBlock, 0, s>>>(
          static_cast<S*>(dx), static_cast<const S*>(dy), static_cast<const S*>(x), mean, rstd,
          static_cast<const S*>(weight), rows, cols, accumulate);
  SHARDLAB_CUDA_CHECK_LAUNCH("layernorm_input_grad_kernel");
}

}  // namespace

void layernorm_forward(DType dt, void* y, float* mean, float* rstd, const void* x,
                       const void* weight, const void* bias, int rows, int cols, double eps,
                       cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  with_storage(dt, [&](auto tag) {
    launch_forward<decltype(tag)>(y, mean, rstd, x, weight, bias, rows, cols, eps, s);
  });
}

void layernorm_backward(DType dt, void* dx, void* dweight, void* dbias, const void* dy,
                        const void* x, const float* mean, const float* rstd, const void* weight,
                        int rows, int cols, bool accumulate, double* partial, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  with_storage(dt, [&](auto tag) {
    launch_backward<decltype(tag)>(dx, dweight, dbias, dy, x, mean, rstd, weight, rows, cols,
                                   accumulate, partial, s);
  });
}

}  // namespace shardlab::kernels::cuda
