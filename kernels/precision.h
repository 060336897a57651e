// Low-precision storage formats for mixed precision: bfloat16 and IEEE fp16
// held as 16-bit patterns, converted with round-to-nearest-even. Math is done
// in fp32 (kernels upcast); only storage and traffic are 2 bytes per value.
// The conversions themselves live in kernels/math.h, shared with the GPU.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/math.h"

namespace shardlab::kernels {

// Elementwise sums in fp32 with one rounding back to storage (what NCCL does
// for bf16/fp16 reductions). `out` may alias `a`.
inline void sum_bf16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}
inline void sum_fp16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = float_to_fp16(fp16_to_float(a[i]) + fp16_to_float(b[i]));
}

}  // namespace shardlab::kernels
