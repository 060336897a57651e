// Where a run's ranks live and how they talk, decided once from --device and
// --backend and the GPUs this machine has: CPU ranks over Gloo, one GPU per
// rank over NCCL, or ranks sharing GPUs over Gloo with host staging.
#pragma once
#include <string>
#include <vector>

#include "core/config.h"
#include "core/device/device.h"

namespace shardlab {

enum class CommKind { gloo, gloo_staged, nccl };
const char* to_string(CommKind k);

struct Placement {
  DeviceKind kind = DeviceKind::cpu;
  bool guarded = false;          // --device cpu-guarded
  std::vector<int> gpu_of_rank;  // cuda: the GPU each rank runs on
  CommKind comm = CommKind::gloo;
  std::string device_name;  // "cpu", "cpu-guarded", "cuda" (what --device resolved to)
  std::string summary;      // one line for the run summary and the UI
};

// Throws ConfigError with one line naming the bad value and what would be valid.
Placement plan_placement(const RunConfig& cfg);
// True when --device puts the ranks on GPUs here (cuda, or auto with a usable GPU),
// without plan_placement's checks: what a device-dependent default asks.
bool places_on_cuda(const RunConfig& cfg);

// The attention a gpt run uses (kAttentionValues, config.h): as given, else flash
// where the ranks run on GPUs (--device cuda, or auto with a GPU) and naive on
// the CPU. Throws ConfigError for a value that is neither.
std::string effective_attention(const RunConfig& cfg);
}  // namespace shardlab
