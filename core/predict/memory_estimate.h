// The memory preflight. Each rank's peak memory is predicted before anything is
// allocated by running the real strategy on meta devices that hold no memory
// (core/predict/meta_memory.h: setup, the first steps and the export, every
// allocation counted by the real allocator); to that come what the process
// holds beside the allocator (the initial weights, the data generator, the
// history and records that grow with --steps). A run that cannot fit in the
// memory available is refused in one line before it starts, unless --force.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/comm/placement.h"
#include "core/config.h"
#include "core/device/memory.h"

namespace shardlab {

// ---------------------------------------------------------------------------
// The estimate

// What a command does with a run besides training it that also takes host memory.
struct RunOutputs {
  bool caller_holds_init = false;  // the initial weights are already allocated (run_training's
                                   // `initial`): MemAvailable has counted them
  bool save_init = false;          // --save-init: a copy of the weights while writing
  bool save_final = false;         // --save-final
  bool save_data = false;          // --save-data: every batch's x and y, [steps, batch, D] each
  bool trace = false;              // --trace: every record as JSON in memory, then its text
  bool recording = false;          // --record
  bool json = false;               // --json: the losses and step times as JSON
};

struct RankMemoryEstimate {
  int rank = 0;
  MemStats at_report;           // the allocator's stats as RankReport::memory will hold them
  MemStats at_end;              // after export_params too: peak_reserved is what the rank takes
  int64_t outside = 0;          // host memory beside the allocator, peak
  int64_t record_per_step = 0;  // bytes its recorder grows by a step (0 with --no-record)
  int gpu = -1;                 // cuda: the GPU it runs on
  // What the rank takes from its device's memory (the CPU's is the host's).
  int64_t device_bytes() const { return at_end.device.peak_reserved; }
  // Of host memory: the host pool and what is beside the allocator (on a CPU
  // device, the device pool is host memory too: see MemoryEstimate::host_total).
  int64_t host_bytes() const { return at_end.host.peak_reserved + outside; }
};

struct MemoryEstimate {
  std::vector<RankMemoryEstimate> ranks;
  DeviceKind device = DeviceKind::cpu;
  // Host memory the run needs: every rank's, the shared part, and steps × per_step, once
  // when the ranks are threads of this process.
  int64_t shared = 0;       // initial weights, data generator, outputs
  int64_t per_step = 0;     // every rank's records, and the loss and step-time history
  int64_t steps_total = 0;  // steps × per_step
  // One process per rank (cfg.ranks_on_host > 0): each of this host's processes holds its
  // own baseline (the binary's private memory after start-up, measured, and what its threads
  // add), its own shared part (it makes its own weights and data) and its own history (the
  // loss shares are world-sized in every process, and every process gathers every rank's
  // records at the end). 0 when the ranks are threads.
  int processes = 0;
  int64_t process_baseline = 0;  // per process
  int64_t per_process = 0;       // process_baseline + shared + steps_total
  int64_t processes_total = 0;   // processes × per_process: in host_total instead of
                                 // shared + steps_total
  int64_t host_total = 0;
  std::map<int, int64_t> gpu_total;  // cuda: device memory each GPU needs (its ranks' sum)
  int64_t largest_rank() const;      // the most one rank takes of its device
};

// Throws ConfigError for a configuration validate() refuses.
MemoryEstimate estimate_memory(const RunConfig& cfg, const RunOutputs& outputs = {});

// What one rank process holds before its rank allocates anything: this process's private
// memory now (/proc/self/smaps_rollup's Private_Dirty; a fresh `shardlab run` at its
// preflight holds just that), plus what start-up adds after the preflight (the rank,
// watchdog and Gloo threads' stacks and malloc arenas, BLAS's packing buffer), rounded up to
// 4 MiB so that every process of a group finds the same.
int64_t process_baseline_bytes();

// How much memory there is: bytes (−1 when unknown) and where that came from
// ("MemAvailable", "cgroup memory.max", "SHARDLAB_MEMORY_LIMIT", "cudaMemGetInfo").
struct MemoryLimit {
  int64_t bytes = -1;
  std::string source;
};
// SHARDLAB_MEMORY_LIMIT (bytes, or with K, M, G, T: "8G") when set — tests and
// anyone who wants to leave room — else MemAvailable, lowered to what the
// process's cgroup limit leaves. Throws ConfigError for a bad variable.
MemoryLimit host_memory_limit();
// Free memory on GPU `gpu` (SHARDLAB_MEMORY_LIMIT when set); bytes −1 without CUDA.
MemoryLimit gpu_memory_limit(int gpu);
// Parses SHARDLAB_MEMORY_LIMIT's format: "1073741824", "512M", "1.5G"; −1 when invalid.
int64_t parse_memory_size(const std::string& text);

// A run the preflight refused: bad input for this machine (exit 2, as ConfigError).
class MemoryRefused : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// The preflight: nothing happens unless the estimate is over the limit and
// cfg.force is not set; then throws MemoryRefused, one line: "mlp:16x16384,
// ddp, world 2 needs about 33.10 GiB per rank (66.20 GiB in all) but 21.30 GiB
// is available (MemAvailable); use a smaller model, batch or world, or --force
// to try anyway".
void check_memory(const RunConfig& cfg, const RunOutputs& outputs = {});

}  // namespace shardlab
