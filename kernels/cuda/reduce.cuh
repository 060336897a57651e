// Warp-level reductions for the row kernels (LayerNorm, masked softmax,
// cross-entropy): XOR butterflies, so every lane ends with the same value and
// the order of the additions is fixed (the results are deterministic).
#pragma once
#include <cuda_runtime.h>

namespace shardlab::kernels::cuda::detail {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// std::max's rule (a < b ? b : a), as the CPU kernels take it.
template <typename T>
__device__ inline T warp_max(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const T o = __shfl_xor_sync(kFullMask, v, offset);
    v = v < o ? o : v;
  }
  return v;
}

// Grid for kernels that give each row one warp of a kBlock-thread block.
inline unsigned grid_for_rows(size_t rows, int block) {
  const size_t per_block = static_cast<size_t>(block / kWarp);
  const size_t blocks = (rows + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
}

}  // namespace shardlab::kernels::cuda::detail
