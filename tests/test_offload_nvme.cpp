// ZeRO-Infinity's offload to NVMe (`--offload nvme:DIR`, zero3 and fsdp): the
// optimizer state lives in a nameless file per rank and training still ends on
// single's weights; each step reads and writes exactly the rank's state, as
// disk spans; with --offload-params the parameter shards too, read before
// each all-gather; the meta run predicts memory to the byte; nothing is left
// in DIR; a disk too small and bad settings are one line.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>

#include "core/model/model.h"
#include "core/parallel/model_state.h"
#include "core/parallel/strategy.h"
#include "core/predict/meta_memory.h"
#include "core/predict/offload_traffic.h"
#include "core/record/trace.h"
#include "core/run/recording.h"
#include "core/run/runner.h"
#include "core/run_options.h"
#include "tests/run_util.h"

using namespace shardlab;
using shardlab::test::CliResult;
using shardlab::test::max_rel_diff;
using shardlab::test::run_cli;

namespace {

namespace fs = std::filesystem;

// An empty directory of this test's own, on a disk filesystem (O_DIRECT).
fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::path("/var/tmp") / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

bool no_entries(const fs::path& d) {
  return fs::directory_iterator(d) == fs::directory_iterator();
}

double disk_per_step(const RunResult& r, int rank, SpanKind kind) {
  return bytes_per_step(r.recorders[rank]->snapshot().spans, r.cfg.steps, kind);
}

}  // namespace

TEST_CASE(
    "nvme offload: zero3 and fsdp end on single's weights, the state read and written once a step",
    "[nvme][offload]") {
  const fs::path dir = fresh_dir("shardlab-test-offload");
  // mlp:4x25: 650 values a layer, padded to 652 for 4 ranks; batch 16.
  RunConfig ref_cfg = test::small_run("mlp:4x25", "single", 1, 16, 5);
  const RunResult ref = run_training(ref_cfg);
  for (const char* strategy : {"zero3", "fsdp"})
    for (int world : {2, 3}) {
      RunConfig c = ref_cfg;
      c.strategy = strategy;
      c.world = world;
      c.batch = ref_cfg.batch - ref_cfg.batch % world;
      // The same run with the state in memory (fsdp: CPU offload, the same host pool).
      RunConfig plain = c;
      plain.offload = std::string(strategy) == "fsdp";
      c.offload = true;
      c.offload_to = "nvme:" + dir.string();
      INFO(strategy << ", world " << world);
      validate(c);
      RunConfig single = ref_cfg;
      single.batch = c.batch;
      const RunResult want = run_training(single);
      const RunResult r = run_training(c);
      REQUIRE(r.final_params.size() == want.final_params.size());
      CHECK(max_rel_diff(r.final_params, want.final_params) < 2e-5);
      // Bit for bit the run whose state stays in memory: the file only holds it.
      const RunResult p = run_training(plain);
      CHECK(r.final_params == p.final_params);
      // Each rank reads its whole state in and writes it back once a step.
      const double state = predict_disk_traffic(c, 0)->read;
      CHECK(state > 0);
      for (int k = 0; k < world; ++k) {
        CHECK(disk_per_step(r, k, SpanKind::disk_read) == state);
        CHECK(disk_per_step(r, k, SpanKind::disk_write) == state);
        for (const Span& s : r.recorders[k]->snapshot().spans)
          if (s.kind == SpanKind::disk_read || s.kind == SpanKind::disk_write)
            CHECK(s.lane == Lane::disk);
      }
      // Its optimizer state is in memory three layers at most (read, stepped, written).
      auto optimizer_peak = [](const RunResult& x) {
        const int cat = static_cast<int>(MemCategory::optimizer_state);
        return x.ranks[0].memory.device.peak[cat] + x.ranks[0].memory.host.peak[cat];
      };
      CHECK(optimizer_peak(r) < optimizer_peak(p));
      CHECK(no_entries(dir));  // the files had no names, and are gone
    }
  fs::remove_all(dir);
}

