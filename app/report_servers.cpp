// Parameter-server report, after the common run summary (ps): bytes into and
// out of every rank per step, measured, beside the formula (W·Ψ/S each way
// through a server, Ψ through a worker) and an all-reduce's 2(W−1)/W·Ψ; and
// how stale the workers' parameters were, step by step.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "app/summary.h"
#include "core/parallel/strategy.h"
#include "core/predict/server_traffic.h"

namespace shardlab::app {

namespace {

// Bytes each rank received per step (server_traffic.h), -1 when not recorded.
std::vector<double> received_by_rank(const RunResult& r) {
  std::vector<double> out(r.ranks.size(), -1);
  for (size_t k = 0; k < r.ranks.size() && k < r.recorders.size(); ++k)
    if (r.recorders[k] && r.recorders[k]->enabled())
      out[k] = bytes_per_step(r.recorders[k]->snapshot().spans, static_cast<int>(r.step_ms.size()),
                              SpanKind::recv);
  return out;
}

// How many (worker, step) pairs computed with parameters k updates old, by k.
std::map<int, int> staleness_counts(const RunResult& r) {
  std::map<int, int> counts;
  for (const auto& rec : r.recorders) {
    if (!rec) continue;
    std::vector<int> by_step;
    for (const Span& s : rec->snapshot().spans)
      if (s.lane == Lane::compute) note_staleness(by_step, s);
    for (int k : by_step)
      if (k >= 0) ++counts[k];
  }
  return counts;
}

}  // namespace

void print_server_report(const RunResult& r) {
  const RunConfig& c = r.cfg;
  const std::optional<ServerTraffic> t = predict_server_traffic(c);
  if (!t || r.ranks.empty()) return;
  const StrategyInfo& info = strategy_info(c.strategy);
  std::printf("  parameter server: %d server%s, %d worker%s; Ψ = %s (the model in %s%s)\n",
              t->servers, t->servers > 1 ? "s" : "", t->workers, t->workers > 1 ? "s" : "",
              human_bytes(t->model_bytes).c_str(), c.precision.c_str(),
              t->servers > 1
                  ? (", padded to " + std::to_string(t->servers) + " equal shards").c_str()
                  : "");
  std::printf("    %-5s %-7s %13s %13s %13s  %s\n", "rank", "role", "received/step", "sent/step",
              "predicted", "formula (each way)");
  const std::vector<double> in = received_by_rank(r);
  for (size_t k = 0; k < r.ranks.size(); ++k) {
    const bool server = info.role(c, static_cast<int>(k)) == RankRole::server;
    std::printf("    %-5zu %-7s %13s %13s %13s  %s\n", k, server ? "server" : "worker",
                in[k] < 0 ? "not recorded" : human_bytes(in[k]).c_str(),
                human_bytes(r.ranks[k].bytes_sent_per_step).c_str(),
                human_bytes(server ? t->server_out : t->worker_out).c_str(),
                server ? "W·Ψ/S: its shard from and to every worker" : "Ψ: the whole model");
  }
  std::printf(
      "  beside all-reduce: ddp among the %d workers would send 2(W−1)/W·Ψ = %s per rank, "
      "at most 2Ψ whatever W; a server's W·Ψ/S grows with every worker added\n",
      t->workers, human_bytes(t->all_reduce_per_rank).c_str());
  const std::map<int, int> counts = staleness_counts(r);
  if (!counts.empty()) {
    std::string line;
    int total = 0;
    for (const auto& [k, n] : counts) {
      line += (line.empty() ? "" : ", ") + std::to_string(k) + ": " + std::to_string(n);
      total += n;
    }
    std::printf(
        "  staleness (updates behind its step, of %d worker steps; bound --staleness %d): %s\n",
        total, c.staleness, line.c_str());
  }
}

void server_report_json(const RunResult& r, nlohmann::json& j) {
  const std::optional<ServerTraffic> t = predict_server_traffic(r.cfg);
  if (!t || r.ranks.empty()) return;
  const StrategyInfo& info = strategy_info(r.cfg.strategy);
  const std::vector<double> in = received_by_rank(r);
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t k = 0; k < r.ranks.size(); ++k) {
    const bool server = info.role(r.cfg, static_cast<int>(k)) == RankRole::server;
    nlohmann::json row = {{"rank", k},
                          {"role", server ? "server" : "worker"},
                          {"sent_per_step", r.ranks[k].bytes_sent_per_step},
                          {"predicted_each_way", server ? t->server_out : t->worker_out}};
    if (in[k] >= 0) row["received_per_step"] = in[k];
    ranks.push_back(row);
  }
  nlohmann::json staleness = nlohmann::json::object();
  for (const auto& [k, n] : staleness_counts(r)) staleness[std::to_string(k)] = n;
  j["parameter_server"] = {{"servers", t->servers},
                           {"workers", t->workers},
                           {"model_bytes", t->model_bytes},
                           {"all_reduce_per_rank", t->all_reduce_per_rank},
                           {"ranks", ranks},
                           {"staleness_counts", staleness}};
}

}  // namespace shardlab::app
