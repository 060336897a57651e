// The real source of initial weights: a flat vector, written where each tensor lives.
#include "core/model/param_source.h"

#include <cstring>
#include <stdexcept>

#include "core/device/device.h"
#include "core/device/memory.h"
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
