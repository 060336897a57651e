// NCCL communicators for ranks on GPUs, one rank per GPU (the devices
// themselves: core/device/gpu.h). With SHARDLAB_CUDA off the constructors throw one
// clear line.
#pragma once
#include <chrono>
#include <memory>

#include "core/comm/comm.h"
#include "core/device/device.h"

namespace gloo::rendezvous {
class Store;
}

namespace shardlab {

// The communicators of one in-process run, one rank per GPU: an NCCL unique id
// made once and shared by the rank threads (ncclCommInitRank).
class NcclGroup {
 public:
  virtual ~NcclGroup() = default;
  // On rank `rank`'s thread, after make_cuda_backend: joins the group (blocks
  // until every rank has joined, or the timeout passes). `device` must be a
  // CUDA backend; `recorder` and `alloc` may be null.
  virtual std::unique_ptr<Comm> connect(int rank, DeviceBackend& device, Recorder* recorder,
                                        Allocator* alloc) = 0;
};
std::unique_ptr<NcclGroup> make_nccl_group(int world, std::chrono::milliseconds timeout,
                                           FailureBoard& failures);
// One process per rank: this process joins as `rank` alone. Rank 0 makes the
// unique id and puts it in the run's store ("nccl/unique_id"); the others read
// it there. The cross-rank check of point-to-point order (P2PLedger) needs the
// ranks in one process and is off.
std::unique_ptr<NcclGroup> make_nccl_group(int world, std::chrono::milliseconds timeout,
                                           FailureBoard& failures, gloo::rendezvous::Store& store,
                                           int rank);

}  // namespace shardlab
