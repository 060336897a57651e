// The central contract: ddp at world 1–4 ends with the same weights as
// single after 20 steps; overlap on and off agree; a failing rank does not hang the others.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "core/model/checkpoint.h"
#include "core/parallel/strategy.h"
#include "core/run/runner.h"
#include "tests/run_util.h"

using namespace shardlab;
using shardlab::test::CliResult;
using shardlab::test::max_rel_diff;
using shardlab::test::run_cli;

namespace {

RunConfig small_config(const std::string& strategy, int world, OptimizerKind opt) {
  // batch 48: divisible by 1, 2, 3 and 4
  return test::small_run("mlp:4x48", strategy, world, 48, 7, opt);
}

}  // namespace

TEST_CASE("ddp matches single at world 1-4 (AdamW and SGD)", "[ddp]") {
  for (OptimizerKind opt : {OptimizerKind::adamw, OptimizerKind::sgd}) {
    const RunResult ref = run_training(small_config("single", 1, opt));
    // It really trains: the last steps' loss is below the first steps'.
    const auto& l = ref.losses;
    if (opt == OptimizerKind::adamw) REQUIRE(l[17] + l[18] + l[19] < 0.9 * (l[0] + l[1] + l[2]));
    for (int world = 1; world <= 4; ++world) {
      RunConfig c = small_config("ddp", world, opt);
      c.bucket_mb = 0.004;  // several buckets, so overlap really interleaves
      const RunResult r = run_training(c);
      INFO("optimizer " << to_string(opt) << " world " << world);
      REQUIRE(max_rel_diff(r.final_params, ref.final_params) < 2e-5);
      REQUIRE(r.losses.back() == Approx(ref.losses.back()).epsilon(1e-4));
    }
  }
}

TEST_CASE("ddp overlap on and off give the same weights", "[ddp]") {
  RunConfig c = small_config("ddp", 3, OptimizerKind::adamw);
  c.bucket_mb = 0.004;
  const RunResult on = run_training(c);
  c.overlap = false;
  const RunResult off = run_training(c);
  REQUIRE(on.final_params == off.final_params);  // same buckets, same sums: bit-identical
}

TEST_CASE("ddp starts bucket all-reduces during backward", "[ddp]") {
  // World 1: one compute thread and one comm thread, so on this 2-core machine
  // the comm thread has a core free and the overlap is visible in the spans.
  // (At world 2 both cores run backward and the comm threads wait for a core.)
  RunConfig c = small_config("ddp", 1, OptimizerKind::adamw);
  c.model = "mlp:6x256";
  c.bucket_mb = 0.2;
  c.steps = 6;
  const RunResult r = run_training(c);
  // In some step after the first, an all-reduce starts before the last backward
  // span of that step ends. (Any one step can lose its core to another test
  // running beside this one under ctest -j2, so one step alone is not enough.)
  const auto snap = r.recorders[0]->snapshot();
  bool overlapped = false;
  for (int step = 1; step < c.steps; ++step) {
    int64_t last_backward_end = 0;
    int64_t first_allreduce_begin = INT64_MAX;
    for (const Span& s : snap.spans) {
      if (s.step != step) continue;
      if (s.kind == SpanKind::backward) last_backward_end = std::max(last_backward_end, s.t_end_ns);
      if (s.kind == SpanKind::all_reduce)
        first_allreduce_begin = std::min(first_allreduce_begin, s.t_begin_ns);
    }
    overlapped |= first_allreduce_begin < last_backward_end;
  }
  REQUIRE(overlapped);
}

TEST_CASE("ddp memory and traffic are measured", "[ddp]") {
  RunConfig c = small_config("ddp", 2, OptimizerKind::adamw);
  c.model = "mlp:6x128";
  c.bucket_mb = 0.05;
  c.steps = 3;
  const RunResult r = run_training(c);
  // Memory: params, grads, AdamW state and buckets are all accounted.
  const PoolStats& m = r.ranks[0].memory.device;
  const int64_t P = 6 * (128 * 128 + 128) * 4;
  REQUIRE(m.peak[static_cast<int>(MemCategory::params)] == P);
  REQUIRE(m.peak[static_cast<int>(MemCategory::grads)] == P);
  REQUIRE(m.peak[static_cast<int>(MemCategory::optimizer_state)] == 2 * P);
  REQUIRE(m.peak[static_cast<int>(MemCategory::comm_buffers)] >= P);
  REQUIRE(m.peak[static_cast<int>(MemCategory::activations)] > 0);
  // Ring all-reduce sends 2(W−1)/W of the gradient bytes per step.
  REQUIRE(r.ranks[0].bytes_sent_per_step == Approx(static_cast<double>(P)).epsilon(0.02));
}

