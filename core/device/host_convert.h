// fp32 to and from the 2-byte storage types (bf16, fp16) in host memory: what a
// CPU device's kernels, checkpoints and offloaded tensors convert with. Mixed
// precision's machinery (core/model/precision.h) builds on these.
#pragma once
#include <cstddef>

#include "kernels/params.h"

namespace shardlab {

// Host memory only (checkpoints, tests, offloaded tensors): device memory is
// converted by DeviceBackend::cast/upload/download/all_finite.
// dst[n] (dt) = round(src[n]) with round-to-nearest-even; a plain copy for f32.
void store_from_f32(void* dst, DType dt, const float* src, size_t n);
// dst[n] (fp32) = src[n] (dt), exact.
void load_to_f32(float* dst, const void* src, DType dt, size_t n);
// False when any value is inf or NaN.
bool all_finite(const void* src, DType dt, size_t n);

}  // namespace shardlab
