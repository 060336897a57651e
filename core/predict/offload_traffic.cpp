// The offload file's traffic by formula and from spans (offload_traffic.h).
#include "core/predict/offload_traffic.h"

#include <algorithm>

#include "core/model/model.h"
#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"
#include "core/run_options.h"

namespace shardlab {

std::optional<double> predict_disk_state_bytes(const RunConfig& cfg, int rank) {
  if (!option_in_effect(cfg, StrategyOption::offload) || nvme_offload_dir(cfg).empty() ||
      !cfg.mesh.empty())
    return std::nullopt;
  const int floats =
      (cfg.optimizer.kind == OptimizerKind::adamw ? 2 : 0) + (cfg.precision != "fp32" ? 1 : 0);
  // A flat group per layer (zero3), or units of --fsdp-unit layers (fsdp).
  const int per_group =
      strategy_info(cfg.strategy).reads_option(StrategyOption::fsdp_unit) ? cfg.fsdp_unit : 1;
  double bytes = 0;
  for (const FlatGroup& g : make_flat_groups(make_layout(cfg), per_group, cfg.world)) {
    (void)rank;  // every rank's shard of a group is the same size (padded)
    bytes += static_cast<double>(g.plan.shard) * floats * sizeof(float);
  }
  return bytes;
}

double disk_bytes_per_step(const std::vector<Span>& spans, int steps, SpanKind kind) {
  int64_t bytes = 0;
  for (const Span& s : spans)
    if (s.kind == kind && s.step >= 0) bytes += s.bytes;
  return static_cast<double>(bytes) / std::max(1, steps);
}

}  // namespace shardlab
