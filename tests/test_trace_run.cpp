// Traces of real runs: a ddp run and a real send/recv exchange export to a
// Chrome trace that parses back with one process per rank, both tracks,
// memory counters and one flow per message.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <thread>

#include "core/comm/comm.h"
#include "core/record/trace.h"
#include "core/run/runner.h"

using namespace shardlab;
using nlohmann::json;

namespace {
json roundtrip(const std::vector<Recorder::Snapshot>& snaps, int64_t t0) {
  return json::parse(trace_to_json(snaps, t0).dump());
}
}  // namespace

TEST_CASE("trace of a real ddp run has ranks, tracks and memory counters", "[trace]") {
  RunConfig c;
  c.model = "mlp:3x32";
  c.strategy = "ddp";
  c.world = 3;
  c.batch = 12;
  c.steps = 2;
  const RunResult r = run_training(c);
  std::vector<Recorder::Snapshot> snaps;
  for (const auto& rec : r.recorders) snaps.push_back(rec->snapshot());
  const json t = roundtrip(snaps, r.t0_ns);

  std::map<int, std::string> process;                // pid -> name
  std::map<std::pair<int, int>, std::string> track;  // (pid, tid) -> name
  std::map<std::string, int> x_by_track, counters;
  for (const json& e : t["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") process[e["pid"]] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name")
      track[{e["pid"], e["tid"]}] = e["args"]["name"];
  }
  for (const json& e : t["traceEvents"]) {
    if (e["ph"] == "X") {
      const std::string name = process[e["pid"]] + "/" + track[{e["pid"], e["tid"]}];
      ++x_by_track[name];
      REQUIRE(e["dur"].get<double>() >= 0);
    }
    if (e["ph"] == "C") ++counters[process[e["pid"]]];
  }
  REQUIRE(process.size() == 3);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string p = "rank " + std::to_string(rank);
    INFO(p);
    REQUIRE(x_by_track[p + "/compute"] >=
            2 * (3 + 3 + 1 + 1));                    // fwd, bwd, loss, optimizer per step
    REQUIRE(x_by_track[p + "/communication"] >= 2);  // at least one all-reduce per step
    REQUIRE(counters[p] > 0);
  }
}

TEST_CASE("trace of real send/recv pairs every message with one flow", "[trace]") {
  GlooGroup group(2, GlooGroupOptions{std::chrono::milliseconds(10000)});
  std::vector<std::shared_ptr<Recorder>> recs = {std::make_shared<Recorder>(0),
                                                 std::make_shared<Recorder>(1)};
  const int64_t t0 = now_ns();
  std::vector<std::string> errors(2);
  auto body = [&](int rank) {
    try {
      auto comm = group.connect(rank, recs[rank].get(), nullptr);
      std::vector<float> buf(100, static_cast<float>(rank));
      for (int i = 0; i < 5; ++i) {
        if (rank == 0) {
          comm->send(buf.data(), buf.size() * 4, 1, i);
          comm->recv(buf.data(), buf.size() * 4, 1, 100 + i);
        } else {
          comm->recv(buf.data(), buf.size() * 4, 0, i);
          comm->send(buf.data(), buf.size() * 4, 0, 100 + i);
        }
      }
    } catch (const std::exception& e) {
      errors[rank] = e.what();
    }
  };
  std::thread a(body, 0), b(body, 1);
  a.join();
  b.join();
  REQUIRE(errors[0].empty());
  REQUIRE(errors[1].empty());
  const json t = roundtrip({recs[0]->snapshot(), recs[1]->snapshot()}, t0);
  std::map<uint64_t, int> starts, finishes;
  for (const json& e : t["traceEvents"]) {
    if (e["ph"] == "s") ++starts[e["id"].get<uint64_t>()];
    if (e["ph"] == "f") ++finishes[e["id"].get<uint64_t>()];
  }
  REQUIRE(starts.size() == 10);
  REQUIRE(starts == finishes);
  for (const auto& [id, n] : starts) REQUIRE(n == 1);
}
