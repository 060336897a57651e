// Data-parallel strategies on a dp × tp mesh (FSDP or ZeRO over dp, Megatron's
// tensor parallelism inside): every one trains to `single`'s weights, the dp
// group carries exactly ZeRO's volume over one slice's Ψ and the tp group
// exactly what the same layers carry in a pipeline, the meta run predicts
// both, checkpoints are the whole model, and a mesh they cannot run is
// refused in one line.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/mesh.h"
#include "core/parallel/data_parallel_mesh.h"
#include "core/parallel/model_state.h"
#include "core/parallel/strategy.h"
#include "core/predict/meta_memory.h"
#include "core/run/metrics.h"
#include "core/run/runner.h"
#include "core/run/train_checkpoint.h"
#include "tests/run_util.h"

using namespace shardlab;
using shardlab::test::max_rel_diff;
using shardlab::test::run_cli;

namespace {
constexpr size_t kDp = static_cast<size_t>(MeshAxis::dp);
constexpr size_t kTp = static_cast<size_t>(MeshAxis::tp);

RunConfig on_mesh(RunConfig c, const std::string& strategy, const std::string& mesh,
                  const std::string& order = "") {
  c.strategy = strategy;
  c.mesh = mesh;
  c.mesh_order = order;
  c.world = parse_mesh(mesh, order).world();
  return c;
}
}  // namespace

TEST_CASE("dp x tp: ddp, zero1, zero2, zero3 and fsdp train the gpt to single's weights",
          "[mesh][tp][zero]") {
  RunConfig base = test::small_run("gpt:2x32x4", "single", 1, 8, 5, OptimizerKind::adamw, 5);
  base.seq = 8;
  const RunResult ref = run_training(base);
  struct Case {
    std::string strategy, mesh, order;
    bool sp = false;
  };
  for (const Case& k :
       {Case{"ddp", "dp=2,tp=2", ""}, Case{"zero1", "dp=2,tp=2", ""},
        Case{"zero2", "dp=2,tp=2", ""}, Case{"zero3", "dp=2,tp=2", ""},
        Case{"fsdp", "dp=2,tp=2", ""},
        Case{"zero3", "dp=2,tp=2", "tp,pp,dp"},  // tp outermost: groups of ranks {0,2} and {1,3}
        Case{"zero3", "dp=2,tp=2", "", true},    // sequence parallelism inside
        Case{"zero2", "dp=2,tp=4", ""}, Case{"ddp", "dp=4,tp=2", ""}}) {  // world 8 as threads
    const RunConfig c = [&] {
      RunConfig r = on_mesh(base, k.strategy, k.mesh, k.order);
      r.sequence_parallel = k.sp;
      return r;
    }();
    INFO(k.strategy << " --mesh " << k.mesh << " --mesh-order " << k.order << " sp " << k.sp);
    const RunResult r = run_training(c);
    REQUIRE(r.final_params.size() == ref.final_params.size());
    CHECK(max_rel_diff(r.final_params, ref.final_params) < 1e-4);
    for (int s = 0; s < c.steps; ++s) CHECK(r.losses[s] == Approx(ref.losses[s]).epsilon(1e-5));
  }
}

TEST_CASE("dp x tp: mixed precision on tensor-parallel slices follows single's bf16 run",
          "[mesh][tp][zero][precision]") {
  // bf16 rounds each partial sum before the tp all-reduce adds them, so the
  // runs agree to bf16's precision, not bit for bit.
  RunConfig base = test::small_run("gpt:1x32x4", "single", 1, 8, 3, OptimizerKind::adamw, 4);
  base.seq = 8;
  base.precision = "bf16";
  const RunResult ref = run_training(base);
  for (const char* strategy : {"fsdp", "zero2"}) {
    INFO(strategy);
    const RunResult r = run_training(on_mesh(base, strategy, "dp=2,tp=2"));
    for (int s = 0; s < base.steps; ++s) CHECK(r.losses[s] == Approx(ref.losses[s]).epsilon(5e-3));
    // AdamW turns bf16's rounding of tiny gradients into ±lr steps: the slices
    // part from single no more than the same strategy without tp does.
    RunConfig plain = base;
    plain.strategy = strategy;
    plain.world = 2;
    const RunResult p = run_training(plain);
    const double tp_diff = max_rel_diff(r.final_params, ref.final_params);
    const double dp_diff = max_rel_diff(p.final_params, ref.final_params);
    INFO("with tp " << tp_diff << ", without " << dp_diff);
    CHECK(tp_diff < 0.1);
    CHECK(tp_diff < 2 * dp_diff + 1e-3);
  }
}

