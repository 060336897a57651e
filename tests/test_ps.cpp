// The parameter server (`ps`) against `single`: synchronous training ends on
// single's weights for 1 and 2 servers and 2 or 3 workers; staleness 0 is
// synchronous; staleness 2 stays within its bound and still trains; every
// server moves exactly its shard to and from every worker; bad settings are
// refused in one line.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <algorithm>
#include <filesystem>

#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"
#include "core/predict/meta_memory.h"
#include "core/predict/projection.h"
#include "core/run/runner.h"
#include "tests/run_util.h"

using namespace shardlab;
using shardlab::test::CliResult;
using shardlab::test::max_rel_diff;
using shardlab::test::run_cli;

namespace {

RunConfig ps_config(int servers, int workers, int staleness = 0) {
  // mlp:4x25 with batch 48: 650 values a layer, which 2 servers shard with
  // no padding and 3 workers split 16 rows each.
  RunConfig c = test::small_run("mlp:4x25", "ps", servers + workers, 48, 11);
  c.servers = servers;
  c.staleness = staleness;
  return c;
}

// Bytes rank `rank` received in recv spans, per step (the steps' spans only).
double received_per_step(const RunResult& r, int rank) {
  int64_t bytes = 0;
  for (const Span& s : r.recorders[rank]->snapshot().spans)
    if (s.kind == SpanKind::recv && s.step >= 0) bytes += s.bytes;
  return static_cast<double>(bytes) / r.cfg.steps;
}

}  // namespace

TEST_CASE("ps: synchronous training ends on single's weights (1-2 servers, 2-3 workers)", "[ps]") {
  for (OptimizerKind opt : {OptimizerKind::adamw, OptimizerKind::sgd}) {
    RunConfig ref_cfg = ps_config(1, 1);
    ref_cfg.strategy = "single";
    ref_cfg.world = 1;
    ref_cfg.servers = 1;  // (the default: single reads no servers)
    ref_cfg.optimizer.kind = opt;
    ref_cfg.optimizer.lr = opt == OptimizerKind::sgd ? 0.5f : 1e-2f;
    const RunResult ref = run_training(ref_cfg);
    for (int servers : {1, 2})
      for (int workers : {2, 3}) {
        RunConfig c = ps_config(servers, workers);
        c.optimizer = ref_cfg.optimizer;
        INFO(to_string(opt) << ", " << servers << " servers, " << workers << " workers");
        const RunResult r = run_training(c);
        REQUIRE(r.final_params.size() == ref.final_params.size());
        CHECK(max_rel_diff(r.final_params, ref.final_params) < 2e-5);
        for (int s = 0; s < c.steps; ++s) CHECK(r.losses[s] == Approx(ref.losses[s]).epsilon(1e-4));
        // Synchronous: every worker computed every step with fresh parameters.
        for (int w = servers; w < c.world; ++w)
          for (const Span& s : r.recorders[w]->snapshot().spans)
            if (s.step >= 0 && s.lane == Lane::compute) REQUIRE(s.staleness == 0);
      }
  }
}

TEST_CASE("ps: the gpt's tied head and bf16 train to single's weights", "[ps]") {
  RunConfig base = test::small_run("gpt:2x32x4", "single", 1, 8, 5, OptimizerKind::adamw, 5);
  base.seq = 8;
  const RunResult ref = run_training(base);
  RunConfig c = base;
  c.strategy = "ps";
  c.world = 4;
  c.servers = 2;
  const RunResult r = run_training(c);
  CHECK(max_rel_diff(r.final_params, ref.final_params) < 1e-4);
  for (int s = 0; s < c.steps; ++s) CHECK(r.losses[s] == Approx(ref.losses[s]).epsilon(1e-5));

  // bf16 against ddp's bf16: both sum 2-byte gradients and keep fp32 masters.
  RunConfig m = ps_config(1, 2);
  m.precision = "bf16";
  RunConfig d = m;
  d.strategy = "ddp";
  d.world = 2;
  d.servers = 1;
  const RunResult rp = run_training(m), rd = run_training(d);
  CHECK(max_rel_diff(rp.final_params, rd.final_params) < 2e-2);
  CHECK(rp.losses.back() < rp.losses.front());
}

TEST_CASE("ps: staleness 0 is synchronous, staleness 2 stays within 2 and still trains", "[ps]") {
  const RunResult sync = run_training(ps_config(1, 3));
  RunConfig zero = ps_config(1, 3, 0);
  zero.servers = 1;  // as typed: --servers 1 --staleness 0
  const RunResult r0 = run_training(zero);
  REQUIRE(r0.final_params == sync.final_params);

  RunConfig c = ps_config(1, 3, 2);
  c.steps = 30;
  REQUIRE_FALSE(strategy_info("ps").equals_reference(c));
  REQUIRE(strategy_info("ps").equals_reference(zero));
  const RunResult r = run_training(c);
  int most = -1, spans = 0;
  for (int w = 1; w < c.world; ++w)
    for (const Span& s : r.recorders[w]->snapshot().spans)
      if (s.step >= 0 && s.lane == Lane::compute) {
        ++spans;
        REQUIRE(s.staleness >= 0);
        REQUIRE(s.staleness <= 2);
        REQUIRE(s.staleness <= s.step);  // never older than the first weights
        most = std::max(most, s.staleness);
      }
  REQUIRE(spans > 0);
  // The servers compute nothing with parameters of their own age: no staleness.
  for (const Span& s : r.recorders[0]->snapshot().spans) REQUIRE(s.staleness == -1);
  // Still training: the last five steps' loss well under the first five's.
  double first = 0, last = 0;
  for (int s = 0; s < 5; ++s) {
    first += r.losses[s];
    last += r.losses[c.steps - 1 - s];
  }
  CHECK(last < 0.9 * first);
  INFO("most stale: " << most);
}

