// core/device/gpu.h for a build without CUDA (SHARDLAB_CUDA=OFF, or no nvcc/NCCL found):
// zero GPUs, and the constructors say how to get a CUDA build.
#include <stdexcept>

#include "core/device/gpu.h"

namespace shardlab {

bool cuda_compiled() {
  return false;
}
int cuda_device_count() {
  return 0;
}
std::string cuda_status() {
  return "this build has no CUDA backend: rebuild with -DSHARDLAB_CUDA=ON where nvcc and NCCL are "
         "installed";
}
bool cuda_memory_info(int, int64_t*, int64_t*) {
  return false;
}
std::unique_ptr<DeviceBackend> make_cuda_backend(int, Recorder*, bool) {
  throw std::runtime_error("CUDA device requested, but " + cuda_status());
}
}  // namespace shardlab
