// What a run gives back (losses, timings, memory, traffic, records, the final
// weights) and how a run fails: values apart from the runner that makes them,
// so what saves, loads or reports a run (recording.h, the reports) need not
// know how it ran.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/comm/placement.h"
#include "core/config.h"
#include "core/device/memory.h"
#include "core/mesh.h"
#include "core/record/recorder.h"

namespace shardlab {

// A run that failed at run time (a rank threw, a collective timed out).
class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The step's loss was inf or NaN: every rank stopped at once, and the message
// names the step (1-based, as the progress lines count), the rank and the
// learning rate: "loss became nan at step 2 on rank 0; try a smaller --lr (now 1e+30)".
class LossDiverged : public RunError {
 public:
  using RunError::RunError;
};

struct RankReport {
  MemStats memory;                 // peaks over the whole run
  std::vector<double> step_ms;     // this rank's wall time per step
  double bytes_sent_per_step = 0;  // wire bytes, training steps only (setup excluded)
  // Of those, what each mesh axis's group carried (by MeshAxis; see RankTotals).
  SentByAxis sent_by_axis_per_step{};
};

struct RunResult {
  RunConfig cfg;
  std::vector<double> losses;       // global loss per step
  std::vector<double> step_ms;      // per step, the slowest rank's time
  double median_step_ms = 0;        // steady_median(step_ms): the warm-up step left out
  std::vector<float> final_params;  // flat, model order
  // fp16: the steps (0-based) the loss scaler skipped, their gradients having
  // overflowed; filled by rank 0 (in its process, one process per rank).
  std::vector<int> skipped_steps;
  std::vector<RankReport> ranks;
  Placement placement;  // devices and communicator actually used
  std::vector<std::shared_ptr<Recorder>> recorders;
  int64_t t0_ns = 0;  // run start, the zero of the trace
  // One process per rank: the rank this process ran (its recorder is the only
  // one with spans, and final_params are filled on rank 0 only); -1 when every
  // rank was a thread of this process.
  int process_rank = -1;
  // One process per rank: each rank's clock minus rank 0's (ns), measured at
  // rendezvous with the round trip below (the best of several), per rank. The
  // recorders' times are already shifted onto rank 0's clock through t0_ns.
  std::vector<int64_t> clock_offset_ns;
  std::vector<int64_t> clock_rtt_ns;
  // The steps a checkpoint already held when this run resumed from it (its
  // steps before this one have losses and no times); 0 for a fresh start.
  int resumed_after_step = 0;
};

double median(std::vector<double> v);
// The median of a run's step times without its first step, unless that is the
// only one: the first is a warm-up (first-touch page faults; on a GPU, cuBLAS
// handles and module loading make it ~100x a later step) and says nothing
// about the steps after it. Every "median step" Shardlab reports is this one.
double steady_median(const std::vector<double>& step_ms);

}  // namespace shardlab
