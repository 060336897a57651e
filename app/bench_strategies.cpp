// `shardlab bench strategies`: every strategy on one model and device, side by
// side: median step time, peak memory per rank from the allocator, bytes sent
// per step. The table scripts/gpu-check.sh prints on a GPU machine.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "app/args.h"
#include "app/commands.h"
#include "app/summary.h"
#include "core/comm/cores.h"
#include "core/comm/placement.h"
#include "core/parallel/strategy.h"
#include "core/predict/memory_estimate.h"
#include "core/predict/projection.h"
#include "core/run/runner.h"

namespace shardlab::app {

int bench_strategies(int argc, char** argv) {
  const Args a(argc, argv, "bench strategies",
               {"model", "world", "workers", "steps", "rounds", "device", "backend", "precision",
                "batch", "strategies", "seq", "data", "link"},
               {"force"});
  if (a.help()) {
    std::printf(
        "usage: shardlab bench strategies [--model mlp:8x1024] [--world 2] [--steps 10]\n"
        "                                 [--rounds 2] [--device cpu] [--backend auto]\n"
        "                                 [--precision fp32] [--batch 64] [--strategies a,b,..]\n"
        "                                 [--seq T] [--data FILE] [--force]\n"
        "                                 [--workers W1,W2,..] [--link L]\n\n"
        "Every strategy (default: all) on one model and device. Pipeline strategies run\n"
        "--world stages with 4 micro-batches (naive-mp: 1), in fp32 whatever --precision\n"
        "says. Rows run in interleaved rounds;\n"
        "step time = median over steps 1.. of the slowest rank; memory = the largest peak\n"
        "of any rank, measured by the allocator (device pool); sent = bytes per step of the\n"
        "rank that sends most (a parameter server's server).\n"
        "--workers: every strategy at each number of computing ranks in turn, in place of\n"
        "--world: ps gets its servers on top (world W + 1), the others world W; the\n"
        "server's bytes grow with W while an all-reduce rank's stay under 2 model sizes.\n"
        "--link L: also each row's run projected onto dedicated devices joined by link L\n"
        "(see 'shardlab project --help'; e.g. eth100): the median projected step, where a\n"
        "port carries one transfer at a time, so a server's port saturates as W grows.\n"
        "--seq, --data: a gpt model's context and text (see 'shardlab run --help').\n"
        "--force: run rows the memory check says will not fit (see 'shardlab run --help').\n");
    return 0;
  }
  RunConfig base;
  base.model = a.str("model", "mlp:8x1024");
  if (a.has("seq")) {
    base.seq = a.integer("seq", 0, "1 to 4096");
    if (base.seq < 1 || base.seq > 4096)
      throw ConfigError("--seq " + std::to_string(base.seq) + " is invalid (valid: 1 to 4096)");
  }
  base.data = a.str("data", "");
  base.world = a.integer("world", 2);
  base.steps = a.integer("steps", 10);
  base.batch = a.integer("batch", 64);
  base.force = a.has("force");
  base.device = a.str("device", "cpu");
  base.backend = a.str("backend", "auto");
  base.precision = a.str("precision", "fp32");
  const int rounds = a.integer("rounds", 2);
  // --link: each run replayed on dedicated devices (core/predict/projection.h).
  std::optional<Link> link;
  if (a.has("link")) link = parse_link(a.str("link", ""));
  // Each round runs every row again: beyond 1000 a typo, not a benchmark.
  if (rounds < 1 || rounds > 1000)
    throw ConfigError("--rounds " + std::to_string(rounds) + " is invalid (valid: 1 to 1000)");
  if (base.steps < 2)
    throw ConfigError("--steps " + std::to_string(base.steps) + " is invalid (valid: 2 or more)");

  // --workers: the computing ranks of each row set (default: --world's ranks).
  std::vector<int> workers;
  if (a.has("workers")) {
    const std::string list = a.str("workers", "");
    workers = parse_int_list(list, "--workers");
    for (int w : workers)
      if (w < 1 || w > kMaxRunWorld - 1)
        throw ConfigError("--workers '" + list + "' is invalid (valid: a comma-separated list of " +
                          "1 to " + std::to_string(kMaxRunWorld - 1) + ", e.g. 2,4,8)");
  }

  std::vector<std::string> names;
  if (a.has("strategies")) {
    const std::string list = a.str("strategies", "");
    size_t pos = 0;
    while (true) {
      const size_t comma = list.find(',', pos);
      names.push_back(
          list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  } else {
    // The reference first: the other rows are read against it.
    for (const bool reference : {true, false})
      for (const StrategyInfo& info : all_strategies())
        if (info.is_reference() == reference) names.push_back(info.name);
  }

  struct Row {
    RunConfig cfg;
    std::vector<double> step_ms;
    std::vector<double> projected_ms;  // --link: per round, the projected median step
    int64_t peak = 0;
    double sent = 0;
    std::string placement;
  };
  std::vector<Row> rows;
  for (const std::string& n : names)
    if (!find_strategy(n))
      throw ConfigError("--strategies: '" + n + "' is not a strategy (valid: " + strategy_names() +
                        ")");
  for (const int w : workers.empty() ? std::vector<int>{0} : workers)
    for (const std::string& n : names) {
      // Each row sets only what its strategy reads: a pipeline runs fp32 whatever
      // --precision says (its row says so), naive-mp has no micro-batches.
      const StrategyInfo& info = strategy_info(n);
      RunConfig c = for_strategy(base, n);
      if (w > 0) c.world = w + info.server_ranks(c);  // the servers on top of W workers
      c.world = info.world_for(c.world);
      if (info.reads_option(StrategyOption::micro_batches)) c.micro_batches = 4;
      if (info.reads_option(StrategyOption::stages)) c.stages = c.world;
      validate(c);  // every row is checked before any runs, its memory too
      check_memory(c);
      rows.push_back({c, {}, {}, 0, 0, ""});
    }

  for (int round = 0; round < rounds; ++round) {
    for (Row& row : rows) {
      const RunResult r = run_training(row.cfg);
      // Step 0 warms caches (and on a GPU loads kernels): left out.
      row.step_ms.insert(row.step_ms.end(), r.step_ms.begin() + 1, r.step_ms.end());
      for (const RankReport& rr : r.ranks) {
        row.peak = std::max(row.peak, rr.memory.device.peak_total);
        row.sent = std::max(row.sent, rr.bytes_sent_per_step);
      }
      row.placement = r.placement.summary;
      if (link) {
        ProjectionOptions po;
        po.devices = r.cfg.world;
        po.link = *link;
        row.projected_ms.push_back(project(r, po).median_step_ms);
      }
    }
  }

  std::printf("bench strategies: %s, batch %d, %s, %d steps x %d rounds\n", base.model.c_str(),
              base.batch, base.precision.c_str(), base.steps, rounds);
  if (!rows.empty())
    std::printf("placement (world %d): %s\n", rows.back().cfg.world, rows.back().placement.c_str());
  int widest = base.world;
  for (const Row& row : rows) widest = std::max(widest, row.cfg.world);
  if (plan_placement(base).kind == DeviceKind::cpu) {
    const std::string note = oversubscription_note(widest, cores_available());
    if (!note.empty()) std::printf("note: %s\n", note.c_str());
  }
  if (link)
    std::printf(
        "projected step: each run replayed on its world of dedicated devices over %s "
        "(each op's CPU time here; a port carries one transfer at a time)\n",
        link->name.c_str());
  std::printf("%-14s %6s %14s %10s %16s %18s%s\n", "strategy", "world", "median step", "vs single",
              "peak mem/rank", "sent/step busiest", link ? "   projected step" : "");
  double single_ms = 0;
  for (const Row& row : rows)
    if (is_reference_strategy(row.cfg.strategy)) single_ms = median(row.step_ms);
  for (const Row& row : rows) {
    const double ms = median(row.step_ms);
    char ratio[32] = "-";
    if (single_ms > 0) std::snprintf(ratio, sizeof ratio, "%.2f", ms / single_ms);
    // A row that could not take --precision says what it ran in.
    const std::string label =
        row.cfg.strategy + (row.cfg.precision != base.precision ? " " + row.cfg.precision : "");
    std::printf("%-14s %6d %11.3f ms %10s %16s %18s", label.c_str(), row.cfg.world, ms, ratio,
                human_bytes(static_cast<double>(row.peak)).c_str(), human_bytes(row.sent).c_str());
    if (link) std::printf(" %14.3f ms", median(row.projected_ms));
    std::printf("\n");
  }
  return 0;
}

}  // namespace shardlab::app