TEST_CASE("dp x tp: the mlp's column and row pairs under zero3 and ddp train as single",
          "[mesh][tp][zero]") {
  const RunConfig base = test::small_run("mlp:4x32", "single", 1, 16, 3, OptimizerKind::sgd, 6);
  const RunResult ref = run_training(base);
  for (const char* strategy : {"ddp", "zero3"}) {
    INFO(strategy);
    const RunResult r = run_training(on_mesh(base, strategy, "dp=2,tp=2"));
    CHECK(max_rel_diff(r.final_params, ref.final_params) < 2e-5);
  }
}

TEST_CASE("dp x tp: the dp group carries ZeRO's volume of one slice, the tp group the layers'",
          "[mesh][tp][zero]") {
  RunConfig base = test::small_run("gpt:2x32x4", "single", 1, 8, 2, OptimizerKind::adamw, 2);
  base.seq = 8;
  // The same layers on the same 4 rows per tp group, as a pipeline of one
  // stage: its tp traffic is what the layers themselves send.
  RunConfig pipe = on_mesh(base, "gpipe", "dp=2,tp=2");
  const RunResult layers_only = run_training(pipe);
  for (const char* strategy : {"ddp", "zero1", "zero2", "zero3", "fsdp"}) {
    const RunConfig c = on_mesh(base, strategy, "dp=2,tp=2");
    INFO(strategy);
    const RunResult r = run_training(c);
    const ModelLayout slice = data_parallel_rank_layout(c);
    REQUIRE(slice.tensor_parallel());
    const ModelStateInput in = model_state_input(c, static_cast<double>(make_layout(c).total()));
    CHECK(in.world == 2);
    CHECK(in.params == static_cast<double>(slice.total()));
    const MetaMemory meta = predict_memory_meta(c);
    for (int rank = 0; rank < c.world; ++rank) {
      INFO("rank " << rank);
      const SentByAxis& sent = r.ranks[rank].sent_by_axis_per_step;
      // No padding: every flat group of a slice splits evenly over dp=2.
      CHECK(sent[kDp] == predict_comm(in, rank).sent_bytes);
      CHECK(sent[kTp] == layers_only.ranks[rank].sent_by_axis_per_step[kTp]);
      CHECK(meta.ranks[rank].sent_by_axis_per_step == sent);
      CHECK(meta.ranks[rank].at_report.device.peak_total >= r.ranks[rank].memory.device.peak_total);
      // The lesson metrics: ZeRO's formula beside the dp group's bytes and the
      // model states; none beside the total, which holds the tp bytes too.
      MetricRuns runs(r, nullptr);
      MetricRef ref;
      ref.rank = rank;
      ref.name = "axis_sent_bytes_per_step";
      ref.axis = "dp";
      const MetricValue dp = evaluate_metric(ref, runs);
      REQUIRE(dp.formula);
      CHECK(*dp.formula == dp.measured);
      ref.name = "model_state_bytes";
      const MetricValue states = evaluate_metric(ref, runs);
      REQUIRE(states.formula);
      CHECK(*states.formula == states.measured);
      ref.name = "sent_bytes_per_step";
      CHECK_FALSE(evaluate_metric(ref, runs).formula);
    }
  }
}

