// fp32 to and from the 2-byte storage types in host memory (see host_convert.h).
#include "core/device/host_convert.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/precision.h"

namespace shardlab {

void store_from_f32(void* dst, DType dt, const float* src, size_t n) {
  if (dt == DType::f32) {
    if (dst != src) std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  if (dt == DType::bf16)
    for (size_t i = 0; i < n; ++i) out[i] = kernels::float_to_bf16(src[i]);
  else
    for (size_t i = 0; i < n; ++i) out[i] = kernels::float_to_fp16(src[i]);
}

void load_to_f32(float* dst, const void* src, DType dt, size_t n) {
  if (dt == DType::f32) {
    if (dst != src) std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  const auto* in = static_cast<const uint16_t*>(src);
  if (dt == DType::bf16)
    for (size_t i = 0; i < n; ++i) dst[i] = kernels::bf16_to_float(in[i]);
  else
    for (size_t i = 0; i < n; ++i) dst[i] = kernels::fp16_to_float(in[i]);
}

bool all_finite(const void* src, DType dt, size_t n) {
  if (dt == DType::f32) {
    const auto* f = static_cast<const float*>(src);
    for (size_t i = 0; i < n; ++i)
      if (!std::isfinite(f[i])) return false;
    return true;
  }
  // bf16 and fp16 both mark inf/NaN with an all-ones exponent.
  const uint16_t mask = dt == DType::bf16 ? 0x7f80u : 0x7c00u;
  const auto* h = static_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; ++i)
    if ((h[i] & mask) == mask) return false;
  return true;
}

}  // namespace shardlab
