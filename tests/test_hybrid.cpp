// Pipelines on a device mesh (dp × pp): each pipeline trains on its own rows,
// the same stage of every pipeline all-reduces its gradients over the dp
// group, and the run ends with `single`'s weights; the groups' traffic is
// what the formulas say, and a mesh the pipelines cannot run is refused in one line.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <map>
#include <set>
#include <tuple>

#include "core/mesh.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/strategy.h"
#include "core/predict/meta_memory.h"
#include "core/run/runner.h"
#include "tests/run_util.h"

using namespace shardlab;
using shardlab::test::max_rel_diff;
using shardlab::test::run_cli;

TEST_CASE("hybrid: gpipe, 1f1b and naive-mp on dp x pp meshes train to single's weights",
          "[hybrid][mesh]") {
  // Each pipeline sums its own rows' gradients and the dp group sums the
  // pipelines': the same sum in another order, so reduction-order noise; AdamW
  // divides small gradients by their own size and lets it grow, SGD does not.
  for (const auto& [model, opt, tol] : {std::tuple{"mlp:5x32", OptimizerKind::sgd, 2e-5},
                                        std::tuple{"mlp:5x32", OptimizerKind::adamw, 1e-4},
                                        std::tuple{"gpt:2x32x2", OptimizerKind::adamw, 1e-4}}) {
    RunConfig base = test::small_run(model, "single", 1, 16, 5, opt, 6);
    if (std::string(model).rfind("gpt", 0) == 0) base.seq = 8;
    const RunResult ref = run_training(base);
    struct Case {
      std::string strategy, mesh, order;
      int M;
    };
    const std::vector<Case> cases = {
        {"gpipe", "dp=2,pp=2", "", 2},        {"1f1b", "dp=2,pp=2", "", 4},
        {"naive-mp", "dp=2,pp=2", "", 1},     {"gpipe", "dp=2", "", 2},
        {"1f1b", "dp=2,pp=2", "dp,pp,tp", 2}, {"gpipe", "dp=4,pp=2", "", 2},
    };
    for (const Case& k : cases) {
      RunConfig c = base;
      c.strategy = k.strategy;
      c.mesh = k.mesh;
      c.mesh_order = k.order;
      c.world = parse_mesh(k.mesh, k.order).world();
      c.micro_batches = k.M;
      INFO(model << " " << to_string(opt) << " " << k.strategy << " --mesh " << k.mesh
                 << " --mesh-order " << k.order << " M=" << k.M);
      const RunResult r = run_training(c);
      REQUIRE(max_rel_diff(r.final_params, ref.final_params) < tol);
      for (int s = 0; s < c.steps; ++s) REQUIRE(r.losses[s] == Approx(ref.losses[s]).epsilon(1e-5));
    }
  }
}

TEST_CASE("hybrid: each group carries its own traffic, recorded under its group id",
          "[hybrid][mesh]") {
  RunConfig c = test::small_run("mlp:4x32", "gpipe", 4, 16, 3, OptimizerKind::adamw, 2);
  c.mesh = "dp=2,pp=2";  // rank = dp + 2*pp: pipelines {0,2} and {1,3}
  c.micro_batches = 2;
  const Mesh mesh = run_mesh(c);
  const RunResult r = run_training(c);
  const ModelLayout layout = make_layout(c);
  const std::vector<int> partition = pipeline_partition(c, layout);
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    const int stage = mesh.coord(rank, MeshAxis::pp);
    CHECK(pipeline_stage_of(c, rank) == stage);
    const StageTopology t = stage_topology(stage, partition);
    int64_t stage_params = 0;
    for (int l = t.first_layer; l < t.last_layer; ++l)
      stage_params += static_cast<int64_t>(layout.layer_begin(l + 1) - layout.layer_begin(l));
    int64_t all_reduced = 0, sent = 0;
    std::set<int> peers;
    for (const Span& s : r.recorders[rank]->snapshot().spans) {
      if (s.lane != Lane::comm || s.step != 1) continue;
      if (s.kind == SpanKind::all_reduce) {
        CHECK(s.group == mesh.group_id(rank, MeshAxis::dp));
        all_reduced += s.bytes;
      }
      if (s.kind == SpanKind::send || s.kind == SpanKind::recv) {
        CHECK(s.group == mesh.group_id(rank, MeshAxis::pp));
        peers.insert(s.peer);
        if (s.kind == SpanKind::send) sent += s.bytes;
      }
    }
    // The dp group all-reduces exactly this stage's gradients, fp32, once a step.
    CHECK(all_reduced == stage_params * 4);
    // Activations and gradients cross to the other stage of this rank's own pipeline.
    CHECK(peers == std::set<int>{mesh.group_ranks(rank, MeshAxis::pp)[1 - stage]});
    // 8 rows a pipeline in 2 micro-batches, 32 values each way at the boundary.
    CHECK(sent == 2 * 4 * 32 * 4);
  }
}

