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

// Column sums in two passes, both in a fixed order (the result does not depend
// on scheduling): blocks of 32 columns (x lanes, coalesced along a row) × 8 row
// lanes each sum one chunk of rows into partial[chunk][col]; then one thread per
// column adds the chunks in order onto the stored gradient and rounds once. The
// chunks give the GPU enough blocks when there are few columns (a one-pass
// kernel with a block per 32 columns ran 12 blocks for C = 384).
constexpr int kTile = 32, kRowLanes = 8;

template <typename S>
__global__ void bias_grad_partial_kernel(float* partial, const S* dout, int rows, int cols,
                                         int rows_per_chunk) {
  __shared__ float lanes[kRowLanes][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * kTile + tx, chunk = blockIdx.y;
  const int r0 = chunk * rows_per_chunk;
  const int r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc = 0.0f;
  if (c < cols)
    for (int r = r0 + ty; r < r1; r += kRowLanes)
      acc += load(dout[static_cast<size_t>(r) * cols + c]);
  lanes[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && c < cols) {
    float sum = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) sum += lanes[k][tx];
    partial[static_cast<size_t>(chunk) * cols + c] = sum;
  }
}

template <typename S>
__global__ void bias_grad_finish_kernel(S* dbias, const float* partial, int chunks, int cols) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
    float sum = 0.0f;
    for (int k = 0; k < chunks; ++k) sum += partial[static_cast<size_t>(k) * cols + c];
    store(dbias[c], load(dbias[c]) + sum);
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
void launch_bias_grad(S* dbias, const S* dout, int rows, int cols, float* partial, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  const int chunks = column_sum_chunks(rows), per = (rows + chunks - 1) / chunks;
  const unsigned tiles = static_cast<unsigned>((cols + kTile - 1) / kTile);
  bias_grad_partial_kernel<S>
      <<<dim3(tiles, static_cast<unsigned>(chunks)), dim3(kTile, kRowLanes), 0, s>>>(
          partial, dout, rows, cols, per);
  SHARDLAB_CUDA_CHECK_LAUNCH("bias_grad_partial_kernel");
  bias_grad_finish_kernel<S><<<detail::grid_for(static_cast<size_t>(cols)), detail::kBlock, 0, s>>>(
      dbias, partial, chunks, cols);
  SHARDLAB_CUDA_CHECK_LAUNCH("bias_grad_finish_kernel");
}

}  // namespace

void bias_rows(float* out, const float* bias, int rows, int cols, cudaStream_t s) {
  launch_bias_rows(out, bias, rows, cols, s);
}

int column_sum_chunks(int rows) {
  // ~256 rows a chunk, at most 64 chunks: enough blocks, few partials to add.
  const int chunks = (rows + 255) / 256;
  return chunks < 1 ? 1 : chunks > 64 ? 64 : chunks;
}

void bias_grad_accumulate(float* dbias, const float* dout, int rows, int cols, float* partial,
                          cudaStream_t s) {
  launch_bias_grad(dbias, dout, rows, cols, partial, s);
}

void bias_rows(DType dt, void* out, const void* bias, int rows, int cols, cudaStream_t s) {
  with_storage(dt, [&](auto tag) {
    using S = decltype(tag);
    launch_bias_rows(static_cast<S*>(out), static_cast<const S*>(bias), rows, cols, s);
  });
}

void bias_grad_accumulate(DType dt, void* dbias, const void* dout, int rows, int cols,
                          float* partial, cudaStream_t s) {
  with_storage(dt, [&](auto tag) {
    using S = decltype(tag);
    launch_bias_grad(static_cast<S*>(dbias), static_cast<const S*>(dout), rows, cols, partial, s);
  });
}

}  // namespace shardlab::kernels::cuda
