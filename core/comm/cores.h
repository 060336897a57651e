// How many CPU cores this process may run on, and what it does to a run's
// timings when its ranks (threads of this process) outnumber them.
#pragma once
#include <string>

#include "core/config.h"

namespace shardlab {

// Cores this process may run on: the count in its CPU affinity mask
// (sched_getaffinity: what taskset, cgroups' cpusets and containers leave it),
// else std::thread::hardware_concurrency(); at least 1.
int cores_available();

// One line for the run summary when `ranks` outnumber `cores`, empty otherwise:
// "4 ranks on 2 cores: ranks take turns on the cores, so step times and compute
// spans are stretched and waits grow; compare timings at world ≤ 2 here".
std::string oversubscription_note(int ranks, int cores);
// The same in a few words, for a status line: "4 ranks on 2 cores: timings stretched".
std::string oversubscription_short(int ranks, int cores);
// The note for a configuration: empty unless its ranks compute on the CPU (GPU
// ranks' compute is timed on their devices) and outnumber `cores`, or when its
// --device is invalid (validate() says why).
std::string oversubscription_note(const RunConfig& cfg, int cores, bool short_form = false);

}  // namespace shardlab
