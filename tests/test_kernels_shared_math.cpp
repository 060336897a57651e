// kernels/math.h, the scalar math the CPU and CUDA kernels share, against
// independent references: double-precision GELU, rounding computed with
// frexp/nearbyint instead of bit tricks, known bit patterns, and torch's AdamW.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "kernels/math.h"

using namespace shardlab::kernels;

namespace {

// Round x to a binary format with `digits` significant bits, smallest normal
// 2^min_exp and largest finite max_finite, nearest-even, computed in double
// (exact for every float input). Overflow gives inf.
float round_to_format(float x, int digits, int min_exp, double max_finite) {
  if (std::isnan(x) || std::isinf(x)) return x;
  const double d = x;
  int e = 0;
  std::frexp(d, &e);  // |d| in [2^(e-1), 2^e)
  // Spacing of representable values near d; subnormals share the smallest normal's.
  const int quantum_exp = std::max(e - 1, min_exp) - (digits - 1);
  const double r = std::ldexp(std::nearbyint(std::ldexp(d, -quantum_exp)), quantum_exp);
  // Values past the largest finite one round to inf unless they round back down to it.
  if (std::abs(r) > max_finite) return std::copysign(std::numeric_limits<float>::infinity(), d);
  return static_cast<float>(r);
}
float ref_bf16(float x) {
  return round_to_format(x, 8, -126, 0x1.fep127);
}
float ref_fp16(float x) {
  return round_to_format(x, 11, -14, 65504.0);
}

// Float bit patterns worth checking: every sign and exponent with random
// mantissas, and mantissas at and next to the rounding ties of both formats.
std::vector<float> interesting_floats() {
  std::mt19937_64 rng(42);
  std::vector<float> v;
  for (uint32_t se = 0; se < 512; ++se) {
    const uint32_t top = se << 23;
    for (int i = 0; i < 64; ++i) v.push_back(bits_float(top | (rng() & 0x7fffffu)));
    for (int i = 0; i < 16; ++i) {
      const uint32_t m = static_cast<uint32_t>(rng()) & 0x7fffffu;
      for (uint32_t low : {0x7fffu, 0x8000u, 0x8001u})  // bf16 keeps the top 7 mantissa bits
        v.push_back(bits_float(top | (m & 0x7f0000u) | low));
      for (uint32_t low : {0xfffu, 0x1000u, 0x1001u})  // fp16 keeps the top 10
        v.push_back(bits_float(top | (m & 0x7fe000u) | low));
    }
  }
  // fp16's subnormal range: every multiple of half an fp16 subnormal ulp, ties included.
  for (int j = 0; j <= 2 * 1024 + 4; ++j) {
    v.push_back(std::ldexp(static_cast<float>(j), -25));
    v.push_back(-std::ldexp(static_cast<float>(j), -25));
  }
  return v;
}

}  // namespace

TEST_CASE("shared gelu_scalar matches a long double reference", "[kernels][shared]") {
  for (double x = -10; x <= 10; x += 0.01) {
    const long double xl = x;
    const double want = static_cast<double>(0.5L * xl * (1 + std::erf(xl / std::sqrt(2.0L))));
    // 1 + erf cancels in the negative tail: the error there is absolute, ~ulp(1)·|x|.
    REQUIRE(std::abs(gelu_scalar(x) - want) <= 1e-14 * (std::abs(want) + std::abs(x)));
    const float xf = static_cast<float>(x);
    const double want_f = static_cast<double>(0.5L * xf * (1 + std::erf(xf / std::sqrt(2.0L))));
    REQUIRE(std::abs(gelu_scalar(xf) - want_f) <=
            1e-6 * std::abs(want_f) + 1e-7 * (1 + std::abs(x)));
  }
  REQUIRE(gelu_scalar(1.0) == Approx(0.8413447460685429).epsilon(1e-14));
  REQUIRE(gelu_scalar(-0.5) == Approx(-0.15426876936299344).epsilon(1e-14));
  REQUIRE(gelu_scalar(0.0f) == 0.0f);
  REQUIRE(gelu_scalar(20.0f) == 20.0f);
  REQUIRE(gelu_scalar(-20.0f) == 0.0f);
}

