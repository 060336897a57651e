// The residual add of a transformer block, out = a + b, in any storage format
// (fp32 math, rounded once), as kernels/transformer.h's residual_forward.
#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/storage.h"

namespace shardlab::kernels::cuda {

namespace {

// No __restrict__: out may alias a or b.
template <typename S>
__global__ void residual_kernel(S* out, const S* a, const S* b, size_t n) {
  for (size_t i = detail::global_index(); i < n; i += detail::grid_stride())
    store(out[i], load(a[i]) + load(b[i]));
}

template <typename S>
void launch(void* out, const void* a, const void* b, size_t n, cudaStream_t s) {
  residual_kernel<S><<<detail::grid_for(n), detail::kBlock, 0, s>>>(
      static_cast<S*>(out), static_cast<const S*>(a), static_cast<const S*>(b), n);
  SHARDLAB_CUDA_CHECK_LAUNCH("residual_kernel");
}

}  // namespace

void residual_forward(DType dt, void* out, const void* a, const void* b, size_t n, cudaStream_t s) {
  if (n == 0) return;
  with_storage(dt, [&](auto tag) { launch<decltype(tag)>(out, a, b, n, s); });
}

}  // namespace shardlab::kernels::cuda
