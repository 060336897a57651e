// core/comm/nccl_group.h for a build without CUDA (SHARDLAB_CUDA=OFF, or no
// nvcc/NCCL found): asking for NCCL says how to get a CUDA build.
#include <stdexcept>

#include "core/comm/nccl_group.h"
#include "core/device/gpu.h"

namespace shardlab {

std::unique_ptr<NcclGroup> make_nccl_group(int, std::chrono::milliseconds, FailureBoard&) {
  throw std::runtime_error("NCCL requested, but " + cuda_status());
}
std::unique_ptr<NcclGroup> make_nccl_group(int, std::chrono::milliseconds, FailureBoard&,
                                           gloo::rendezvous::Store&, int) {
  throw std::runtime_error("NCCL requested, but " + cuda_status());
}

}  // namespace shardlab
