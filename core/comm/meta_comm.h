// The meta communicator: a Comm whose every operation completes when it is
// waited on (nothing moves), but which counts the bytes Gloo would send and
// allocates the scratch Gloo would allocate, so a meta run's CommStats and
// allocator peaks are the real run's.
#pragma once
#include <memory>

#include "core/comm/comm.h"
#include "core/device/meta_backend.h"

namespace shardlab {

// Where GlooComm's scratch (gloo_comm.cpp's Scratch) lands on the device a run
// stands for.
enum class ScratchPlacement {
  device,            // a plain CPU: the host reads device memory
  host,              // beside a GPU: known up front
  device_then_host,  // the guarded CPU: made in the device pool, found closed to the
                     // host, made again in the host pool (both held for a moment)
};

// `alloc` (may be null) takes the scratch blocks Gloo's ring reduce-scatter and
// non-root reduce keep. For ranks that stage through the host (cuda ranks
// sharing Gloo, the guarded CPU), wrap it in make_staging_comm as the real run does.
// `recorder` (may be null) gets each op's issue, wait and span, as from GlooComm;
// `log` (may be null) each op's issue and wait, in program order. `group`: which
// of the run's ranks the comm's are (a mesh axis's group); empty: the world.
std::unique_ptr<Comm> make_meta_comm(int rank, int world, Allocator* alloc,
                                     ScratchPlacement scratch, Recorder* recorder = nullptr,
                                     OpLog* log = nullptr, const CommGroup& group = {});

}  // namespace shardlab
