// The memory preflight: each strategy's predicted peak against what its
// allocator measures, a run over the limit refused at once with the estimate
// in its one line (--force runs it anyway), and a failed allocation naming
// the rank, the buffer and its size.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/parallel/strategy.h"
#include "core/predict/memory_estimate.h"
#include "core/run/runner.h"
#include "test_util.h"

using namespace shardlab;
using shardlab::test::run_cli;

namespace {

// Sets SHARDLAB_MEMORY_LIMIT for one scope.
struct LimitEnv {
  explicit LimitEnv(const std::string& value) { setenv("SHARDLAB_MEMORY_LIMIT", value.c_str(), 1); }
  ~LimitEnv() { unsetenv("SHARDLAB_MEMORY_LIMIT"); }
};

RunConfig config(const std::string& strategy, int world) {
  RunConfig c;
  c.model = "mlp:8x256";
  c.strategy = strategy;
  c.world = world;
  c.steps = 3;
  c.record = false;
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("the estimate is within 10% of the measured peak for every strategy", "[preflight]") {
  struct Case {
    std::string strategy, label;
    int world;
    void (*tweak)(RunConfig&);
  };
  std::vector<Case> cases = {{"single", "single", 1, nullptr}};
  for (const StrategyInfo& s : all_strategies())
    if (s.family != StrategyFamily::single)
      for (int w : {2, 4})  // (a parameter server's server on top of w workers)
        cases.push_back({s.name, s.name, s.servers ? w + 1 : w, nullptr});
  cases.push_back({"fsdp", "fsdp --offload", 2, [](RunConfig& c) { c.offload = true; }});
  cases.push_back(
      {"fsdp", "fsdp --no-reshard", 4, [](RunConfig& c) { c.reshard_after_forward = false; }});
  cases.push_back({"gpipe", "gpipe M=4", 2, [](RunConfig& c) { c.micro_batches = 4; }});
  cases.push_back({"gpipe", "gpipe M=4 --recompute", 4, [](RunConfig& c) {
                     c.micro_batches = 4;
                     c.recompute = true;
                   }});
  cases.push_back({"1f1b", "1f1b M=8", 4, [](RunConfig& c) { c.micro_batches = 8; }});
  cases.push_back({"ddp", "ddp bf16", 2, [](RunConfig& c) { c.precision = "bf16"; }});
  cases.push_back({"zero3", "zero3 bf16", 2, [](RunConfig& c) { c.precision = "bf16"; }});

  std::printf("\n%-22s %5s %4s %14s %14s %8s  (mlp:8x256, batch 64, peak in use per rank)\n",
              "strategy", "world", "rank", "estimated", "measured", "error");
  for (const Case& k : cases) {
    RunConfig cfg = config(k.strategy, k.world);
    if (k.tweak) k.tweak(cfg);
    const MemoryEstimate e = estimate_memory(cfg);
    const RunResult r = run_training(cfg);
    REQUIRE(e.ranks.size() == r.ranks.size());
    for (size_t i = 0; i < r.ranks.size(); ++i) {
      const PoolStats& measured = r.ranks[i].memory.device;
      const PoolStats& predicted = e.ranks[i].at_report.device;
      const double err = static_cast<double>(predicted.peak_total - measured.peak_total) /
                         static_cast<double>(measured.peak_total);
      std::printf("%-22s %5d %4zu %14lld %14lld %+7.1f%%\n", k.label.c_str(), k.world, i,
                  static_cast<long long>(predicted.peak_total),
                  static_cast<long long>(measured.peak_total), 100 * err);
      INFO(k.label << " world " << k.world << " rank " << i << ": estimated "
                   << predicted.peak_total << ", measured " << measured.peak_total);
      CHECK(std::abs(err) <= 0.10);
      // In use + cached: what the rank takes from its device, which the preflight sums.
      CHECK(std::abs(static_cast<double>(predicted.peak_reserved - measured.peak_reserved)) <=
            0.10 * static_cast<double>(measured.peak_reserved));
      // The host pool too (fsdp --offload keeps the model states there).
      const PoolStats& host = r.ranks[i].memory.host;
      if (host.peak_total > 0)
        CHECK(
            std::abs(static_cast<double>(e.ranks[i].at_report.host.peak_total - host.peak_total)) <=
            0.10 * static_cast<double>(host.peak_total));
    }
  }
}

TEST_CASE("a run estimated over the limit is refused at once, naming estimate and limit",
          "[preflight]") {
  RunConfig cfg = config("ddp", 2);
  const MemoryEstimate e = estimate_memory(cfg);
  REQUIRE(e.host_total > 0);
  {
    LimitEnv limit(std::to_string(e.host_total / 2));
    const auto t0 = std::chrono::steady_clock::now();
    try {
      run_training(cfg);
      FAIL("the run was not refused");
    } catch (const MemoryRefused& err) {
      const std::string msg = err.what();
      INFO(msg);
      CHECK(msg.find("mlp:8x256, ddp, world 2 needs about ") == 0);
      CHECK(msg.find(bytes_string(static_cast<double>(e.host_total))) != std::string::npos);
      CHECK(msg.find(bytes_string(static_cast<double>(e.host_total / 2)) +
                     " is available (SHARDLAB_MEMORY_LIMIT)") != std::string::npos);
      CHECK(msg.find("--force") != std::string::npos);
      CHECK(msg.find('\n') == std::string::npos);
    }
    CHECK(seconds_since(t0) < 1.0);
  }
  // With the limit just above the estimate it runs.
  LimitEnv limit(std::to_string(e.host_total + 1));
  CHECK_NOTHROW(run_training(cfg));
}

TEST_CASE("a refused run runs anyway with --force", "[preflight]") {
  RunConfig cfg = config("zero2", 2);
  const MemoryEstimate e = estimate_memory(cfg);
  // Slightly under the estimate: refused, though it fits this machine.
  LimitEnv limit(std::to_string(e.host_total * 9 / 10));
  CHECK_THROWS_AS(run_training(cfg), MemoryRefused);
  cfg.force = true;
  const RunResult r = run_training(cfg);
  CHECK(r.losses.size() == 3);

  const auto cli = run_cli("run --model mlp:8x256 --strategy zero2 --steps 3 --no-record");
  CHECK(cli.code == 2);
  CHECK(cli.out.find("error: mlp:8x256, zero2, world 2 needs about") != std::string::npos);
  const auto forced =
      run_cli("run --model mlp:8x256 --strategy zero2 --steps 3 --no-record --force");
  INFO(forced.out);
  CHECK(forced.code == 0);
  CHECK(forced.out.find("final loss") != std::string::npos);
}

TEST_CASE("the real machine refuses a model far larger than its memory, quickly", "[preflight]") {
  const auto t0 = std::chrono::steady_clock::now();
  // 16 x 16384² parameters: 17 GB of weights, 69 GB with grads and AdamW, per replica.
  const auto r = run_cli("run --model mlp:16x16384 --strategy ddp --world 2 --steps 2");
  const double s = seconds_since(t0);
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.rfind("error: mlp:16x16384, ddp, world 2 needs about ", 0) == 0);
  CHECK(r.out.find(" per rank (") != std::string::npos);
  CHECK(r.out.find("is available (") != std::string::npos);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  CHECK(s < 1.0);
}

TEST_CASE("a step count whose records cannot fit is refused, naming the per-step cost",
          "[preflight]") {
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_cli("run --steps 2147483647");
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.rfind("error: mlp:8x256, ddp, world 2, 2147483647 steps needs about ", 0) == 0);
  CHECK(r.out.find(" a step)") != std::string::npos);
  CHECK(r.out.find("use fewer --steps or --no-record") != std::string::npos);
  CHECK(seconds_since(t0) < 1.0);

