// nn.Linear's bias: broadcasting it over the rows (forward) and summing the
// output gradient over the rows into its gradient (backward), on fp32 and on
// the 2-byte storage formats (sums in fp32, each gradient rounded once).
#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/storage.h"

namespace shardlab::kernels::cuda {

namespace {

template <typename S>
__global__ void bias_rows_kernel(S* out, const S* bias, size_t total, size_t cols) {
  for (size_t i = detail::global_index(); i < total; i += detail::grid_stride())
    out[i] = bias[i % cols];
}

// A block owns 32 columns (one per x lane, so loads are coalesced along a row)
// and splits the rows over its 32 y lanes; the partial sums are then added in a
// fixed order, so the result does not depend on scheduling.
constexpr int kTile = 32;

template <typename S>
__global__ void bias_grad_kernel(S* dbias, const S* dout, int rows, int cols) {
  __shared__ float partial[kTile][kTile + 1];  // +1: no bank conflicts on the column read
  const int tx = threadIdx.x, ty = threadIdx.y;
  // The loop bound depends on blockIdx only, so every thread reaches each barrier.
  for (int c0 = blockIdx.x * kTile; c0 < cols; c0 += gridDim.x * kTile) {
    const int c = c0 + tx;
    float acc = 0.0f;
    if (c < cols)
      for (int r = ty; r < rows; r += kTile) acc += load(dout[static_cast<size_t>(r) * cols + c]);
    partial[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < cols) {
      float sum = 0.0f;
      for (int k = 0; k < kTile; ++k) sum += partial[k][tx];
      store(dbias[c], load(dbias[c]) + sum);
    }
    __syncthreads();
  }
}

template <typename S>
void launch_bias_rows(S* out, const S* bias, int rows, int cols, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  const size_t total = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  bias_rows_kernel<S><<<detail::grid_for(total), detail::kBlock, 0, s>>>(out, bias, total,
                                                                         static_cast<size_t>(cols));
  SHARDLAB_CUDA_CHECK_LAUNCH("bias_rows_kernel");
}

template <typename S>
void launch_bias_grad(S* dbias, const S* dout, int rows, int cols, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  const size_t tiles = (static_cast<size_t>(cols) + kTile - 1) / kTile;
  const unsigned grid =
      static_cast<unsigned>(tiles < detail::kMaxBlocks ? tiles : detail::kMaxBlocks);
  bias_grad_kernel<S><<<grid, dim3(kTile, kTile), 0, s>>>(dbias, dout, rows, cols);
  SHARDLAB_CUDA_CHECK_LAUNCH("bias_grad_kernel");
}

}  // namespace

void bias_rows(float* out, const float* bias, int rows, int cols, cudaStream_t s) {
  launch_bias_rows(out, bias, rows, cols, s);
}

void bias_grad_accumulate(float* dbias, const float* dout, int rows, int cols, cudaStream_t s) {
  launch_bias_grad(dbias, dout, rows, cols, s);
}

void bias_rows(DType dt, void* out, const void* bias, int rows, int cols, cudaStream_t s) {
  with_storage(dt, [&](auto tag) {
    using S = decltype(tag);
    launch_bias_rows(static_cast<S*>(out), static_cast<const S*>(bias), rows, cols, s);
  });
}

void bias_grad_accumulate(DType dt, void* dbias, const void* dout, int rows, int cols,
                          cudaStream_t s) {
  with_storage(dt, [&](auto tag) {
    using S = decltype(tag);
    launch_bias_grad(static_cast<S*>(dbias), static_cast<const S*>(dout), rows, cols, s);
  });
}

}  // namespace shardlab::kernels::cuda
