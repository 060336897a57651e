// Synthetic regression data from the seed: x ~ N(0,1), y = tanh(x·T) with a
// fixed random T. Every row is generated from (seed, step, row) alone, so each
// data-parallel rank makes exactly its own rows of the global batch.
#pragma once
#include <cstdint>
#include <vector>

namespace shardlab {

class DeviceBackend;

class SyntheticData {
 public:
  SyntheticData(int dim, uint64_t seed);
  int dim() const { return dim_; }
  // Rows [row_begin, row_begin + rows) of step `step`'s global batch:
  // x[rows, dim], y[rows, dim]. y may be null when only the inputs are needed
  // (a pipeline's first stage), which skips the x·T product.
  void rows(int step, int row_begin, int rows, float* x, float* y) const;

 private:
  int dim_;
  uint64_t seed_;
  std::vector<float> target_;  // T[dim, dim], scaled by 1/√dim so tanh is not saturated
};

// SyntheticData::rows into device memory: x_dev[rows, dim] and y_dev[rows, dim]
// (y_dev may be null, as for rows). Memory the host can write (a plain CPU
// device) is filled in place, with no extra copy; otherwise the rows are made
// in host vectors and uploaded.
void load_rows(DeviceBackend& dev, const SyntheticData& data, int step, int row_begin, int rows,
               float* x_dev, float* y_dev);

}  // namespace shardlab
