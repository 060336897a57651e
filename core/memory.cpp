// The accounting allocator (see memory.h).
#include "core/memory.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace shardlab {

size_t dtype_size(DType dt) {
  return dt == DType::f32 ? 4 : 2;
}
const char* to_string(DType dt) {
  switch (dt) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
  }
  return "?";
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    reset();
    alloc_ = other.alloc_;
    ptr_ = other.ptr_;
    numel_ = other.numel_;
    capacity_ = other.capacity_;
    dtype_ = other.dtype_;
    category_ = other.category_;
    pool_ = other.pool_;
    id_ = other.id_;
    shape_ = std::move(other.shape_);
    name_ = std::move(other.name_);
    other.alloc_ = nullptr;
    other.ptr_ = nullptr;
    other.numel_ = 0;
  }
  return *this;
}

void Tensor::reset() {
  if (alloc_ && ptr_) alloc_->free(*this);
  alloc_ = nullptr;
  ptr_ = nullptr;
  numel_ = 0;
}

Allocator::Allocator(DeviceBackend& backend, Recorder* recorder)
    : backend_(backend), recorder_(recorder) {}

Allocator::~Allocator() {
  release_cache();
}

Tensor Allocator::alloc(std::string name, MemCategory category, std::vector<int64_t> shape,
                        DType dtype, Pool pool) {
  size_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<size_t>(d);
  const size_t bytes = numel * dtype_size(dtype);
  const size_t block = bytes == 0 ? 64 : bytes;
  const int p = static_cast<int>(pool);
  void* ptr = nullptr;
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_[p].find(block);
    if (it != cache_[p].end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      (p == 0 ? stats_.device : stats_.host).cached -= static_cast<int64_t>(block);
    }
    id = next_id_++;
  }
  if (!ptr) ptr = pool == Pool::device ? backend_.raw_alloc(block) : backend_.raw_alloc_host(block);
  if (bytes) {
    if (pool == Pool::device)
      backend_.fill_zero(ptr, bytes);
    else
      std::memset(ptr, 0, bytes);  // host pools are host memory on every device
  }

  Tensor t;
  t.alloc_ = this;
  t.ptr_ = ptr;
  t.numel_ = numel;
  t.capacity_ = block;
  t.dtype_ = dtype;
  t.category_ = category;
  t.pool_ = pool;
  t.id_ = id;
  t.shape_ = std::move(shape);
  t.name_ = name;

  const int64_t now = now_ns();
  {
    std::lock_guard<std::mutex> lock(mu_);
    PoolStats& s = pool == Pool::device ? stats_.device : stats_.host;
    const int c = static_cast<int>(category);
    s.current[c] += static_cast<int64_t>(bytes);
    s.peak[c] = std::max(s.peak[c], s.current[c]);
    s.current_total += static_cast<int64_t>(bytes);
    s.peak_total = std::max(s.peak_total, s.current_total);
  }
  if (recorder_)
    recorder_->add_alloc(
        AllocEvent{now, static_cast<int64_t>(bytes), id, category, pool, std::move(name)});
  return t;
}

void Allocator::free(Tensor& t) {
  const int64_t bytes = static_cast<int64_t>(t.bytes());
  const int p = static_cast<int>(t.pool_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    PoolStats& s = t.pool_ == Pool::device ? stats_.device : stats_.host;
    s.current[static_cast<int>(t.category_)] -= bytes;
    s.current_total -= bytes;
    s.cached += static_cast<int64_t>(t.capacity_);
    cache_[p][t.capacity_].push_back(t.ptr_);
  }
  if (recorder_)
    recorder_->add_alloc(AllocEvent{now_ns(), -bytes, t.id_, t.category_, t.pool_, t.name_});
}

MemStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Allocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  for (PoolStats* s : {&stats_.device, &stats_.host}) {
    s->peak = s->current;
    s->peak_total = s->current_total;
  }
}

void Allocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (int p = 0; p < 2; ++p) {
    for (auto& [bytes, blocks] : cache_[p])
      for (void* ptr : blocks)
        p == 0 ? backend_.raw_free(ptr, bytes) : backend_.raw_free_host(ptr, bytes);
    cache_[p].clear();
  }
  stats_.device.cached = 0;
  stats_.host.cached = 0;
}

}  // namespace shardlab