TEST_CASE(
    "nvme offload: bf16 masters live in the file too, and the weights match the in-memory run",
    "[nvme][offload]") {
  const fs::path dir = fresh_dir("shardlab-test-offload-bf16");
  RunConfig plain = test::small_run("mlp:4x25", "fsdp", 2, 16, 4);
  plain.precision = "bf16";
  plain.offload = true;  // CPU offload: the same host pool, the state in memory
  RunConfig c = plain;
  c.offload_to = "nvme:" + dir.string();
  const RunResult p = run_training(plain);
  const RunResult r = run_training(c);
  CHECK(r.final_params == p.final_params);
  CHECK(r.losses == p.losses);
  // 12 B a parameter: two moments and the master.
  CHECK(predict_disk_traffic(c, 1)->read == 3 * 4 * 4 * (650 / 2.0));
  CHECK(disk_per_step(r, 1, SpanKind::disk_read) == predict_disk_traffic(c, 1)->read);
  CHECK(no_entries(dir));
  fs::remove_all(dir);
}

TEST_CASE("nvme offload: the meta run predicts every rank's peak to the byte", "[nvme][meta]") {
  const fs::path dir = fresh_dir("shardlab-test-offload-meta");
  for (const char* strategy : {"zero3", "fsdp"})
    for (const char* precision : {"fp32", "bf16"})
      for (bool params : {false, true}) {
        RunConfig c = test::small_run("mlp:4x25", strategy, 2, 16, 3);
        c.precision = precision;
        c.offload = true;
        c.offload_to = "nvme:" + dir.string();
        c.offload_params = params;
        INFO(strategy << " " << precision << (params ? " --offload-params" : ""));
        const MetaMemory m = predict_memory_meta(c);
        const RunResult r = run_training(c);
        for (int k = 0; k < c.world; ++k) {
          INFO("rank " << k);
          for (Pool pool : {Pool::device, Pool::host, Pool::disk}) {
            CHECK(m.ranks[k].at_report.pool(pool).peak_total ==
                  r.ranks[k].memory.pool(pool).peak_total);
            for (int cat = 0; cat < kNumMemCategories; ++cat)
              CHECK(m.ranks[k].at_report.pool(pool).peak[cat] ==
                    r.ranks[k].memory.pool(pool).peak[cat]);
          }
        }
        CHECK(no_entries(dir));  // the meta run made no file
      }
  fs::remove_all(dir);
}

TEST_CASE("nvme offload: the file's bytes are the disk pool, kept in recordings and traces",
          "[nvme][recording]") {
  const fs::path dir = fresh_dir("shardlab-test-offload-pool");
  RunConfig c = test::small_run("mlp:4x25", "fsdp", 2, 16, 2);
  c.offload = true;
  c.offload_to = "nvme:" + dir.string();
  const RunResult r = run_training(c);
  const int cat = static_cast<int>(MemCategory::optimizer_state);
  for (int k = 0; k < 2; ++k) {
    const PoolStats& disk = r.ranks[k].memory.disk;
    CHECK(disk.peak_total == static_cast<int64_t>(predict_disk_traffic(c, k)->held));
    CHECK(disk.peak[cat] == disk.peak_total);  // all of it optimizer state
  }
  // A run without the file has no disk pool.
  RunConfig plain = c;
  plain.offload_to.clear();
  CHECK(run_training(plain).ranks[0].memory.disk.peak_total == 0);
  // Saved and read back: the pool and its events.
  const std::string rec = (dir / "run.shardrec").string();
  save_recording(rec, r);
  const Recording back = load_recording(rec);
  CHECK(back.run.ranks[1].memory.disk.peak_total == r.ranks[1].memory.disk.peak_total);
  CHECK(back.run.cfg.offload_to == c.offload_to);
  int64_t disk_events = 0;
  for (const AllocEvent& a : back.run.recorders[1]->snapshot().allocs)
    if (a.pool == Pool::disk) disk_events += a.delta_bytes > 0 ? 1 : 0;
  CHECK(disk_events == 4 * 2);  // two moments of each of the 4 units
  fs::remove(rec);
  // A Chrome trace carries the pool as a counter, and the disk lane.
  std::vector<Recorder::Snapshot> snaps;
  for (const auto& rec_k : r.recorders) snaps.push_back(rec_k->snapshot());
  const nlohmann::json trace = nlohmann::json::parse(
      trace_to_json(snaps, r.t0_ns, trace_metadata(r, describe_origin(r))).dump());
  const Recording from_trace = recording_from_trace(trace, "t.json");
  CHECK(from_trace.run.ranks[0].memory.disk.peak_total == r.ranks[0].memory.disk.peak_total);
  bool disk_lane = false;
  for (const Span& s : from_trace.run.recorders[0]->snapshot().spans)
    disk_lane |= s.lane == Lane::disk && s.kind == SpanKind::disk_read;
  CHECK(disk_lane);
  fs::remove_all(dir);
}

