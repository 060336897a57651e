// The tests' small training runs: one builder for their settings, and one
// scaffold for a run in which a rank fails or stalls mid-run.
#pragma once
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/config.h"
#include "core/run/runner.h"

namespace shardlab::test {

// A small run: `model` trained by `strategy` on `world` ranks, `batch` rows a
// step (a multiple of every world the test uses), `steps` steps from `seed`.
// SGD at lr 0.5 or AdamW at 1e-2: far from the defaults, and quick to move the
// weights far enough that a wrong gradient shows. A 20 s timeout: a failing
// test stops rather than hangs.
inline RunConfig small_run(const std::string& model, const std::string& strategy, int world,
                           int batch, uint64_t seed, OptimizerKind opt = OptimizerKind::adamw,
                           int steps = 20) {
  RunConfig c;
  c.model = model;
  c.strategy = strategy;
  c.world = world;
  c.batch = batch;
  c.steps = steps;
  c.optimizer.kind = opt;
  c.optimizer.lr = opt == OptimizerKind::sgd ? 0.5f : 1e-2f;
  c.seed = seed;
  c.timeout_ms = 20000;
  return c;
}

// How a run with a failing rank ended: the run's one-line error, and how long
// it took to say so.
struct FailedRun {
  std::string message;  // empty: the run did not fail
  double seconds = 0;
};

// Runs `c` with rank `rank` giving up ("`why`") as it begins step `step`; with
// `stall_ms` it first stalls that long, standing for a rank that hangs. The
// other ranks must not hang: the run fails, naming the rank.
inline FailedRun run_with_failing_rank(const RunConfig& c, int rank, int step,
                                       const std::string& why, int stall_ms = 0) {
  RunCallbacks cb;
  cb.before_step = [=](int r, int s) {
    if (r != rank || s != step) return;
    if (stall_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
    throw std::runtime_error(why);
  };
  const auto t0 = std::chrono::steady_clock::now();
  FailedRun out;
  try {
    run_training(c, nullptr, cb);
  } catch (const RunError& e) {
    out.message = e.what();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace shardlab::test
