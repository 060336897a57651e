// Synthetic regression data from the seed: x ~ N(0,1), y = tanh(x·T) with a
// fixed random T. Every element is a function of (seed, step, row, column)
// alone (counter-based draws, kernels/math.h), so each data-parallel rank makes
// exactly its own rows of the global batch, and a GPU makes them in parallel.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardlab {

class DeviceBackend;

class SyntheticData {
 public:
  SyntheticData(int dim, uint64_t seed);
  int dim() const { return dim_; }
  uint64_t seed() const { return seed_; }
  // Rows [row_begin, row_begin + rows) of step `step`'s global batch:
  // x[rows, dim], y[rows, dim]. y may be null when only the inputs are needed
  // (a pipeline's first stage), which skips the x·T product.
  void rows(int step, int row_begin, int rows, float* x, float* y) const;
  // Tᵀ[dim, dim] (stored transposed, so y = x·T is a Linear with weight Tᵀ).
  const std::vector<float>& target_t() const { return target_t_; }
  // A name for Tᵀ that differs whenever its values do: DeviceBackend::constant's key.
  std::string target_key() const;

 private:
  int dim_;
  uint64_t seed_;
  std::vector<float> target_t_;  // T scaled by 1/√dim so tanh is not saturated
};

// SyntheticData::rows into device memory: x_dev[rows, dim] and y_dev[rows, dim]
// (y_dev may be null, as for rows). Memory the host can write (a plain CPU
// device) is filled in place; any other device makes the rows itself with the
// same draws and the same Linear (Tᵀ uploaded once): nothing crosses the bus.
void load_rows(DeviceBackend& dev, const SyntheticData& data, int step, int row_begin, int rows,
               float* x_dev, float* y_dev);

}  // namespace shardlab