  // Records grow with the steps; the history stays when they are off.
  RunConfig cfg = config("ddp", 2);
  cfg.record = true;
  const MemoryEstimate rec = estimate_memory(cfg);
  cfg.record = false;
  const MemoryEstimate no_rec = estimate_memory(cfg);
  CHECK(rec.per_step > 10 * no_rec.per_step);
  CHECK(no_rec.per_step > 0);
  // --save-data holds every batch: 2 x steps x batch x D floats.
  cfg.steps = 1000;
  const MemoryEstimate data = estimate_memory(cfg, RunOutputs{.save_data = true});
  CHECK(data.shared - estimate_memory(cfg).shared >= 2LL * 1000 * 64 * 256 * 4);
}

TEST_CASE("the per-step record estimate is of the size the recorder reaches", "[preflight]") {
  for (const char* strategy : {"ddp", "zero3", "gpipe"}) {
    RunConfig cfg = config(strategy, 2);
    cfg.record = true;
    cfg.steps = 20;
    const MemoryEstimate e = estimate_memory(cfg);
    const RunResult r = run_training(cfg);
    for (size_t i = 0; i < r.ranks.size(); ++i) {
      const auto snap = r.recorders[i]->snapshot();
      // Everything recorded, setup included, per step.
      const int64_t bytes = static_cast<int64_t>(snap.allocs.size() * sizeof(AllocEvent) +
                                                 snap.spans.size() * sizeof(Span)) /
                            cfg.steps;
      INFO(strategy << " rank " << i << ": estimated " << e.ranks[i].record_per_step
                    << " B/step, recorded about " << bytes);
      // An upper bound, not wildly above: vectors reserve up to twice what they hold.
      CHECK(e.ranks[i].record_per_step >= bytes);
      CHECK(e.ranks[i].record_per_step <= 6 * bytes);
    }
  }
}

