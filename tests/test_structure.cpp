// The registry's built-in entries and what they declare (traffic, in-flight
// formula), the ZeRO accounting's one split, and the shared data-parallel
// mechanics (core/parallel/data_parallel.h, core/comm/phase_barrier.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/comm.h"
#include "core/comm/phase_barrier.h"
#include "core/parallel/model_state.h"
#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"
#include "strategies/registry.h"

using namespace shardlab;

TEST_CASE("built-in strategies are registered once, each with its traffic by operation",
          "[structure]") {
  register_builtin_strategies();  // main() already did: a second call changes nothing
  const size_t n = all_strategies().size();
  register_builtin_strategies();
  CHECK(all_strategies().size() == n);
  CHECK_THROWS_AS(register_strategy(ddp_strategy()), std::logic_error);
  CHECK(all_strategies().size() == n);

  // Each strategy's model-state traffic, as its operations sum to (rank 1 of 4, the reference's
  // only rank; resharding after forward) and the first of them. Pipelines move only activations,
  // which ZeRO's accounting leaves out: no operations.
  struct Expect {
    std::string formula;
    std::string first;
  };
  const std::map<std::string, Expect> traffic = {
      {"single", {"0", ""}},
      {"ddp", {"2Ψ", "all-reduce of the gradients"}},
      {"dp", {"Ψ", "copy of the gradients"}},
      {"zero1", {"2Ψ", "reduce-scatter of the gradients"}},
      {"zero2", {"2Ψ", "reduce-scatter of the gradients"}},
      {"zero3", {"3Ψ", "all-gather of the parameters"}},
      {"fsdp", {"3Ψ", "all-gather of the parameters"}},
      {"naive-mp", {"", ""}},
      {"gpipe", {"", ""}},
      {"1f1b", {"", ""}},
      {"zb-h1", {"", ""}},
      {"interleaved", {"", ""}},
      {"ps", {"", ""}}};  // its own report: a server's W·Ψ/S (core/predict/server_traffic.h)
  REQUIRE(n == traffic.size());
  for (const StrategyInfo& s : all_strategies()) {
    INFO(s.name);
    REQUIRE(traffic.count(s.name));
    const Expect& want = traffic.at(s.name);
    if (s.has_stages() || s.servers) {
      CHECK_FALSE(s.moves);
    } else {
      const int world = s.world_for(4);
      const CommPrediction c = predict_comm(ModelStateInput{1e6, world, s.name}, world - 1);
      CHECK(c.formula == want.formula);
      CHECK(c.by_operation.rfind(want.first, 0) == 0);
    }
    CHECK(s.in_flight_formula.empty() == (s.family != StrategyFamily::pipeline));
    CHECK(is_controller(s.name) == (s.name == "dp"));
  }
  // Rank 0 of dp copies the weights to each replica; fsdp keeping its gathered
  // parameters from forward to backward saves one all-gather.
  CHECK(predict_comm(ModelStateInput{1e6, 4, "dp"}, 0).formula == "(N−1)Ψ");
  CHECK(predict_comm(ModelStateInput{1e6, 4, "dp"}, 0).sent_bytes == 3e6 * 4);
  ModelStateInput keep{1e6, 4, "fsdp"};
  keep.reshard_after_forward = false;
  CHECK(predict_comm(keep, 1).formula == "2Ψ");
  CHECK(predict_comm(ModelStateInput{1e6, 1, "dp"}, 0).formula == "0");
  CHECK(strategy_names_where([](const StrategyInfo& s) { return s.has_stages(); }) ==
        "gpipe, naive-mp, 1f1b, zb-h1, interleaved");
  CHECK(strategy_names_where([](const StrategyInfo& s) { return s.is_reference(); }) == "single");
  CHECK_FALSE(is_controller("nope"));
}

namespace {
// Every .cpp and .h under SHARDLAB_SOURCE_DIR/dir, with its text.
std::vector<std::pair<std::string, std::string>> sources_under(const char* dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(SHARDLAB_SOURCE_DIR) / dir)) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    out.emplace_back(fs::relative(e.path(), SHARDLAB_SOURCE_DIR).string(), text.str());
  }
  return out;
}

