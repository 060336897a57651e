// The per-rank accounting allocator: every buffer has a name, a category and a
// pool, and every allocation and free is recorded with a time. Memory shown
// anywhere in Shardlab is read from here, never computed from a formula.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/recorder.h"

namespace shardlab {


struct PoolStats {
  std::array<int64_t, kNumMemCategories> current{};
  std::array<int64_t, kNumMemCategories> peak{};  // each category's own peak
  int64_t current_total = 0;
  int64_t peak_total = 0;  // peak of the sum, not the sum of peaks
  int64_t cached = 0;      // freed blocks kept for reuse (not in use, not counted above)
};

struct MemStats {
  PoolStats device;
  PoolStats host;
  const PoolStats& pool(Pool p) const { return p == Pool::device ? device : host; }
};

class Allocator;

// A named, accounted block of memory. Move-only; returns itself to the
// allocator when destroyed.
class Tensor {
 public:
  Tensor() = default;
  ~Tensor() { reset(); }
  Tensor(Tensor&& other) noexcept { *this = std::move(other); }
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  void reset();  // free now
  bool empty() const { return ptr_ == nullptr; }

  template <typename T>
  T* data() {
    return static_cast<T*>(ptr_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(ptr_);
  }
  void* raw() { return ptr_; }
  const void* raw() const { return ptr_; }
  std::span<float> f32() { return {data<float>(), numel_}; }
  std::span<const float> f32() const { return {data<float>(), numel_}; }

  size_t numel() const { return numel_; }
  size_t bytes() const { return numel_ * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  MemCategory category() const { return category_; }
  Pool pool() const { return pool_; }
  uint64_t id() const { return id_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::string& name() const { return name_; }

 private:
  friend class Allocator;
  Allocator* alloc_ = nullptr;
  void* ptr_ = nullptr;
  size_t numel_ = 0;
  size_t capacity_ = 0;  // bytes of the underlying block (the cache key)
  DType dtype_ = DType::f32;
  MemCategory category_ = MemCategory::temporary;
  Pool pool_ = Pool::device;
  uint64_t id_ = 0;
  std::vector<int64_t> shape_;
  std::string name_;
};

// Caching allocator: freed blocks are kept by size and reused, because glibc
// would unmap and re-fault multi-MiB blocks every step. What is in use is
// counted by category; what is cached is reported apart.
class Allocator {
 public:
  Allocator(DeviceBackend& backend, Recorder* recorder);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Zero-initialised.
  Tensor alloc(std::string name, MemCategory category, std::vector<int64_t> shape,
               DType dtype = DType::f32, Pool pool = Pool::device);
  Tensor alloc(std::string name, MemCategory category, size_t numel, DType dtype = DType::f32,
               Pool pool = Pool::device) {
    return alloc(std::move(name), category, std::vector<int64_t>{static_cast<int64_t>(numel)},
                 dtype, pool);
  }

  MemStats stats() const;
  void reset_peaks();  // peaks restart from the current state
  void release_cache();
  DeviceBackend& backend() { return backend_; }
  Recorder* recorder() { return recorder_; }

 private:
  friend class Tensor;
  void free(Tensor& t);

  DeviceBackend& backend_;
  Recorder* recorder_;
  mutable std::mutex mu_;
  MemStats stats_;
  uint64_t next_id_ = 1;
  std::map<size_t, std::vector<void*>> cache_[2];  // per pool: block bytes -> free blocks
};

}  // namespace shardlab