TEST_CASE("ps: each server moves its shard to and from every worker, exactly", "[ps]") {
  for (int servers : {1, 2})
    for (int workers : {2, 3}) {
      RunConfig c = ps_config(servers, workers);
      c.steps = 3;
      const RunResult r = run_training(c);
      const ModelLayout layout(ModelSpec::parse(c.model));
      const ShardPlan plan(layout.total(), servers);
      const double shard = static_cast<double>(plan.shard) * 4;  // fp32
      INFO(servers << " servers, " << workers << " workers");
      for (int s = 0; s < servers; ++s) {
        // In: its shard of the gradient from every worker; out: its shard of
        // the parameters to every worker.
        CHECK(received_per_step(r, s) == workers * shard);
        CHECK(r.ranks[s].bytes_sent_per_step == workers * shard);
      }
      for (int w = servers; w < c.world; ++w) {
        CHECK(r.ranks[w].bytes_sent_per_step == servers * shard);  // the padded model, once
        CHECK(received_per_step(r, w) == servers * shard);
      }
    }
}

TEST_CASE("ps: the meta run predicts every rank's peak to the byte, servers and workers",
          "[ps][meta]") {
  for (int staleness : {0, 1, 3})
    for (int servers : {1, 2}) {
      RunConfig c = ps_config(servers, 3, staleness);
      c.steps = 8;
      INFO(servers << " servers, staleness " << staleness);
      const MetaMemory m = predict_memory_meta(c);
      const RunResult r = run_training(c);
      for (int k = 0; k < c.world; ++k) {
        INFO("rank " << k);
        CHECK(m.ranks[k].at_report.device.peak_total == r.ranks[k].memory.device.peak_total);
        for (int cat = 0; cat < kNumMemCategories; ++cat)
          CHECK(m.ranks[k].at_report.device.peak[cat] == r.ranks[k].memory.device.peak[cat]);
      }
    }
}

TEST_CASE("ps: bad settings are refused in one line", "[ps][cli]") {
  const std::string base = "run --model mlp:4x16 --batch 12 --steps 1 --strategy ps ";
  struct Bad {
    std::string args, says;
  };
  for (const Bad& b :
       {Bad{"--world 2 --servers 2", "--servers 2 is invalid for --world 2 (valid: 1 to 1"},
        Bad{"--world 3 --servers 5", "--servers 5 is invalid for --world 3 (valid: 1 to 2"},
        Bad{"--world 3 --staleness -1", "--staleness -1 is invalid"},
        Bad{"--world 3 --staleness 1001", "--staleness 1001 is invalid"},
        Bad{"--world 3 --servers 0", "--servers 0 is invalid"},
        Bad{"--world 3 --precision fp16", "--precision fp16 is invalid for ps"},
        Bad{"--world 6 --servers 1", "--batch 12 is invalid for ps with 5 workers"},
        Bad{"--world 3 --checkpoint-every 1 --checkpoint-dir /tmp/shardlab-ps-never",
            "ps cannot be checkpointed yet"}}) {
    const CliResult r = run_cli(base + b.args);
    INFO(b.args << "\n" << r.out);
    CHECK(r.code == 2);
    CHECK(r.out.find(b.says) != std::string::npos);
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  }
  CHECK_FALSE(std::filesystem::exists("/tmp/shardlab-ps-never"));  // refused before it is made
  // Another strategy given ps's options refuses them.
  const CliResult r =
      run_cli("run --model mlp:4x16 --batch 12 --steps 1 --strategy ddp --servers 1");
  CHECK(r.code == 2);
  CHECK(r.out.find("--servers") != std::string::npos);
}

TEST_CASE(
    "ps: projected onto a slow link, the server's port saturates as workers grow but ddp's does "
    "not",
    "[ps][projection]") {
  // At 10 MB/s the wire dominates: the server's one port carries W gradients
  // in and W parameter copies out, one at a time, while each ddp rank's ring
  // share stays under two model sizes whatever the world.
  const Link slow = parse_link("10MB/s,1us");
  auto projected = [&](const std::string& strategy, int world) {
    RunConfig c = test::small_run("mlp:2x64", strategy, world, 16, 3);
    const RunResult r = run_training(c);
    ProjectionOptions o;
    o.devices = world;
    o.link = slow;
    return project(r, o).median_step_ms;
  };
  const double ps2 = projected("ps", 3), ps8 = projected("ps", 9);
  const double ddp2 = projected("ddp", 2), ddp8 = projected("ddp", 8);
  INFO("ps " << ps2 << " → " << ps8 << " ms, ddp " << ddp2 << " → " << ddp8 << " ms");
  CHECK(ps8 > 2.5 * ps2);  // 4× the workers: 4× the server's bytes, less what overlaps
  CHECK(ddp8 < 2 * ddp2);  // 2(N−1)/N·Ψ: from Ψ to 1.75Ψ per rank
  CHECK(ps8 > 3 * ddp8);
  // `bench strategies --link` prints the projection beside the measured step.
  const CliResult b = run_cli(
      "bench strategies --model mlp:2x16 --strategies ddp,ps --workers 2 --steps 2 --rounds 1 "
      "--batch 8 --link eth100");
  INFO(b.out);
  CHECK(b.code == 0);
  CHECK(b.out.find("projected step") != std::string::npos);
  test::expect_refused("bench strategies --workers 2 --link warp9",
                       "--link 'warp9': not a preset nor BW,LAT");
}