TEST_CASE("a failed allocation names the rank, the buffer and its size", "[preflight]") {
  // The allocator on its own: a request no machine has.
  auto backend = make_cpu_backend();
  Allocator alloc(*backend, nullptr, 3);
  try {
    alloc.alloc("layers.3.weight.grad", MemCategory::grads, {int64_t{1} << 22, int64_t{1} << 22});
    FAIL("a 64 TiB allocation succeeded");
  } catch (const OutOfMemory& e) {
    CHECK(std::string(e.what()) ==
          "rank 3 could not allocate 'layers.3.weight.grad' (grads, 64.00 TiB of cpu memory): out "
          "of memory");
  }

  // In a run: rank 1's allocator limited to 1 MiB fails in setup.
  RunConfig cfg = config("ddp", 2);
  RunCallbacks cb;
  cb.on_allocator = [](int rank, Allocator& a) {
    if (rank == 1) a.set_limit(Pool::device, 1 << 20);
  };
  try {
    run_training(cfg, nullptr, cb);
    FAIL("the run did not fail");
  } catch (const RunError& e) {
    const std::string msg = e.what();
    INFO(msg);
    // Rank 1 holds layer 0's weight, bias and their gradients and layer 1's
    // weight (770 KiB) when layer 1's weight gradient would take it past 1 MiB.
    CHECK(msg.rfind("rank 1 failed: could not allocate 'layers.1.weight.grad' (grads, 256.00 KiB "
                    "of cpu memory): out of memory (this pool is limited to 1.00 MiB, 770.00 KiB "
                    "in use)",
                    0) == 0);
  }
}

TEST_CASE("bench comm refuses sizes that cannot fit, at once", "[preflight]") {
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_cli("bench comm --sizes 4G --worlds 2,4");
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.find("error: bench comm --sizes up to 4 GiB with --worlds 4 needs about ") !=
        std::string::npos);
  CHECK(seconds_since(t0) < 1.0);
  LimitEnv limit("1M");
  const auto small = run_cli("bench comm --sizes 4K..64K --worlds 2");
  INFO(small.out);
  CHECK(small.code == 0);
  const auto over = run_cli("bench comm --sizes 1M --worlds 2");
  CHECK(over.code == 2);
  CHECK(over.out.find("is available (SHARDLAB_MEMORY_LIMIT)") != std::string::npos);
}

