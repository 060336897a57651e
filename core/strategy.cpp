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

namespace {
// Strategies whose layers are LayerStacks that keep BatchNorm's buffers and see
// whole (micro-)batches: single, and the pipelines, where the statistics are
// per micro-batch. The data-parallel family would need per-rank statistics and
// DDP's buffer broadcast (or SyncBatchNorm) in each of its files: not yet.
constexpr const char* kBatchNormStrategies[] = {"single", "naive-mp", "gpipe", "1f1b"};
}  // namespace

void require_batchnorm_support(const RunConfig& cfg) {
  const ModelSpec spec = ModelSpec::parse(cfg.model);
  if (!spec.batchnorm) return;
  std::string supported;
  bool ok = false;
  for (const char* name : kBatchNormStrategies) {
    supported += (supported.empty() ? "" : ", ") + std::string(name);
    ok |= cfg.strategy == name;
  }
  const std::string what = "--model " + cfg.model + ": ";
  if (!ok)
    throw ConfigError(what + cfg.strategy +
                      " does not support BatchNorm yet (supported by: " + supported + ")");
  if (cfg.precision != "fp32")
    throw ConfigError(what + "--precision " + cfg.precision +
                      " does not support BatchNorm yet (valid: fp32)");
  if (cfg.batch < 2)
    throw ConfigError(what + "--batch " + std::to_string(cfg.batch) +
                      " gives BatchNorm1d one row (valid: 2 or more, as PyTorch's BatchNorm1d "
                      "needs in training)");
}

void validate(const RunConfig& cfg) {
  const StrategyInfo* info = find_strategy(cfg.strategy);
  if (!info)
    throw ConfigError("unknown strategy '" + cfg.strategy + "' (valid: " + strategy_names() + ")");
  validate_common(cfg);
  require_batchnorm_support(cfg);
  if (info->validate) info->validate(cfg);
}

}  // namespace shardlab
