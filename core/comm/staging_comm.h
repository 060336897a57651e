// A communicator for ranks whose buffers Gloo cannot read (GPU memory, or the
// guarded CPU device): every operation copies device buffers to host staging,
// runs the host communicator on them, and copies results back. This is how
// ranks that share one GPU talk (NCCL refuses two ranks on one GPU).
#pragma once
#include <memory>

#include "core/comm/comm.h"
#include "core/device/device.h"

namespace shardlab {

// `alloc` (may be null) accounts the staging buffers (host pool, comm_buffers);
// the copies are recorded as copy_d2h / copy_h2d spans on the comm lane.
std::unique_ptr<Comm> make_staging_comm(std::unique_ptr<Comm> host_comm, DeviceBackend& device,
                                        Allocator* alloc, Recorder* recorder);

}  // namespace shardlab