TEST_CASE("one process per rank: each process's baseline, weights, data and history count",
          "[preflight]") {
  RunConfig cfg = config("ddp", 4);
  cfg.steps = 1000;
  const MemoryEstimate threads = estimate_memory(cfg);
  CHECK(threads.processes == 0);
  CHECK(threads.processes_total == 0);
  cfg.ranks_on_host = 4;  // shardlab launch --nproc-per-node 4
  const MemoryEstimate procs = estimate_memory(cfg);
  CHECK(procs.processes == 4);
  // Measured: this process's private memory now, and what start-up adds after a preflight,
  // in steps of 4 MiB.
  CHECK(procs.process_baseline >= int64_t{4} << 20);
  CHECK(procs.process_baseline % (int64_t{4} << 20) == 0);
  CHECK(procs.per_process == procs.process_baseline + procs.shared + procs.steps_total);
  CHECK(procs.processes_total == 4 * procs.per_process);
  // The ranks' part is the same; the rest is counted once per process.
  CHECK(procs.host_total - procs.processes_total ==
        threads.host_total - threads.shared - threads.steps_total);
  CHECK(procs.host_total - threads.host_total >= 4 * procs.process_baseline);
  // The case that was missed: 32 processes each keep the world's loss shares, 16 B per rank
  // and step (~100 MB each for 200000 steps), and the estimate counted them once.
  cfg.world = 32;
  cfg.ranks_on_host = 32;
  cfg.steps = 200000;
  const MemoryEstimate many = estimate_memory(cfg);
  CHECK(many.per_process >= int64_t{200000} * 32 * 16);
  CHECK(many.host_total >= int64_t{32} * 200000 * 32 * 16);
}

namespace {
// "6.49 MiB" (as bytes_string writes) after `tag` in `text`, in bytes; -1 when absent.
double bytes_after(const std::string& text, const std::string& tag) {
  const size_t at = text.find(tag);
  if (at == std::string::npos) return -1;
  char unit[8] = {};
  double v = 0;
  if (std::sscanf(text.c_str() + at + tag.size(), "%lf %7s", &v, unit) != 2) return -1;
  const std::string u = unit;
  const double scale = u == "B" ? 1 : u == "KiB" ? 1024.0 : u == "MiB" ? 1048576.0 : 1073741824.0;
  return v * scale;
}
}  // namespace

TEST_CASE("under launch the preflight counts the processes, labelled, once", "[preflight]") {
  LimitEnv limit("1");
  const std::string run = "run --model mlp:8x256 --batch 48 --steps 20 --no-record";
  const auto threads = run_cli(run + " --world 3");
  INFO(threads.out);
  CHECK(threads.code == 2);
  CHECK(threads.out.find("processes") == std::string::npos);
  const auto launched = run_cli("launch --nproc-per-node 3 -- " + run);
  INFO(launched.out);
  CHECK(launched.code == 2);
  const std::string label = " for the 3 processes (";
  CHECK(launched.out.find(label) != std::string::npos);
  CHECK(launched.out.find(label) == launched.out.rfind(label));  // one rank's line, shown once
  const double baseline = bytes_after(launched.out, label);
  CHECK(baseline >= 4 << 20);
  CHECK(bytes_after(launched.out, " per rank (") - bytes_after(threads.out, " per rank (") >=
        3 * baseline * 0.99);  // bytes_string rounds to 3 digits
}

