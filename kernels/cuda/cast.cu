// Storage-format kernels of mixed precision: casts between fp32/bf16/fp16, sums
// in a storage format, and the inf/NaN check of dynamic loss scaling. All use
// kernels/math.h's conversions, so the GPU rounds exactly as the CPU does.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math.h"

namespace shardlab::kernels::cuda {

namespace {

// Loads one element of dt as fp32 (exact for every format).
template <DType dt>
__device__ inline float load_f32(const void* p, size_t i) {
  if constexpr (dt == DType::f32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (dt == DType::bf16) {
    return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
  } else {
    return fp16_to_float(static_cast<const uint16_t*>(p)[i]);
  }
}

// Stores an fp32 value as dt, rounding to nearest even.
template <DType dt>
__device__ inline void store_f32(void* p, size_t i, float x) {
  if constexpr (dt == DType::f32) {
    static_cast<float*>(p)[i] = x;
  } else if constexpr (dt == DType::bf16) {
    static_cast<uint16_t*>(p)[i] = float_to_bf16(x);
  } else {
    static_cast<uint16_t*>(p)[i] = float_to_fp16(x);
  }
}

template <DType dst_dt, DType src_dt>
__global__ void cast_kernel(void* dst, const void* src, size_t n) {
  for (size_t i = detail::global_index(); i < n; i += detail::grid_stride())
    store_f32<dst_dt>(dst, i, load_f32<src_dt>(src, i));
}

// For f32 this is acc += src; for 2-byte formats the fp32 sum is rounded once,
// as kernels::sum_bf16 / sum_fp16 do on the CPU.
template <DType dt>
__global__ void add_kernel(void* acc, const void* src, size_t n) {
  for (size_t i = detail::global_index(); i < n; i += detail::grid_stride())
    store_f32<dt>(acc, i, load_f32<dt>(acc, i) + load_f32<dt>(src, i));
}

template <DType dt>
__global__ void nonfinite_kernel(const void* src, size_t n, int* flag) {
  bool bad = false;
  for (size_t i = detail::global_index(); i < n && !bad; i += detail::grid_stride()) {
    if constexpr (dt == DType::f32) {
      bad = f32_nonfinite(static_cast<const float*>(src)[i]);
    } else if constexpr (dt == DType::bf16) {
      bad = bf16_nonfinite(static_cast<const uint16_t*>(src)[i]);
    } else {
      bad = fp16_nonfinite(static_cast<const uint16_t*>(src)[i]);
    }
  }
  // Every writer stores the same 1, so the racing stores need no atomics.
  if (bad) *flag = 1;
}

size_t dtype_bytes(DType dt) {
  return dt == DType::f32 ? 4 : 2;
}

[[noreturn]] void bad_dtype(const char* what, DType dt) {
  throw std::invalid_argument(std::string(what) + ": unknown DType " +
                              std::to_string(static_cast<int>(dt)));
}

template <DType dst_dt, DType src_dt>
void launch_cast(void* dst, const void* src, size_t n, cudaStream_t s) {
  cast_kernel<dst_dt, src_dt><<<detail::grid_for(n), detail::kBlock, 0, s>>>(dst, src, n);
  SHARDLAB_CUDA_CHECK_LAUNCH("cast_kernel");
}

template <DType dst_dt>
void launch_cast_from(void* dst, const void* src, DType src_dt, size_t n, cudaStream_t s) {
  switch (src_dt) {
    case DType::f32:
      return launch_cast<dst_dt, DType::f32>(dst, src, n, s);
    case DType::bf16:
      return launch_cast<dst_dt, DType::bf16>(dst, src, n, s);
    case DType::f16:
      return launch_cast<dst_dt, DType::f16>(dst, src, n, s);
  }
  bad_dtype("cuda::cast", src_dt);
}

}  // namespace

void cast(void* dst, DType dst_dt, const void* src, DType src_dt, size_t n, cudaStream_t s) {
  if (n == 0) return;
  if (dst_dt == src_dt) {
    if (dst_dt != DType::f32 && dst_dt != DType::bf16 && dst_dt != DType::f16)
      bad_dtype("cuda::cast", dst_dt);
    if (dst == src) return;
    SHARDLAB_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, n * dtype_bytes(dst_dt), cudaMemcpyDeviceToDevice, s));
    return;
  }
  // bf16 <-> fp16 goes through fp32 inside the kernel, with no temporary buffer.
  switch (dst_dt) {
    case DType::f32:
      return launch_cast_from<DType::f32>(dst, src, src_dt, n, s);
    case DType::bf16:
      return launch_cast_from<DType::bf16>(dst, src, src_dt, n, s);
    case DType::f16:
      return launch_cast_from<DType::f16>(dst, src, src_dt, n, s);
  }
  bad_dtype("cuda::cast", dst_dt);
}

void add(void* acc, const void* src, DType dt, size_t n, cudaStream_t s) {
  if (n == 0) return;
  const unsigned grid = detail::grid_for(n);
  switch (dt) {
    case DType::f32:
      add_kernel<DType::f32><<<grid, detail::kBlock, 0, s>>>(acc, src, n);
      break;
    case DType::bf16:
      add_kernel<DType::bf16><<<grid, detail::kBlock, 0, s>>>(acc, src, n);
      break;
    case DType::f16:
      add_kernel<DType::f16><<<grid, detail::kBlock, 0, s>>>(acc, src, n);
      break;
    default:
      bad_dtype("cuda::add", dt);
  }
  SHARDLAB_CUDA_CHECK_LAUNCH("add_kernel");
}

void flag_nonfinite(const void* src, DType dt, size_t n, int* flag, cudaStream_t s) {
  if (n == 0) return;
  const unsigned grid = detail::grid_for(n);
  switch (dt) {
    case DType::f32:
      nonfinite_kernel<DType::f32><<<grid, detail::kBlock, 0, s>>>(src, n, flag);
      break;
    case DType::bf16:
      nonfinite_kernel<DType::bf16><<<grid, detail::kBlock, 0, s>>>(src, n, flag);
      break;
    case DType::f16:
      nonfinite_kernel<DType::f16><<<grid, detail::kBlock, 0, s>>>(src, n, flag);
      break;
    default:
      bad_dtype("cuda::flag_nonfinite", dt);
  }
  SHARDLAB_CUDA_CHECK_LAUNCH("nonfinite_kernel");
}

}  // namespace shardlab::kernels::cuda
