// The accounting allocator (see memory.h).
#include "core/device/memory.h"

#include <algorithm>
#include <cstdio>
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

void PoolStats::on_alloc(MemCategory c, int64_t bytes, int64_t block, bool from_cache) {
  if (from_cache) cached -= block;
  const int k = static_cast<int>(c);
  current[k] += bytes;
  peak[k] = std::max(peak[k], current[k]);
  current_total += bytes;
  peak_total = std::max(peak_total, current_total);
  peak_reserved = std::max(peak_reserved, current_total + cached);
}

void PoolStats::on_free(MemCategory c, int64_t bytes, int64_t block) {
  current[static_cast<int>(c)] -= bytes;
  current_total -= bytes;
  cached += block;
}

std::string bytes_string(double bytes) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, unit[u]);
  return buf;
}

OutOfMemory::OutOfMemory(int rank, const std::string& detail)
    : std::runtime_error(rank >= 0 ? "rank " + std::to_string(rank) + " " + detail : detail),
      rank_(rank),
      detail_(detail) {}

Allocator::Allocator(DeviceBackend& backend, Recorder* recorder, int rank)
    : backend_(backend), recorder_(recorder), rank_(rank) {}

Allocator::~Allocator() {
  release_cache();
}

namespace {
// "could not allocate 'layers.3.weight.grad' (grads, 1.00 GiB of cpu memory)"
std::string could_not(const std::string& name, MemCategory category, size_t bytes, Pool pool,
                      const Device& device) {
  return "could not allocate '" + name + "' (" + to_string(category) + ", " +
         bytes_string(static_cast<double>(bytes)) + " of " +
         (pool == Pool::device ? device.str() : std::string("host")) + " memory)";
}
}  // namespace

void* Allocator::raw_block(const std::string& name, MemCategory category, size_t bytes, Pool pool) {
  std::string reason;
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      return pool == Pool::device ? backend_.raw_alloc(bytes) : backend_.raw_alloc_host(bytes);
    } catch (const std::bad_alloc&) {
      reason = "out of memory";
    } catch (const std::exception& e) {
      reason = e.what();  // a GPU's: "cudaMalloc of N bytes on GPU 1: out of memory"
    }
    // Cached blocks of other sizes may be what stands in the way: give them back, once.
    if (attempt == 0) release_cache();
  }
  throw OutOfMemory(rank_,
                    could_not(name, category, bytes, pool, backend_.device()) + ": " + reason);
}

void Allocator::set_limit(Pool pool, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_[static_cast<int>(pool)] = bytes;
}

Tensor Allocator::alloc(std::string name, MemCategory category, std::vector<int64_t> shape,
                        DType dtype, Pool pool) {
  size_t numel = 1;
  bool overflow = false;
  for (int64_t d : shape)
    overflow |= d < 0 || __builtin_mul_overflow(numel, static_cast<size_t>(d), &numel);
  size_t bytes = 0;
  overflow |= __builtin_mul_overflow(numel, dtype_size(dtype), &bytes);
  if (overflow)
    throw OutOfMemory(rank_, "could not allocate '" + name + "' (" + to_string(category) +
                                 "): its size overflows 64 bits");
  const size_t block = block_bytes(bytes);
  const int p = static_cast<int>(pool);
  void* ptr = nullptr;
  uint64_t id;
  // Recorded under the lock, with the totals' change: a comm thread allocating
  // beside the rank's thread cannot then record its events in another order
  // than the totals moved, and a recording's events replay to its peaks exactly
  // (the loader checks them against the peaks: core/run/recording_read.cpp).
  auto record = [&] {
    if (recorder_)
      recorder_->add_alloc(
          AllocEvent{now_ns(), static_cast<int64_t>(bytes), id, category, pool, name});
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    PoolStats& s = pool == Pool::device ? stats_.device : stats_.host;
    if (limit_[p] >= 0 && s.current_total + static_cast<int64_t>(bytes) > limit_[p])
      throw OutOfMemory(rank_, could_not(name, category, bytes, pool, backend_.device()) +
                                   ": out of memory (this pool is limited to " +
                                   bytes_string(static_cast<double>(limit_[p])) + ", " +
                                   bytes_string(static_cast<double>(s.current_total)) + " in use)");
    id = next_id_++;
    auto it = cache_[p].find(block);
    if (it != cache_[p].end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      s.on_alloc(category, static_cast<int64_t>(bytes), static_cast<int64_t>(block), true);
      record();
    }
  }
  if (!ptr) {
    ptr = raw_block(name, category, block, pool);
    std::lock_guard<std::mutex> lock(mu_);
    PoolStats& s = pool == Pool::device ? stats_.device : stats_.host;
    s.on_alloc(category, static_cast<int64_t>(bytes), static_cast<int64_t>(block), false);
    record();
  }
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
  t.name_ = std::move(name);
  return t;
}

void Allocator::free(Tensor& t) {
  const int64_t bytes = static_cast<int64_t>(t.bytes());
  const int p = static_cast<int>(t.pool_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    PoolStats& s = t.pool_ == Pool::device ? stats_.device : stats_.host;
    s.on_free(t.category_, bytes, static_cast<int64_t>(t.capacity_));
    cache_[p][t.capacity_].push_back(t.ptr_);
    if (recorder_)  // under the lock: see alloc
      recorder_->add_alloc(AllocEvent{now_ns(), -bytes, t.id_, t.category_, t.pool_, t.name_});
  }
}

MemStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

uint64_t Allocator::disk_alloc(const std::string& name, MemCategory category, int64_t bytes) {
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    stats_.disk.on_alloc(category, bytes, bytes, false);
  }
  if (recorder_) recorder_->add_alloc(AllocEvent{now_ns(), bytes, id, category, Pool::disk, name});
  return id;
}

void Allocator::disk_free(uint64_t id, const std::string& name, MemCategory category,
                          int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    PoolStats& s = stats_.disk;
    s.current[static_cast<int>(category)] -= bytes;  // no cache: the file's blocks are gone
    s.current_total -= bytes;
  }
  if (recorder_) recorder_->add_alloc(AllocEvent{now_ns(), -bytes, id, category, Pool::disk, name});
}

void Allocator::note_outside(int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  outside_ += delta;
  outside_peak_ = std::max(outside_peak_, outside_);
}

int64_t Allocator::outside_peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return outside_peak_;
}

void Allocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  for (PoolStats* s : {&stats_.device, &stats_.host}) {
    s->peak = s->current;
    s->peak_total = s->current_total;
    s->peak_reserved = s->current_total + s->cached;
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
