// Validation shared by every strategy.
#include "core/config.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/model.h"
#include "core/placement.h"

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

std::string effective_attention(const RunConfig& cfg) {
  if (cfg.attention.empty()) return places_on_cuda(cfg) ? "flash" : "naive";
  if (cfg.attention != "naive" && cfg.attention != "flash")
    throw ConfigError("--attention '" + cfg.attention + "' is invalid (valid: " + kAttentionValues +
                      ")");
  return cfg.attention;
}

RunConfig resolve_defaults(const RunConfig& cfg) {
  RunConfig c = cfg;
  try {
    if (c.attention.empty() && resolve_model(cfg).family == "gpt")
      c.attention = effective_attention(cfg);
  } catch (const ConfigError&) {
    return cfg;
  }
  return c;
}

void validate_common(const RunConfig& cfg, int max_world) {
  resolve_model(cfg);  // the model's name, and what the run adds to it (gpt: --seq, --data)
  validate_sizes(cfg, max_world);
  plan_placement(cfg);  // --device and --backend against this machine's GPUs
  if (cfg.precision != "fp32" && cfg.precision != "bf16" && cfg.precision != "fp16")
    throw ConfigError("--precision '" + cfg.precision + "' is invalid (valid: fp32, bf16, fp16)");
  if (cfg.timeout_ms < 1)
    throw ConfigError("--timeout-ms " + std::to_string(cfg.timeout_ms) +
                      " is invalid (valid: 1 or more)");
  // The cap becomes a byte count (size_t): 1 TiB is far beyond any model here
  // and keeps that conversion defined.
  if (!(cfg.bucket_mb > 0) || !(cfg.bucket_mb <= 1048576))
    throw ConfigError("--bucket-mb " + number(cfg.bucket_mb) +
                      " is invalid (valid: a positive number of MiB up to 1048576, e.g. 25)");
}

}  // namespace shardlab
