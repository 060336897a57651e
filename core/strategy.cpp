// Strategy registry and full validation.
#include "core/strategy.h"

namespace shardlab {

namespace {
std::vector<StrategyInfo>& registry() {
  static std::vector<StrategyInfo> r;
  return r;
}
}  // namespace

bool register_strategy(StrategyInfo info) {
  registry().push_back(std::move(info));
  return true;
}

const std::vector<StrategyInfo>& all_strategies() {
  return registry();
}

const StrategyInfo* find_strategy(const std::string& name) {
  for (const StrategyInfo& s : registry())
    if (s.name == name) return &s;
  return nullptr;
}

std::string strategy_names() {
  std::string s;
  for (const StrategyInfo& i : registry()) s += (s.empty() ? "" : ", ") + i.name;
  return s;
}

void require_fp32(const RunConfig& cfg) {
  if (cfg.precision != "fp32")
    throw ConfigError("--precision " + cfg.precision + " is not supported by strategy " +
                      cfg.strategy + " yet (valid: fp32)");
}

void validate(const RunConfig& cfg) {
  const StrategyInfo* info = find_strategy(cfg.strategy);
  if (!info)
    throw ConfigError("unknown strategy '" + cfg.strategy + "' (valid: " + strategy_names() + ")");
  validate_common(cfg);
  if (info->validate) info->validate(cfg);
}

}  // namespace shardlab
