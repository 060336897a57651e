// The mesh accounting (core/predict/mesh_estimate.h): Megatron-LM's weights per
// tensor-parallel rank, the model states, and the bytes each axis's group
// carries per step equal what the implementation allocates and sends — in the
// meta run and in a real run on every axis — and `shardlab estimate --mesh`
// prints them side by side, refusing what a run would refuse in one line.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <nlohmann/json.hpp>

#include "app/gui/logic/memory_logic.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/strategy.h"
#include "core/predict/mesh_estimate.h"
#include "core/predict/meta_memory.h"
#include "core/run/metrics.h"
#include "core/run/recording.h"
#include "core/run/runner.h"
#include "tests/run_util.h"

using namespace shardlab;
using shardlab::test::CliResult;
using shardlab::test::run_cli;

namespace {

RunConfig mesh_run(const std::string& model, const std::string& strategy, const std::string& mesh,
                   int batch, int M) {
  RunConfig c;
  c.model = model;
  c.seq = 16;
  c.strategy = strategy;
  c.mesh = mesh;
  c.world = mesh.empty() ? 2 : parse_mesh(mesh).world();
  c.batch = batch;
  c.micro_batches = M;
  c.steps = 2;
  return c;
}

double category(const MetaRankMemory& r, MemCategory c) {
  return static_cast<double>(r.at_report.device.peak[static_cast<int>(c)]);
}

}  // namespace

