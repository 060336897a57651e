// Scalar math shared by the CPU kernels and the CUDA kernels, so both compute
// the same formulas and the CPU tests cover the GPU's element-wise math too.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/params.h"

// Functions callable from host and device code; plain inline functions in
// translation units that g++ compiles.
#ifdef __CUDACC__
#define SL_HD __host__ __device__
#else
#define SL_HD
#endif

namespace shardlab::kernels {

namespace math_detail {

// The host branches call exactly what the CPU kernels always called (std::
// overloads), so CPU results stay bit-identical; device code gets CUDA's own.
SL_HD inline float erf(float x) {
#ifdef __CUDA_ARCH__
  return ::erff(x);
#else
  return std::erf(x);
#endif
}
SL_HD inline double erf(double x) {
#ifdef __CUDA_ARCH__
  return ::erf(x);
#else
  return std::erf(x);
#endif
}
SL_HD inline float exp(float x) {
#ifdef __CUDA_ARCH__
  return ::expf(x);
#else
  return std::exp(x);
#endif
}
SL_HD inline double exp(double x) {
#ifdef __CUDA_ARCH__
  return ::exp(x);
#else
  return std::exp(x);
#endif
}
SL_HD inline float sqrt(float x) {
#ifdef __CUDA_ARCH__
  return ::sqrtf(x);
#else
  return std::sqrt(x);
#endif
}
SL_HD inline double sqrt(double x) {
#ifdef __CUDA_ARCH__
  return ::sqrt(x);
#else
  return std::sqrt(x);
#endif
}
// Round to the nearest integer, ties to even (the default rounding mode on the host).
SL_HD inline float nearbyint(float x) {
#ifdef __CUDA_ARCH__
  return ::rintf(x);
#else
  return std::nearbyint(x);
#endif
}

}  // namespace math_detail

// ---- activations

// Exact-erf GELU, as torch.nn.GELU() (approximate='none').
template <typename T>
SL_HD inline T gelu_scalar(T x) {
  return T(0.5) * x * (T(1) + math_detail::erf(x * T(0.70710678118654752440)));
}
template <typename T>
SL_HD inline T gelu_grad_scalar(T x) {
  const T cdf = T(0.5) * (T(1) + math_detail::erf(x * T(0.70710678118654752440)));
  const T pdf = math_detail::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
  return cdf + x * pdf;
}

// ---- BatchNorm1d (training mode)
// Statistics are accumulated and combined in double on both devices: the sums
// over rows are then the only thing whose order differs between CPU and GPU.

// 1/√(var + eps) of one feature, from its biased batch variance.
SL_HD inline double bn_invstd(double var_biased, double eps) {
  return 1.0 / math_detail::sqrt(var_biased + eps);
}

// PyTorch's running-statistics rule: running ← (1 − momentum)·running + momentum·batch,
// where running_var takes the unbiased variance var·n/(n − 1) of the n rows.
template <typename T>
SL_HD inline T bn_running_mean(T running, double mean, double momentum) {
  return static_cast<T>((1.0 - momentum) * static_cast<double>(running) + momentum * mean);
}
template <typename T>
SL_HD inline T bn_running_var(T running, double var_biased, int rows, double momentum) {
  const double unbiased = var_biased * rows / (rows - 1);
  return static_cast<T>((1.0 - momentum) * static_cast<double>(running) + momentum * unbiased);
}

// The input gradient of one element: with N rows, ŷ = (x − mean)·invstd, y = w·ŷ + b,
//   dx = w·invstd/N · (N·dy − Σdy − ŷ·Σ(dy·ŷ))
// (the mean's and the variance's dependence on x give the two sums).
SL_HD inline double bn_grad_input(double dy, double xhat, double sum_dy, double sum_dy_xhat,
                                  double weight, double invstd, int rows) {
  return weight * invstd / rows * (rows * dy - sum_dy - xhat * sum_dy_xhat);
}

// ---- storage formats

// Bit casts without unions (undefined behaviour in C++): memcpy on the host,
// the CUDA intrinsics on the device.
SL_HD inline uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
SL_HD inline float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// fp32 -> bfloat16, round to nearest even; NaN stays a (quiet) NaN instead of
// rounding into inf.
SL_HD inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
SL_HD inline float bf16_to_float(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

// fp32 -> IEEE fp16, round to nearest even, overflow to inf, gradual underflow.
SL_HD inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {
    // Subnormal or zero in fp16: scale into the integer range and round to even.
    const float a = bits_float(abs);
    const float scaled = a * 16777216.0f;  // 2^24: one fp16 subnormal ulp becomes 1
    const uint32_t m = static_cast<uint32_t>(math_detail::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

SL_HD inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(man) / 16777216.0f;  // man * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// inf and NaN have an all-ones exponent in all three formats.
SL_HD inline bool f32_nonfinite(float f) {
  return (float_bits(f) & 0x7f800000u) == 0x7f800000u;
}
SL_HD inline bool bf16_nonfinite(uint16_t h) {
  return (h & 0x7f80u) == 0x7f80u;
}
SL_HD inline bool fp16_nonfinite(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u;
}

// ---- optimizers

// The per-step constants of torch.optim.AdamW, computed once on the host so
// every element (CPU loop or GPU thread) uses the very same floats.
struct AdamWScalars {
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float decay;      // 1 - lr * weight_decay (decoupled weight decay)
  float beta1;
  float beta2;
  float eps;
};

// Step t counts from 1. The bias corrections go through double as torch's
// single-tensor path does (Python floats), then round to float once.
inline AdamWScalars adamw_scalars(const AdamWParams& h, int64_t t) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(t));
  AdamWScalars s;
  s.step_size = static_cast<float>(h.lr / bc1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.decay = 1.0f - h.lr * h.weight_decay;
  s.beta1 = h.beta1;
  s.beta2 = h.beta2;
  s.eps = h.eps;
  return s;
}

// One element of torch.optim.AdamW (amsgrad=False, maximize=False), in the
// order torch's single-tensor path rounds: decay, lerp of m, v, then the step.
SL_HD inline void adamw_update(float& p, float g, float& m, float& v, const AdamWScalars& s) {
  p *= s.decay;
  m += (g - m) * (1.0f - s.beta1);  // torch's lerp_
  v = v * s.beta2 + (1.0f - s.beta2) * g * g;
  const float denom = math_detail::sqrt(v) / s.bc2_sqrt + s.eps;
  p -= s.step_size * m / denom;
}

// Plain SGD (no momentum, no weight decay): the new parameter.
SL_HD inline float sgd_update(float p, float g, float lr) {
  return p - lr * g;
}

}  // namespace shardlab::kernels
