// bf16 / fp16 conversions: exact where representable, round-to-nearest-even
// otherwise, with the special values (inf, NaN, subnormals) handled.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "kernels/precision.h"

using namespace shardlab::kernels;

TEST_CASE("bf16 round trip and rounding", "[precision]") {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 3.0e38f, 1e-30f}) {
    const float back = bf16_to_float(float_to_bf16(f));
    REQUIRE(std::abs(back - f) <= std::abs(f) * (1.0f / 256));
  }
  REQUIRE(float_to_bf16(1.0f) == 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to even (1.0).
  REQUIRE(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)) == 1.0f);
  REQUIRE(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
  REQUIRE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
  REQUIRE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

TEST_CASE("fp16 round trip, rounding, overflow and subnormals", "[precision]") {
  REQUIRE(float_to_fp16(1.0f) == 0x3c00);
  REQUIRE(float_to_fp16(-2.0f) == 0xc000);
  REQUIRE(float_to_fp16(65504.0f) == 0x7bff);  // largest finite
  REQUIRE(float_to_fp16(65520.0f) == 0x7c00);  // rounds to inf
  REQUIRE(std::isinf(fp16_to_float(float_to_fp16(1e6f))));
  REQUIRE(fp16_to_float(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  REQUIRE(float_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);
  REQUIRE(float_to_fp16(std::ldexp(1.0f, -26)) == 0x0000);  // underflows to zero
  REQUIRE(std::isnan(fp16_to_float(float_to_fp16(std::nanf("")))));
  // 1 + 2^-11 is halfway between 1 and the next fp16: ties to even.
  REQUIRE(fp16_to_float(float_to_fp16(1.0f + std::ldexp(1.0f, -11))) == 1.0f);
  REQUIRE(fp16_to_float(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11))) ==
          1.0f + std::ldexp(1.0f, -9));
  // Every fp16 value converts to float and back unchanged.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    REQUIRE(float_to_fp16(f) == h);
  }
}

TEST_CASE("low-precision sums round once", "[precision]") {
  const uint16_t a[2] = {float_to_bf16(1.0f), float_to_bf16(-3.0f)};
  const uint16_t b[2] = {float_to_bf16(0.5f), float_to_bf16(1.0f)};
  uint16_t out[2];
  sum_bf16(out, a, b, 2);
  REQUIRE(bf16_to_float(out[0]) == 1.5f);
  REQUIRE(bf16_to_float(out[1]) == -2.0f);
  const uint16_t c[1] = {float_to_fp16(60000.0f)};
  uint16_t o16[1];
  sum_fp16(o16, c, c, 1);
  REQUIRE(std::isinf(fp16_to_float(o16[0])));  // overflow shows up as inf, as loss scaling expects
}
