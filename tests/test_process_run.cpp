// One process per rank, the runner's side: ranks that meet only through a
// rendezvous store (here each "process" is a thread with its own group, link
// and store handle) train to the very bits of the threaded run.
#include <catch2/catch.hpp>

#include <filesystem>
#include <future>
#include <thread>

#include "core/launch/check_store.h"
#include "core/parallel/strategy.h"
#include "core/record/trace.h"
#include "core/run/runner.h"

using namespace shardlab;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("shardlab-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Every rank as if it were its own process: its own store handle on the same
// directory, its own groups. Returns each rank's result.
std::vector<RunResult> run_as_processes(const RunConfig& cfg, const fs::path& dir,
                                        const RunCallbacks& cb = {}) {
  std::vector<std::future<RunResult>> futures;
  for (int r = 0; r < cfg.world; ++r)
    futures.push_back(std::async(std::launch::async, [&, r] {
      const std::unique_ptr<CheckStore> file = make_file_store(dir.string());
      const std::unique_ptr<CheckStore> store = make_prefix_store("run", *file);
      ProcessContext pc;
      pc.rank = r;
      pc.store = store.get();
      return run_training(cfg, nullptr, cb, pc);
    }));
  std::vector<RunResult> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

}  // namespace

TEST_CASE("ranks meeting through a store end with the threaded run's bits", "[process]") {
  for (const char* strategy : {"ddp", "zero3", "fsdp", "1f1b"}) {
    RunConfig cfg;
    cfg.model = "mlp:4x32";
    cfg.strategy = strategy;
    cfg.world = 4;
    cfg.batch = 16;
    cfg.steps = 3;
    if (std::string(strategy) == "1f1b") cfg.micro_batches = 4;
    INFO(strategy);
    const RunResult threads = run_training(cfg);
    const fs::path dir = fresh_dir(std::string("proc-") + strategy);
    const std::vector<RunResult> procs = run_as_processes(cfg, dir);
    REQUIRE(procs[0].final_params.size() == threads.final_params.size());
    CHECK(procs[0].final_params == threads.final_params);  // bit for bit
    for (int r = 0; r < cfg.world; ++r) {
      INFO("rank " << r);
      CHECK(procs[r].process_rank == r);
      CHECK(procs[r].losses == threads.losses);
      // Every rank's report arrived as a message: the same traffic as threads.
      for (int q = 0; q < cfg.world; ++q) {
        CHECK(procs[r].ranks[q].bytes_sent_per_step == threads.ranks[q].bytes_sent_per_step);
        CHECK(procs[r].ranks[q].step_ms.size() == 3);
        CHECK(procs[r].ranks[q].memory.device.peak_total ==
              threads.ranks[q].memory.device.peak_total);
      }
      CHECK(procs[r].clock_offset_ns.size() == 4);
      CHECK(procs[r].clock_rtt_ns[0] == 0);
      if (r > 0) CHECK(procs[r].clock_rtt_ns[r] > 0);
      // One clock on one host: the offset is within the round trip.
      CHECK(std::abs(procs[r].clock_offset_ns[r]) <= procs[r].clock_rtt_ns[r] + 1000000);
      // Each process recorded its own rank and received the others' records.
      for (int q = 0; q < cfg.world; ++q) {
        CHECK(procs[r].recorders[q]->span_count() == procs[q].recorders[q]->span_count());
        // Every allocation event, the frees of the rank's teardown included
        // (it tears down before the exchange).
        const size_t got = procs[r].recorders[q]->snapshot().allocs.size();
        CHECK(got > 0);
        CHECK(got == procs[q].recorders[q]->snapshot().allocs.size());
      }
    }
    // Each process's own trace, merged: the same spans and arrows as one
    // trace of all ranks (the arrows cross files).
    std::vector<Recorder::Snapshot> all;
    std::vector<nlohmann::json> parts;
    for (int r = 0; r < cfg.world; ++r) {
      all.push_back(procs[r].recorders[r]->snapshot());
      std::vector<Recorder::Snapshot> own(cfg.world);
      own[r] = procs[r].recorders[r]->snapshot();
      parts.push_back(trace_to_json(own, procs[r].t0_ns, {{"rank", r}}, r));
    }
    const nlohmann::json merged = merge_traces(parts, {});
    const nlohmann::json whole = trace_to_json(all, procs[0].t0_ns);
    auto count = [](const nlohmann::json& t, const char* ph) {
      int n = 0;
      for (const auto& e : t["traceEvents"]) n += e["ph"] == ph;
      return n;
    };
    for (const char* ph : {"X", "M", "C", "s", "f"}) CHECK(count(merged, ph) == count(whole, ph));
    CHECK(merged["metadata"]["ranks"].size() == 4);
    if (std::string(strategy) == "1f1b") CHECK(count(merged, "s") > 0);
    CHECK_THROWS_WITH(merge_traces({parts[1], parts[1]}, {"a.json", "b.json"}),
                      Catch::Contains("'b.json' holds rank 1"));
    CHECK_THROWS_WITH(merge_traces({nlohmann::json::array()}, {"x.json"}),
                      Catch::Contains("'x.json' is not a Shardlab trace"));
    fs::remove_all(dir);
  }
}

TEST_CASE("a dp x pp x tp mesh as processes ends with the threaded run's bits",
          "[process][mesh][tp]") {
  // Each axis group is its own Gloo context behind a prefixed store: the tp
  // all-reduces inside the layers, the pp sends, the dp all-reduce.
  RunConfig cfg;
  cfg.model = "mlp:4x32";
  cfg.strategy = "1f1b";
  cfg.mesh = "dp=2,pp=2,tp=2";
  cfg.world = 8;
  cfg.batch = 16;
  cfg.micro_batches = 2;
  cfg.steps = 2;
  const RunResult threads = run_training(cfg);
  const fs::path dir = fresh_dir("proc-mesh-tp");
  const std::vector<RunResult> procs = run_as_processes(cfg, dir);
  CHECK(procs[0].final_params == threads.final_params);  // bit for bit
  for (int r = 0; r < cfg.world; ++r) {
    INFO("rank " << r);
    CHECK(procs[r].losses == threads.losses);
    CHECK(procs[0].ranks[r].bytes_sent_per_step == threads.ranks[r].bytes_sent_per_step);
    // Each axis's share crosses the processes' report exchange too.
    CHECK(procs[0].ranks[r].sent_by_axis_per_step == threads.ranks[r].sent_by_axis_per_step);
  }
  fs::remove_all(dir);
}

TEST_CASE("one process per rank: a rank's failure reaches its peers by name", "[process]") {
  RunConfig cfg;
  cfg.model = "mlp:2x16";
  cfg.strategy = "ddp";
  cfg.world = 2;
  cfg.batch = 8;
  cfg.steps = 4;
  cfg.timeout_ms = 5000;
  RunCallbacks cb;
  cb.before_step = [](int rank, int step) {
    if (rank == 1 && step == 2) throw std::runtime_error("injected failure");
  };
  const fs::path dir = fresh_dir("proc-fail");
  std::vector<std::future<std::string>> futures;
  for (int r = 0; r < 2; ++r)
    futures.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      const std::unique_ptr<CheckStore> file = make_file_store(dir.string());
      ProcessContext pc;
      pc.rank = r;
      pc.store = file.get();
      try {
        run_training(cfg, nullptr, cb, pc);
        return "";
      } catch (const std::exception& e) {
        return e.what();
      }
    }));
  const auto start = std::chrono::steady_clock::now();
  const std::string e0 = futures[0].get(), e1 = futures[1].get();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_THAT(e1, Catch::Contains("injected failure"));
  CHECK_THAT(e0, Catch::Contains("rank 1 failed: injected failure"));
  fs::remove_all(dir);
}