TEST_CASE("a saved init (--init-from) reproduces the same run", "[ddp][io]") {
  RunConfig c = small_config("ddp", 2, OptimizerKind::adamw);
  c.steps = 5;
  const ModelLayout layout(ModelSpec::parse(c.model));
  const std::string path =
      (std::filesystem::temp_directory_path() / "shardlab_init_test.safetensors").string();
  save_params(path, layout, init_params(layout, c.seed));
  const RunResult seeded = run_training(c);
  const std::vector<float> loaded = load_params(path, layout);
  const RunResult from_file = run_training(c, &loaded);
  REQUIRE(seeded.final_params == from_file.final_params);
  std::filesystem::remove(path);
}

TEST_CASE("a rank that throws makes the others fail with an error naming it", "[ddp]") {
  RunConfig c = small_config("ddp", 3, OptimizerKind::adamw);
  c.timeout_ms = 1500;
  RunCallbacks cb;
  cb.on_rank_start = [](int rank) {
    if (rank == 1) throw std::runtime_error("simulated crash");
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  try {
    run_training(c, nullptr, cb);
  } catch (const RunError& e) {
    message = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(message.find("rank 1") != std::string::npos);
  REQUIRE(message.find("simulated crash") != std::string::npos);
  REQUIRE(seconds < 15);
}

TEST_CASE("a rank that fails mid-run, or stalls, does not hang the others", "[ddp]") {
  RunConfig c = small_config("ddp", 3, OptimizerKind::adamw);
  c.timeout_ms = 1000;
  for (bool stall : {false, true}) {
    const test::FailedRun f =
        test::run_with_failing_rank(c, 2, 3, "gave up at step 3", stall ? 2500 : 0);
    INFO("stall " << stall << ": " << f.message);
    REQUIRE(f.message.find("rank 2") != std::string::npos);
    if (stall) REQUIRE(f.message.find("timed out") != std::string::npos);
    REQUIRE(f.seconds < 10);
  }
}

TEST_CASE("validation rejects bad settings with one clear line", "[config]") {
  auto bad = [](RunConfig c, const std::string& expect) {
    try {
      validate(c);
      FAIL("accepted: " << expect);
    } catch (const ConfigError& e) {
      INFO(e.what());
      REQUIRE(std::string(e.what()).find(expect) != std::string::npos);
    }
  };
  RunConfig c = small_config("ddp", 2, OptimizerKind::adamw);
  RunConfig x = c;
  x.strategy = "zero9";
  bad(x, "unknown strategy 'zero9'");
  x = c, x.model = "mlp:8";
  bad(x, "unknown model 'mlp:8'");
  x = c, x.world = 0;
  bad(x, "--world 0");
  x = c, x.batch = 50, x.world = 4;
  bad(x, "--batch 50 is not divisible by --world 4");
  x = c, x.steps = 0;
  bad(x, "--steps 0");
  x = c, x.optimizer.lr = -1;
  bad(x, "--lr");
}

TEST_CASE("RunControl pauses every rank at a step boundary, single-steps and cancels", "[runner]") {
  RunConfig c = small_config("ddp", 2, OptimizerKind::adamw);
  c.steps = 50;
  RunControl control;
  control.pause();
  std::atomic<int> done{0};
  RunCallbacks cb;
  cb.control = &control;
  cb.on_step = [&](int, double) { ++done; };
  bool cancelled = false;
  std::thread runner([&] {
    try {
      run_training(c, nullptr, cb);
    } catch (const RunCancelled&) {
      cancelled = true;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int while_paused = done.load();
  control.step_once();
  control.step_once();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int after_two = done.load();
  control.cancel();
  runner.join();
  REQUIRE(while_paused == 0);
  REQUIRE(after_two == 2);
  REQUIRE(cancelled);
}
