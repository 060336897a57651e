// What one rank runs, the same for a training run (core/run/runner.cpp) and a
// meta run (core/predict/meta_memory.cpp): its resources made from the
// placement, then its strategy's setup, its steps and the export of the final
// weights. A prediction runs this body itself, so it cannot drift from it.
#pragma once
#include <array>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/device/device.h"
#include "core/device/memory.h"
#include "core/mesh.h"
#include "core/parallel/strategy.h"

namespace shardlab {

// This rank's device, allocator and communicator: made from the placement by
// the runner (a CPU, a guarded CPU or a GPU; Gloo, staged Gloo or NCCL) or by
// the meta run (a meta device standing for that one, a meta communicator).
struct RankResources {
  std::unique_ptr<DeviceBackend> device;
  std::unique_ptr<Allocator> alloc;
  std::unique_ptr<Comm> comm;
  // A mesh's axes whose groups are smaller than the world: one communicator
  // each (by MeshAxis), closed before the world's.
  std::array<std::unique_ptr<Comm>, std::size(kMeshAxes)> axis_comms;

  // The axis communicators as a rank's env holds them.
  std::array<Comm*, std::size(kMeshAxes)> axis_comm_ptrs() const;
  // Every communicator's counters added up.
  CommStats comm_stats() const;

  // In the order they were made, backwards: the communicator closes (peers
  // blocked on this rank fail fast), work still on the device finishes (its
  // device-timed spans reach the recorder), then the allocator and the device
  // go. The strategy's tensors must be gone first.
  void release();
  ~RankResources() { release(); }
};

// What the caller adds around the body's steps. Every hook may be empty, and
// may throw to stop the rank.
struct RankSteps {
  int first = 0;                         // the first step (after a checkpoint, when resuming)
  int end = 0;                           // one past the last
  std::function<void()> after_setup;     // e.g. restore a checkpoint's state
  std::function<void(int step)> before;  // before the step begins (gates, checks)
  // After the step and its device work: this rank's share of the loss and the
  // step's wall time on this rank.
  std::function<void(int step, const LossShare& share, double ms)> after;
};

// What the body leaves for the caller's report.
struct RankTotals {
  double bytes_sent_per_step = 0;  // the communicator's and the strategy's own copies
  // Of those, what each mesh axis's group carried (by MeshAxis): an axis that
  // spans the world is the world's communicator. The rest of the total went
  // over the world beside a mesh's axes, or as the strategy's own copies.
  SentByAxis sent_by_axis_per_step{};
  MemStats at_report;         // the allocator after the steps, before the export
  std::vector<float> params;  // the export: the full flat weights on rank 0
};

// Setup, the steps [first, end), the export. `phase` names where the rank is,
// for a message about a failure outside the allocator ("setup", "step 3", ...).
RankTotals run_rank_body(RankEnv& env, Strategy& strategy, const ParamSource& init,
                         const RankSteps& steps, std::string& phase);

}  // namespace shardlab
