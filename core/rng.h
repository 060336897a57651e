// Deterministic random numbers that do not depend on the standard library's
// distributions (those differ between implementations): splitmix64 for
// seeding, xoshiro256** for streams, Box–Muller for normals.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/math.h"

namespace shardlab {

// Both shared with the GPU's kernels (kernels/math.h), which draw the same numbers.
inline uint64_t splitmix64(uint64_t& state) {
  return kernels::splitmix64_step(state);
}

// Mixes several keys (seed, step, row, ...) into one seed.
inline uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0) {
  return kernels::mix_keys(a, b, c);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& w : s_) w = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace shardlab
