// `shardlab bench step`: median step time of strategies side by side in one
// process, in interleaved rounds so machine noise hits every row alike.
#include <cstdio>
#include <string>
#include <vector>

#include "app/args.h"
#include "app/commands.h"
#include "core/comm/cores.h"
#include "core/parallel/strategy.h"
#include "core/predict/memory_estimate.h"
#include "core/run/runner.h"

namespace shardlab::app {

int bench_step(int argc, char** argv) {
  const Args a(argc, argv, "bench step", {"models", "steps", "rounds", "world"}, {"force"});
  if (a.help()) {
    std::printf(
        "usage: shardlab bench step [--models mlp:8x256,mlp:8x1024] [--world 2] [--steps 10] "
        "[--rounds 3] [--force]\n\n"
        "Median step time of single vs ddp (overlap on/off, recording on/off) per model.\n"
        "Rows run in interleaved rounds; ratios are against single on the same model.\n"
        "--force: run rows the memory check says will not fit (see 'shardlab run --help').\n");
    return 0;
  }
  std::vector<std::string> models;
  {
    std::string s = a.str("models", "mlp:8x256,mlp:8x1024");
    size_t pos = 0;
    while (pos <= s.size()) {
      const size_t comma = s.find(',', pos);
      models.push_back(s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  const int steps = a.integer("steps", 10), rounds = a.integer("rounds", 3),
            world = a.integer("world", 2);
  // Each round runs every row again: beyond 1000 a typo, not a benchmark.
  if (rounds < 1 || rounds > 1000)
    throw ConfigError("--rounds " + std::to_string(rounds) + " is invalid (valid: 1 to 1000)");

  struct Row {
    std::string label;
    RunConfig cfg;
    std::vector<double> step_ms;
  };
  std::vector<Row> rows;
  for (const std::string& m : models) {
    RunConfig base;
    base.model = m;
    base.steps = steps;
    base.batch = 64;
    base.force = a.has("force");
    RunConfig single = base, ddp = base, no_overlap = base, no_record = base;
    single.strategy = "single";
    single.world = 1;
    ddp.world = no_overlap.world = no_record.world = world;
    no_overlap.overlap = false;
    no_record.record = false;
    rows.push_back({"single", single, {}});
    rows.push_back({"ddp", ddp, {}});
    rows.push_back({"ddp --no-overlap", no_overlap, {}});
    rows.push_back({"ddp --no-record", no_record, {}});
  }
  for (Row& r : rows) {  // every row is checked before any runs, its memory too
    validate(r.cfg);
    check_memory(r.cfg);
  }
  for (int round = 0; round < rounds; ++round)
    for (Row& r : rows) {
      const RunResult res = run_training(r.cfg);
      // The first step pays for first-touch page faults and warm-up: leave it out.
      r.step_ms.insert(r.step_ms.end(), res.step_ms.begin() + (res.step_ms.size() > 1),
                       res.step_ms.end());
    }

  std::printf("%-12s %-18s %5s %14s %10s\n", "model", "run", "world", "median step", "vs single");
  double single_ms = 0;
  for (const Row& r : rows) {
    const double ms = median(r.step_ms);
    if (is_reference_strategy(r.cfg.strategy)) single_ms = ms;
    std::printf("%-12s %-18s %5d %11.3f ms %9.2fx\n", r.cfg.model.c_str(), r.label.c_str(),
                r.cfg.world, ms, ms / single_ms);
  }
  std::printf("(%d rounds x %d steps per row, batch 64, AdamW; ranks are threads on %d cores)\n",
              rounds, steps, cores_available());
  const std::string note = oversubscription_note(world, cores_available());
  if (!note.empty()) std::printf("note: %s\n", note.c_str());
  return 0;
}

}  // namespace shardlab::app
