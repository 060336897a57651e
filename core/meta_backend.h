// The meta device: a DeviceBackend that holds no memory. Strategies and layers
// run on it unchanged under the real Allocator, so what that allocator counts
// is a prediction of a real run's memory made by the real code (no twin to keep).
#pragma once
#include <memory>

#include "core/device.h"

namespace shardlab {

// Stands for `stands_for` (cpu or cuda:N): reports that device, so pools,
// scratch placement and 2-byte math (native_2byte_math) choose as they would
// there. Device blocks are fake addresses in a reserved, non-canonical range
// (any dereference faults at once), aligned as the real device aligns; kernels
// do nothing; download() and all_finite() see zeros: loss 0, finite, no fp16
// overflow. Host blocks (raw_alloc_host) are real memory, because host code
// reads them (the allocator zeroes them, offloaded optimizers step them).
std::unique_ptr<DeviceBackend> make_meta_backend(Device stands_for);

// True for an address the meta devices handed out (any rank's).
bool is_meta_pointer(const void* p);

}  // namespace shardlab
