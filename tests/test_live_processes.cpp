// Watching a run of one process per rank live: the live files each process
// appends (core/live_stream) and the app's session that launches the group,
// reads them while it runs and ends on its recording.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "app/gui/logic/run_session.h"
#include "core/record/live_stream.h"
#include "test_util.h"

using namespace shardlab;
using namespace shardlab::gui;
namespace fs = std::filesystem;

namespace {

RunConfig small_zero3(int steps) {
  RunConfig c;
  c.model = "mlp:4x64";
  c.strategy = "zero3";
  c.world = 3;
  c.batch = 24;
  c.steps = steps;
  return c;
}

// Any `shardlab run` of a launched group still alive (launched groups live
// under TMPDIR's shardlab-lesson-*).
bool group_left(const std::string& tmp) {
  const std::string cmd = "pgrep -f -- '[s]hardlab-lesson-.*' | while read p; do grep -qa -- '" +
                          tmp + "' /proc/$p/cmdline && echo $p; done | grep -q .";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace

TEST_CASE("live files: a writer's records reach a reader whole, bad lines are named", "[live]") {
  shardlab::test::TempDir dir;
  auto rec = std::make_shared<Recorder>(1, true);
  const int64_t t0 = 1000000;
  {
    LiveWriter w(live_file(dir.path.string(), 1), rec, t0);
    Span s;
    s.t_begin_ns = t0 + 5;
    s.t_end_ns = t0 + 9;
    s.lane = Lane::comm;
    s.kind = SpanKind::all_gather;
    s.layer = 2;
    s.bytes = 64;
    s.flow_id = 77;
    rec->add_span(s);
    rec->add_alloc({t0 + 6, 128, 3, MemCategory::params, Pool::host, "layers.2.weight"});
    w.note_loss(0, 1.5);
  }  // the destructor appends what is left
  LiveReader r(dir.path.string(), 2);
  std::vector<double> losses;
  CHECK(r.poll(losses));
  CHECK_FALSE(r.poll(losses));  // nothing new
  const Recorder::Snapshot snap = r.recorders()[1]->snapshot();
  REQUIRE(snap.spans.size() == 1);
  CHECK(snap.spans[0].t_begin_ns == 5);
  CHECK(snap.spans[0].t_end_ns == 9);
  CHECK(snap.spans[0].kind == SpanKind::all_gather);
  CHECK(snap.spans[0].lane == Lane::comm);
  CHECK(snap.spans[0].layer == 2);
  CHECK(snap.spans[0].flow_id == 77);
  CHECK(snap.spans[0].rank == 1);
  REQUIRE(snap.allocs.size() == 1);
  CHECK(snap.allocs[0].name == "layers.2.weight");
  CHECK(snap.allocs[0].pool == Pool::host);
  CHECK(losses == std::vector<double>{1.5});
  CHECK(r.recorders()[0]->snapshot().spans.empty());  // rank 0 has not started

  // A line cut in the middle waits for its end; a line that is not ours is named.
  const std::string path = live_file(dir.path.string(), 0);
  {
    std::ofstream f(path, std::ios::app);
    f << "{\"l\":[3,";
  }
  CHECK_FALSE(r.poll(losses));
  {
    std::ofstream f(path, std::ios::app);
    f << "2.5]}\n{\"x\":1}\n";
  }
  try {
    r.poll(losses);
    FAIL("a foreign line was accepted");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("rank0.live' line 2: not a span"));
  }
  CHECK(losses.size() == 4);
  CHECK(losses[3] == 2.5);
  // The writer never writes through a link or over a file.
  CHECK_THROWS_WITH(LiveWriter(path, rec, t0), Catch::Contains("cannot create live file"));
}

TEST_CASE("the app runs one process per rank, watches it live and ends on its recording",
          "[live][process]") {
  const fs::path tmp =
      fs::temp_directory_path() / ("shardlab-live-test-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  const char* old_tmp = std::getenv("TMPDIR");
  const std::string had_tmp = old_tmp ? old_tmp : "";
  ::setenv("SHARDLAB_BIN", SHARDLAB_BIN, 1);
  ::setenv("TMPDIR", tmp.c_str(), 1);

  RunSession session;
  RunData data;
  std::vector<double> losses;
  auto wait_for = [&](auto done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (!done() && std::chrono::steady_clock::now() < until) {
      session.poll(data, losses);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    session.poll(data, losses);
  };

  const RunConfig cfg = small_zero3(30);
  session.start_processes(cfg);
  CHECK(session.processes());
  // Seen while the processes still run: spans of every rank and some losses.
  bool live_spans = false, live_losses = false;
  wait_for([&] {
    if (session.state() == RunState::running && !session.result()) {
      bool all = data.world == 3;
      for (const RankData& r : data.ranks) all = all && !r.lane(Lane::compute).spans.empty();
      live_spans = live_spans || all;
      live_losses = live_losses || (!losses.empty() && losses.size() < 30);
    }
    const RunState s = session.state();
    return s == RunState::finished || s == RunState::failed;
  });
  INFO(session.error());
  REQUIRE(session.state() == RunState::finished);
  CHECK(live_spans);
  CHECK(live_losses);
  REQUIRE(session.result() != nullptr);
  // The end is the group's recording: the threaded run's weights, bit for bit.
  const RunResult threads = run_training(cfg);
  CHECK(session.result()->final_params == threads.final_params);
  CHECK(losses == session.result()->losses);
  CHECK(session.result()->clock_offset_ns.size() == 3);
  for (const RankData& r : data.ranks) CHECK(!r.lane(Lane::comm).spans.empty());

  // Reset during a long run stops the group: no process is left, nothing in TMPDIR.
  // Long enough to outlast the reset, short enough for the preflight on a machine with a few
  // GiB free: every process keeps every rank's records (230 KiB a step), so 5000 steps are
  // estimated at 3.3 GiB (100000 were at 22 GiB, once, and refused here).
  session.start_processes(small_zero3(5000));
  wait_for([&] { return session.steps_done() > 2 || session.state() == RunState::failed; });
  INFO(session.error());
  REQUIRE(session.state() == RunState::running);
  const auto before = std::chrono::steady_clock::now();
  session.reset();
  CHECK(std::chrono::steady_clock::now() - before < std::chrono::seconds(10));
  CHECK(session.state() == RunState::idle);
  CHECK_FALSE(group_left(tmp.string()));
  CHECK(fs::is_empty(tmp));

  // What one process per rank cannot run fails with the CLI's line.
  RunConfig dp = small_zero3(2);
  dp.strategy = "dp";
  session.start_processes(dp);
  wait_for([&] { return session.state() == RunState::failed; });
  CHECK(session.state() == RunState::failed);
  CHECK_THAT(session.error(), Catch::Contains("dp cannot run one process per rank"));

  old_tmp ? ::setenv("TMPDIR", had_tmp.c_str(), 1) : ::unsetenv("TMPDIR");
  std::error_code ec;
  fs::remove_all(tmp, ec);
}