TEST_CASE("shared gelu_grad_scalar matches finite differences and a double reference",
          "[kernels][shared]") {
  const double h = 1e-5;
  for (double x = -8; x <= 8; x += 0.0137) {
    const double numeric = (gelu_scalar(x + h) - gelu_scalar(x - h)) / (2 * h);
    REQUIRE(std::abs(gelu_grad_scalar(x) - numeric) <= 1e-8);
    const float xf = static_cast<float>(x);
    const double cdf = 0.5 * (1 + std::erf(xf / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * double(xf) * xf) / std::sqrt(2 * std::numbers::pi);
    const double want = cdf + xf * pdf;
    REQUIRE(std::abs(gelu_grad_scalar(xf) - want) <= 1e-6 * std::abs(want) + 2e-7);
  }
  REQUIRE(gelu_grad_scalar(0.0) == 0.5);
  REQUIRE(gelu_grad_scalar(30.0f) == 1.0f);
  REQUIRE(gelu_grad_scalar(-30.0f) == 0.0f);
}

TEST_CASE("shared float_bits and bits_float are exact bit casts", "[kernels][shared]") {
  REQUIRE(float_bits(1.0f) == 0x3f800000u);
  REQUIRE(float_bits(-0.0f) == 0x80000000u);
  REQUIRE(float_bits(std::numeric_limits<float>::infinity()) == 0x7f800000u);
  REQUIRE(bits_float(0x40490fdbu) == 3.14159265f);
  REQUIRE(bits_float(0x00000001u) == std::numeric_limits<float>::denorm_min());
  for (uint32_t u : {0u, 1u, 0x7fc00001u, 0xffffffffu, 0x12345678u})
    REQUIRE(float_bits(bits_float(u)) == u);  // NaN payloads survive too
}

TEST_CASE("shared bf16 conversions hit known bit patterns", "[kernels][shared]") {
  REQUIRE(float_to_bf16(1.0f) == 0x3f80);
  REQUIRE(float_to_bf16(-2.0f) == 0xc000);
  REQUIRE(float_to_bf16(-0.0f) == 0x8000);
  REQUIRE(float_to_bf16(3.14159265f) == 0x4049);              // 0x40490fdb rounds down
  REQUIRE(float_to_bf16(bits_float(0x3f808000u)) == 0x3f80);  // tie -> even (down)
  REQUIRE(float_to_bf16(bits_float(0x3f818000u)) == 0x3f82);  // tie -> even (up)
  REQUIRE(float_to_bf16(bits_float(0x3f808001u)) == 0x3f81);  // just past the tie
  REQUIRE(float_to_bf16(bits_float(0x7f7fffffu)) == 0x7f80);  // FLT_MAX rounds to inf
  REQUIRE(float_to_bf16(bits_float(0xff7fffffu)) == 0xff80);
  REQUIRE(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  REQUIRE(float_to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
  REQUIRE(float_to_bf16(bits_float(0x7fc00000u)) == 0x7fc0);
  // A NaN whose payload sits in the dropped bits stays NaN (quieted), not inf.
  REQUIRE(float_to_bf16(bits_float(0x7f800001u)) == 0x7fc0);
  REQUIRE(float_to_bf16(bits_float(0xff800001u)) == 0xffc0);
  // Subnormals keep bf16's (float's) exponent range.
  REQUIRE(float_to_bf16(bits_float(0x00000001u)) == 0x0000);
  REQUIRE(float_to_bf16(bits_float(0x00018000u)) == 0x0002);
  REQUIRE(float_to_bf16(bits_float(0x00010000u)) == 0x0001);
  REQUIRE(float_bits(bf16_to_float(0x0001)) == 0x00010000u);
  REQUIRE(bf16_to_float(0x3f80) == 1.0f);
  REQUIRE(std::isinf(bf16_to_float(0xff80)));
  REQUIRE(std::isnan(bf16_to_float(0x7fc1)));
}

TEST_CASE("shared fp16 conversions hit known bit patterns", "[kernels][shared]") {
  REQUIRE(float_to_fp16(1.0f) == 0x3c00);
  REQUIRE(float_to_fp16(-2.0f) == 0xc000);
  REQUIRE(float_to_fp16(-0.0f) == 0x8000);
  REQUIRE(float_to_fp16(0.1f) == 0x2e66);
  REQUIRE(float_to_fp16(65504.0f) == 0x7bff);                 // largest finite
  REQUIRE(float_to_fp16(bits_float(0x477fefffu)) == 0x7bff);  // just below the overflow tie
  REQUIRE(float_to_fp16(65520.0f) == 0x7c00);                 // the tie rounds to inf
  REQUIRE(float_to_fp16(-1e6f) == 0xfc00);
  REQUIRE(float_to_fp16(std::numeric_limits<float>::infinity()) == 0x7c00);
  REQUIRE(float_to_fp16(std::numeric_limits<float>::quiet_NaN()) == 0x7e00);
  REQUIRE(float_to_fp16(bits_float(0xff800001u)) == 0xfe00);       // signalling NaN: NaN, not inf
  REQUIRE(float_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie -> even
  REQUIRE(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie -> even
  REQUIRE(float_to_fp16(std::ldexp(1.0f, -14)) == 0x0400);             // smallest normal
  REQUIRE(float_to_fp16(bits_float(0x387fffffu)) == 0x0400);   // subnormal path rounds up to it
  REQUIRE(float_to_fp16(std::ldexp(1023.0f, -24)) == 0x03ff);  // largest subnormal
  REQUIRE(float_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);     // smallest subnormal
  REQUIRE(float_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);     // tie with 0 -> even
  REQUIRE(float_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);     // tie 1.5 ulp -> even
  REQUIRE(float_to_fp16(std::ldexp(5.0f, -25)) == 0x0002);     // tie 2.5 ulp -> even
  REQUIRE(float_to_fp16(-std::ldexp(1.0f, -24)) == 0x8001);
  REQUIRE(float_to_fp16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  REQUIRE(fp16_to_float(0x0001) == std::ldexp(1.0f, -24));
  REQUIRE(fp16_to_float(0x3555) == 0.333251953125f);
  REQUIRE(float_bits(fp16_to_float(0x8000)) == 0x80000000u);
  REQUIRE(fp16_to_float(0xfc00) == -std::numeric_limits<float>::infinity());
  REQUIRE(std::isnan(fp16_to_float(0x7c01)));
}

TEST_CASE("shared 16-bit formats round trip through fp32 for every pattern", "[kernels][shared]") {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float b = bf16_to_float(h), f = fp16_to_float(h);
    if (std::isnan(b)) {
      REQUIRE(std::isnan(bf16_to_float(float_to_bf16(b))));
    } else {
      REQUIRE(float_to_bf16(b) == h);
    }
    if (std::isnan(f)) {
      REQUIRE(std::isnan(fp16_to_float(float_to_fp16(f))));
    } else {
      REQUIRE(float_to_fp16(f) == h);
    }
    REQUIRE(bf16_nonfinite(h) == !std::isfinite(b));
    REQUIRE(fp16_nonfinite(h) == !std::isfinite(f));
  }
}

TEST_CASE("shared bf16 and fp16 rounding match a nearest-even reference", "[kernels][shared]") {
  for (float x : interesting_floats()) {
    if (std::isnan(x)) {
      REQUIRE(std::isnan(bf16_to_float(float_to_bf16(x))));
      REQUIRE(std::isnan(fp16_to_float(float_to_fp16(x))));
      continue;
    }
    INFO("x bits 0x" << std::hex << float_bits(x));
    REQUIRE(float_bits(bf16_to_float(float_to_bf16(x))) == float_bits(ref_bf16(x)));
    REQUIRE(float_bits(fp16_to_float(float_to_fp16(x))) == float_bits(ref_fp16(x)));
    REQUIRE(f32_nonfinite(x) == !std::isfinite(x));
  }
}

TEST_CASE("shared adamw_scalars computes torch's bias corrections", "[kernels][shared]") {
  AdamWParams h;
  h.lr = 1e-3f;
  h.weight_decay = 0.01f;
  // The betas are floats (0.999f is 0.99900001287...), widened to double as torch
  // widens them to Python floats.
  const double b1 = h.beta1, b2 = h.beta2;
  const AdamWScalars s1 = adamw_scalars(h, 1);
  REQUIRE(s1.step_size == Approx(double(h.lr) / (1 - b1)).epsilon(1e-7));
  REQUIRE(s1.bc2_sqrt == Approx(std::sqrt(1 - b2)).epsilon(1e-7));
  REQUIRE(s1.decay == 1.0f - 1e-3f * 0.01f);
  const AdamWScalars s3 = adamw_scalars(h, 3);
  REQUIRE(s3.step_size == Approx(double(h.lr) / (1 - b1 * b1 * b1)).epsilon(1e-7));
  REQUIRE(s3.bc2_sqrt == Approx(std::sqrt(1 - b2 * b2 * b2)).epsilon(1e-7));
  REQUIRE(s1.beta1 == h.beta1);
  REQUIRE(s1.beta2 == h.beta2);
  REQUIRE(s1.eps == h.eps);
  // Late steps: the corrections tend to 1.
  const AdamWScalars s = adamw_scalars(h, 100000);
  REQUIRE(s.step_size == Approx(1e-3).epsilon(1e-6));
  REQUIRE(s.bc2_sqrt == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("shared adamw_update follows torch's AdamW in double precision", "[kernels][shared]") {
  AdamWParams h;
  h.lr = 1e-2f;
  h.beta1 = 0.8f;
  h.beta2 = 0.95f;
  h.eps = 1e-6f;
  h.weight_decay = 0.1f;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> nd;
  for (int trial = 0; trial < 200; ++trial) {
    float p = static_cast<float>(nd(rng)), m = 0, v = 0;
    double pd = p, md = 0, vd = 0, gmax = 0;
    for (int64_t t = 1; t <= 5; ++t) {
      const float g = static_cast<float>(nd(rng) * (trial % 3 == 0 ? 1e-4 : 1.0));
      gmax = std::max(gmax, std::abs(double(g)));
      adamw_update(p, g, m, v, adamw_scalars(h, t));
      // torch.optim.AdamW, single-tensor path, in double.
      const double lr = h.lr, b1 = h.beta1, b2 = h.beta2;
      pd *= 1 - lr * h.weight_decay;
      md += (g - md) * (1 - b1);
      vd = vd * b2 + (1 - b2) * double(g) * g;
      const double bc1 = 1 - std::pow(b1, double(t)), bc2 = 1 - std::pow(b2, double(t));
      pd -= lr / bc1 * md / (std::sqrt(vd) / std::sqrt(bc2) + h.eps);
      INFO("trial " << trial << " step " << t);
      // Float rounding over a few steps: m can cancel (gradients of both signs),
      // so its error is measured against the gradients' size; v only adds.
      REQUIRE(std::abs(m - md) <= 3e-6 * gmax);
      REQUIRE(std::abs(v - vd) <= 3e-6 * vd);
      REQUIRE(std::abs(p - pd) <= 1e-6 * std::abs(pd) + 1e-5 * lr);
    }
  }
}

TEST_CASE("shared adamw_update first step moves by lr against the gradient's sign",
          "[kernels][shared]") {
  AdamWParams h;  // lr 1e-3, weight decay 0.01
  for (float g : {3.0f, -0.25f}) {
    float p = 2.0f, m = 0, v = 0;
    adamw_update(p, g, m, v, adamw_scalars(h, 1));
    // m̂ = g and v̂ = g² at t = 1, so the step is lr · g / (|g| + eps).
    const double want = 2.0 * (1 - 1e-3 * 0.01) - 1e-3 * (g > 0 ? 1 : -1);
    REQUIRE(p == Approx(want).epsilon(1e-6));
    // 1 - beta in float: 0.999f is not 0.999, so (1 - beta2) is 0.00099998713.
    REQUIRE(m == Approx((1 - double(h.beta1)) * g).epsilon(1e-6));
    REQUIRE(v == Approx((1 - double(h.beta2)) * g * g).epsilon(1e-6));
  }
}

TEST_CASE("shared sgd_update subtracts lr times the gradient", "[kernels][shared]") {
  REQUIRE(sgd_update(1.0f, 2.0f, 0.25f) == 0.5f);
  REQUIRE(sgd_update(-1.0f, -4.0f, 0.5f) == 1.0f);
  REQUIRE(sgd_update(3.0f, 0.0f, 0.1f) == 3.0f);
}
