// The offload file's traffic by formula (offload_traffic.h).
#include "core/predict/offload_traffic.h"

#include "core/model/model.h"
#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"
#include "core/run_options.h"

namespace shardlab {

std::optional<DiskTraffic> predict_disk_traffic(const RunConfig& cfg, int rank) {
  if (!option_in_effect(cfg, StrategyOption::offload) || nvme_offload_dir(cfg).empty() ||
      !cfg.mesh.empty())
    return std::nullopt;
  const bool mixed = cfg.precision != "fp32";
  const double state_per_param =
      ((cfg.optimizer.kind == OptimizerKind::adamw ? 2 : 0) + (mixed ? 1 : 0)) * sizeof(float);
  const bool params = option_in_effect(cfg, StrategyOption::offload_params);
  const double param_bytes = mixed ? 2 : 4;
  const int gathers = cfg.reshard_after_forward ? 2 : 1;  // zero3 always reshards
  // A flat group per layer (zero3), or units of --fsdp-unit layers (fsdp).
  const int per_group =
      strategy_info(cfg.strategy).reads_option(StrategyOption::fsdp_unit) ? cfg.fsdp_unit : 1;
  DiskTraffic t;
  (void)rank;  // every rank's shard of a group is the same size (padded)
  for (const FlatGroup& g : make_flat_groups(make_layout(cfg), per_group, cfg.world)) {
    const double shard = static_cast<double>(g.plan.shard);
    t.held += shard * state_per_param;
    t.read += shard * state_per_param;
    t.written += shard * state_per_param;
    if (!params) continue;
    t.held += shard * param_bytes;
    t.read += shard * param_bytes * (gathers + (mixed ? 0 : 1));
    t.written += shard * param_bytes;
  }
  return t;
}

}  // namespace shardlab
