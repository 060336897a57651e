// Recordings: real runs survive save and load exactly; malformed, hostile and
// non-regular files give one-line errors (never a crash or a hang); writes are
// atomic; the recording shipped for the lessons is a real zero3 run.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>

#include "app/gui/logic/recording_view.h"
#include "app/gui/logic/run_data.h"
#include "core/parallel/strategy.h"
#include "core/record/memory_timeline.h"
#include "core/record/trace.h"
#include "core/run/recording.h"
#include "test_util.h"

using namespace shardlab;
using nlohmann::json;
using shardlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

RunConfig small(const std::string& strategy, int world) {
  RunConfig c;
  c.model = "mlp:4x32";
  c.strategy = strategy;
  c.world = world;
  c.batch = 8;
  c.steps = 3;
  return c;
}

void require_same_pool(const PoolStats& a, const PoolStats& b) {
  CHECK(a.current == b.current);
  CHECK(a.peak == b.peak);
  CHECK(a.current_total == b.current_total);
  CHECK(a.peak_total == b.peak_total);
  CHECK(a.cached == b.cached);
}

// Two ranks' spans, field by field (`with_rank`: their rank field too).
void require_same_spans(const std::vector<Span>& a, const std::vector<Span>& b, bool with_rank) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const Span &x = a[i], &y = b[i];
    INFO("span " << i);
    CHECK(x.t_begin_ns == y.t_begin_ns);
    CHECK(x.t_end_ns == y.t_end_ns);
    if (with_rank) CHECK(x.rank == y.rank);
    CHECK(x.lane == y.lane);
    CHECK(x.kind == y.kind);
    CHECK(x.layer == y.layer);
    CHECK(x.micro_batch == y.micro_batch);
    CHECK(x.step == y.step);
    CHECK(x.bytes == y.bytes);
    CHECK(x.peer == y.peer);
    CHECK(x.flow_id == y.flow_id);
  }
}

// Everything a RunResult holds, compared exactly.
void require_same_run(const RunResult& a, const RunResult& b) {
  CHECK(recording_to_json(a, {}).at("config") == recording_to_json(b, {}).at("config"));
  CHECK(a.placement.kind == b.placement.kind);
  CHECK(a.placement.guarded == b.placement.guarded);
  CHECK(a.placement.gpu_of_rank == b.placement.gpu_of_rank);
  CHECK(a.placement.comm == b.placement.comm);
  CHECK(a.placement.device_name == b.placement.device_name);
  CHECK(a.placement.summary == b.placement.summary);
  CHECK(a.t0_ns == b.t0_ns);
  CHECK(a.losses == b.losses);
  CHECK(a.step_ms == b.step_ms);
  CHECK(a.median_step_ms == b.median_step_ms);
  REQUIRE(a.final_params.size() == b.final_params.size());
  CHECK(std::memcmp(a.final_params.data(), b.final_params.data(),
                    a.final_params.size() * sizeof(float)) == 0);
  REQUIRE(a.ranks.size() == b.ranks.size());
  REQUIRE(a.recorders.size() == b.recorders.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    INFO("rank " << r);
    require_same_pool(a.ranks[r].memory.device, b.ranks[r].memory.device);
    require_same_pool(a.ranks[r].memory.host, b.ranks[r].memory.host);
    CHECK(a.ranks[r].step_ms == b.ranks[r].step_ms);
    CHECK(a.ranks[r].bytes_sent_per_step == b.ranks[r].bytes_sent_per_step);
    const Recorder::Snapshot sa = a.recorders[r]->snapshot(), sb = b.recorders[r]->snapshot();
    CHECK(b.recorders[r]->rank() == static_cast<int>(r));
    require_same_spans(sa.spans, sb.spans, /*with_rank=*/true);
    REQUIRE(sa.allocs.size() == sb.allocs.size());
    for (size_t i = 0; i < sa.allocs.size(); ++i) {
      const AllocEvent &x = sa.allocs[i], &y = sb.allocs[i];
      INFO("alloc " << i);
      CHECK(x.t_ns == y.t_ns);
      CHECK(x.delta_bytes == y.delta_bytes);
      CHECK(x.buffer_id == y.buffer_id);
      CHECK(x.category == y.category);
      CHECK(x.pool == y.pool);
      CHECK(x.name == y.name);
    }
  }
}

