// Cores available to this process, and the oversubscription note (see cores.h).
#include "core/comm/cores.h"

#include <sched.h>

#include <thread>

#include "core/comm/placement.h"

namespace shardlab {

int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();  // 0 when unknown
  return hw > 0 ? static_cast<int>(hw) : 1;
}

std::string oversubscription_short(int ranks, int cores) {
  if (ranks <= cores) return "";
  return std::to_string(ranks) + " ranks on " + std::to_string(cores) + " core" +
         (cores == 1 ? "" : "s") + ": timings stretched";
}

std::string oversubscription_note(int ranks, int cores) {
  if (ranks <= cores) return "";
  return std::to_string(ranks) + " ranks on " + std::to_string(cores) + " core" +
         (cores == 1 ? "" : "s") +
         ": ranks take turns on the cores, so step times and compute spans are stretched and "
         "waits grow; compare timings at world \xE2\x89\xA4 " +
         std::to_string(cores) + " here";
}

std::string oversubscription_note(const RunConfig& cfg, int cores, bool short_form) {
  try {
    if (plan_placement(cfg).kind != DeviceKind::cpu) return "";
  } catch (const ConfigError&) {
    return "";
  }
  return short_form ? oversubscription_short(cfg.world, cores)
                    : oversubscription_note(cfg.world, cores);
}

}  // namespace shardlab