TEST_CASE("hybrid: the meta run predicts each rank of a mesh, its axes' traffic included",
          "[hybrid][mesh][meta]") {
  RunConfig c = test::small_run("mlp:4x32", "1f1b", 4, 16, 3, OptimizerKind::adamw, 2);
  c.mesh = "dp=2,pp=2";
  c.micro_batches = 2;
  const RunResult r = run_training(c);
  const MetaMemory m = predict_memory_meta(c);
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    CHECK(m.ranks[rank].bytes_sent_per_step == r.ranks[rank].bytes_sent_per_step);
    CHECK(m.ranks[rank].at_report.device.peak_total >= r.ranks[rank].memory.device.peak_total);
  }
}

TEST_CASE("hybrid: ZeRO-1 over dp keeps 1/dp of the optimizer state, and the same weights",
          "[hybrid][mesh][zero1]") {
  struct Case {
    std::string model, strategy, mesh;
  };
  for (const Case& k : {Case{"mlp:4x32", "gpipe", "dp=2,pp=2"}, Case{"mlp:4x32", "1f1b", "dp=4"},
                        Case{"gpt:2x32x4", "1f1b", "dp=2,pp=2,tp=2"}}) {
    RunConfig c = test::small_run(k.model, k.strategy, parse_mesh(k.mesh, "").world(), 16, 3,
                                  OptimizerKind::adamw, 3);
    c.seq = k.model.rfind("gpt", 0) == 0 ? 8 : 0;
    c.mesh = k.mesh;
    c.micro_batches = 2;
    INFO(k.model << " " << k.strategy << " --mesh " << k.mesh);
    const RunResult plain = run_training(c);
    c.dp_zero1 = true;
    const RunResult zero1 = run_training(c);
    // Two replicas: a reduce adds the same two gradients an all-reduce adds.
    // Four: the order of the sum may differ.
    if (parse_mesh(k.mesh, "").size(MeshAxis::dp) == 2)
      CHECK(zero1.final_params == plain.final_params);
    else
      CHECK(max_rel_diff(zero1.final_params, plain.final_params) < 1e-6);
    CHECK(zero1.losses == plain.losses);
    // The optimizer state of a stage is spread over its replicas: every rank
    // keeps less than the whole, and together they keep it once.
    const auto opt = static_cast<int>(MemCategory::optimizer_state);
    const Mesh mesh = parse_mesh(k.mesh, "");
    int64_t whole = 0, spread = 0;
    for (int rank = 0; rank < c.world; ++rank) {
      const int64_t a = plain.ranks[rank].memory.device.peak[opt];
      const int64_t b = zero1.ranks[rank].memory.device.peak[opt];
      CHECK(b < a);
      if (mesh.coord(rank, MeshAxis::dp) == 0) whole += a;
      spread += b;
    }
    CHECK(spread == whole);
    // The meta run predicts it too.
    const MetaMemory m = predict_memory_meta(c);
    for (int rank = 0; rank < c.world; ++rank)
      CHECK(m.ranks[rank].at_report.device.peak_total >=
            zero1.ranks[rank].memory.device.peak_total);
  }
  // Without a dp axis there is nothing to shard over.
  const test::CliResult r = run_cli(
      "run --model mlp:4x16 --batch 8 --steps 1 --strategy gpipe --world 2 --mesh pp=2 "
      "--dp-zero1");
  CHECK(r.code == 2);
  CHECK(r.out ==
        "error: --dp-zero1 shards the optimizer over pipelines side by side, but --mesh pp=2 has "
        "no dp axis (valid: with a mesh whose dp is 2 or more, e.g. --mesh dp=2,pp=2)\n");
}

TEST_CASE("hybrid: a mesh the pipelines cannot run is refused in one line, exit 2",
          "[hybrid][mesh][cli]") {
  const std::string base = "run --model mlp:4x16 --batch 8 --steps 1 --strategy gpipe ";
  auto refused = [&](const std::string& args, const std::string& part) {
    test::expect_refused(base + args, part);
  };
  refused("--world 4 --mesh dp=2,pp=3", "has 6 ranks but --world is 4");
  refused("--world 3 --mesh tp=3", "tp=3 does not divide the width 16 of mlp:4x16");
  refused("--world 4 --mesh dp=2,pp=2 --stages 4", "--stages 4 does not match --mesh dp=2,pp=2");
  refused("--world 3 --mesh dp=3", "--batch 8 does not split over dp=3");
  refused("--world 4 --mesh dp=2,pp=2 --micro-batches 8",
          "--micro-batches 8 does not divide the 4 rows");
  refused("--world 8 --mesh dp=1,pp=8", "more stages than the 4 layers");
  refused("--world 2 --mesh-order dp,pp,tp", "orders no mesh");
  refused("--world 2 --mesh dp=2,pp=x", "is not a whole number");
  refused("--world 4 --model mlp:4x16+bn --mesh dp=2,pp=2",
          "each pipeline replica would keep its own BatchNorm statistics");
  const test::CliResult other = run_cli("run --model mlp:4x16 --batch 8 --strategy dp --mesh dp=2");
  CHECK(other.code == 2);
  CHECK(other.out ==
        "error: --mesh dp=2: dp has no device mesh; used by ddp, fsdp, gpipe, naive-mp, 1f1b, "
        "zb-h1, zero1, zero2, zero3\n");
}
