// The per-rank accounting allocator: every buffer has a name, a category and a
// pool, and every allocation and free is recorded with a time. Memory shown
// anywhere in Shardlab is read from here, never computed from a formula.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/record/recorder.h"

namespace shardlab {

// One pool's bookkeeping. The Allocator keeps it for real memory and the
// preflight (memory_estimate.h) for allocations it only replays, through the
// same two calls, so the prediction and the measurement count alike.
struct PoolStats {
  std::array<int64_t, kNumMemCategories> current{};
  std::array<int64_t, kNumMemCategories> peak{};  // each category's own peak
  int64_t current_total = 0;
  int64_t peak_total = 0;  // peak of the sum, not the sum of peaks
  int64_t cached = 0;      // freed blocks kept for reuse (not in use, not counted above)
  // Peak of in use + cached: what the pool took from the device or the host.
  int64_t peak_reserved = 0;

  // `bytes` in use for category c, in a block of `block` bytes taken from the
  // cache (from_cache) or newly from the backend.
  void on_alloc(MemCategory c, int64_t bytes, int64_t block, bool from_cache);
  // The block goes back to the cache.
  void on_free(MemCategory c, int64_t bytes, int64_t block);
};

// The block the caching allocator keeps for a request of `bytes` (the cache key).
inline size_t block_bytes(size_t bytes) {
  return bytes == 0 ? 64 : bytes;
}

// "512 B", "1.50 KiB", "33.10 GiB", "1.20 TiB".
std::string bytes_string(double bytes);

// An allocation the device (or the host, or a test's limit) could not satisfy.
// what(): "rank 1 could not allocate 'layers.3.weight.grad' (grads, 1.00 GiB,
// device memory of cpu): out of memory".
class OutOfMemory : public std::runtime_error {
 public:
  OutOfMemory(int rank, const std::string& detail);
  // The message without "rank N ", for a report that names the rank itself.
  const std::string& detail() const { return detail_; }
  int rank() const { return rank_; }

 private:
  int rank_;
  std::string detail_;
};

struct MemStats {
  PoolStats device;
  PoolStats host;
  PoolStats disk;  // the offload file's bytes (--offload nvme:DIR): not memory, shown beside it
  const PoolStats& pool(Pool p) const {
    return p == Pool::device ? device : p == Pool::host ? host : disk;
  }
  PoolStats& pool(Pool p) { return p == Pool::device ? device : p == Pool::host ? host : disk; }
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

// Whether memory of `pool` allocated for `dev` is host memory the CPU (and a
// file read into it) can address: the host pool, or any pool of a CPU device;
// not a GPU's device pool, which is reached through host copies.
inline bool host_addressable(const DeviceBackend& dev, Pool pool) {
  return pool == Pool::host || dev.device().kind != DeviceKind::cuda;
}

// Caching allocator: freed blocks are kept by size and reused, because glibc
// would unmap and re-fault multi-MiB blocks every step. What is in use is
// counted by category; what is cached is reported apart.
class Allocator {
 public:
  // `rank` (-1: none) names the rank in out-of-memory errors.
  Allocator(DeviceBackend& backend, Recorder* recorder, int rank = -1);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Zero-initialised. Throws OutOfMemory naming the buffer, its category and
  // size when neither the backend (after giving back the cache) nor the limit
  // below allows it.
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
  // Refuse, as out of memory, any allocation that would take the pool's
  // in-use bytes past `bytes` (-1: no limit): a smaller device than the one at
  // hand, for tests of what a failed allocation reports.
  void set_limit(Pool pool, int64_t bytes);
  int rank() const { return rank_; }
  DeviceBackend& backend() { return backend_; }
  // Host memory a rank holds beside the allocator (an export's flat vector,
  // ExportBuffer), counted here so that a meta run, which makes none of it,
  // still reports it: `delta` bytes taken (> 0) or given back (< 0).
  void note_outside(int64_t delta);
  // Bytes a rank keeps in its offload file (Pool::disk), recorded as an
  // allocation of `name` in `category` so the memory views and the meta run
  // count them as they count memory; returns the id disk_free takes.
  uint64_t disk_alloc(const std::string& name, MemCategory category, int64_t bytes);
  void disk_free(uint64_t id, const std::string& name, MemCategory category, int64_t bytes);
  int64_t outside_peak() const;
  Recorder* recorder() { return recorder_; }

 private:
  friend class Tensor;
  void free(Tensor& t);
  // A new block from the backend; on failure gives the cache back and tries
  // once more, then throws OutOfMemory.
  void* raw_block(const std::string& name, MemCategory category, size_t bytes, Pool pool);

  DeviceBackend& backend_;
  Recorder* recorder_;
  const int rank_;
  int64_t limit_[2] = {-1, -1};  // per pool, see set_limit
  mutable std::mutex mu_;
  MemStats stats_;
  int64_t outside_ = 0, outside_peak_ = 0;  // see note_outside
  uint64_t next_id_ = 1;
  std::map<size_t, std::vector<void*>> cache_[2];  // per pool: block bytes -> free blocks
};

}  // namespace shardlab
