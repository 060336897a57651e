// Run settings from `shardlab run`'s options (see config_args.h).
#include "app/config_args.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "app/args.h"
#include "core/mesh.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/strategy.h"
#include "core/run_options.h"

namespace shardlab::app {

std::set<std::string> option_flags(bool with_value) {
  std::set<std::string> out;
  for (const OptionRow& r : option_rows()) {
    const bool flag = r.kind == OptionKind::on_flag || r.kind == OptionKind::off_flag;
    if (flag != with_value) out.insert(r.flag + 2);  // without the leading "--"
  }
  return out;
}

std::string strategy_option_help() {
  constexpr size_t kColumn = 22;  // where the other options' texts begin
  std::string out;
  for (const OptionRow& r : option_rows()) {
    std::string head = std::string("  ") + r.flag + (r.metavar ? std::string(" ") + r.metavar : "");
    head += head.size() + 2 <= kColumn ? std::string(kColumn - head.size(), ' ') : "  ";
    std::string readers = r.help_names_readers ? strategies_reading(r.id) : "";
    for (size_t at = readers.find(", "); at != std::string::npos; at = readers.find(", ", at))
      readers.replace(at, 2, "/");
    std::string text = (readers.empty() ? "" : readers + ": ") + r.help;
    for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1))
      text.insert(at + 1, std::string(kColumn, ' '));
    out += head + text + "\n";
  }
  return out;
}

const std::set<std::string>& run_options() {
  static const std::set<std::string> options = [] {
    std::set<std::string> o = {"model",     "strategy",   "world",     "batch",      "steps",
                               "optimizer", "lr",         "seed",      "timeout-ms", "trace",
                               "save-init", "save-final", "init-from", "save-data",  "device",
                               "backend",   "record",     "seq",       "data",       "attention"};
    o.merge(option_flags(true));
    return o;
  }();
  return options;
}

const std::set<std::string>& run_flags() {
  static const std::set<std::string> flags = [] {
    std::set<std::string> f = {"no-record", "json", "force", "allow-nonfinite", "tf32"};
    f.merge(option_flags(false));
    return f;
  }();
  return flags;
}

OptimizerKind optimizer_kind_from(const Args& a) {
  const std::string opt = a.str("optimizer", "adamw");
  if (opt == "adamw") return OptimizerKind::adamw;
  if (opt == "sgd") return OptimizerKind::sgd;
  throw ConfigError("unknown optimizer '" + opt + "' (valid: adamw, sgd)");
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
  c.optimizer.kind = optimizer_kind_from(a);
  const double lr = a.number("lr", c.optimizer.lr, "a positive number, e.g. 1e-3");
  // The optimizer keeps lr as a float: 1e39 would become inf, not what was typed.
  if (std::abs(lr) > std::numeric_limits<float>::max())
    throw ConfigError("--lr " + a.str("lr", "") +
                      " is out of range (valid: a positive number below 3.4e38, e.g. 1e-3)");
  c.optimizer.lr = static_cast<float>(lr);
  c.seed = a.u64("seed", c.seed);
  c.timeout_ms = a.integer("timeout-ms", c.timeout_ms, "1 or more");
  c.record = !a.has("no-record");
  c.force = a.has("force");
  c.tf32 = a.has("tf32");
  c.device = a.str("device", c.device);
  c.backend = a.str("backend", c.backend);
  // The strategy options, each as its row says it is typed (core/run_options.h).
  for (const OptionRow& r : option_rows()) {
    const std::string key = r.flag + 2;  // without the leading "--"
    switch (r.kind) {
      case OptionKind::integer:
        c.*r.integer = a.integer(key, c.*r.integer, r.valid);
        break;
      case OptionKind::number:
        c.*r.number = a.number(key, c.*r.number, r.valid);
        break;
      case OptionKind::on_flag:
        c.*r.boolean = a.has(key);
        if (r.flag_value)
          if (auto v = a.flag_value(key)) c.*r.flag_value = parse_offload_value(*v);
        break;
      case OptionKind::off_flag:
        c.*r.boolean = !a.has(key);
        break;
      case OptionKind::choice:
      case OptionKind::text:
        c.*r.text = a.str(key, c.*r.text);  // validate() names the valid values
        break;
      case OptionKind::int_list:
        if (auto v = a.get(key); v && *v != "cost") c.*r.list = parse_int_list(*v, r.flag);
        break;
    }
  }
  // A mesh names its ranks: without --world, the world is the axes' product
  // (a bad --mesh is left for validate() to name).
  if (a.has("mesh") && !a.has("world")) {
    try {
      c.world = parse_mesh(c.mesh, c.mesh_order).world();
    } catch (const ConfigError&) {
    }
  }
  const std::string stages_valid = "--stages " + std::to_string(c.world) +
                                   ", one stage per rank of --world " + std::to_string(c.world) +
                                   ", or leave it out";
  // RunConfig's 0 means "not given: one stage per rank"; typed, it is no stage count.
  if (a.has("stages") && c.stages < 1)
    throw ConfigError("--stages " + std::to_string(c.stages) +
                      " is invalid (valid: " + stages_valid + ")");
  // Likewise --virtual-stages: 0 is "not given: 2"; typed, interleaving takes 2 or more.
  if (a.has("virtual-stages") && c.virtual_stages < 2)
    throw ConfigError("--virtual-stages " + std::to_string(c.virtual_stages) +
                      " is invalid (valid: 2 or more model chunks per rank, or leave it out: 2)");
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
