// Element types a kernel can be instantiated on, as its storage: float and
// double (math in the same type) and the 2-byte formats bf16 and fp16 (math in
// fp32: load() upcasts exactly, store() rounds to nearest even once). One
// template then serves the double tests, fp32 runs and mixed precision, on the
// CPU and the GPU alike (host and device functions).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/math.h"
#include "kernels/params.h"

namespace shardlab::kernels {

// 16-bit patterns with a type of their own, so overloads can tell them apart
// (as uint16_t they could not be told from each other).
struct bf16 {
  uint16_t bits;
};
struct fp16 {
  uint16_t bits;
};

SL_HD inline float load(float v) {
  return v;
}
SL_HD inline double load(double v) {
  return v;
}
SL_HD inline float load(bf16 v) {
  return bf16_to_float(v.bits);
}
SL_HD inline float load(fp16 v) {
  return fp16_to_float(v.bits);
}

SL_HD inline void store(float& dst, float v) {
  dst = v;
}
SL_HD inline void store(double& dst, double v) {
  dst = v;
}
SL_HD inline void store(bf16& dst, float v) {
  dst.bits = float_to_bf16(v);
}
SL_HD inline void store(fp16& dst, float v) {
  dst.bits = float_to_fp16(v);
}

// The type the math of a kernel on storage S runs in: S itself for float and
// double, float for the 2-byte formats.
template <typename S>
using compute_t = decltype(load(S{}));

// The storage type of a DType, for dispatching a runtime dtype to a template:
//   with_storage(dt, [&](auto tag) { using S = decltype(tag); ... });
template <typename F>
decltype(auto) with_storage(DType dt, F&& f) {
  switch (dt) {
    case DType::bf16:
      return f(bf16{});
    case DType::f16:
      return f(fp16{});
    case DType::f32:
      return f(float{});
  }
  throw std::invalid_argument("storage type: DType " + std::to_string(static_cast<int>(dt)) +
                              " is not f32, bf16 or f16");
}

}  // namespace shardlab::kernels
