// What the rest of Shardlab knows about GPUs: how many there are and a CUDA
// device backend per rank (the NCCL communicators: core/comm/nccl_group.h). With
// SHARDLAB_CUDA off, or on a machine without a usable driver, there are zero GPUs
// and the constructors throw one clear line.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/device/device.h"

namespace shardlab {

class Recorder;

// True when this binary was built with the CUDA backend.
bool cuda_compiled();
// Number of usable GPUs; 0 when CUDA is not compiled in or any CUDA call fails
// (no driver, insufficient driver, no device).
int cuda_device_count();
// One line on why there are no GPUs ("built without CUDA", "cudaGetDeviceCount: ..."),
// or the GPU's name when there is one.
std::string cuda_status();
// Free and total memory of GPU `index` (cudaMemGetInfo; the calling thread's
// current GPU is left as it was). False when there is no such GPU or the call fails.
bool cuda_memory_info(int index, int64_t* free_bytes, int64_t* total_bytes);

// A CUDA device backend on GPU `index`. Call on the rank's own thread: it makes
// `index` current for that thread. With a recorder, compute spans are timed by
// CUDA events (the recorder's DeviceClock) for the backend's lifetime. tf32: the
// model's fp32 GEMMs run on tensor cores with TF32 inputs (--tf32), not exact fp32.
std::unique_ptr<DeviceBackend> make_cuda_backend(int index, Recorder* recorder, bool tf32 = false);

}  // namespace shardlab
