// What every kernels/cuda/*.cu shares: grid sizing for grid-stride loops, and
// the error checks (SHARDLAB_CUDA_CHECK_LAUNCH after every launch).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/check.h"

namespace shardlab::kernels::cuda::detail {

constexpr int kBlock = 256;
// Enough blocks to fill every SM of current GPUs several times over; the
// grid-stride loops cover larger n, so a grid never exceeds the launch limits.
constexpr size_t kMaxBlocks = 4096;

inline unsigned grid_for(size_t n, int block = kBlock) {
  const size_t blocks = (n + static_cast<size_t>(block) - 1) / static_cast<size_t>(block);
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// Index of this thread and stride of the whole grid, in size_t: n may exceed 2^31.
__device__ inline size_t global_index() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline size_t grid_stride() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

}  // namespace shardlab::kernels::cuda::detail
