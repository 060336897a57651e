// Where a rank's initial weights come from: the model's flat state vector
// (parameters, then buffers), read by range. A real run reads the vector it
// was given; a meta run (core/device/meta_backend.h) is given a source that holds no
// values and is never read, so predicting a model's memory never makes its
// weights (GPT-3's would be 700 GB).
#pragma once
#include <cstddef>
#include <vector>

namespace shardlab {

class Allocator;
class DeviceBackend;
class ModelLayout;
class Tensor;

class ParamSource {
 public:
  virtual ~ParamSource() = default;
  // Floats in the state vector: ModelLayout::state_total() (or total() without buffers).
  virtual size_t size() const = 0;
  // Writes floats [from, from + n) into t at element `offset`, in t's dtype and
  // pool (write_from_host).
  virtual void write_to(DeviceBackend& dev, Tensor& t, size_t offset, size_t from,
                        size_t n) const = 0;
  // Copies floats [from, from + n) to host memory at dst.
  virtual void read(float* dst, size_t from, size_t n) const = 0;
  virtual float value(size_t at) const = 0;
};

// The values of a vector that outlives the source.
class FlatParams final : public ParamSource {
 public:
  explicit FlatParams(const std::vector<float>& flat) : flat_(flat) {}
  size_t size() const override { return flat_.size(); }
  void write_to(DeviceBackend& dev, Tensor& t, size_t offset, size_t from, size_t n) const override;
  void read(float* dst, size_t from, size_t n) const override;
  float value(size_t at) const override { return flat_.at(at); }

 private:
  const std::vector<float>& flat_;
};

// A state vector of `size` floats that exists nowhere: for meta devices, whose
// tensors hold no values (a host-pool tensor keeps the allocator's zeros, a
// host buffer what it held). Reading it gives nothing; no weight is ever made.
class MetaParams final : public ParamSource {
 public:
  explicit MetaParams(size_t size) : size_(size) {}
  size_t size() const override { return size_; }
  void write_to(DeviceBackend&, Tensor&, size_t, size_t, size_t) const override {}
  void read(float*, size_t, size_t) const override {}
  float value(size_t) const override { return 0.0f; }

 private:
  size_t size_;
};

// One tp rank's part of a full state vector (tensor parallelism): the state
// vector of a sliced layout (ModelLayout(spec, TensorSlice)), each value read
// from where for_each_slice_run puts it in `full`, the padding of a padded
// tensor as zeros. A meta source stays one.
class SlicedParams final : public ParamSource {
 public:
  SlicedParams(const ParamSource& full, const ModelLayout& slice);
  size_t size() const override;
  void write_to(DeviceBackend& dev, Tensor& t, size_t offset, size_t from, size_t n) const override;
  void read(float* dst, size_t from, size_t n) const override;
  float value(size_t at) const override;

 private:
  struct Run {
    size_t at, full_at, n;
  };
  const ParamSource& full_;
  const ModelLayout& slice_;
  std::vector<Run> runs_;  // in order of `at`
};

// Rank 0's exported state vector (Strategy::export_params), filled by
// downloads, copies and receives. On a device that holds values it is a host
// vector of `n` floats; on a meta device it is nothing and every fill is
// skipped (at() is nullptr), so exporting a model larger than memory makes no
// copy of it, while the collectives and buffers around it still run. Either
// way its bytes are noted with the allocator (Allocator::note_outside) for as
// long as the buffer lives, so a meta run predicts the host memory it takes.
class ExportBuffer {
 public:
  ExportBuffer(Allocator& alloc, size_t n);
  ~ExportBuffer();
  ExportBuffer(const ExportBuffer&) = delete;
  ExportBuffer& operator=(const ExportBuffer&) = delete;
  bool keeps() const { return keeps_; }
  // Where floats [from, from + n) go, or nullptr when nothing is kept. Throws
  // std::logic_error for a range past the end.
  float* at(size_t from, size_t n);
  std::vector<float> take() { return std::move(flat_); }

 private:
  Allocator& alloc_;
  bool keeps_;
  size_t size_;
  std::vector<float> flat_;
};

}  // namespace shardlab