TEST_CASE(
    "mesh estimate: Megatron's weights, model states and each axis's bytes are the meta run's",
    "[estimate][mesh][tp]") {
  struct Case {
    std::string model, strategy, mesh;
    int batch, M;
    bool sp = false, recompute = false;
    OptimizerKind opt = OptimizerKind::adamw;
  };
  const std::vector<Case> cases = {
      {"gpt:2x32x4", "1f1b", "dp=2,pp=2,tp=2", 16, 4},
      {"gpt:2x32x4", "1f1b", "dp=2,pp=2,tp=2", 16, 4, true},
      {"gpt:4x32x4", "1f1b", "pp=4,tp=2", 8, 4, true},  // stages without blocks, and middle ones
      {"gpt:2x32x4", "gpipe", "tp=4", 8, 2},            // one stage: wte and lm_head together
      {"gpt:2x32x4", "naive-mp", "", 8, 1},             // no mesh: pp = world
      {"gpt:2x32x4", "gpipe", "pp=2,tp=2", 8, 2, false, true},
      {"gpt:2x32x4", "gpipe", "pp=2,tp=2", 8, 2, true, true},
      {"gpt:2x32x4", "gpipe", "dp=2,tp=4", 8, 1, true, false, OptimizerKind::sgd},
  };
  for (const Case& k : cases) {
    RunConfig c = mesh_run(k.model, k.strategy, k.mesh, k.batch, k.M);
    c.sequence_parallel = k.sp;
    c.recompute = k.recompute;
    c.optimizer.kind = k.opt;
    INFO(k.model << " " << k.strategy << " --mesh " << k.mesh << " M=" << k.M << " sp=" << k.sp
                 << " recompute=" << k.recompute);
    const MeshEstimate e = estimate_mesh(c);
    const MetaMemory meta = predict_memory_meta(c);
    REQUIRE(static_cast<int>(e.stages.size()) == pipeline_stages(c));
    for (const MetaRankMemory& r : meta.ranks) {
      INFO("rank " << r.rank);
      const MeshStageEstimate& g = e.stages[static_cast<size_t>(pipeline_stage_of(c, r.rank))];
      CHECK(g.params * 4 == category(r, MemCategory::params));
      CHECK(g.model_states.total() == category(r, MemCategory::params) +
                                          category(r, MemCategory::grads) +
                                          category(r, MemCategory::optimizer_state));
      for (MeshAxis axis : kMeshAxes) {
        INFO(to_string(axis));
        const size_t x = static_cast<size_t>(axis);
        CHECK(g.sent[x] == Approx(r.sent_by_axis_per_step[x]).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("mesh estimate: a real dp x pp x tp run sends on each axis what the formulas say",
          "[estimate][mesh][tp]") {
  RunConfig c = mesh_run("gpt:2x32x4", "1f1b", "dp=2,pp=2,tp=2", 16, 4);
  c.seq = 8;
  const MeshEstimate e = estimate_mesh(c);
  const RunResult r = run_training(c);
  const Mesh mesh = run_mesh(c);
  for (int rank = 0; rank < c.world; ++rank) {
    INFO("rank " << rank);
    const RankReport& rr = r.ranks[static_cast<size_t>(rank)];
    const MeshStageEstimate& g = e.stages[static_cast<size_t>(pipeline_stage_of(c, rank))];
    double axes = 0;
    for (MeshAxis axis : kMeshAxes) {
      const size_t x = static_cast<size_t>(axis);
      CHECK(rr.sent_by_axis_per_step[x] == Approx(g.sent[x]).epsilon(1e-12));
      CHECK(rr.sent_by_axis_per_step[x] > 0);
      axes += rr.sent_by_axis_per_step[x];
    }
    CHECK(axes == rr.bytes_sent_per_step);  // every byte went over one axis's group
    // The lesson metric reads the same figure.
    MetricRef ref;
    ref.name = "axis_sent_bytes_per_step";
    ref.rank = rank;
    ref.axis = "pp";
    check_metric(ref, c, nullptr);
    MetricRuns runs(r, nullptr);
    const MetricValue v = evaluate_metric(ref, runs);
    CHECK(v.measured == rr.sent_by_axis_per_step[static_cast<size_t>(MeshAxis::pp)]);
    // ... beside the formula's, as the lesson player and the memory view show it.
    REQUIRE(v.formula);
    CHECK(*v.formula == g.sent[static_cast<size_t>(MeshAxis::pp)]);
    ref.name = "model_state_bytes";
    const MetricValue states = evaluate_metric(ref, runs);
    REQUIRE(states.formula);
    CHECK(*states.formula == states.measured);
    const auto shown = gui::predicted_model_state(c, rank);
    REQUIRE(shown);
    CHECK(shown->model_state_bytes == static_cast<int64_t>(states.measured));
  }
  // A recording keeps each axis's figure.
  const Recording back = recording_from_json(recording_to_json(r, describe_origin(r)), "mem");
  for (int rank = 0; rank < c.world; ++rank)
    CHECK(back.run.ranks[static_cast<size_t>(rank)].sent_by_axis_per_step ==
          r.ranks[static_cast<size_t>(rank)].sent_by_axis_per_step);
  // An axis the run's mesh lacks is refused, naming the mesh's.
  MetricRef bad;
  bad.name = "axis_sent_bytes_per_step";
  bad.axis = "ep";
  CHECK_THROWS_WITH(
      check_metric(bad, c, nullptr),
      "axis 'ep' is not an axis of the run's mesh pp=2,dp=2,tp=2 (valid: pp, dp, tp)");
  RunConfig ddp = test::small_run("mlp:2x16", "ddp", 2, 8, 2, OptimizerKind::adamw, 1);
  bad.axis = "tp";
  CHECK_THROWS_WITH(check_metric(bad, ddp, nullptr),
                    "axis 'tp' is not an axis of the run's mesh dp=2 (valid: dp)");
}

TEST_CASE("estimate --mesh prints the formulas beside the meta run, and refuses in one line",
          "[estimate][mesh][cli]") {
  const CliResult r = run_cli(
      "estimate --model gpt:2x32x4 --seq 16 --mesh dp=2,pp=2,tp=2 --strategy 1f1b --batch 16 "
      "--micro-batches 4 --sequence-parallel --json");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["world"] == 8);  // the mesh's product, without --world
  CHECK(j["vocab_padded"].get<int>() % 2 == 0);
  CHECK(j["bubble_formula"].get<double>() == Approx(1.0 / 5));
  REQUIRE(j["stages"].size() == 2);
  for (const auto& st : j["stages"]) {
    CHECK(st["params"]["value"] == st["params"]["meta_run"][0]);
    for (const char* axis : {"tp", "pp", "dp"})
      CHECK(st["sent_per_step"][axis]["bytes"].get<double>() ==
            Approx(st["sent_per_step"][axis]["meta_run_bytes"][0].get<double>()).epsilon(1e-12));
  }
  CHECK(j["korthikanti_block_16bit_with_dropout"].size() == 6);

  const CliResult text = run_cli(
      "estimate --model gpt:2x32x4 --seq 16 --mesh pp=2,tp=2 --strategy gpipe --batch 8 "
      "--micro-batches 2");
  INFO(text.out);
  REQUIRE(text.code == 0);
  CHECK(text.out.find("sent on tp") != std::string::npos);
  CHECK(text.out.find("s·b·h·(10 + 24/t + 5·a·s/(h·t))") != std::string::npos);

  auto bad = [](const std::string& args, const std::string& message) {
    const CliResult b = run_cli("estimate " + args);
    INFO("shardlab estimate " << args << "\n" << b.out);
    CHECK(b.code == 2);
    CHECK(b.out.find(message) != std::string::npos);
    CHECK(b.out.find('\n') == b.out.size() - 1);
  };
  bad("--model mlp:4x32 --mesh pp=2,tp=2 --strategy gpipe --batch 8",
      "the mesh accounting is a transformer's (valid: --model gpt:LxCxH)");
  bad("--model gpt:2x32x4 --mesh tp=3 --strategy gpipe --batch 8", "tp");
  bad("--model gpt:2x32x4 --mesh dp=2,pp=2 --strategy ddp", "ddp has no pipeline stages");
  bad("--model gpt:2x32x4 --mesh dp=2,pp=2 --strategy dp",
      "runs no mesh (valid: gpipe, naive-mp, 1f1b, zb-h1; ddp, fsdp, zero1, zero2, zero3 on a "
      "mesh of dp and tp)");
  bad("--params 1e6 --world 4 --strategy ddp --micro-batches 2",
      "--micro-batches applies to a mesh or a pipeline strategy only");
  bad("--mesh dp=2,pp=2 --strategy 1f1b", "--model is required with --mesh");
}

TEST_CASE("memory view: what each axis of a mesh divides of a rank's model states",
          "[mesh][gui-logic]") {
  RunConfig c;
  c.model = "gpt:2x64x4";
  c.seq = 64;
  c.batch = 16;
  c.strategy = "1f1b";
  c.micro_batches = 4;
  c.mesh = "dp=2,pp=2,tp=2";
  c.world = 8;
  const std::optional<gui::AxisSavings> a = gui::axis_savings(c, 0);
  REQUIRE(a);
  const ModelLayout whole = make_layout(c);
  CHECK(a->whole == 16.0 * static_cast<double>(whole.total()));
  REQUIRE(a->steps.size() == 3);  // tp, pp, dp
  CHECK(a->steps[0].axis == MeshAxis::tp);
  CHECK(a->steps[0].bytes ==
        16.0 * static_cast<double>(ModelLayout(whole.spec(), TensorSlice{2, 0}).total()));
  CHECK(a->steps[1].axis == MeshAxis::pp);
  CHECK(a->steps[1].bytes == 837120);  // lesson 16: 52 320 parameters of stage 0's slice
  CHECK(a->steps[2].axis == MeshAxis::dp);
  CHECK(a->steps[2].bytes == 837120);  // replicas: dp divides the batch
  const std::string line = gui::axis_savings_line(*a, 0);
  CHECK(line.find("pp=2 817.5 KiB") != std::string::npos);
  CHECK(line.find("(dp divides the batch, not the states)") != std::string::npos);
  // ZeRO-3 over dp with tp inside: the dp step is ZeRO's 16Ψ_s/dp.
  RunConfig z = c;
  z.strategy = "zero3";
  z.micro_batches = 1;
  z.mesh = "dp=2,tp=2";
  z.world = 4;
  const std::optional<gui::AxisSavings> b = gui::axis_savings(z, 3);
  REQUIRE(b);
  REQUIRE(b->steps.size() == 2);
  CHECK(b->steps[1].bytes == b->steps[0].bytes / 2);
  CHECK(gui::axis_savings_line(*b, 3).find("divides the batch") == std::string::npos);
  // Without a mesh: nothing to split by axis.
  RunConfig plain = z;
  plain.mesh.clear();
  CHECK_FALSE(gui::axis_savings(plain, 0));
}
