// What every kernels/cuda/*.cu shares: grid sizing for grid-stride loops and
// turning launch errors into exceptions that name the kernel.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

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

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
// Call right after a launch: bad configurations only show up here.
inline void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

}  // namespace shardlab::kernels::cuda::detail