// "path: pattern" for each pattern found in a source under `dirs`, one per
// line (empty when none), leaving out the files in `allowed`.
std::string sources_containing(const std::vector<const char*>& dirs,
                               const std::vector<std::string>& patterns,
                               const std::vector<std::string>& allowed = {}) {
  std::string found;
  for (const char* dir : dirs)
    for (const auto& [path, src] : sources_under(dir)) {
      if (std::find(allowed.begin(), allowed.end(), path) != allowed.end()) continue;
      for (const std::string& pattern : patterns)
        if (src.find(pattern) != std::string::npos) found += path + ": " + pattern + "\n";
    }
  return found;
}
}  // namespace

// Issue 12 item 6: what a strategy is lives in its registration, so nothing outside
// strategies/ asks for one by name (tests and help text may name them).
TEST_CASE("no strategy is compared by name outside strategies/", "[structure]") {
  std::vector<std::string> patterns;
  for (const StrategyInfo& s : all_strategies()) {
    const std::string q = "\"" + s.name + "\"";
    for (const std::string& p : {"== " + q, "!= " + q, q + " ==", q + " !="}) patterns.push_back(p);
  }
  const std::string found = sources_containing({"app", "core", "bench"}, patterns);
  INFO("comparisons by name:\n" << found);
  CHECK(found.empty());
}

// Issue 25: what a strategy is, the rest of the program asks its descriptor
// (StrategyInfo's questions: is_reference, rows_per_pass, role, shards, ...);
// only core/strategy.* reads the fields those answers come from, and the
// registrations in strategies/ set them.
TEST_CASE("no switch on a strategy's family, controller or ZeRO stage outside its descriptor",
          "[structure]") {
  const std::string found = sources_containing(
      {"app", "core", "bench"}, {"StrategyFamily::", ".controller", ".zero_stage", "in_family("},
      {"core/parallel/strategy.h", "core/parallel/strategy.cpp"});
  INFO(found);
  CHECK(found.empty());
}

// Issue 25: the strategy options are one table (core/run_options.h); the
// command line, recordings, validation, the run bar and the compare view read
// its rows, so adding an option is one row, not a case in every switch.
TEST_CASE("no switch on a strategy option outside its table", "[structure]") {
  const std::string found = sources_containing({"app", "core", "bench", "strategies"},
                                               {"case StrategyOption::", "SlotOption"});
  INFO(found);
  CHECK(found.empty());
}

// Issue 25: memory is predicted by running the real code on meta devices, so
// no strategy or model keeps a second, hand-written copy of what it allocates.
TEST_CASE("no strategy or model replays its allocations by hand", "[structure]") {
  const std::string found = sources_containing(
      {"strategies", "core"}, {"MemoryPlan", "MemoryTally", "MemBlock", "plan_memory",
                               "plan_forward", "plan_backward", "plan_loss"});
  INFO(found);
  CHECK(found.empty());
}

TEST_CASE("the model-state split adds up to the predicted bytes and formula", "[structure]") {
  for (const StrategyInfo& s : all_strategies()) {
    if (!has_model_state_prediction(s.name)) continue;
    for (const char* precision : {"fp32", "bf16"})
      for (int rank : {0, 1}) {
        ModelStateInput in;
        in.params = 1e6;
        in.world = s.family == StrategyFamily::single ? 1 : 4;
        in.strategy = s.name;
        in.precision = precision;
        INFO(s.name << " " << precision << " rank " << rank);
        const ModelStateSplit split = model_state_split(in, rank);
        const ModelStateBytes bytes = predict_model_state(in, rank);
        CHECK(bytes.total() == split.whole * in.params + split.sharded * in.params / in.world);
        CHECK(split.whole + split.sharded ==
              split.params.bytes + split.grads.bytes + split.optimizer.bytes);
        CHECK(split.params.sharded == (s.zero_stage >= 3));
        CHECK(split.grads.sharded == (s.zero_stage >= 2));
      }
  }
  // Stage 2 in mixed precision: 2Ψ whole, (2 + 12)Ψ/N sharded.
  ModelStateInput z2;
  z2.params = 1e6;
  z2.world = 4;
  z2.strategy = "zero2";
  z2.precision = "bf16";
  const ModelStateSplit split = model_state_split(z2, 0);
  CHECK(split.whole == 2);
  CHECK(split.sharded == 14);
  CHECK(predict_model_state(z2, 0).formula == "2Ψ + 14Ψ/N");
}

