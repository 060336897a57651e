// Pipeline schedules as data: the named schedules against golden files and
// their formulas, the text form, and the validator's one-line refusals.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/config.h"
#include "core/parallel/run_result.h"
#include "core/parallel/schedule.h"
#include "core/predict/memory_estimate.h"
#include "core/predict/pipeline_analysis.h"
#include "core/run/runner.h"
#include "tests/run_util.h"
#include "tests/test_util.h"

using namespace shardlab;
namespace test = shardlab::test;

namespace {

std::string read_golden(const std::string& name) {
  std::ifstream in(std::string(SHARDLAB_TEST_DATA) + "/schedules/" + name);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The refusal's one line, or "" when `text` is a valid schedule on P, M, V.
std::string refusal(const std::string& text, int P, int M, int V = 1) {
  try {
    validate_schedule(parse_schedule(text, "test"), P, M, V);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE(
    "schedules: the named orders equal the golden files (Megatron's interleaved order, "
    "the zero-bubble ZB-H1)",
    "[schedule]") {
  struct Golden {
    const char* name;
    int P, M, V;
    const char* file;
  };
  for (const Golden& g :
       {Golden{"gpipe", 4, 8, 1, "gpipe_p4_m8.txt"}, Golden{"1f1b", 4, 8, 1, "1f1b_p4_m8.txt"},
        Golden{"interleaved", 4, 8, 2, "interleaved_p4_m8_v2.txt"},
        Golden{"zb-h1", 4, 8, 1, "zb-h1_p4_m8.txt"},
        Golden{"naive-mp", 4, 1, 1, "naive-mp_p4_m1.txt"}}) {
    INFO(g.file);
    const Schedule s = named_schedule(g.name, g.P, g.M, g.V);
    const std::string text = format_schedule(s);
    // The golden file's comments (its provenance) are not part of the order.
    const Schedule golden = parse_schedule(read_golden(g.file), g.file);
    CHECK(format_schedule(golden) == text);
    // The text form reads back to the same schedule.
    const Schedule back = parse_schedule(text, "formatted");
    CHECK(back.ranks == s.ranks);
    CHECK(back.chunks == s.chunks);
  }
}

TEST_CASE("schedules: every named one validates and its unit-cost bubble is the paper's formula",
          "[schedule]") {
  for (int P : {2, 4})
    for (int M : {4, 8}) {
      INFO("P " << P << ", M " << M);
      for (const char* name : {"gpipe", "1f1b"}) {
        const UnitTiming t = unit_timing(named_schedule(name, P, M));
        CHECK(t.bubble_over_compute() == Approx(double(P - 1) / M));
        CHECK(t.bubble_share(0) == Approx(double(P - 1) / (M + P - 1)));
      }
      // Activations alive: gpipe all M, 1f1b P − rank.
      const UnitTiming g = unit_timing(named_schedule("gpipe", P, M));
      const UnitTiming o = unit_timing(named_schedule("1f1b", P, M));
      for (int r = 0; r < P; ++r) {
        CHECK(g.peak_alive[r] == M);
        CHECK(o.peak_alive[r] == std::min(P - r, M));
      }
      // Interleaved: (P−1)/(V·M), each chunk costing 1/V of a stage.
      const UnitTiming i = unit_timing(named_schedule("interleaved", P, M, 2));
      CHECK(i.bubble_over_compute() == Approx(double(P - 1) / (2 * M)));
      // ZB-H1: (P−1)/(3M) with F = B = W, and 1F1B's micro-batches between F and B.
      const UnitTiming z = unit_timing(named_schedule("zb-h1", P, M));
      CHECK(z.bubble_over_compute() == Approx(double(P - 1) / (3 * M)));
      for (int r = 0; r < P; ++r) CHECK(z.peak_unbacked[r] == o.peak_alive[r]);
      CHECK(*std::max_element(z.peak_alive.begin(), z.peak_alive.end()) ==
            *std::max_element(o.peak_alive.begin(), o.peak_alive.end()));
    }
}

TEST_CASE("schedules: the validator refuses a bad schedule in one line naming the rank and action",
          "[schedule]") {
  struct Bad {
    const char* text;
    int P, M, V;
    const char* part;
  };
  const Bad cases[] = {
      // wrong rank count
      {"rank 0: F0 B0\n", 2, 1, 1, "the schedule has 1 rank line but the pipeline has 2 stages"},
      // not an action
      {"rank 0: F0 X0 B0\nrank 1: F0 B0\n", 2, 1, 1, "'X0' is not an action"},
      {"rank 0: F0 Fa B0\nrank 1: F0 B0\n", 2, 1, 1, "'Fa' is not an action"},
      // a label out of order
      {"rank 1: F0 B0\nrank 0: F0 B0\n", 2, 1, 1, "'rank 1:' does not name the next rank"},
      // a micro-batch that does not exist
      {"rank 0: F0 B0 F5 B5\nrank 1: F0 B0\n", 2, 1, 1,
       "rank 0, action 3 (F5): there is no micro-batch 5 (valid: 0 to 0"},
      // a chunk without interleaving
      {"rank 0: F0.1 B0.1\nrank 1: F0 B0\n", 2, 1, 1, "there is no model chunk 1"},
      // missing micro-batch
      {"rank 0: F0 F1 B0 B1\nrank 1: F0 B0 F1\n", 2, 2, 1, "rank 1 never runs B1"},
      {"rank 0: F0 B0\nrank 1: F0 B0\n", 2, 2, 1, "rank 0 never runs F1"},
      // twice
      {"rank 0: F0 F0 B0\nrank 1: F0 B0\n", 2, 1, 1,
       "rank 0, action 2 (F0): rank 0 already ran F0 at action 1"},
      {"rank 0: F0 B0 W0 W0\nrank 1: F0 B0\n", 2, 1, 1, "already ran W0"},
      // B before F, W before B
      {"rank 0: B0 F0\nrank 1: F0 B0\n", 2, 1, 1,
       "rank 0, action 1 (B0) comes before F0 on rank 0"},
      {"rank 0: F0 B0\nrank 1: F0 W0 B0\n", 2, 1, 1,
       "rank 1, action 2 (W0) comes before B0 on rank 1"},
      // deadlock: rank 0 waits for B0 before sending F1; rank 1 wants F1 first
      {"rank 0: F0 B0 F1 B1\nrank 1: F0 F1 B0 B1\n", 2, 2, 1,
       "rank 0, action 2 (B0) waits for B0 of rank 1, which is itself waiting at action 2 (F1): "
       "a deadlock"},
      // deadlock on interleaved chunks: chunk 1 of rank 0 needs chunk 0 of rank 1
      {"rank 0: F0.1 F0.0 B0.1 B0.0\nrank 1: F0.0 F0.1 B0.1 B0.0\n", 2, 1, 2,
       "rank 0, action 1 (F0.1) waits for F0.0 of rank 1"},
      // an empty file
      {"# nothing\n\n", 2, 1, 1, "holds no schedule"},
  };
  for (const Bad& b : cases) {
    INFO(b.text);
    const std::string e = refusal(b.text, b.P, b.M, b.V);
    CHECK(e.find(b.part) != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
    CHECK(!e.empty());
  }
  // And the good ones pass.
  CHECK(refusal("rank 0: F0 F1 B0 B1\nrank 1: F0 B0 F1 B1\n", 2, 2) == "");
  CHECK(refusal("0: F0 B0 W0\n1: F0 B0 W0   # split backward\n", 2, 1) == "");
}

TEST_CASE("schedules: a named schedule refuses sizes it cannot take", "[schedule]") {
  CHECK_THROWS_WITH(named_schedule("interleaved", 4, 6, 2),
                    Catch::Contains("--micro-batches 6") && Catch::Contains("a multiple of 4"));
  CHECK_THROWS_WITH(named_schedule("1f1b", 4, 8, 2), Catch::Contains("--virtual-stages 2"));
  CHECK_THROWS_WITH(named_schedule("zb-h2", 4, 8), Catch::Contains("no schedule named 'zb-h2'"));
}

TEST_CASE("schedules: gpipe, 1f1b, zb-h1 and naive-mp really run the orders their schedules write",
          "[schedule][pipeline]") {
  for (const char* name : {"gpipe", "1f1b", "zb-h1", "naive-mp"})
    for (int P : {2, 4})
      for (int M : {4, 8}) {
        const bool naive = std::string(name) == "naive-mp";
        if (naive && M != 4) continue;
        RunConfig c = test::small_run("mlp:4x32", name, P, 16, 1, OptimizerKind::adamw, 2);
        if (!naive) c.micro_batches = M;
        INFO(name << ", P " << P << ", M " << c.micro_batches);
        const RunResult r = run_training(c);
        const Schedule want = named_schedule(name, P, naive ? 1 : M);
        for (int step = 0; step < 2; ++step)
          CHECK(format_schedule(recorded_schedule(r, step)) == format_schedule(want));
      }
}

TEST_CASE("schedules: 'shardlab schedule' prints a named or written schedule, refuses a bad one",
          "[schedule][cli]") {
  const test::CliResult named = test::run_cli("schedule zb-h1 --stages 4 --micro-batches 8");
  INFO(named.out);
  CHECK(named.code == 0);
  CHECK(named.out.find("rank 3: F0 B0 F1 B1 F2 B2 F3 B3 W0 F4") != std::string::npos);
  CHECK(named.out.find("idle / compute on the busiest rank 0.125 (zb-h1's (P-1)/(3M) = 0.125)") !=
        std::string::npos);
  test::TempDir dir;
  const std::string file = (dir.path / "mine.txt").string();
  std::ofstream(file) << "# mine\nrank 0: F0 F1 B0 B1\nrank 1: F0 B0 F1 B1\n";
  const test::CliResult mine = test::run_cli("schedule " + file);
  INFO(mine.out);
  CHECK(mine.code == 0);
  CHECK(mine.out.find("step 9 units") != std::string::npos);
  test::expect_refused("schedule " + file + " --micro-batches 3", "rank 0 never runs F2");
  test::expect_refused("schedule " + file + " --stages 3",
                       "has 2 rank lines but the pipeline has 3");
  std::ofstream(file) << "rank 0: F0 B0 F1 B1\nrank 1: F0 F1 B0 B1\n";
  test::expect_refused("schedule " + file, "a deadlock");
  test::expect_refused("schedule nope", "'nope' is neither a schedule name nor a readable file");
  test::expect_refused("schedule interleaved --micro-batches 6", "a multiple of 4");
  test::expect_refused("schedule 1f1b --stages 0", "--stages 0 is out of range (valid: 1 to 64)");
}

TEST_CASE(
    "schedules: a learner's --schedule file runs as written, equals single, and a bad one "
    "is refused before any rank starts",
    "[schedule][pipeline][cli]") {
  test::TempDir dir;
  const std::string file = (dir.path / "mine.txt").string();
  // Two stages, four micro-batches, backwards split into B and W, the Ws
  // placed by hand where the stages would otherwise wait: not a named schedule.
  const std::string mine =
      "# mine: zero bubble by hand\n"
      "rank 0: F0 F1 B0 F2 B1 F3 B2 W0 B3 W1 W2 W3\n"
      "rank 1: F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3\n";
  std::ofstream(file) << mine;
  RunConfig c = test::small_run("mlp:4x32", "1f1b", 2, 16, 3, OptimizerKind::adamw, 2);
  c.micro_batches = 4;
  c.schedule = file;
  const RunResult r = run_training(c);
  const RunResult ref =
      run_training(test::small_run("mlp:4x32", "single", 1, 16, 3, OptimizerKind::adamw, 2));
  CHECK(test::max_rel_diff(r.final_params, ref.final_params) < 5e-5);
  for (int step = 0; step < c.steps; ++step)
    CHECK(format_schedule(recorded_schedule(r, step)) ==
          format_schedule(parse_schedule(mine, "mine")));

  // On the command line: the report names the file and its unit-cost bubble.
  const std::string base =
      "run --model mlp:4x32 --batch 16 --steps 1 --world 2 --strategy 1f1b "
      "--micro-batches 4 --schedule ";
  const test::CliResult ok = test::run_cli(base + file);
  INFO(ok.out);
  CHECK(ok.code == 0);
  CHECK(ok.out.find("schedule          " + file + " (run in place of 1f1b's order)") !=
        std::string::npos);
  // Refused in one line, before a rank starts (no summary), naming rank and action.
  std::ofstream(file) << "rank 0: F0 F1 B0 B1 F2 B2 F3 B3\nrank 1: F0 B0 F1 B1 F2 B2 F3\n";
  test::expect_refused(base + file, "--schedule " + file + ": rank 1 never runs B3");
  std::ofstream(file) << "rank 0: F0 B0 W0 F1 B1 W1 F2 B2 W2 F3 B3 W3\n"
                         "rank 1: F0 W0 B0 F1 B1 W1 F2 B2 W2 F3 B3 W3\n";
  test::expect_refused(base + file, "rank 1, action 2 (W0) comes before B0 on rank 1");
  test::expect_refused(base + (dir.path / "none.txt").string(), "--schedule ");
  // The file's micro-batches must be the run's.
  test::expect_refused(
      "run --model mlp:4x32 --batch 16 --steps 1 --world 2 --strategy 1f1b "
      "--micro-batches 2 --schedule " +
          file,
      "there is no micro-batch 2");
}

TEST_CASE(
    "schedules: an order that would hang on rendezvous sends runs with receives posted early, "
    "and holds the activations the plan predicts",
    "[schedule][pipeline]") {
  // The named schedules need none of the plan's extra early receives.
  for (const std::string& name : schedule_names())
    for (int P : {2, 4})
      for (int M : {4, 8}) {
        const int V = name == "interleaved" ? 2 : 1;
        if (name == "naive-mp" && M != 4) continue;
        INFO(name << ", P " << P << ", M " << M);
        CHECK(plan_receives(named_schedule(name, P, name == "naive-mp" ? 1 : M, V)).mended.empty());
      }
  // Two random orders (one with split backwards) that validate but, with the
  // usual early receives alone, leave two ranks each waiting for the other to
  // take its send: the plan posts the missing receives earlier.
  for (const char* name : {"rendezvous_p4_m8.txt", "rendezvous_split_p4_m8.txt"}) {
    INFO(name);
    const std::string file = std::string(SHARDLAB_TEST_DATA) + "/schedules/" + name;
    const Schedule want = parse_schedule(read_golden(name), name);
    const ReceivePlan plan = plan_receives(want);
    CHECK(plan.mended.size() >= 7);
    // Every mend names a receive its rank really reads later.
    for (const ReceivePlan::Mend& m : plan.mended) {
      const Action reader{m.message.gradient ? ActionKind::backward : ActionKind::forward,
                          m.message.micro_batch, m.message.chunk};
      const auto& line = want.ranks[m.rank];
      const auto at = std::find(line.begin(), line.end(), reader);
      REQUIRE(at != line.end());
      CHECK(static_cast<size_t>(at - line.begin()) >= m.action);
    }
    RunConfig c = test::small_run("mlp:8x32", "zb-h1", 4, 32, 9, OptimizerKind::adamw, 3);
    c.micro_batches = 8;
    c.schedule = file;
    const RunResult r = run_training(c);
    RunConfig s = c;
    s.strategy = "single";
    s.world = 1;
    s.micro_batches = 1;
    s.schedule.clear();
    CHECK(test::max_rel_diff(r.final_params, run_training(s).final_params) < 5e-5);
    for (int step = 0; step < c.steps; ++step)
      CHECK(format_schedule(recorded_schedule(r, step)) == format_schedule(want));
    // The early receives' buffers are activations: the allocator's peak is
    // the meta run's and the plan's walk's.
    const MemoryEstimate e = estimate_memory(c);
    for (int rank = 0; rank < 4; ++rank) {
      INFO("rank " << rank);
      const int64_t measured =
          r.ranks[rank].memory.device.peak[static_cast<int>(MemCategory::activations)];
      CHECK(measured ==
            e.ranks[rank].at_report.device.peak[static_cast<int>(MemCategory::activations)]);
      CHECK(measured == predicted_peak_activation_bytes(c, rank));
    }
  }
  // 'shardlab schedule' says where a run posts a receive early, and why.
  const test::CliResult out = test::run_cli(std::string("schedule ") + SHARDLAB_TEST_DATA +
                                            "/schedules/rendezvous_p4_m8.txt");
  INFO(out.out);
  CHECK(out.code == 0);
  CHECK(out.out.find("rank 2 posts the receive its F7 reads before its action 10 (B2), early: "
                     "rank 1 waits for it to be taken") != std::string::npos);
}
