// nn.Linear's bias: broadcasting it over the rows (forward) and summing the
// output gradient over the rows into its gradient (backward).
#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"

namespace shardlab::kernels::cuda {

namespace {

__global__ void bias_rows_kernel(float* out, const float* bias, size_t total, size_t cols) {
  for (size_t i = detail::global_index(); i < total; i += detail::grid_stride())
    out[i] = bias[i % cols];
}

// A block owns 32 columns (one per x lane, so loads are coalesced along a row)
// and splits the rows over its 32 y lanes; the partial sums are then added in a
// fixed order, so the result does not depend on scheduling.
constexpr int kTile = 32;

__global__ void bias_grad_kernel(float* dbias, const float* dout, int rows, int cols) {
  __shared__ float partial[kTile][kTile + 1];  // +1: no bank conflicts on the column read
  const int tx = threadIdx.x, ty = threadIdx.y;
  // The loop bound depends on blockIdx only, so every thread reaches each barrier.
  for (int c0 = blockIdx.x * kTile; c0 < cols; c0 += gridDim.x * kTile) {
    const int c = c0 + tx;
    float acc = 0.0f;
    if (c < cols)
      for (int r = ty; r < rows; r += kTile) acc += dout[static_cast<size_t>(r) * cols + c];
    partial[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < cols) {
      float sum = 0.0f;
      for (int k = 0; k < kTile; ++k) sum += partial[k][tx];
      dbias[c] += sum;
    }
    __syncthreads();
  }
}

}  // namespace

void bias_rows(float* out, const float* bias, int rows, int cols, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  const size_t total = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  bias_rows_kernel<<<detail::grid_for(total), detail::kBlock, 0, s>>>(out, bias, total,
                                                                      static_cast<size_t>(cols));
  SHARDLAB_CUDA_CHECK_LAUNCH("bias_rows_kernel");
}

void bias_grad_accumulate(float* dbias, const float* dout, int rows, int cols, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  const size_t tiles = (static_cast<size_t>(cols) + kTile - 1) / kTile;
  const unsigned grid =
      static_cast<unsigned>(tiles < detail::kMaxBlocks ? tiles : detail::kMaxBlocks);
  bias_grad_kernel<<<grid, dim3(kTile, kTile), 0, s>>>(dbias, dout, rows, cols);
  SHARDLAB_CUDA_CHECK_LAUNCH("bias_grad_kernel");
}

}  // namespace shardlab::kernels::cuda