TEST_CASE("a phase barrier names a party that stalls, and fails at once after one leaves",
          "[structure]") {
  PhaseBarrier stalled("dp", 2, std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(stalled.arrive_and_wait(0, "gather"),
                    "rank 0: dp gather: timed out after 200 ms waiting for device(s) 1");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));

  PhaseBarrier left("dp", 2, std::chrono::milliseconds(10000));
  std::thread other([&] { left.leave(1); });
  CHECK_THROWS_WITH(left.arrive_and_wait(0, "reduce"), "rank 0: dp reduce: device 1 left the run");
  other.join();

  PhaseBarrier ok("dp", 2, std::chrono::milliseconds(10000));
  std::thread peer([&] { ok.arrive_and_wait(1, "broadcast"); });
  CHECK_NOTHROW(ok.arrive_and_wait(0, "broadcast"));
  peer.join();
}

TEST_CASE("no test name holds a semicolon (ctest would split it into tests that run nothing)",
          "[structure]") {
  // catch_discover_tests keeps names in a CMake list: "a; b" became two ctest
  // entries, "a" and " b", each matching no test and passing without running one.
  namespace fs = std::filesystem;
  int files = 0;
  for (const auto& e :
       fs::recursive_directory_iterator(std::string(SHARDLAB_SOURCE_DIR) + "/tests")) {
    if (e.path().extension() != ".cpp") continue;
    std::ifstream in(e.path());
    const std::string code((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ++files;
    for (size_t at = code.find("TEST_CASE("); at != std::string::npos;
         at = code.find("TEST_CASE(", at + 1)) {
      if (at > 0 && code[at - 1] == '"') continue;  // this test's own search string
      const size_t open = code.find_first_not_of(" \n", at + 10);
      if (open == std::string::npos || code[open] != '"') continue;  // not a test's name
      const size_t close = code.find('"', open + 1);
      if (close == std::string::npos) break;
      const std::string name = code.substr(open + 1, close - open - 1);
      INFO(e.path().filename().string() << ": " << name);
      CHECK(name.find(';') == std::string::npos);
      // ctest hands the name to the test binary as an argument: "--x ..." is
      // read as an option, and the test fails without running.
      CHECK(name.rfind("-", 0) != 0);
    }
  }
  CHECK(files > 10);
}

TEST_CASE("a strategy's descriptor answers what the program asks of it", "[structure]") {
  RunConfig c;
  c.batch = 12;
  c.world = 3;
  c.micro_batches = 4;
  const StrategyInfo& single = strategy_info("single");
  const StrategyInfo& zero3 = strategy_info("zero3");
  const StrategyInfo& dp = strategy_info("dp");
  const StrategyInfo& gpipe = strategy_info("gpipe");
  const StrategyInfo& naive = strategy_info("naive-mp");
  CHECK(single.is_reference());
  CHECK(single.world_for(4) == 1);
  CHECK(zero3.world_for(4) == 4);
  // Rows one forward call sees: the whole batch, a rank's share, a micro-batch.
  CHECK(single.rows_per_pass(c, 0) == 12);
  CHECK(zero3.rows_per_pass(c, 2) == 4);
  CHECK(dp.rows_per_pass(c, 1) == 4);
  CHECK(gpipe.rows_per_pass(c, 1) == 3);
  CHECK(naive.rows_per_pass(c, 1) == 12);  // naive-mp has no micro-batches
  CHECK(zero3.data_parallel_degree(c) == 3);
  CHECK(gpipe.data_parallel_degree(c) == 1);
  // Ranks that differ: dp's controller and its replicas; a pipeline's stages.
  CHECK(dp.role(0, 3) == RankRole::controller);
  CHECK(dp.role(2, 3) == RankRole::replica);
  CHECK(dp.role(0, 1) == RankRole::peer);
  CHECK(dp.typical_rank(3) == 1);
  CHECK(zero3.typical_rank(3) == 0);
  CHECK(gpipe.role(1, 3) == RankRole::stage);
  // ZeRO's stages as the states each rank keeps 1/N of.
  CHECK(strategy_info("zero1").shards(ModelStatePart::optimizer_state));
  CHECK_FALSE(strategy_info("zero1").shards(ModelStatePart::grads));
  CHECK(strategy_info("zero2").shards(ModelStatePart::grads));
  CHECK(zero3.shards(ModelStatePart::params));
  CHECK_FALSE(strategy_info("ddp").shards(ModelStatePart::optimizer_state));
  CHECK(is_reference_strategy("single"));
  CHECK_FALSE(is_reference_strategy("nope"));
}

// Issue 25: core/ in folders that show the architecture, lowest first; a file
// includes only from its own folder or one below it, so each folder can be read
// (and tested) with only what is under it. A new folder must be given its place here.
TEST_CASE("core's folders include only downward", "[structure]") {
  const std::vector<std::string> levels = {
      "",          // core/ itself: RunConfig, the option table, the clock, the RNG
      "io",        // files written whole or not at all, JSON, safetensors
      "record",    // the recorder, spans, traces
      "device",    // backends (CPU, meta, guarded, CUDA), the allocator
      "comm",      // communicators (Gloo, NCCL, meta, staging) and where ranks run
      "model",     // layers, models, optimizers, mixed precision, data
      "models",    // one model, one file
      "parallel",  // the strategy descriptor and the machinery strategies share
      "predict",   // the meta run, the preflight, projections
      "launch",    // processes, stores, rendezvous
      "run",       // the runner, recordings, metrics, checkpoints of a run
  };
  // The folder's level: models sits with model, so both get model's.
  const auto level_of = [&](const std::string& path) -> int {
    // "core/comm/gloo/gloo_comm.cpp" -> "comm"; "core/config.h" -> "".
    const std::string rest = path.substr(std::string("core/").size());
    const size_t slash = rest.find('/');
    const std::string folder = slash == std::string::npos ? "" : rest.substr(0, slash);
    if (folder == "models") return 5;
    const auto it = std::find(levels.begin(), levels.end(), folder);
    return it == levels.end() ? -1 : static_cast<int>(it - levels.begin());
  };
  std::string unplaced, upward;
  int includes = 0;
  for (const auto& [path, src] : sources_under("core")) {
    const int own = level_of(path);
    if (own < 0) {
      unplaced += path + "\n";
      continue;
    }
    size_t at = 0;
    while ((at = src.find("#include \"core/", at)) != std::string::npos) {
      const size_t begin = at + std::string("#include \"").size();
      const size_t end = src.find('"', begin);
      const std::string target = src.substr(begin, end - begin);
      at = end;
      ++includes;
      const int to = level_of(target);
      if (to < 0)
        unplaced += path + " includes " + target + "\n";
      else if (to > own)
        upward += path + " (" + levels[own] + ") includes " + target + " (" + levels[to] + ")\n";
    }
  }
  INFO("in no folder of the table:\n" << unplaced);
  CHECK(unplaced.empty());
  INFO("includes pointing up:\n" << upward);
  CHECK(upward.empty());
  CHECK(includes > 300);
}

// Issue 25: what a span kind is called, abbreviated to and whether it is a
// collective is one table (SpanKindRow, core/record/recorder.cpp); the traces,
// the app's legend and the projection read its rows.
TEST_CASE("a span kind's names and nature come from its table", "[structure]") {
  const std::string found =
      sources_containing({"app", "core", "bench", "strategies"},
                         {"return \"AR\"", "tr(\"reduce-scatter\")", "return \"reduce_scatter\"",
                          "bool is_collective(", "k == SpanKind::barrier"},
                         {"core/record/recorder.h", "core/record/recorder.cpp"});
  INFO(found);
  CHECK(found.empty());
}
