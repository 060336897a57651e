// A parameter server's traffic by formula, and staleness per step (server_traffic.h).
#include "core/predict/server_traffic.h"

#include <algorithm>

#include "core/model/model.h"
#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"

namespace shardlab {

std::optional<ServerTraffic> predict_server_traffic(const RunConfig& cfg) {
  const StrategyInfo& info = strategy_info(cfg.strategy);
  const int S = info.server_ranks(cfg);
  if (S <= 0) return std::nullopt;
  const ModelLayout layout = make_layout(cfg);
  const double bytes = cfg.precision == "fp32" ? 4 : 2;
  ServerTraffic t;
  t.servers = S;
  t.workers = std::max(1, cfg.world - S);
  const ShardPlan plan(layout.total(), S);
  t.shard_bytes = static_cast<double>(plan.shard) * bytes;
  t.model_bytes = static_cast<double>(plan.padded()) * bytes;
  t.server_in = t.server_out = t.workers * t.shard_bytes;
  t.worker_in = t.worker_out = t.model_bytes;
  const double W = t.workers;
  t.all_reduce_per_rank = 2 * (W - 1) / W * static_cast<double>(layout.total()) * bytes;
  return t;
}

void note_staleness(std::vector<int>& by_step, const Span& s) {
  if (s.step < 0 || s.staleness < 0) return;
  if (by_step.size() <= static_cast<size_t>(s.step)) by_step.resize(s.step + 1, -1);
  by_step[s.step] = std::max(by_step[s.step], s.staleness);
}

}  // namespace shardlab