TEST_CASE("SHARDLAB_MEMORY_LIMIT sizes parse, and a bad one is refused", "[preflight]") {
  CHECK(parse_memory_size("1024") == 1024);
  CHECK(parse_memory_size("512M") == 512LL << 20);
  CHECK(parse_memory_size("1.5G") == 3LL << 29);
  CHECK(parse_memory_size("2GiB") == 2LL << 30);
  CHECK(parse_memory_size("8T") == 8LL << 40);
  CHECK(parse_memory_size("lots") == -1);
  CHECK(parse_memory_size("-1G") == -1);
  CHECK(parse_memory_size("") == -1);
  LimitEnv limit("lots");
  CHECK_THROWS_WITH(host_memory_limit(), Catch::Contains("SHARDLAB_MEMORY_LIMIT 'lots'"));
  const auto r = run_cli("run --steps 2 --no-record");
  CHECK(r.code == 2);
}

TEST_CASE("the estimate matches the measured peak for every strategy on gpt", "[preflight][gpt]") {
  std::printf("\n%-22s %5s %4s %14s %14s %8s  (gpt:2x64x4, seq 32, batch 8, peak per rank)\n",
              "strategy", "world", "rank", "estimated", "measured", "error");
  struct Case {
    std::string strategy;
    int world;
    std::string precision = "fp32";
    int micro_batches = 1;
    std::string attention = "";  // the CPU's default, naive
  };
  std::vector<Case> cases = {{"single", 1}, {"single", 1, "bf16"}};
  for (const StrategyInfo& s : all_strategies())
    if (s.family != StrategyFamily::single)
      for (int w : {2, 4}) {
        // Interleaved cuts 4 layers into world × 2 chunks: world 2 only.
        if (s.reads_option(StrategyOption::virtual_stages) && w == 4) continue;
        cases.push_back({s.name, s.servers ? w + 1 : w, "fp32",
                         s.family == StrategyFamily::pipeline ? 4 : 1});
      }
  for (const std::string s : {"ddp", "zero2", "zero3", "fsdp"}) cases.push_back({s, 2, "bf16"});
  // --attention flash: a logsumexp per row kept instead of the [T,T] matrix.
  cases.push_back({"single", 1, "fp32", 1, "flash"});
  cases.push_back({"single", 1, "bf16", 1, "flash"});
  cases.push_back({"zero3", 2, "bf16", 1, "flash"});
  cases.push_back({"fsdp", 4, "fp32", 1, "flash"});
  cases.push_back({"gpipe", 4, "fp32", 4, "flash"});
  cases.push_back({"1f1b", 2, "fp32", 4, "flash"});
  for (const Case& k : cases) {
    RunConfig cfg = config(k.strategy, k.world);
    cfg.model = "gpt:2x64x4";
    cfg.seq = 32;
    cfg.batch = 8;
    cfg.precision = k.precision;
    cfg.attention = k.attention;
    if (k.strategy == "gpipe" || k.strategy == "1f1b") cfg.micro_batches = k.micro_batches;
    const MemoryEstimate e = estimate_memory(cfg);
    const RunResult r = run_training(cfg);
    REQUIRE(e.ranks.size() == r.ranks.size());
    for (size_t i = 0; i < r.ranks.size(); ++i) {
      const PoolStats& measured = r.ranks[i].memory.device;
      const PoolStats& predicted = e.ranks[i].at_report.device;
      const double err = static_cast<double>(predicted.peak_total - measured.peak_total) /
                         static_cast<double>(measured.peak_total);
      std::printf("%-22s %5d %4zu %14lld %14lld %+7.1f%%\n",
                  (k.strategy + " " + k.precision + (k.attention.empty() ? "" : " flash")).c_str(),
                  k.world, i, static_cast<long long>(predicted.peak_total),
                  static_cast<long long>(measured.peak_total), 100 * err);
      INFO(k.strategy << " " << k.precision << " " << k.attention << " world " << k.world
                      << " rank " << i);
      CHECK(std::abs(err) <= 0.02);
      // The activations are planned to the byte, whichever attention keeps them.
      const int act = static_cast<int>(MemCategory::activations);
      CHECK(predicted.peak[act] == measured.peak[act]);
    }
  }
}