TEST_CASE("nvme offload: a disk too small is one line, and leaves nothing behind", "[nvme][cli]") {
  const fs::path dir = fresh_dir("shardlab-test-offload-full");
  // A 64 KiB tmpfs where this process may mount one (root); else a limit
  // standing for it. mlp:4x128's AdamW state is 2 × 4 × 66 048 B / 2 ranks.
  const bool mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") == 0;
  const std::string env = mounted ? "" : "SHARDLAB_DISK_LIMIT=65536 ";
  INFO((mounted ? "a 64 KiB tmpfs" : "SHARDLAB_DISK_LIMIT=65536"));
  const CliResult r = test::run_shell(env + SHARDLAB_BIN +
                                      std::string(" run --model mlp:4x128 --strategy fsdp "
                                                  "--world 2 --batch 8 --steps 2 --no-record "
                                                  "--offload nvme:") +
                                      dir.string() + " 2>&1");
  INFO(r.out);
  CHECK(r.code != 0);
  CHECK(r.out.find("--offload nvme:" + dir.string() + ": no room under '" + dir.string() + "'") !=
        std::string::npos);
  CHECK(r.out.find("exp_avg") != std::string::npos);  // names the state that did not fit
  CHECK(no_entries(dir));
  if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
  fs::remove_all(dir);
}

TEST_CASE("nvme offload: bad settings are refused in one line", "[nvme][cli]") {
  const fs::path dir = fresh_dir("shardlab-test-offload-bad");
  const std::string d = dir.string();
  const std::string base = "run --model mlp:4x16 --batch 8 --steps 1 --world 2 ";
  struct Bad {
    std::string args, says;
  };
  for (const Bad& b :
       {Bad{"--strategy ddp --offload nvme:" + d, "--offload nvme:" + d + ": ddp has no offload"},
        Bad{"--strategy zero3 --offload", "zero3 offloads its optimizer state to NVMe only"},
        Bad{"--strategy fsdp --offload nvme:",
            "--offload nvme: is invalid (valid: cpu, or nvme:DIR"},
        Bad{"--strategy fsdp --offload=disk", "--offload disk is invalid (valid: cpu, or nvme:DIR"},
        Bad{"--strategy fsdp --offload nvme:/nonexistent/shardlab",
            "'/nonexistent/shardlab' is not an existing directory"},
        Bad{"--strategy fsdp --offload nvme:/etc/hostname",
            "'/etc/hostname' is not an existing directory"},
        Bad{"--strategy fsdp --no-offload", "unknown option '--no-offload'"},
        Bad{"--strategy fsdp --offload-params",
            "--offload-params: the parameter shards go to the offload file, and there is none "
            "(valid: --offload nvme:DIR --offload-params)"},
        Bad{"--strategy fsdp --offload --offload-params", "and there is none"},
        Bad{"--strategy ddp --offload-params",
            "--offload-params: ddp has no parameters to offload to NVMe; used by fsdp, zero3"}})
    test::expect_refused(base + b.args, b.says);
  // estimate's formulas have no disk: it says so rather than answer without it.
  test::expect_refused("estimate --model mlp:4x16 --world 2 --strategy fsdp --offload nvme:" + d,
                       "estimate does not model a disk yet");
  test::expect_refused("estimate --model mlp:4x16 --world 2 --strategy zero3 --offload-params",
                       "--offload-params: estimate does not model a disk yet");
  // `--offload cpu` is the bare flag's meaning, typed out.
  const CliResult ok = run_cli(base + "--strategy fsdp --offload cpu --no-record");
  INFO(ok.out);
  CHECK(ok.code == 0);
  CHECK(no_entries(dir));
  fs::remove_all(dir);
}

