// Synthetic data generation (see data.h).
#include "core/data.h"

#include <cmath>

#include "core/device.h"
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

void load_rows(DeviceBackend& dev, const SyntheticData& data, int step, int row_begin, int rows,
               float* x_dev, float* y_dev) {
  // The guarded CPU device also says cpu, but its memory is closed to the host.
  if (dev.device().kind == DeviceKind::cpu && !dev.is_device_pointer(x_dev)) {
    data.rows(step, row_begin, rows, x_dev, y_dev);
    return;
  }
  const size_t n = static_cast<size_t>(rows) * data.dim();
  std::vector<float> x(n), y(y_dev ? n : 0);
  data.rows(step, row_begin, rows, x.data(), y_dev ? y.data() : nullptr);
  dev.upload(x_dev, DType::f32, x.data(), n);
  if (y_dev) dev.upload(y_dev, DType::f32, y.data(), n);
}

}  // namespace shardlab
