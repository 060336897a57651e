// The meta communicator: a Comm whose every operation completes when it is
// waited on (nothing moves), but which counts the bytes Gloo would send and
// allocates the scratch Gloo would allocate, so a meta run's CommStats and
// allocator peaks are the real run's.
#pragma once
#include <memory>

#include "core/comm.h"

namespace shardlab {

// `alloc` (may be null) takes the scratch blocks Gloo's ring reduce-scatter and
// non-root reduce keep, in `scratch_pool`: Gloo's choice on the device the run
// stands for (host beside a GPU or the guarded CPU, device on a plain CPU).
// For cuda ranks sharing Gloo, wrap it in make_staging_comm as the real run does.
std::unique_ptr<Comm> make_meta_comm(int rank, int world, Allocator* alloc, Pool scratch_pool);

}  // namespace shardlab
