// RunConfig's own checks: the sizes any run needs, before the model or this
// machine is asked (validate_common, in core/parallel/strategy.cpp, asks them).
#include "core/config.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace shardlab {

const char* to_string(OptimizerKind k) {
  return k == OptimizerKind::sgd ? "sgd" : "adamw";
}

namespace {
// Numbers in messages as the user would type them: 0.001, not 0.001000.
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

void validate_sizes(const RunConfig& cfg, int max_world) {
  if (cfg.world < 1 || cfg.world > max_world)
    throw ConfigError("--world " + std::to_string(cfg.world) + " is invalid (valid: 1 to " +
                      std::to_string(max_world) + ")");
  if (cfg.batch < 1)
    throw ConfigError("--batch " + std::to_string(cfg.batch) +
                      " is invalid (valid: a positive integer)");
  if (cfg.steps <= 0)
    throw ConfigError("--steps " + std::to_string(cfg.steps) + " is invalid (valid: 1 or more)");
  if (!(cfg.optimizer.lr > 0) || !std::isfinite(cfg.optimizer.lr))
    throw ConfigError("--lr " + number(cfg.optimizer.lr) +
                      " is invalid (valid: a positive number, e.g. 1e-3)");
}

}  // namespace shardlab