TEST_CASE("dp x tp: a zero3 checkpoint is the whole model, and resumes bit for bit",
          "[mesh][tp][zero][checkpoint]") {
  namespace fs = std::filesystem;
  RunConfig cfg = test::small_run("gpt:2x32x4", "single", 1, 8, 4, OptimizerKind::adamw, 6);
  cfg.seq = 8;
  RunConfig one = cfg;
  one.steps = 3;
  const RunResult single = run_training(one);
  cfg = on_mesh(cfg, "zero3", "dp=2,tp=2");
  const RunResult whole = run_training(cfg);
  const fs::path dir = fs::temp_directory_path() / "shardlab_dp_tp_ckpt";
  fs::remove_all(dir);
  RunConfig first = cfg;
  first.steps = 3;
  run_training(first, nullptr, {}, nullptr, Checkpointing{3, dir.string(), nullptr, ""});
  const ModelLayout layout = make_layout(cfg);
  const ResumeState saved = load_checkpoint(dir.string(), layout);
  // The padded vocabulary's padding is in no file: the 719 real rows, single's.
  REQUIRE(saved.weights.size() == single.final_params.size());
  CHECK(max_rel_diff(saved.weights, single.final_params) < 1e-4);
  const RunResult resumed =
      run_training(cfg, nullptr, {}, nullptr, Checkpointing{0, "", &saved, ""});
  CHECK(resumed.final_params == whole.final_params);  // bit for bit
  fs::remove_all(dir);
}

TEST_CASE("dp x tp: a mesh a data-parallel strategy cannot run is refused in one line, exit 2",
          "[mesh][tp][cli]") {
  const std::string base = "run --model gpt:1x32x4 --seq 8 --batch 8 --steps 1 ";
  auto refused = [&](const std::string& args, const std::string& part) {
    test::expect_refused(base + args, part);
  };
  refused("--strategy zero3 --mesh dp=2,pp=2", "zero3 has no pipeline stages for its pp axis");
  refused("--strategy ddp --mesh tp=2", "ddp runs over the dp axis, and it has 1 rank");
  refused("--strategy zero2 --mesh dp=2,tp=3", "tp=3 does not divide the 4 heads");
  refused("--strategy zero1 --mesh dp=3,tp=2 --batch 8", "--batch 8 does not split over dp=3");
  refused("--strategy fsdp --mesh dp=2 --sequence-parallel", "has no tp axis");
  refused("--strategy zero3 --sequence-parallel", "there is no --mesh");
  refused("--strategy dp --mesh dp=2,tp=2", "dp has no device mesh");
  refused("--strategy zero3 --mesh dp=2,tp=2 --world 2", "has 4 ranks but --world is 2");
}

TEST_CASE("dp x tp: estimate gives ZeRO's accounting over dp of one slice, beside the meta run",
          "[mesh][tp][estimate][cli]") {
  const std::string args =
      "estimate --model gpt:2x32x4 --seq 8 --batch 8 --strategy zero3 --mesh dp=2,tp=2";
  const test::CliResult r = run_cli(args + " --json");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  RunConfig c;
  c.model = "gpt:2x32x4";
  c.seq = 8;
  c.batch = 8;
  c.strategy = "zero3";
  c.mesh = "dp=2,tp=2";
  c.world = 4;
  const double psi = static_cast<double>(data_parallel_rank_layout(c).total());
  CHECK(j.at("world") == 2);  // ZeRO's N: the dp axis
  CHECK(j.at("ranks") == 4);
  CHECK(j.at("tp") == 2);
  CHECK(j.at("params").get<double>() == psi);
  CHECK(j.at("model_states_per_rank").at("total").get<double>() == 16 * psi / 2);
  REQUIRE(j.at("run_peak_groups").size() == 1);  // every rank alike
  CHECK(j.at("run_peak_groups")[0].at("model_states_over_formula_bytes") == 0);
  const test::CliResult text = run_cli(args);
  CHECK(text.code == 0);
  CHECK(text.out.find("of one tp slice (t = 2") != std::string::npos);
  CHECK(text.out.find("sent per step: dp group") != std::string::npos);
  const test::CliResult bad =
      run_cli("estimate --model gpt:2x32x4 --seq 8 --batch 8 --strategy zero3 --mesh dp=2,pp=2");
  CHECK(bad.code == 2);
  CHECK(bad.out.find("zero3 has no pipeline stages") != std::string::npos);
}
