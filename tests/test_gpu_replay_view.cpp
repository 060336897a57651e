// A GPU recording replayed on a CPU-only machine: step 0 (the warm-up, ~100x a
// later step on a GPU) is named so and kept from squeezing "All steps", and a
// recording made with --device cuda gets a neutral line, not an error.
#include <catch2/catch.hpp>

#include <string>

#include "app/gui/logic/recording_view.h"
#include "app/gui/logic/run_data.h"
#include "app/gui/logic/timeline_logic.h"
#include "core/parallel/strategy.h"

using namespace shardlab;
using namespace shardlab::gui;

namespace {

// One rank, `steps` steps: step 0 lasts `warmup` ns, every later one 1000 ns.
RunData run_with_warmup(int steps, int64_t warmup) {
  RunData d;
  RunConfig cfg;
  cfg.model = "mlp:4x16";
  cfg.strategy = "single";
  cfg.world = 1;
  cfg.steps = steps;
  reset_run_data(d, cfg, 1, 0);
  int64_t t = 5000;  // after the setup
  for (int s = 0; s < steps; ++s) {
    const int64_t len = s == 0 ? warmup : 1000;
    Span sp;
    sp.t_begin_ns = t;
    sp.t_end_ns = t + len;
    sp.kind = SpanKind::forward;
    sp.step = s;
    append(d, 0, {sp}, {});
    t += len;
  }
  return d;
}

RunConfig gpu_recording_settings() {
  RunConfig c;
  c.model = "mlp:4x16";
  c.strategy = "ddp";
  c.world = 2;
  c.batch = 8;
  c.steps = 4;
  c.device = "cuda";
  return c;
}

}  // namespace

TEST_CASE("warm-up: step 0 is labelled as the warm-up when the run has more steps",
          "[warm-up][timeline-view]") {
  const RunData d = run_with_warmup(4, 1000);
  CHECK(is_warmup_step(d, 0));
  CHECK(step_label(d, 0) == "step 0 (warm-up)");
  CHECK(step_label(d, 1) == "step 1");
  CHECK(!is_warmup_step(d, 3));
  const RunData one = run_with_warmup(1, 1000);  // its only step is what the run measures
  CHECK(step_label(one, 0) == "step 0");
}

TEST_CASE("warm-up: All steps starts at step 1 when step 0 dwarfs the others (a GPU's)",
          "[warm-up][timeline-view]") {
  // On a GPU: step 0 100x a later step (cuBLAS handles, module loading).
  const RunData gpu = run_with_warmup(5, 100'000);
  const double step1 = static_cast<double>(gpu.step_begin[1]);
  CHECK(warmup_dwarfs(gpu, false));
  CHECK(all_steps_begin(gpu, 1e12, false) == step1);
  Viewport vp;
  fit_steps(vp, gpu, false, static_cast<double>(gpu.t_end), false);
  CHECK(vp.t_begin > step1 - 100);  // the margin only
  CHECK(vp.t_end >= static_cast<double>(gpu.t_end));
  // A playhead inside step 0 (a lesson pointing there) keeps it in view.
  CHECK(all_steps_begin(gpu, gpu.steps_begin() + 10, false) == gpu.steps_begin());

  // On a CPU step 0 costs a page fault or two more: every step stays in view.
  const RunData cpu = run_with_warmup(5, 2500);
  CHECK(!warmup_dwarfs(cpu, false));
  fit_steps(vp, cpu, false, static_cast<double>(cpu.t_end), false);
  CHECK(vp.t_begin <= cpu.steps_begin());

  // Live, the newest step is unfinished: with no later step finished, no verdict yet.
  const RunData two = run_with_warmup(2, 100'000);
  CHECK(!warmup_dwarfs(two, true));
  CHECK(warmup_dwarfs(two, false));
}

TEST_CASE("a cuda recording opened without a GPU says where it ran and how to run it here",
          "[gpu-replay]") {
  RecordingOrigin origin;
  origin.device = "cuda (1 x NVIDIA H100 80GB HBM3)";
  origin.gpus = {"1 x NVIDIA H100 80GB HBM3"};
  const RunConfig form = gpu_recording_settings();
  const auto note = rerun_here_note(form, origin, 0);
  REQUIRE(note);
  CHECK(*note ==
        "Recorded on cuda (1 x NVIDIA H100 80GB HBM3); this machine has no usable GPU, so it is "
        "shown as recorded. It can be re-run here with --device cpu.");
  // What its button sets runs here.
  CHECK(on_this_cpu(form).device == "cpu");
  CHECK_NOTHROW(validate(on_this_cpu(form)));

  // NCCL needs GPUs: the CPU settings talk through Gloo.
  RunConfig nccl = form;
  nccl.backend = "nccl";
  const auto with_backend = rerun_here_note(nccl, origin, 0);
  REQUIRE(with_backend);
  CHECK(with_backend->find("--device cpu --backend auto.") != std::string::npos);
  CHECK(on_this_cpu(nccl).backend == "auto");

  // TF32 is a tensor-core format: the CPU runs exact fp32.
  RunConfig tf32 = form;
  tf32.tf32 = true;
  const auto without_tf32 = rerun_here_note(tf32, origin, 0);
  REQUIRE(without_tf32);
  CHECK(without_tf32->find("--device cpu without --tf32.") != std::string::npos);
  CHECK(!on_this_cpu(tf32).tf32);

  // No GPU named in the file (an older recording): the device alone.
  RecordingOrigin unnamed;
  CHECK(rerun_here_note(form, unnamed, 0)->rfind("Recorded on cuda; this machine", 0) == 0);
}

TEST_CASE("the run bar keeps its error when the GPU is not what stops the settings",
          "[gpu-replay]") {
  RecordingOrigin origin;
  origin.gpus = {"1 x NVIDIA H100 80GB HBM3"};
  const RunConfig form = gpu_recording_settings();
  CHECK(!rerun_here_note(form, origin, 1));  // a GPU here: nothing to explain
  RunConfig cpu = form;
  cpu.device = "cpu";
  CHECK(!rerun_here_note(cpu, origin, 0));  // not a GPU run
  RunConfig odd = form;
  odd.batch = 7;  // ddp on 2 ranks cannot split it, on any device
  CHECK(!rerun_here_note(odd, origin, 0));
}