TEST_CASE("nvme offload-params: the parameter shards live in the file, and training is unchanged",
          "[nvme][offload]") {
  const fs::path dir = fresh_dir("shardlab-test-offload-params");
  struct Case {
    const char* strategy;
    const char* precision;
    bool reshard, prefetch;
  };
  for (const Case& k : {Case{"zero3", "fp32", true, true}, Case{"zero3", "bf16", true, false},
                        Case{"fsdp", "fp32", true, true}, Case{"fsdp", "bf16", false, true},
                        Case{"fsdp", "fp32", false, false}}) {
    RunConfig c = test::small_run("mlp:4x25", k.strategy, 2, 16, 4);
    c.precision = k.precision;
    c.reshard_after_forward = k.reshard;
    c.prefetch = k.prefetch;
    c.offload = true;
    c.offload_to = "nvme:" + dir.string();
    RunConfig state_only = c;  // the optimizer state on disk, the parameters in memory
    c.offload_params = true;
    INFO(k.strategy << " " << k.precision << (k.reshard ? "" : " --no-reshard")
                    << (k.prefetch ? "" : " --no-prefetch"));
    validate(c);
    const RunResult r = run_training(c);
    const RunResult p = run_training(state_only);
    // Bit for bit the run with the parameters in memory: the file only holds them.
    CHECK(r.final_params == p.final_params);
    CHECK(r.losses == p.losses);
    if (std::string(k.precision) == "fp32") {
      RunConfig single = test::small_run("mlp:4x25", "single", 1, 16, 4);
      CHECK(max_rel_diff(r.final_params, run_training(single).final_params) < 2e-5);
    }
    const DiskTraffic t = *predict_disk_traffic(c, 0);
    const DiskTraffic state = *predict_disk_traffic(state_only, 0);
    // 650 values a layer, 325 a shard: 4 B in fp32, 2 B in bf16.
    const double shards = 4 * 325.0 * (std::string(k.precision) == "fp32" ? 4 : 2);
    CHECK(t.held == state.held + shards);
    // ZeRO's accounting says the same of the file's share (no padding at world 2).
    const double psi = static_cast<double>(make_layout(c).total());
    const ModelStateBytes b = predict_model_state(model_state_input(c, psi), 0);
    CHECK(b.on_disk == t.held);
    CHECK(b.disk_formula == (std::string(k.precision) == "fp32" ? "12Ψ/N" : "14Ψ/N"));
    CHECK(predict_model_state(model_state_input(state_only, psi), 0).on_disk == state.held);
    CHECK(t.written == state.written + shards);
    CHECK(t.read == state.read + shards * ((k.reshard ? 2 : 1) +
                                           (std::string(k.precision) == "fp32" ? 1 : 0)));
    const int params = static_cast<int>(MemCategory::params);
    for (int rank = 0; rank < 2; ++rank) {
      CHECK(disk_per_step(r, rank, SpanKind::disk_read) == t.read);
      CHECK(disk_per_step(r, rank, SpanKind::disk_write) == t.written);
      const PoolStats& disk = r.ranks[rank].memory.disk;
      CHECK(disk.peak_total == static_cast<int64_t>(t.held));
      CHECK(disk.peak[params] == static_cast<int64_t>(shards));
      // In memory, only the shards in flight: fewer than all four.
      const MemStats& m = r.ranks[rank].memory;
      const MemStats& mp = p.ranks[rank].memory;
      CHECK(m.device.peak[params] + m.host.peak[params] <
            mp.device.peak[params] + mp.host.peak[params]);
    }
    // Every parameter read is on the disk lane, named by its layer.
    int reads = 0;
    for (const Span& s : r.recorders[0]->snapshot().spans)
      if (s.kind == SpanKind::disk_read && s.step == 1) {
        CHECK(s.lane == Lane::disk);
        CHECK(s.layer >= 0);
        ++reads;
      }
    // The gathers' reads, one per unit and gather, and the update's, one per unit.
    CHECK(reads == 4 * (k.reshard ? 2 : 1) + 4);
    CHECK(no_entries(dir));
  }
  fs::remove_all(dir);
}
