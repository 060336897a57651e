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
SL_HD inline double log(double x) {
#ifdef __CUDA_ARCH__
  return ::log(x);
#else
  return std::log(x);
#endif
}
SL_HD inline double sin(double x) {
#ifdef __CUDA_ARCH__
  return ::sin(x);
#else
  return std::sin(x);
#endif
}
SL_HD inline double cos(double x) {
#ifdef __CUDA_ARCH__
  return ::cos(x);
#else
  return std::cos(x);
#endif
}
SL_HD inline float tanh(float x) {
#ifdef __CUDA_ARCH__
  return ::tanhf(x);
#else
  return std::tanh(x);
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

// ---- counter-based random draws (the synthetic data of core/device/data.h)
// Every draw is a function of (key, counter) alone, so a GPU thread per pair of
// elements makes the same numbers the CPU makes in a loop: no stream to replay.

// splitmix64: the seeding step of core/rng.h, one output per call.
SL_HD inline uint64_t splitmix64_step(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Several keys (seed, step, row) mixed into one (core/rng.h's mix_seed).
SL_HD inline uint64_t mix_keys(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t s = a;
  uint64_t h = splitmix64_step(s) ^ b;
  h = splitmix64_step(h) ^ c;
  return splitmix64_step(h);
}
// The i-th output of splitmix64's stream from state `key`, computed directly.
SL_HD inline uint64_t splitmix64_at(uint64_t key, uint64_t i) {
  uint64_t state = key + i * 0x9E3779B97F4A7C15ull;
  return splitmix64_step(state);
}
// Pair `pair` of a row's N(0,1) draws (elements 2·pair and 2·pair + 1): Box–Muller
// on two 53-bit uniforms at counters 2·pair and 2·pair + 1 of the row's key. u1 is
// centred in its interval so it is never 0 (log(0)). Math in double, rounded to
// float once: CPU and GPU agree unless their log/sin/cos differ in a double's last
// bit at a float rounding boundary.
SL_HD inline void normal_pair(uint64_t row_key, uint64_t pair, float* first, float* second) {
  const double u1 = (static_cast<double>(splitmix64_at(row_key, 2 * pair) >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = static_cast<double>(splitmix64_at(row_key, 2 * pair + 1) >> 11) * 0x1.0p-53;
  const double r = math_detail::sqrt(-2.0 * math_detail::log(u1));
  const double a = 6.283185307179586476925 * u2;
  *first = static_cast<float>(r * math_detail::cos(a));
  *second = static_cast<float>(r * math_detail::sin(a));
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
