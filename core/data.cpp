// Synthetic data generation (see data.h).
#include "core/data.h"

#include <cmath>

#include "core/rng.h"
#include "kernels/cpu.h"

namespace shardlab {

SyntheticData::SyntheticData(int dim, uint64_t seed) : dim_(dim), seed_(seed) {
  target_.resize(static_cast<size_t>(dim) * dim);
  Rng rng(mix_seed(seed, 0x7a7a));
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  for (float& t : target_) t = static_cast<float>(rng.normal() * scale);
}

void SyntheticData::rows(int step, int row_begin, int rows, float* x, float* y) const {
  for (int r = 0; r < rows; ++r) {
    Rng rng(mix_seed(seed_, static_cast<uint64_t>(step), static_cast<uint64_t>(row_begin + r)));
    float* xr = x + static_cast<size_t>(r) * dim_;
    for (int j = 0; j < dim_; ++j) xr[j] = static_cast<float>(rng.normal());
  }
  if (!y) return;
  // y = tanh(x · T), one GEMM for the slice.
  kernels::gemm(false, false, rows, dim_, dim_, 1.0f, x, target_.data(), 0.0f, y);
  for (size_t i = 0; i < static_cast<size_t>(rows) * dim_; ++i) y[i] = std::tanh(y[i]);
}

}  // namespace shardlab
