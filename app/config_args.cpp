// Run settings from `shardlab run`'s options (see config_args.h).
#include "app/config_args.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "app/args.h"
#include "core/pipeline.h"
#include "core/strategy.h"

namespace shardlab::app {

const std::set<std::string>& run_options() {
  static const std::set<std::string> options = {
      "model",     "strategy",  "world",      "batch",  "steps",         "optimizer",  "lr",
      "seed",      "bucket-mb", "timeout-ms", "trace",  "save-init",     "save-final", "init-from",
      "save-data", "precision", "fsdp-unit",  "stages", "micro-batches", "partition",  "device",
      "backend",   "record",    "seq",        "data",   "attention"};
  return options;
}

const std::set<std::string>& run_flags() {
  static const std::set<std::string> flags = {
      "no-overlap", "no-record", "json",  "no-prefetch",     "no-reshard",
      "offload",    "recompute", "force", "allow-nonfinite", "tf32"};
  return flags;
}

std::vector<int> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < -1000000 || v > 1000000)
      throw ConfigError(what + " '" + text +
                        "' is not a comma-separated list of integers (valid: e.g. 3,2,2,1)");
    out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

RunConfig config_from(const Args& a) {
  RunConfig c;
  c.model = a.str("model", c.model);
  if (a.has("seq")) {  // 0 in RunConfig means "not given": the typed value must be valid
    c.seq = a.integer("seq", c.seq, "1 to 4096");
    if (c.seq < 1 || c.seq > 4096)
      throw ConfigError("--seq " + std::to_string(c.seq) + " is invalid (valid: 1 to 4096)");
  }
  c.data = a.str("data", c.data);
  c.attention = a.str("attention", c.attention);
  c.strategy = a.str("strategy", c.strategy);
  // The ranges validate_common() and the strategies check, for values that are
  // not numbers of the option's type at all ("two", "1e300", "nan").
  c.world = a.integer("world", c.world, "1 to 64");
  c.batch = a.integer("batch", c.batch, "a positive integer");
  c.steps = a.integer("steps", c.steps, "1 or more");
  const std::string opt = a.str("optimizer", "adamw");
  if (opt == "adamw")
    c.optimizer.kind = OptimizerKind::adamw;
  else if (opt == "sgd")
    c.optimizer.kind = OptimizerKind::sgd;
  else
    throw ConfigError("unknown optimizer '" + opt + "' (valid: adamw, sgd)");
  const double lr = a.number("lr", c.optimizer.lr, "a positive number, e.g. 1e-3");
  // The optimizer keeps lr as a float: 1e39 would become inf, not what was typed.
  if (std::abs(lr) > std::numeric_limits<float>::max())
    throw ConfigError("--lr " + a.str("lr", "") +
                      " is out of range (valid: a positive number below 3.4e38, e.g. 1e-3)");
  c.optimizer.lr = static_cast<float>(lr);
  c.seed = a.u64("seed", c.seed);
  c.bucket_mb =
      a.number("bucket-mb", c.bucket_mb, "a positive number of MiB up to 1048576, e.g. 25");
  c.overlap = !a.has("no-overlap");
  c.timeout_ms = a.integer("timeout-ms", c.timeout_ms, "1 or more");
  c.record = !a.has("no-record");
  c.force = a.has("force");
  c.precision = a.str("precision", c.precision);
  c.tf32 = a.has("tf32");
  c.device = a.str("device", c.device);
  c.backend = a.str("backend", c.backend);
  c.prefetch = !a.has("no-prefetch");
  c.fsdp_unit = a.integer("fsdp-unit", c.fsdp_unit, "1 to the model's layers");
  c.reshard_after_forward = !a.has("no-reshard");
  c.offload = a.has("offload");
  const std::string stages_valid = "--stages " + std::to_string(c.world) +
                                   ", one stage per rank of --world " + std::to_string(c.world) +
                                   ", or leave it out";
  c.stages = a.integer("stages", c.stages, stages_valid);
  // RunConfig's 0 means "not given: one stage per rank"; typed, it is no stage count.
  if (a.has("stages") && c.stages < 1)
    throw ConfigError("--stages " + std::to_string(c.stages) +
                      " is invalid (valid: " + stages_valid + ")");
  c.micro_batches = a.integer("micro-batches", c.micro_batches, "1 to --batch, dividing it");
  c.recompute = a.has("recompute");
  if (auto p = a.get("partition"); p && *p != "cost")
    c.partition = parse_int_list(*p, "--partition");
  if (a.get("partition") == "cost") {
    // Balanced by each layer's measured forward + backward time, once, here:
    // the run then holds an explicit partition, the same on every rank.
    const StrategyInfo* info = find_strategy(c.strategy);
    if (!info) {
      c.partition = {1};  // validate() names the unknown strategy
    } else if (!info->reads_option(StrategyOption::partition)) {
      throw ConfigError("--partition cost: " + c.strategy +
                        " has no pipeline stages to partition; used by " +
                        strategies_reading(StrategyOption::partition));
    } else {
      RunConfig probe = c;
      validate(probe);  // the run's own errors first, before any measuring
      c.partition = balanced_partition(measure_layer_costs(probe), pipeline_stages(probe));
    }
  }
  return c;
}

}  // namespace shardlab::app
