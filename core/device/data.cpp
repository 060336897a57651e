// Synthetic data generation (see data.h): the same three calls on every device.
#include "core/device/data.h"

#include <cmath>

#include "core/device/device.h"
#include "core/rng.h"
#include "kernels/cpu.h"

namespace shardlab {

SyntheticData::SyntheticData(int dim, uint64_t seed) : dim_(dim), seed_(seed) {
  const size_t d = static_cast<size_t>(dim);
  target_t_.resize(d * d);
  // T is drawn row by row from one stream (made once), and kept transposed.
  Rng rng(mix_seed(seed, 0x7a7a));
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  for (size_t i = 0; i < d; ++i)
    for (size_t o = 0; o < d; ++o) target_t_[o * d + i] = static_cast<float>(rng.normal() * scale);
}

std::string SyntheticData::target_key() const {
  return "synthetic.target_t:" + std::to_string(seed_) + ":" + std::to_string(dim_);
}

void SyntheticData::rows(int step, int row_begin, int rows, float* x, float* y) const {
  kernels::synthetic_normals(x, seed_, step, row_begin, rows, dim_);
  if (!y) return;
  // y = tanh(x · T): one Linear for the slice, as every device computes it.
  kernels::linear_forward<float>(y, x, target_t_.data(), nullptr, rows, dim_, dim_);
  kernels::tanh_forward(y, y, static_cast<size_t>(rows) * dim_);
}

void load_rows(DeviceBackend& dev, const SyntheticData& data, int step, int row_begin, int rows,
               float* x_dev, float* y_dev) {
  // The guarded CPU device also says cpu, but its memory is closed to the host.
  if (dev.device().kind == DeviceKind::cpu && !dev.is_device_pointer(x_dev)) {
    data.rows(step, row_begin, rows, x_dev, y_dev);
    return;
  }
  const int d = data.dim();
  dev.synthetic_normals(x_dev, data.seed(), step, row_begin, rows, d);
  if (!y_dev) return;
  const std::vector<float>& tt = data.target_t();
  const auto* t_dev = static_cast<const float*>(
      dev.constant(data.target_key(), tt.data(), tt.size() * sizeof(float)));
  dev.synthetic_targets(y_dev, x_dev, t_dev, rows, d);
}

}  // namespace shardlab