TEST_CASE("one process per rank: what cannot run that way says so", "[process]") {
  RunConfig cfg;
  cfg.model = "mlp:2x16";
  cfg.strategy = "dp";
  cfg.world = 2;
  cfg.batch = 8;
  const fs::path dir = fresh_dir("proc-dp");
  const std::unique_ptr<CheckStore> file = make_file_store(dir.string());
  ProcessContext pc;
  pc.store = file.get();
  CHECK_THROWS_WITH(run_training(cfg, nullptr, {}, pc),
                    Catch::Contains("dp cannot run one process"));
  cfg.strategy = "ddp";
  pc.rank = 2;
  CHECK_THROWS_WITH(run_training(cfg, nullptr, {}, pc),
                    Catch::Contains("rank 2 is not a rank of a world of 2"));
  fs::remove_all(dir);
}

TEST_CASE("zero3 over dp with tp inside as processes ends with the threaded run's bits",
          "[process][mesh][tp][zero]") {
  RunConfig cfg;
  cfg.model = "gpt:1x32x4";
  cfg.seq = 8;
  cfg.strategy = "zero3";
  cfg.mesh = "dp=2,tp=2";
  cfg.world = 4;
  cfg.batch = 8;
  cfg.steps = 2;
  const RunResult threads = run_training(cfg);
  const fs::path dir = fresh_dir("proc-zero3-tp");
  const std::vector<RunResult> procs = run_as_processes(cfg, dir);
  CHECK(procs[0].final_params == threads.final_params);  // bit for bit
  for (int r = 0; r < cfg.world; ++r) {
    INFO("rank " << r);
    CHECK(procs[r].losses == threads.losses);
    CHECK(procs[0].ranks[r].sent_by_axis_per_step == threads.ranks[r].sent_by_axis_per_step);
  }
  fs::remove_all(dir);
}

TEST_CASE("the gpt on tp=2 with sequence parallelism as processes ends with the threaded bits",
          "[process][mesh][tp][gpt]") {
  // The vocabulary-parallel embedding and cross-entropy, the block's
  // reduce-scatters and all-gathers, each through the tp group's own context.
  RunConfig cfg;
  cfg.model = "gpt:2x32x4";
  cfg.seq = 8;
  cfg.strategy = "gpipe";
  cfg.mesh = "pp=2,tp=2";
  cfg.sequence_parallel = true;
  cfg.world = 4;
  cfg.batch = 4;
  cfg.micro_batches = 2;
  cfg.steps = 2;
  const RunResult threads = run_training(cfg);
  const fs::path dir = fresh_dir("proc-mesh-gpt");
  const std::vector<RunResult> procs = run_as_processes(cfg, dir);
  CHECK(procs[0].final_params == threads.final_params);
  for (int r = 0; r < cfg.world; ++r) {
    INFO("rank " << r);
    CHECK(procs[r].losses == threads.losses);
  }
  fs::remove_all(dir);
}
