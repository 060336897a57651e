// GPT-2's token and position embeddings: the gather (forward) and the
// scatter-add of its gradient into wte and wpe (backward), deterministic and
// in the CPU kernel's order (kernels/transformer.h), so the bits match.
#include <cstdint>

#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/storage.h"

namespace shardlab::kernels::cuda {

namespace {

__device__ inline float quiet_nan() {
  return __int_as_float(0x7fc00000);
}

template <typename S>
__global__ void embedding_forward_kernel(S* out, const int32_t* tokens, const S* wte, const S* wpe,
                                         size_t rows, int T, int C, int V) {
  const size_t Cs = static_cast<size_t>(C), total = rows * Cs;
  for (size_t i = detail::global_index(); i < total; i += detail::grid_stride()) {
    const size_t n = i / Cs, c = i % Cs;
    const int32_t id = tokens[n];
    if (id < 0 || id >= V) {
      store(out[i], quiet_nan());  // a bad id cannot throw here: its row turns NaN
      continue;
    }
    store(out[i], load(wte[static_cast<size_t>(id) * Cs + c]) +
                      load(wpe[(n % static_cast<size_t>(T)) * Cs + c]));
  }
}

// dwte: a block covers 32 channels (x) of 8 vocabulary entries (y); each
// thread owns one (v, c) and scans every id in position order, from a tile of
// ids staged in shared memory, adding the rows holding v. No atomics: the sum
// starts from the stored gradient and is rounded once, as on the CPU.
constexpr int kTileX = 32, kTileY = 8, kIds = kTileX * kTileY;

template <typename S>
__global__ void embedding_wte_grad_kernel(S* dwte, const S* dout, const int32_t* tokens,
                                          size_t rows, int C, int V) {
  __shared__ int32_t ids[kIds];
  const int tid = threadIdx.y * kTileX + threadIdx.x;
  const size_t Cs = static_cast<size_t>(C);
  const int c = blockIdx.x * kTileX + threadIdx.x;
  // The loop bound depends on blockIdx only, so every thread reaches each barrier.
  for (int v0 = blockIdx.y * kTileY; v0 < V; v0 += gridDim.y * kTileY) {
    const int v = v0 + threadIdx.y;
    const bool mine = c < C && v < V;
    float acc = mine ? load(dwte[static_cast<size_t>(v) * Cs + c]) : 0.0f;
    bool touched = false;
    for (size_t n0 = 0; n0 < rows; n0 += kIds) {
      if (n0 + tid < rows) ids[tid] = tokens[n0 + tid];
      __syncthreads();
      const size_t m = rows - n0 < static_cast<size_t>(kIds) ? rows - n0 : kIds;
      if (mine)
        for (size_t k = 0; k < m; ++k)
          if (ids[k] == v) {
            acc += load(dout[(n0 + k) * Cs + c]);
            touched = true;
          }
      __syncthreads();
    }
    if (touched) store(dwte[static_cast<size_t>(v) * Cs + c], acc);
  }
}

// dwpe[t,c]: one thread per element, adding the batch rows in order.
template <typename S>
__global__ void embedding_wpe_grad_kernel(S* dwpe, const S* dout, int B, int T, int C) {
  const size_t Cs = static_cast<size_t>(C), total = static_cast<size_t>(T) * Cs;
  for (size_t i = detail::global_index(); i < total; i += detail::grid_stride()) {
    float acc = load(dwpe[i]);
    for (int b = 0; b < B; ++b) acc += load(dout[static_cast<size_t>(b) * total + i]);
    store(dwpe[i], acc);
  }
}

template <typename S>
void launch_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe, int B,
                    int T, int C, int V, cudaStream_t s) {
  const size_t rows = static_cast<size_t>(B) * T, total = rows * static_cast<size_t>(C);
  embedding_forward_kernel<S><<<detail::grid_for(total), detail::kBlock, 0, s>>>(
      static_cast<S*>(out), tokens, static_cast<const S*>(wte), static_cast<const S*>(wpe), rows, T,
      C, V);
  SHARDLAB_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

template <typename S>
void launch_backward(void* dwte, void* dwpe, const void* dout, const int32_t* tokens, int B, int T,
                     int C, int V, cudaStream_t s) {
  const size_t rows = static_cast<size_t>(B) * T;
  if (dwte) {
    const unsigned gx = static_cast<unsigned>((C + kTileX - 1) / kTileX);
    const size_t vy = (static_cast<size_t>(V) + kTileY - 1) / kTileY;
    const unsigned gy = static_cast<unsigned>(vy < 65535 ? vy : 65535);
    embedding_wte_grad_kernel<S><<<dim3(gx, gy), dim3(kTileX, kTileY), 0, s>>>(
        static_cast<S*>(dwte), static_cast<const S*>(dout), tokens, rows, C, V);
    SHARDLAB_CUDA_CHECK_LAUNCH("embedding_wte_grad_kernel");
  }
  if (dwpe) {
    const size_t total = static_cast<size_t>(T) * C;
    embedding_wpe_grad_kernel<S><<<detail::grid_for(total), detail::kBlock, 0, s>>>(
        static_cast<S*>(dwpe), static_cast<const S*>(dout), B, T, C);
    SHARDLAB_CUDA_CHECK_LAUNCH("embedding_wpe_grad_kernel");
  }
}

}  // namespace

void embedding_forward(DType dt, void* out, const int32_t* tokens, const void* wte, const void* wpe,
                       int B, int T, int C, int V, cudaStream_t s) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  with_storage(
      dt, [&](auto tag) { launch_forward<decltype(tag)>(out, tokens, wte, wpe, B, T, C, V, s); });
}

void embedding_backward(DType dt, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                        int B, int T, int C, int V, cudaStream_t s) {
  if (B <= 0 || T <= 0 || C <= 0 || V <= 0) return;
  with_storage(dt, [&](auto tag) {
    launch_backward<decltype(tag)>(dwte, dwpe, dout, tokens, B, T, C, V, s);
  });
}

}  // namespace shardlab::kernels::cuda
