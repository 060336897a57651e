// "As on N devices" in the views (app/gui/logic/projected_run.h): the projected
// run keeps the measured run's ranks, steps and buffers; with ranks sharing
// cores its steps are no longer than measured; a playhead keeps its step when
// it changes clock; the projection is made again only when the run or the
// link changes; and `gui --projected` refuses a bad link in one line.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "app/gui/logic/compare_logic.h"
#include "app/gui/logic/projected_run.h"
#include "app/gui/logic/run_data.h"
#include "core/comm/cores.h"
#include "core/run/runner.h"
#include "tests/test_util.h"

using namespace shardlab;
using namespace shardlab::gui;

namespace {

// The pipeline the timing tests project (tests/timing/test_projection.cpp),
// with small steps: four stages of four layers, eight micro-batches.
const RunResult& gpipe_run() {
  static const RunResult r = [] {
    RunConfig c;
    c.model = "mlp:16x512";
    c.strategy = "gpipe";
    c.world = 4;
    c.batch = 128;
    c.steps = 4;
    c.micro_batches = 8;
    c.timeout_ms = 60000;
    return run_training(c);
  }();
  return r;
}

struct Projected {
  RunData measured;
  ProjectedRun p;
};

Projected project_gpipe(const std::string& link = kCompareLink) {
  Projected x;
  ingest_result(x.measured, gpipe_run());
  update_projection(x.p, &gpipe_run(), x.measured, false, link);
  return x;
}

// Step k's length on a run's clock, from its step bounds.
std::vector<double> step_lengths(const RunData& d) {
  const std::vector<int64_t> b = step_bounds(d);
  std::vector<double> out;
  for (size_t k = 0; k + 1 < b.size(); ++k) out.push_back(static_cast<double>(b[k + 1] - b[k]));
  return out;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

TEST_CASE("projection view: the projected run has the measured run's ranks, steps and buffers",
          "[projection-view]") {
  const Projected x = project_gpipe();
  INFO(x.p.error);
  REQUIRE(x.p.ok());
  const RunData& m = x.measured;
  const RunData& p = x.p.data;
  CHECK(p.world == m.world);
  CHECK(p.cfg.strategy == "gpipe");
  CHECK(p.step_begin.size() == m.step_begin.size());
  CHECK(step_bounds(p).size() == step_bounds(m).size());
  for (int64_t b : p.step_begin) CHECK(b >= 0);
  for (int r = 0; r < p.world; ++r) {
    INFO("rank " << r);
    const RankData& pr = p.ranks[r];
    const RankData& mr = m.ranks[r];
    // The same work on both clocks, but for making the batches: a data loader
    // makes them ahead, off the projected devices' critical path (ProjectionOptions).
    auto work = [](const LaneData& lane) {
      return std::count_if(lane.spans.begin(), lane.spans.end(),
                           [](const Span& s) { return s.kind != SpanKind::data; });
    };
    CHECK(work(pr.lane(Lane::compute)) == work(mr.lane(Lane::compute)));
    CHECK(pr.lane(Lane::comm).spans.size() == mr.lane(Lane::comm).spans.size());
    for (int step = 0; step < 4; ++step)
      CHECK(std::any_of(pr.lane(Lane::compute).spans.begin(), pr.lane(Lane::compute).spans.end(),
                        [&](const Span& s) { return s.step == step; }));
    // Its buffers too: every allocation event, moved onto the projected clock in order.
    REQUIRE(pr.allocs.size() == mr.allocs.size());
    for (size_t i = 0; i < pr.allocs.size(); ++i) {
      CHECK(pr.allocs[i].delta_bytes == mr.allocs[i].delta_bytes);
      CHECK(pr.allocs[i].name == mr.allocs[i].name);
      CHECK(pr.allocs[i].t_ns >= 0);
      if (i > 0 && mr.allocs[i].t_ns >= mr.allocs[i - 1].t_ns)
        CHECK(pr.allocs[i].t_ns >= pr.allocs[i - 1].t_ns);
    }
    CHECK(pr.residency.size() == mr.residency.size());
  }
  // The captions say which is which.
  CHECK(projected_caption(x.p).rfind("as on 4 \xC3\x97 CPU core, nvlink-h100", 0) == 0);
  CHECK(measured_caption(gpipe_run(), 2).rfind("measured here \xC2\xB7 4 ranks on 2 cores", 0) ==
        0);
}

TEST_CASE("projection view: with ranks sharing cores a projected step is no longer than measured",
          "[projection-view]") {
  const Projected x = project_gpipe();
  REQUIRE(x.p.ok());
  const double measured = median_of(step_lengths(x.measured));
  const double projected = median_of(step_lengths(x.p.data));
  INFO("measured " << measured / 1e6 << " ms, projected " << projected / 1e6 << " ms, "
                   << cores_available() << " cores");
  REQUIRE(projected > 0);
  if (cores_available() < x.measured.world) {
    // Four ranks took turns on fewer cores: on a core each, a step cannot take longer.
    CHECK(projected <= measured * 1.05);
    CHECK(x.p.median_step_ms <= gpipe_run().median_step_ms * 1.05);
  } else {
    // A core each here too: the projection predicts about what was measured.
    CHECK(projected <= measured * 1.5);
  }
}

TEST_CASE("projection view: the clocks map step to step", "[projection-view]") {
  // Two runs of three steps: the second twice as fast, set up in a third of the time.
  const std::vector<double> measured{0, 30, 100, 200, 300, 400, 420};
  const std::vector<double> projected{0, 10, 20, 70, 120, 170, 180};
  CHECK(map_clock(measured, projected, 150) == Approx(45));   // halfway into step 0
  CHECK(map_clock(measured, projected, 300) == Approx(120));  // step 2 begins
  CHECK(map_clock(measured, projected, 15) == Approx(5));     // setup
  CHECK(map_clock(measured, projected, 500) == Approx(260));  // past the end: the same distance
  for (double t : {0.0, 15.0, 99.0, 150.0, 333.0, 410.0})
    CHECK(map_clock(projected, measured, map_clock(measured, projected, t)) == Approx(t));
  // Marks that coincide (a run without setup) leave no gap in the map.
  const std::vector<double> flat{0, 0, 0, 50, 100, 150, 150};
  CHECK(map_clock(flat, measured, 75) == Approx(250));
  CHECK(map_clock(measured, flat, 250) == Approx(75));
}

TEST_CASE("projection view: the playhead keeps its step when it changes clock",
          "[projection-view]") {
  const Projected x = project_gpipe();
  REQUIRE(x.p.ok());
  const std::vector<int64_t> b = step_bounds(x.measured);
  REQUIRE(b.size() == 5);  // four steps and the end
  for (int k = 0; k < 4; ++k) {
    for (double f : {0.0, 0.3, 0.5, 0.97}) {
      INFO("step " << k << ", " << f << " of the way");
      Playhead p;
      p.t = static_cast<double>(b[k]) + f * static_cast<double>(b[k + 1] - b[k]);
      const double t = p.t;
      REQUIRE(x.measured.step_at(static_cast<int64_t>(p.t)) == k);
      keep_clock(p, true, x.p);
      CHECK(p.projected);
      CHECK(x.p.data.step_at(static_cast<int64_t>(p.t)) == k);
      // The projected clock runs faster here: the same step, earlier on its clock.
      keep_clock(p, false, x.p);
      CHECK_FALSE(p.projected);
      CHECK(p.t == Approx(t).margin(1));
    }
  }
  // Without a projection there is no other clock.
  Playhead p;
  p.t = 1234;
  keep_clock(p, true, ProjectedRun{});
  CHECK_FALSE(p.projected);
  CHECK(p.t == 1234);
}

TEST_CASE("projection view: projected once per run and link", "[projection-view]") {
  RunData measured;
  ingest_result(measured, gpipe_run());
  ProjectedRun p;
  Playhead playhead;
  // Nobody asks: nothing is projected.
  refresh_projection(p, playhead, &gpipe_run(), measured, false, "nvlink-h100", false, false);
  CHECK(p.projections == 0);
  CHECK(p.status == ProjectionStatus::none);
  // The timeline asks: projected once, however many frames ask again.
  for (int frame = 0; frame < 3; ++frame)
    refresh_projection(p, playhead, &gpipe_run(), measured, false, "nvlink-h100", true, false);
  CHECK(p.projections == 1);
  CHECK(p.ok());
  CHECK_FALSE(playhead.projected);
  CHECK(p.link_label == "nvlink-h100");
  // Another link: once more, and the data says so.
  const double nvlink_ms = p.median_step_ms;
  CHECK(update_projection(p, &gpipe_run(), measured, false, "eth100"));
  CHECK_FALSE(update_projection(p, &gpipe_run(), measured, false, "eth100"));
  CHECK(p.projections == 2);
  CHECK(p.link_label == "eth100");
  CHECK(p.median_step_ms >= nvlink_ms * 0.9);  // a slower link, never much faster
  // The replay clock asks too: the playhead moves onto the projected clock,
  // and back before the projection under it is made again.
  playhead.t = static_cast<double>(step_bounds(measured)[2]);  // step 2 begins
  refresh_projection(p, playhead, &gpipe_run(), measured, false, "eth100", false, true);
  CHECK(playhead.projected);
  CHECK(p.data.step_at(static_cast<int64_t>(playhead.t)) == 2);
  refresh_projection(p, playhead, &gpipe_run(), measured, false, "25,5", false, true);
  CHECK(p.projections == 3);
  CHECK(p.link_label == "25 GB/s, 5 us");
  CHECK(playhead.projected);
  CHECK(p.data.step_at(static_cast<int64_t>(playhead.t)) == 2);
  // The clock back to measured here: the playhead too.
  refresh_projection(p, playhead, &gpipe_run(), measured, false, "25,5", false, false);
  CHECK_FALSE(playhead.projected);
  CHECK(measured.step_at(static_cast<int64_t>(playhead.t)) == 2);
  // New data for the same run (a run is only reread as a whole): made again.
  ingest_result(measured, gpipe_run());
  CHECK(update_projection(p, &gpipe_run(), measured, false, "25,5"));
  CHECK(p.projections == 4);
}

TEST_CASE("projection view: a run that cannot be projected says why in one line",
          "[projection-view]") {
  RunData measured;
  ProjectedRun p;
  update_projection(p, nullptr, measured, true, kCompareLink);
  CHECK(p.status == ProjectionStatus::running);
  CHECK(projection_reason(p).find("still going") != std::string::npos);
  update_projection(p, nullptr, measured, false, kCompareLink);
  CHECK(p.status == ProjectionStatus::no_run);
  CHECK(projection_reason(p).find("no finished run") != std::string::npos);
  // A run made without recording its spans.
  RunResult bare;
  bare.cfg.world = 2;
  update_projection(p, &bare, measured, false, kCompareLink);
  CHECK(p.status == ProjectionStatus::failed);
  CHECK(p.projections == 1);
  const std::string why = projection_reason(p);
  CHECK(why.find("cannot be projected") != std::string::npos);
  CHECK(why.find("no spans") != std::string::npos);
  CHECK(why.find('\n') == std::string::npos);
  // In Chinese too.
  CHECK(projection_reason(p, Tr{lesson::Lang::zh}).find("无法投影") != std::string::npos);
}

TEST_CASE("projection view: the link menu and the rows' shift", "[projection-view]") {
  const std::vector<std::string> presets = link_choices("pcie4");
  CHECK(presets == std::vector<std::string>{"loopback", "pcie4", "nvlink-h100", "eth100", "ib400"});
  CHECK(link_choices("25,5").back() == "25,5");
  const Projected x = project_gpipe();
  REQUIRE(x.p.ok());
  for (int k = 0; k < 4; ++k)
    CHECK(projected_offset(x.measured, x.p.data, k) ==
          static_cast<double>(x.p.data.step_begin[k] - x.measured.step_begin[k]));
  CHECK(projected_offset(x.measured, x.p.data, 99) ==
        x.p.data.steps_begin() - x.measured.steps_begin());
}

TEST_CASE("gui --projected: a bad link ends in one line and exit code 2, before any window",
          "[projection-view]") {
  const test::CliResult bad = test::run_cli("gui --projected nvlink");
  CHECK(bad.code == 2);
  CHECK(bad.out ==
        "error: --projected 'nvlink' is invalid (valid: loopback, pcie4, nvlink-h100, eth100, "
        "ib400, or BW,LAT such as 25,5 for 25 GB/s and 5 us)\n");
  const test::CliResult help = test::run_cli("gui --help");
  CHECK(help.out.find("--projected LINK") != std::string::npos);
}