// Loading `path` fails with one line that names the file and contains `what`.
void require_refused(const std::string& path, const std::string& what) {
  try {
    load_recording(path);
    FAIL("loaded without error; expected: " << what);
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("'" + path + "'") != std::string::npos);
    CHECK(msg.find(what) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

// A small valid recording as JSON, for the malformed-file cases to break.
json valid_json() {
  const RunResult r = run_training(small("ddp", 2));
  return recording_to_json(r, describe_origin(r));
}

}  // namespace

TEST_CASE("a real ddp run and a gpipe run survive save and load exactly", "[recording]") {
  RunConfig gpipe = small("gpipe", 2);
  gpipe.micro_batches = 2;
  for (const RunConfig& cfg : {small("ddp", 2), gpipe}) {
    INFO(cfg.strategy);
    TempDir dir;
    const RunResult r = run_training(cfg);
    REQUIRE(r.recorders[0]->span_count() > 0);
    const RecordingOrigin origin = describe_origin(r);
    const std::string path = dir.file("run.shardrec");
    save_recording(path, r, origin);
    const Recording back = load_recording(path);
    require_same_run(r, back.run);
    CHECK(back.origin.device == origin.device);
    CHECK(back.origin.cpu == origin.cpu);
    CHECK(back.origin.gpus == origin.gpus);
    CHECK(back.origin.date == origin.date);
    CHECK(back.origin.shardlab == origin.shardlab);
    CHECK(!origin.device.empty());
    CHECK(origin.date.size() == 20);
    // Saving what was loaded gives the same file, byte for byte.
    const std::string again = dir.file("again.shardrec");
    save_recording(again, back.run, back.origin);
    CHECK(read_text(again) == read_text(path));
    // The GUI sees the same data from the recording as from the live run.
    gui::RunData live, replay;
    gui::ingest_result(live, r);
    gui::ingest_result(replay, back.run);
    CHECK(replay.span_count() == live.span_count());
    CHECK(replay.event_times == live.event_times);
    CHECK(replay.step_begin == live.step_begin);
    CHECK(replay.flows.size() == live.flows.size());
    CHECK(replay.t_end == live.t_end);
    if (cfg.strategy == "gpipe") CHECK(!replay.flows.empty());
  }
}

TEST_CASE("every strategy's run loads back from its recording", "[recording]") {
  for (const StrategyInfo& s : all_strategies()) {
    RunConfig c = small(s.name, s.name == "single" ? 1 : 2);
    c.steps = 2;
    if (s.name == "gpipe" || s.name == "1f1b") c.micro_batches = 2;
    INFO(s.name);
    const RunResult r = run_training(c);
    const Recording back = recording_from_json(recording_to_json(r, describe_origin(r)), "x");
    require_same_run(r, back.run);
  }
}

TEST_CASE("a gpt run keeps its context length in its recording", "[recording]") {
  // Its vocabulary and activations depend on --seq: without it in the file,
  // the weights would not fit the model the loader rebuilds.
  RunConfig c = small("ddp", 2);
  c.model = "gpt:1x32x2";
  c.seq = 16;
  c.steps = 2;
  const RunResult r = run_training(c);
  const json j = recording_to_json(r, describe_origin(r));
  CHECK(j.at("config").at("seq") == 16);
  const Recording back = recording_from_json(j, "x");
  CHECK(back.run.cfg.seq == 16);
  require_same_run(r, back.run);
  // MLP recordings are as before: no gpt keys.
  const RunResult m = run_training(small("ddp", 2));
  CHECK_FALSE(recording_to_json(m, describe_origin(m)).at("config").contains("seq"));
}

TEST_CASE("a run without recording cannot be saved", "[recording]") {
  TempDir dir;
  RunConfig c = small("ddp", 2);
  c.record = false;
  const RunResult r = run_training(c);
  CHECK_THROWS_WITH(save_recording(dir.file("r.shardrec"), r), Catch::Contains("--no-record"));
  CHECK(!fs::exists(dir.file("r.shardrec")));
}

TEST_CASE("malformed recordings give one line naming the file and the fault", "[recording]") {
  TempDir dir;
  const json good = valid_json();
  const std::string path = dir.file("bad.shardrec");
  auto with = [&](const std::function<void(json&)>& edit) {
    json j = good;
    edit(j);
    write_text(path, j.dump());
    return path;
  };
  write_text(path, good.dump());
  REQUIRE_NOTHROW(load_recording(path));

  const std::string text = good.dump();
  write_text(path, text.substr(0, text.size() / 2));
  require_refused(path, "not valid JSON: parse error");
  write_text(path, "");
  require_refused(path, "is empty");
  write_text(path, "[1, 2, 3]");
  require_refused(path, "expected a JSON object");
  write_text(path, "{\"format\": \"something else\"}");
  require_refused(path, "not a shardlab recording");
  write_text(path, std::string(100, '[') + std::string(100, ']'));
  require_refused(path, "nested more than 32 levels");

  require_refused(with([](json& j) { j["version"] = 2; }), "version: 2 is not supported");
  require_refused(with([](json& j) { j["version"] = "1"; }), "version: missing or not an integer");
  require_refused(with([](json& j) { j["extra"] = 1; }), "unknown key 'extra'");
  require_refused(with([](json& j) { j.erase("losses"); }), "missing key 'losses'");
  require_refused(with([](json& j) { j["ranks"][0]["spans"][0][3] = "teleport"; }),
                  "ranks[0].spans[0][3] (kind): 'teleport' is not a span kind");
  require_refused(with([](json& j) { j["ranks"][0]["spans"][0][3] = 3; }),
                  "expected a span kind name, got 3");
  require_refused(with([](json& j) { j["ranks"][1]["spans"][0][8] = 2; }),
                  "ranks[1].spans[0][8] (peer): 2 is out of range (valid: -1 to 1)");
  require_refused(with([](json& j) { j["ranks"][0]["spans"][0][4] = 4; }),
                  "(layer): 4 is out of range (valid: -1 to 3)");
  require_refused(with([](json& j) { j["ranks"][0]["spans"][0][6] = 3; }),
                  "(step): 3 is out of range (valid: -1 to 2)");
  require_refused(with([](json& j) {
                    json& s = j["ranks"][0]["spans"][0];
                    s[1] = s[0].get<int64_t>() - 1;
                  }),
                  "(t_end_ns):");
  require_refused(with([](json& j) { j["ranks"][0]["spans"][0][0] = -5; }),
                  "(t_begin_ns): -5 is out of range");
  require_refused(with([](json& j) { j["ranks"][0]["spans"][0].erase(15); }),
                  "ranks[0].spans[0]: has 15 entries (valid: 16)");
  require_refused(with([](json& j) { j["ranks"][0]["spans"][0][15] = -2; }),
                  "(staleness): -2 is out of range");
  require_refused(with([](json& j) { j["ranks"][0]["spans"][0][14] = -1; }),
                  "(group): -1 is out of range");
  require_refused(with([](json& j) { j["ranks"][0]["spans"][0][13] = 1; }),
                  "(made_ahead): expected true or false, got 1");
  // Older recordings (ten columns, no marks) still load.
  {
    json old = good;
    old["span_columns"] = json::array();
    for (const char* c : {"t_begin_ns", "t_end_ns", "lane", "kind", "layer", "micro_batch", "step",
                          "bytes", "peer", "flow_id"})
      old["span_columns"].push_back(c);
    old.erase("mark_columns");
    for (json& r : old["ranks"]) {
      r.erase("marks");
      for (json& s : r["spans"]) s.erase(s.begin() + 10, s.end());
    }
    CHECK_NOTHROW(recording_from_json(old, "old.shardrec"));
  }
  // ... and those of thirteen columns (CPU clocks and op ids, no made_ahead).
  {
    json v2 = good;
    v2["span_columns"].erase(15);
    v2["span_columns"].erase(14);
    v2["span_columns"].erase(13);
    for (json& r : v2["ranks"])
      for (json& s : r["spans"]) {
        s.erase(15);
        s.erase(14);
        s.erase(13);
      }
    const Recording back = recording_from_json(v2, "v2.shardrec");
    for (const Span& s : back.run.recorders[0]->snapshot().spans) CHECK_FALSE(s.made_ahead);
  }
  // ... and those of fourteen (no communicator groups): every span the world's.
  {
    json v3 = good;
    v3["span_columns"].erase(15);
    v3["span_columns"].erase(14);
    for (json& r : v3["ranks"])
      for (json& s : r["spans"]) {
        s.erase(15);
        s.erase(14);
      }
    const Recording back = recording_from_json(v3, "v3.shardrec");
    for (const Span& s : back.run.recorders[0]->snapshot().spans) CHECK(s.group == 0);
  }
  // ... and those of fifteen (no parameter server's staleness): every span's -1.
  {
    json v4 = good;
    v4["span_columns"].erase(15);
    for (json& r : v4["ranks"])
      for (json& s : r["spans"]) s.erase(15);
    const Recording back = recording_from_json(v4, "v4.shardrec");
    for (const Span& s : back.run.recorders[0]->snapshot().spans) CHECK(s.staleness == -1);
  }
  require_refused(with([](json& j) { j["ranks"][0]["marks"][0][0] = "nap"; }),
                  "'nap' is not a mark kind");
  require_refused(with([](json& j) { j["ranks"][0]["allocs"][0][3] = "snacks"; }),
                  "'snacks' is not a memory category");
  require_refused(with([](json& j) { j["ranks"][0]["allocs"][0][5] = "a\nb"; }),
                  "contains a control character");
  require_refused(with([](json& j) { j["ranks"].push_back(j["ranks"][0]); }),
                  "ranks: has 3 entries (valid: 2)");
  require_refused(with([](json& j) { j["ranks"][1]["rank"] = 0; }), "ranks[1].rank: 0 is out");
  require_refused(with([](json& j) { j["config"]["world"] = 4; }),
                  "ranks: has 2 entries (valid: 4)");
  require_refused(with([](json& j) { j["config"]["world"] = 1000000; }),
                  "config.world: 1000000 is out of range (valid: 1 to 64)");
  require_refused(with([](json& j) { j["config"]["steps"] = 2000000000; }),
                  "config.steps: 2000000000 is out of range");
  require_refused(with([](json& j) { j["config"]["steps"] = 1000000; }),
                  "losses: has 3 entries (valid: 1000000)");
  require_refused(with([](json& j) { j["config"]["strategy"] = "magic"; }),
                  "settings shardlab refuses");
  require_refused(with([](json& j) { j["config"]["record"] = false; }), "config.record");
  require_refused(with([](json& j) { j["final_params"]["count"] = 1e15; }),
                  "final_params.count: expected an integer");
  require_refused(with([](json& j) { j["final_params"]["count"] = 1000000000000000; }),
                  "final_params.count: 1000000000000000 is out of range");
  require_refused(with([](json& j) { j["final_params"]["base64"] = "AAAA"; }),
                  "holds 3 bytes, mlp:4x32 needs 16896");
  require_refused(with([](json& j) { j["final_params"]["base64"] = "A*A="; }),
                  "is not valid base64");
  require_refused(with([](json& j) {
                    std::string& b = j["final_params"]["base64"].get_ref<std::string&>();
                    b[100] = b[100] == 'A' ? 'B' : 'A';  // one weight changed
                  }),
                  "final_params.crc32: the string");
  require_refused(with([](json& j) { j["config"]["model"] = "mlp:4x33"; }),
                  "final_params.count: 4224 is out of range (valid: 4488 to 4488)");
  require_refused(with([](json& j) { j["ranks"][0]["step_ms"][1] = "NaN"; }),
                  "ranks[0].step_ms[1]: expected a number, got the string 'NaN'");
  require_refused(with([](json& j) { j["ranks"][0]["step_ms"][1] = -1.0; }),
                  "ranks[0].step_ms[1]: -1.0 is out of range");
  require_refused(with([](json& j) { j["ranks"][0]["memory"]["device"]["current_total"] = 1; }),
                  "is not the sum of the categories");
  require_refused(with([](json& j) { j["ranks"][0]["memory"]["host"]["peak"]["grads"] = -1; }),
                  "memory.host.peak.grads: -1 is out of range");
  require_refused(with([](json& j) { j["losses"][0] = "lots"; }), "'lots' is not a loss");
  require_refused(with([](json& j) { j["origin"]["device"] = "cpu\r\nfake line"; }),
                  "origin.device: 'cpu\\x0d\\x0afake line' contains a control character");
  require_refused(with([](json& j) { j["origin"]["date"] = "last Tuesday"; }),
                  "origin.date: 'last Tuesday' is not a UTC date");
  require_refused(with([](json& j) { j["placement"]["comm"] = "carrier pigeon"; }),
                  "is not a communicator");
  require_refused(with([](json& j) { j["span_columns"][0] = "begin"; }), "span_columns[0]");

  // Literals JSON cannot mean: an infinite time, a step time overflowing to inf.
  std::string inf_text = good.dump();
  const std::string key = "\"bytes_sent_per_step\":";
  const size_t at = inf_text.find(key);
  REQUIRE(at != std::string::npos);
  inf_text.insert(at + key.size(), "1e999,\"x\":");
  write_text(path, inf_text);
  CHECK_THROWS_AS(load_recording(path), ConfigError);  // unknown key or inf, never accepted

  // Losses may be NaN (a diverged run is worth showing), spelled as JSON can.
  const Recording nan = load_recording(with([](json& j) { j["losses"][1] = "NaN"; }));
  CHECK(std::isnan(nan.run.losses[1]));
}

TEST_CASE("damaged recordings never crash the loader", "[recording]") {
  TempDir dir;
  const std::string text = valid_json().dump();
  const std::string path = dir.file("fuzz.shardrec");
  std::mt19937 rng(7);
  int refused = 0, loaded = 0;
  for (int i = 0; i < 300; ++i) {
    std::string t = text;
    if (i < 100) {
      t.resize(std::uniform_int_distribution<size_t>(0, t.size() - 1)(rng));
    } else {
      const int flips = 1 + i % 4;
      for (int k = 0; k < flips; ++k)
        t[std::uniform_int_distribution<size_t>(0, t.size() - 1)(rng)] =
            static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    }
    write_text(path, t);
    try {
      load_recording(path);
      ++loaded;
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
      ++refused;
    }
  }
  CHECK(refused + loaded == 300);
  CHECK(refused > 200);  // almost every flip lands where it changes the meaning
}

TEST_CASE("non-regular files are refused without reading or blocking", "[recording]") {
  TempDir dir;
  require_refused(dir.path.string(), "is a directory");
  require_refused("/dev/zero", "is a character device");
  require_refused(dir.file("missing.shardrec"), "cannot open: No such file or directory");

  const std::string fifo = dir.file("pipe.shardrec");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto pending = std::async(std::launch::async, [&] {
    try {
      load_recording(fifo);
      return std::string("loaded");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
  });
  if (pending.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // Unblock the reader so the test ends, then fail.
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    FAIL("loading a FIFO blocked");
  }
  const std::string msg = pending.get();
  CHECK(msg.find("is a FIFO") != std::string::npos);

  // Too large: refused from its size alone (a sparse file, nothing is read).
  const std::string big = dir.file("big.shardrec");
  { std::ofstream f(big); }
  fs::resize_file(big, static_cast<uintmax_t>(kRecordingMaxBytes) + 1);
  require_refused(big, "MiB a recording may have");
}

TEST_CASE("writes are atomic and never go through links or onto special files", "[recording]") {
  TempDir dir;
  const RunResult r = run_training(small("ddp", 2));
  const std::string path = dir.file("run.shardrec");

  SECTION("a failed write leaves the old file as it was and no temporary behind") {
    write_text(path, "old content");
    // A real write failure: the file-size limit stops write() with EFBIG.
    struct sigaction ignore {
    }, old_action{};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGXFSZ, &ignore, &old_action);
    rlimit old_limit{};
    ::getrlimit(RLIMIT_FSIZE, &old_limit);
    rlimit tight = old_limit;
    tight.rlim_cur = 4096;
    ::setrlimit(RLIMIT_FSIZE, &tight);
    std::string error;
    try {
      save_recording(path, r);
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &old_limit);
    ::sigaction(SIGXFSZ, &old_action, nullptr);
    INFO(error);
    CHECK(error.find("cannot write recording '" + path + "': write") != std::string::npos);
    CHECK(read_text(path) == "old content");
    int entries = 0;
    for (const auto& e : fs::directory_iterator(dir.path)) {
      (void)e;
      ++entries;
    }
    CHECK(entries == 1);
  }

  SECTION("replacing a regular file keeps its permissions") {
    write_text(path, "old content");
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
    save_recording(path, r);
    CHECK(load_recording(path).run.losses == r.losses);
    CHECK((fs::status(path).permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write));
  }

  SECTION("a symbolic link at the target is refused, and neither it nor its target changes") {
    const std::string target = dir.file("elsewhere.txt");
    write_text(target, "keep me");
    fs::create_symlink(target, path);
    CHECK_THROWS_WITH(save_recording(path, r), Catch::Contains("is a symbolic link"));
    CHECK(fs::is_symlink(path));
    CHECK(read_text(target) == "keep me");
  }

  SECTION("a directory or a FIFO at the target is refused at once") {
    fs::create_directory(path);
    CHECK_THROWS_WITH(save_recording(path, r), Catch::Contains("it is a directory"));
    const std::string fifo = dir.file("pipe");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH(save_recording(fifo, r), Catch::Contains("it is a FIFO"));
    CHECK_THROWS_WITH(save_recording(dir.file("no/such/dir/x"), r),
                      Catch::Contains("does not exist"));
  }
}

TEST_CASE("the status line says what was recorded where and when", "[recording]") {
  RecordingOrigin o;
  o.device = "cuda (NVIDIA H100 80GB HBM3)";
  o.date = "2026-11-23T16:40:05Z";
  CHECK(gui::recording_status("a.shardrec", o, 4) ==
        "recording: a.shardrec \xE2\x80\x94 recorded on cuda (NVIDIA H100 80GB HBM3), world 4, "
        "2026-11-23 16:40 UTC");
  // In Chinese, the same facts in a Chinese sentence.
  const gui::Tr zh{lesson::Lang::zh};
  CHECK(gui::recording_status("a.shardrec", o, 4, false, zh) ==
        "录制：a.shardrec \xE2\x80\x94 录制于 cuda (NVIDIA H100 80GB HBM3)，world 4，"
        "2026-11-23 16:40 UTC");
  RunResult run;
  CHECK(gui::recording_details(run, "/x/a.shardrec", o, false, zh)
            .find("\n录制于 2026-11-23 16:40 UTC，设备 cuda") != std::string::npos);
  CHECK(gui::readable_date("yesterday") == "yesterday");
  CHECK(gui::file_name("/a/b/run.shardrec") == "run.shardrec");
  CHECK(gui::file_name("run.shardrec") == "run.shardrec");
}

TEST_CASE("the recording shipped for the lessons is a real zero3 run", "[recording]") {
  const std::string path =
      std::string(SHARDLAB_SOURCE_DIR) + "/lessons/recordings/zero3-w3-cpu.shardrec";
  REQUIRE(fs::file_size(path) < 300 * 1024);
  const Recording rec = load_recording(path);
  const RunConfig& c = rec.run.cfg;
  CHECK(c.strategy == "zero3");
  CHECK(c.world == 3);
  CHECK(c.model == "mlp:3x96");
  CHECK(!rec.origin.device.empty());
  // Its weights and losses are what the same settings compute here: the file
  // holds a real run, not made-up numbers. (Another CPU's BLAS sums in another
  // order, and AdamW amplifies that for tiny gradients: 1e-3, not bitwise.)
  const RunResult again = run_training(c);
  CHECK(test::max_rel_diff(again.final_params, rec.run.final_params) < 1e-3);
  for (size_t s = 0; s < again.losses.size(); ++s)
    CHECK(rec.run.losses[s] == Approx(again.losses[s]).epsilon(1e-4));
}

TEST_CASE("CLI: --record and --open refuse bad combinations in one line", "[recording]") {
  TempDir dir;
  const std::string rec = dir.file("r.shardrec");
  auto res = test::run_cli("run --steps 1 --record " + rec + " --no-record");
  CHECK(res.code == 2);
  CHECK(res.out.find("--record needs recording") != std::string::npos);
  res = test::run_cli("run --steps 1 --record /dev/null");
  CHECK(res.code == 2);
  CHECK(res.out.find("it is a character device") != std::string::npos);
  res = test::run_cli("run --model mlp:2x16 --batch 4 --steps 2 --record " + rec);
  CHECK(res.code == 0);
  CHECK(res.out.find("recording written to " + rec) != std::string::npos);
  CHECK(load_recording(rec).run.cfg.model == "mlp:2x16");
  res = test::run_cli("gui --open " + dir.file("missing.shardrec"));
  CHECK(res.code == 2);
  CHECK(res.out.find("cannot open") != std::string::npos);
  res = test::run_cli("gui --open " + rec + " --model mlp:2x8");
  CHECK(res.code == 2);
  CHECK(res.out.find("--model cannot be combined with --open") != std::string::npos);
}

TEST_CASE("a run of processes keeps its clock offsets and resumed step, old files still load",
          "[recording][processes]") {
  RunResult r = run_training(small("ddp", 2));
  const json old = recording_to_json(r, describe_origin(r));
  CHECK_FALSE(old.contains("processes"));  // a threaded fresh run writes what version 1 wrote
  CHECK(recording_from_json(old, "x").run.clock_offset_ns.empty());

  r.clock_offset_ns = {0, -1234};
  r.clock_rtt_ns = {0, 56};
  // As a run resumed after step 1 reports it: no times for the steps before.
  r.resumed_after_step = 1;
  for (RankReport& rr : r.ranks) rr.step_ms.erase(rr.step_ms.begin());
  r.step_ms.erase(r.step_ms.begin());
  json j = recording_to_json(r, describe_origin(r));
  const Recording back = recording_from_json(j, "x");
  CHECK(back.run.clock_offset_ns == r.clock_offset_ns);
  CHECK(back.run.clock_rtt_ns == r.clock_rtt_ns);
  CHECK(back.run.resumed_after_step == 1);
  CHECK(back.run.step_ms.size() == r.step_ms.size());

  auto refused = [](const json& bad, const std::string& what) {
    try {
      recording_from_json(bad, "f.shardrec");
      FAIL("loaded");
    } catch (const ConfigError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
  };
  json b = j;
  b["processes"]["clock_offset_ns"] = {1, 2, 3};
  refused(b, "processes.clock_offset_ns");
  b = j;
  b["processes"]["resumed_after_step"] = 99;
  refused(b, "processes.resumed_after_step");
  b = j;
  b["processes"]["extra"] = 1;
  refused(b, "unknown key");
}

namespace {

// A run's trace as 'shardlab run --trace' writes it: whole, or one rank's file
// as a process of a multi-process run writes it.
json trace_of(const RunResult& r, int only_rank = -1) {
  std::vector<Recorder::Snapshot> snaps;
  for (const auto& rec : r.recorders) snaps.push_back(rec->snapshot());
  return json::parse(
      trace_to_json(snaps, r.t0_ns, trace_metadata(r, describe_origin(r), only_rank), only_rank)
          .dump());
}

// Per pool, a rank's bytes in use by category after each instant where they
// change (an allocation freed at the instant it was made changes nothing).
std::map<std::pair<int, int64_t>, std::array<int64_t, kNumMemCategories>> totals(
    const std::vector<AllocEvent>& allocs) {
  std::map<std::pair<int, int64_t>, std::array<int64_t, kNumMemCategories>> out;
  for (Pool pool : {Pool::device, Pool::host}) {
    std::array<int64_t, kNumMemCategories> last{};
    for (const CategorySample& s : category_series(allocs, pool)) {
      if (s.bytes == last) continue;
      out[{static_cast<int>(pool), s.t_ns}] = last = s.bytes;
    }
  }
  return out;
}

// What a trace read back must keep of the run: settings, losses, step times,
// traffic and peaks exactly; every span (times to the nanosecond); memory per
// category at every instant. Not kept: buffer names and the final weights.
void require_same_as_trace(const RunResult& a, const Recording& rec) {
  const RunResult& b = rec.run;
  CHECK(rec.from_trace);
  CHECK(recording_to_json(a, {}).at("config") == json(trace_run_json(b, {})).at("config"));
  CHECK(a.t0_ns == b.t0_ns);
  CHECK(a.losses == b.losses);
  CHECK(a.step_ms == b.step_ms);
  CHECK(b.final_params.empty());
  REQUIRE(a.ranks.size() == b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    INFO("rank " << r);
    require_same_pool(a.ranks[r].memory.device, b.ranks[r].memory.device);
    require_same_pool(a.ranks[r].memory.host, b.ranks[r].memory.host);
    CHECK(a.ranks[r].step_ms == b.ranks[r].step_ms);
    CHECK(a.ranks[r].bytes_sent_per_step == b.ranks[r].bytes_sent_per_step);
    const Recorder::Snapshot sa = a.recorders[r]->snapshot(), sb = b.recorders[r]->snapshot();
    require_same_spans(sa.spans, sb.spans, /*with_rank=*/false);
    // The counters sample after the last event of an instant; so does category_series.
    CHECK(totals(sa.allocs) == totals(sb.allocs));
  }
}

}  // namespace

TEST_CASE("a trace opens as a recording: spans exact, memory per category, no weights",
          "[recording][trace]") {
  for (const char* strategy : {"zero3", "1f1b", "fsdp"}) {
    INFO(strategy);
    RunConfig c = small(strategy, 2);
    if (std::string(strategy) == "1f1b") c.micro_batches = 2;
    const RunResult r = run_training(c);
    require_same_as_trace(r, recording_from_trace(trace_of(r), "t.json"));

    // One file per rank, as processes write them, merged: the same run.
    const json merged = merge_traces({trace_of(r, 1), trace_of(r, 0)}, {"r1.json", "r0.json"});
    require_same_as_trace(r, recording_from_trace(merged, "m.json"));
  }
}

TEST_CASE("traces that cannot be shown are refused in one line naming the file",
          "[recording][trace]") {
  const RunResult r = run_training(small("ddp", 2));
  const json good = trace_of(r);
  auto refused = [](const json& bad, const std::string& what) {
    try {
      recording_from_trace(bad, "t.json");
      FAIL("loaded");
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.rfind("trace 't.json': ", 0) == 0);
      CHECK(msg.find(what) != std::string::npos);
      CHECK(msg.find('\n') == std::string::npos);
    }
  };
  // One process's own file holds one rank: the others must be merged in.
  refused(trace_of(r, 1), "holds no report of rank 0 of 2");
  json b = good;
  b["metadata"].erase("run");  // a trace from an older shardlab, or another program
  refused(b, "holds no run");
  b = good;
  b.erase("traceEvents");
  refused(b, "no traceEvents");
  for (const char* key : {"ts", "pid", "dur", "args"}) {
    b = good;
    for (json& e : b["traceEvents"])
      if (e["ph"] == "X") {
        e.erase(key);
        break;
      }
    refused(b, std::string("'") + key + "'");
  }
  b = good;
  for (json& e : b["traceEvents"])
    if (e["ph"] == "X") e["pid"] = 7;  // rank 6 of a world of 2
  refused(b, "pid");
  b = good;
  for (json& e : b["traceEvents"])
    if (e["ph"] == "X") {
      e["args"]["kind"] = "teleport";
      break;
    }
  refused(b, "is not a span kind");
  b = good;
  for (json& e : b["traceEvents"])
    if (e["ph"] == "C") {
      e["args"]["params"] = -5;
      break;
    }
  refused(b, "out of range");

  // Through the file loader the GUI uses: a trace and a recording told apart by content.
  TempDir dir;
  const std::string path = (dir.path / "t.json").string();
  write_text(path, good.dump());
  CHECK(load_run_file(path).from_trace);
  write_text(path, recording_to_json(r, describe_origin(r)).dump());
  CHECK_FALSE(load_run_file(path).from_trace);
}

TEST_CASE("impossible allocation events are refused, naming the event", "[recording]") {
  TempDir dir;
  const json good = valid_json();
  const std::string path = dir.file("allocs.shardrec");
  auto with = [&](const std::function<void(json&)>& edit) {
    json j = good;
    edit(j);
    write_text(path, j.dump());
    return path;
  };
  // Rank 0's first allocation with a size, and the event that frees it.
  const json& allocs = good["ranks"][0]["allocs"];
  size_t alloc_at = 0, free_at = 0;
  while (allocs.at(alloc_at)[1].get<int64_t>() <= 0) ++alloc_at;
  const uint64_t id = allocs[alloc_at][2].get<uint64_t>();
  const int64_t bytes = allocs[alloc_at][1].get<int64_t>();
  for (free_at = alloc_at + 1; free_at < allocs.size(); ++free_at)
    if (allocs[free_at][2].get<uint64_t>() == id) break;
  REQUIRE(free_at < allocs.size());
  REQUIRE(allocs[free_at][1].get<int64_t>() == -bytes);
  const std::string at_free = "ranks[0].allocs[" + std::to_string(free_at) + "]";
  const int64_t peak = good["ranks"][0]["memory"]["device"]["peak_total"].get<int64_t>();

  require_refused(with([&](json& j) { j["ranks"][0]["allocs"][free_at][2] = 987654321; }),
                  at_free + ": frees buffer 987654321 '");
  require_refused(with([&](json& j) { j["ranks"][0]["allocs"][free_at][2] = 987654321; }),
                  "', which was never allocated");
  require_refused(with([&](json& j) {
                    json& a = j["ranks"][0]["allocs"];
                    a.insert(a.begin() + static_cast<std::ptrdiff_t>(free_at) + 1, a[free_at]);
                  }),
                  "ranks[0].allocs[" + std::to_string(free_at + 1) + "]: frees buffer " +
                      std::to_string(id) + " ");
  require_refused(
      with([&](json& j) {
        json& a = j["ranks"][0]["allocs"];
        a.insert(a.begin() + static_cast<std::ptrdiff_t>(free_at) + 1, a[free_at]);
      }),
      "a second time (allocated at allocs[" + std::to_string(alloc_at) + "], already freed)");
  require_refused(with([&](json& j) { j["ranks"][0]["allocs"][free_at][1] = -bytes - 4; }),
                  "frees " + std::to_string(bytes + 4) + " bytes");
  // 1536 TiB on a model of a few KiB: three 512 TiB buffers, each far above
  // the rank's recorded peak.
  require_refused(with([&](json& j) {
                    for (int k = 0; k < 3; ++k)
                      j["ranks"][0]["allocs"].push_back(
                          {5, int64_t{512} << 40, 900000 + k, "temporary", "device", "huge"});
                  }),
                  "ranks[0].allocs[" + std::to_string(allocs.size()) +
                      "]: allocates 562949953421312 bytes (512.00 TiB) for buffer 900000 "
                      "'huge', more than rank 0's recorded peak of " +
                      std::to_string(peak));
  // Buffers each within the peak that together exceed it: never freed.
  require_refused(
      with([&](json& j) {
        for (int k = 0; k < 3; ++k)
          j["ranks"][0]["allocs"].push_back({5, peak, 900000 + k, "temporary", "device", "leak"});
      }),
      "brings rank 0's live device memory to");
  require_refused(with([&](json& j) {
                    j["ranks"][0]["allocs"].push_back({5, 16, id, "temporary", "device", "again"});
                  }),
                  "allocates buffer " + std::to_string(id) +
                      " 'again' again (first allocated at "
                      "allocs[" +
                      std::to_string(alloc_at) + "]");
  // The real run's events replay within its peaks.
  write_text(path, good.dump());
  CHECK_NOTHROW(load_recording(path));
}

TEST_CASE("trace merge refuses a run with a rank missing, naming the rank", "[recording][trace]") {
  const RunResult r = run_training(small("ddp", 2));
  TempDir dir;
  const std::string r0 = dir.file("t.rank0.json"), r1 = dir.file("t.rank1.json"),
                    out = dir.file("m.json");
  write_text(r0, trace_of(r, 0).dump());
  write_text(r1, trace_of(r, 1).dump());
  for (const std::string& only : {r0, r1}) {
    const shardlab::test::TimedCliResult m =
        shardlab::test::run_cli_within("trace merge --out " + out + " " + only, 20);
    INFO(m.out);
    CHECK(m.code == 2);
    CHECK(m.seconds < 1.0);
    CHECK(std::count(m.out.begin(), m.out.end(), '\n') == 1);
    const std::string missing = only == r0 ? "1" : "0";
    CHECK(m.out == "error: no trace holds rank " + missing +
                       " of the run's 2 (valid: every rank's trace, e.g. '" +
                       dir.file("t.rank" + missing + ".json") + "')\n");
    CHECK_FALSE(fs::exists(out));
  }
  CHECK(shardlab::test::run_cli("trace merge --out " + out + " " + r0 + " " + r1).code == 0);
  CHECK(load_run_file(out).run.cfg.world == 2);
  // Files of two runs of different sizes are not one run.
  json other = trace_of(r, 1);
  other["metadata"]["world"] = 3;
  CHECK_THROWS_WITH(merge_traces({trace_of(r, 0), other}, {"a.json", "b.json"}),
                    "'b.json' is of a run of world 3, 'a.json' of world 2 (valid: the traces of "
                    "one run)");
  // Without a world in the metadata, every rank up to the highest given.
  json bare = trace_of(r, 1);
  bare["metadata"] = json::object();
  CHECK_THROWS_WITH(merge_traces({bare}, {"x.json"}), Catch::Contains("no trace holds rank 0"));
}

TEST_CASE("a run's allocation events replay to its recorded peaks exactly", "[recording]") {
  // The allocator records each event under its lock, with the totals' change:
  // a comm thread's scratch buffers (ddp's overlap, the pipelines' sends)
  // cannot interleave differently in the events than in the totals.
  for (const char* strategy : {"ddp", "zero3", "fsdp", "1f1b"}) {
    RunConfig c = small(strategy, 3);
    c.batch = 12;
    if (std::string(strategy) == "1f1b") c.micro_batches = 3;
    const RunResult r = run_training(c);
    for (int rank = 0; rank < c.world; ++rank) {
      std::array<int64_t, 2> live{}, most{};
      for (const AllocEvent& a : r.recorders[rank]->snapshot().allocs) {
        int64_t& l = live[static_cast<int>(a.pool)];
        l += a.delta_bytes;
        most[static_cast<int>(a.pool)] = std::max(most[static_cast<int>(a.pool)], l);
      }
      INFO(strategy << " rank " << rank);
      CHECK(most[0] == r.ranks[rank].memory.device.peak_total);
      CHECK(most[1] == r.ranks[rank].memory.host.peak_total);
      CHECK(live[0] == 0);  // every buffer freed by the end
    }
  }
}
