// The real source of initial weights: a flat vector, written where each tensor lives.
#include "core/model/param_source.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/device/device.h"
#include "core/device/memory.h"
#include "core/model/model.h"
#include "core/model/precision.h"

namespace shardlab {

namespace {
void check_range(size_t from, size_t n, size_t size) {
  if (from > size || n > size - from)
    throw std::logic_error("ParamSource: a read past the end of the state vector");
}
}  // namespace

void FlatParams::write_to(DeviceBackend& dev, Tensor& t, size_t offset, size_t from,
                          size_t n) const {
  check_range(from, n, flat_.size());
  write_from_host(dev, t, offset, flat_.data() + from, n);
}

void FlatParams::read(float* dst, size_t from, size_t n) const {
  check_range(from, n, flat_.size());
  if (n) std::memcpy(dst, flat_.data() + from, n * sizeof(float));
}

SlicedParams::SlicedParams(const ParamSource& full, const ModelLayout& slice)
    : full_(full), slice_(slice) {
  for_each_slice_run(slice, [&](size_t at, size_t full_at, size_t n) {
    if (n) runs_.push_back({at, full_at, n});
  });
  std::sort(runs_.begin(), runs_.end(), [](const Run& a, const Run& b) { return a.at < b.at; });
}

size_t SlicedParams::size() const {
  return slice_.state_total();
}

void SlicedParams::read(float* dst, size_t from, size_t n) const {
  check_range(from, n, size());
  // The run holding `from` (or the last before it), then on in order; what no
  // run covers (a padded vocabulary's padding) reads as zero.
  auto it = std::upper_bound(runs_.begin(), runs_.end(), from,
                             [](size_t v, const Run& r) { return v < r.at; });
  if (it != runs_.begin()) --it;
  const size_t end = from + n;
  while (from < end) {
    if (it != runs_.end() && from >= it->at + it->n) {
      ++it;
      continue;
    }
    const size_t take = it == runs_.end() || from < it->at
                            ? std::min(end, it == runs_.end() ? end : it->at) - from
                            : std::min(end - from, it->n - (from - it->at));
    if (it == runs_.end() || from < it->at)
      std::fill_n(dst, take, 0.0f);
    else
      full_.read(dst, it->full_at + (from - it->at), take);
    dst += take;
    from += take;
  }
}

void SlicedParams::write_to(DeviceBackend& dev, Tensor& t, size_t offset, size_t from,
                            size_t n) const {
  check_range(from, n, size());
  if (!dev.holds_values()) return;  // a meta device: nothing to write
  std::vector<float> host(n);
  read(host.data(), from, n);
  write_from_host(dev, t, offset, host.data(), n);
}

float SlicedParams::value(size_t at) const {
  float v = 0;
  read(&v, at, 1);
  return v;
}

ExportBuffer::ExportBuffer(Allocator& alloc, size_t n)
    : alloc_(alloc), keeps_(alloc.backend().holds_values()), size_(n) {
  if (keeps_) flat_.resize(n);
  alloc_.note_outside(static_cast<int64_t>(n * sizeof(float)));
}

ExportBuffer::~ExportBuffer() {
  alloc_.note_outside(-static_cast<int64_t>(size_ * sizeof(float)));
}

float* ExportBuffer::at(size_t from, size_t n) {
  check_range(from, n, size_);
  return keeps_ ? flat_.data() + from : nullptr;
}

}  // namespace shardlab
