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

// A vocabulary slice: wte holds ids [v_begin, v_begin + v_count); others add
// nothing. wpe may be null.
template <typename S>
__global__ void embedding_forward_kernel(S* out, const int32_t* tokens, const S* wte, const S* wpe,
                                         size_t rows, int T, int C, int V, int v_begin,
                                         int v_count) {
  const size_t Cs = static_cast<size_t>(C), total = rows * Cs;
  for (size_t i = detail::global_index(); i < total; i += detail::grid_stride()) {
    const size_t n = i / Cs, c = i % Cs;
    const int32_t id = tokens[n];
    if (id < 0 || id >= V) {
      store(out[i], quiet_nan());  // a bad id cannot throw here: its row turns NaN
      continue;
    }
    const int local = id - v_begin;
    const float e =
        local >= 0 && local < v_count ? load(wte[static_cast<size_t>(local) * Cs + c]) : 0.0f;
    store(out[i], e + (wpe ? load(wpe[(n % static_cast<size_t>(T)) * Cs + c]) : 0.0f));
  }
}

// dwte in four passes, no atomics, each row of v added in ascending position
// from the stored gradient and rounded once (the CPU's order, so the same bits):
// (1) count each id's positions and (3) list them in order, a thread per id
// scanning the ids from tiles staged in shared memory; (2) an exclusive scan of
// the counts gives each id its slice of the list; (4) a thread per (v, c) adds
// its id's rows. Reads dout once, however large the vocabulary.
constexpr int kIdTile = 1024, kBlockIds = 256;

template <bool kFill>
__global__ void id_positions_kernel(int32_t* counts, const int32_t* offsets, int32_t* positions,
                                    const int32_t* tokens, int rows, int V, int v_begin) {
  __shared__ int32_t ids[kIdTile];
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  int32_t k = 0;
  int32_t* out = kFill && v < V ? positions + offsets[v] : nullptr;
  for (int n0 = 0; n0 < rows; n0 += kIdTile) {  // bound uniform over the block
    for (int i = threadIdx.x; i < kIdTile && n0 + i < rows; i += blockDim.x)
      ids[i] = tokens[n0 + i] - v_begin;  // the slice's row; others match no v
    __syncthreads();
    const int m = rows - n0 < kIdTile ? rows - n0 : kIdTile;
    if (v < V)
      for (int i = 0; i < m; ++i)
        if (ids[i] == v) {
          if (kFill) out[k] = n0 + i;
          ++k;
        }
    __syncthreads();
  }
  if (!kFill && v < V) counts[v] = k;
}

// offsets[v] = Σ_{u<v} counts[u], offsets[V] = the total: one block, each thread
// summing a contiguous run, the runs' totals scanned in order by thread 0.
__global__ void id_offsets_kernel(int32_t* offsets, const int32_t* counts, int V) {
  __shared__ int32_t run_total[1024];
  const int t = threadIdx.x, per = (V + blockDim.x - 1) / blockDim.x;
  const int b = t * per, e = b + per < V ? b + per : V;
  int32_t s = 0;
  for (int v = b; v < e; ++v) s += counts[v];
  run_total[t] = s;
  __syncthreads();
  if (t == 0) {
    int32_t acc = 0;
    for (int i = 0; i < static_cast<int>(blockDim.x); ++i) {
      const int32_t x = run_total[i];
      run_total[i] = acc;
      acc += x;
    }
    offsets[V] = acc;
  }
  __syncthreads();
  int32_t acc = run_total[t];
  for (int v = b; v < e; ++v) {
    offsets[v] = acc;
    acc += counts[v];
  }
}

template <typename S>
__global__ void embedding_wte_grad_kernel(S* dwte, const S* dout, const int32_t* offsets,
                                          const int32_t* positions, int C, int V) {
  const size_t Cs = static_cast<size_t>(C);
  for (int v = blockIdx.y; v < V; v += gridDim.y) {
    const int b = offsets[v], e = offsets[v + 1];
    if (b == e) continue;  // untouched: left as stored, as on the CPU
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
      float acc = load(dwte[static_cast<size_t>(v) * Cs + c]);
      for (int k = b; k < e; ++k) acc += load(dout[static_cast<size_t>(positions[k]) * Cs + c]);
      store(dwte[static_cast<size_t>(v) * Cs + c], acc);
    }
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
                    int T, int C, int V, int v_begin, int v_count, cudaStream_t s) {
  const size_t rows = static_cast<size_t>(B) * T, total = rows * static_cast<size_t>(C);
  embedding_forward_kernel<S><<<detail::grid_for(total), detail::kBlock, 0, s>>>(
      static_cast<S*>(out), tokens, static_cast<const S*>(wte), static_cast<const S*>(wpe), rows, T,
      C, V, v_begin, v_count);
  SHARDLAB_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

// dwte over the slice's v_count rows (V below is the slice's row count).
template <typename S>
void launch_backward(void* dwte, void* dwpe, const void* dout, const int32_t* tokens, int B, int T,
                     int C, int v_begin, int V, int32_t* work, cudaStream_t s) {
  const size_t rows = static_cast<size_t>(B) * T;
  if (dwte && V > 0) {
    int32_t* counts = work;
    int32_t* offsets = work + V;
    int32_t* positions = work + 2 * static_cast<size_t>(V) + 1;
    const int n = static_cast<int>(rows);
    const unsigned id_blocks = static_cast<unsigned>((V + kBlockIds - 1) / kBlockIds);
    id_positions_kernel<false>
        <<<id_blocks, kBlockIds, 0, s>>>(counts, nullptr, nullptr, tokens, n, V, v_begin);
    SHARDLAB_CUDA_CHECK_LAUNCH("id_positions_kernel (count)");
    id_offsets_kernel<<<1, 1024, 0, s>>>(offsets, counts, V);
    SHARDLAB_CUDA_CHECK_LAUNCH("id_offsets_kernel");
    id_positions_kernel<true>
        <<<id_blocks, kBlockIds, 0, s>>>(nullptr, offsets, positions, tokens, n, V, v_begin);
    SHARDLAB_CUDA_CHECK_LAUNCH("id_positions_kernel (fill)");
    const unsigned gx = static_cast<unsigned>((C + detail::kBlock - 1) / detail::kBlock);
    const unsigned gy = static_cast<unsigned>(V < 65535 ? V : 65535);
    embedding_wte_grad_kernel<S><<<dim3(gx, gy), detail::kBlock, 0, s>>>(
        static_cast<S*>(dwte), static_cast<const S*>(dout), offsets, positions, C, V);
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
                       int B, int T, int C, int V, int v_begin, int v_count, cudaStream_t s) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  with_storage(dt, [&](auto tag) {
    launch_forward<decltype(tag)>(out, tokens, wte, wpe, B, T, C, V, v_begin, v_count, s);
  });
}

void embedding_backward(DType dt, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                        int B, int T, int C, int V, int v_begin, int v_count, int32_t* work,
                        cudaStream_t s) {
  if (B <= 0 || T <= 0 || C <= 0 || V <= 0) return;
  with_storage(dt, [&](auto tag) {
    launch_backward<decltype(tag)>(dwte, dwpe, dout, tokens, B, T, C, v_begin, v_count, work, s);
  });
}

}  // namespace shardlab::kernels::cuda
