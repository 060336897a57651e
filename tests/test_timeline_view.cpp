// The timeline's reading of a run, without a window: which part of a comm span
// is waiting (the bubble) and which moves bytes, the per-step breakdown, the
// pipeline blocks and their labels, label placement, axis ticks and flow
// bundling.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include "app/gui/logic/palette.h"
#include "app/gui/logic/run_data.h"
#include "app/gui/logic/timeline_logic.h"
#include "app/gui/logic/wait_logic.h"
#include "core/parallel/schedule.h"
#include "core/parallel/strategy.h"
#include "core/run/runner.h"
#include "tests/run_util.h"

using namespace shardlab;
using namespace shardlab::gui;

namespace {

Span make(int64_t b, int64_t e, SpanKind k, Lane lane, int step = 0) {
  Span s;
  s.t_begin_ns = b;
  s.t_end_ns = e;
  s.kind = k;
  s.lane = lane;
  s.step = step;
  return s;
}

Span compute(int64_t b, int64_t e, SpanKind k = SpanKind::forward, int mb = -1, int layer = -1,
             int step = 0) {
  Span s = make(b, e, k, Lane::compute, step);
  s.micro_batch = mb;
  s.layer = layer;
  return s;
}

Span p2p(int64_t b, int64_t e, SpanKind k, int peer, uint64_t flow, int mb = -1) {
  Span s = make(b, e, k, Lane::comm);
  s.peer = peer;
  s.flow_id = flow;
  s.micro_batch = mb;
  s.bytes = 4096;
  return s;
}

RunData make_data(int world, const std::string& strategy = "ddp") {
  RunData d;
  RunConfig cfg;
  cfg.model = "mlp:4x16";
  cfg.strategy = strategy;
  cfg.world = world;
  reset_run_data(d, cfg, world, 0);
  return d;
}

int64_t sum(const std::vector<Interval>& v) {
  int64_t n = 0;
  for (const Interval& i : v) n += i.second - i.first;
  return n;
}

// Every rank's time in the window is exactly one of computing, exposed bytes, idle.
void require_partition(const WindowUse& u) {
  for (const RankUse& r : u.ranks) {
    REQUIRE(r.computing + r.exposed + r.idle == u.duration());
    REQUIRE(r.hidden <= r.computing);
    REQUIRE(sum(r.idle_intervals) == r.idle);
  }
}

}  // namespace

TEST_CASE("a recv posted early and completed late is idle until its data is sent",
          "[timeline-view]") {
  RunData d = make_data(2, "gpipe");
  // Stage 0 computes F0 for 100 ns and sends it; stage 1 posted its recv at 10.
  append(d, 0, {compute(0, 100, SpanKind::forward, 0, 0), p2p(100, 150, SpanKind::send, 1, 7, 0)},
         {});
  append(d, 1, {p2p(10, 160, SpanKind::recv, 0, 7, 0), compute(160, 250, SpanKind::forward, 0, 1)},
         {});
  const WindowUse u = step_use(d, 0);
  CHECK(u.begin == 0);  // the first compute span of the step
  CHECK(u.end == 250);
  require_partition(u);

  const RankUse& r1 = u.ranks[1];
  REQUIRE(r1.waits.size() == 1);
  CHECK(r1.waits[0].ready == 100);  // the send's begin
  CHECK(r1.waits[0].peer == 0);
  CHECK(r1.wait_of(r1.waits[0].span) == &r1.waits[0]);
  CHECK(r1.computing == 90);
  CHECK(r1.exposed == 60);  // 100..160: the bytes move
  CHECK(r1.idle == 100);    // 0..100: nothing, then the recv waiting for its data
  CHECK(r1.idle_intervals == std::vector<Interval>{{0, 100}});

  // The send found its recv posted already: it moves bytes from its start.
  const RankUse& r0 = u.ranks[0];
  CHECK(r0.waits.empty());
  CHECK(r0.computing == 100);
  CHECK(r0.exposed == 50);
  CHECK(r0.idle_intervals == std::vector<Interval>{{150, 250}});

  CHECK(std::string(idle_name("gpipe")) == "bubble");
  CHECK(std::string(idle_name("1f1b")) == "bubble");
  CHECK(std::string(idle_name("ddp")) == "waiting");
  const Tr zh{lesson::Lang::zh};
  CHECK(std::string(idle_name("gpipe", zh)) == "气泡");
  CHECK(std::string(idle_name("ddp", zh)) == "等待");
}

TEST_CASE("a send waits until its recv is posted, unmatched spans move bytes", "[timeline-view]") {
  RunData d = make_data(2);
  append(d, 0,
         {compute(0, 100), p2p(100, 300, SpanKind::send, 1, 9),
          p2p(300, 350, SpanKind::send, 1, 10)},  // its recv is not recorded (yet)
         {});
  append(d, 1, {compute(0, 200), p2p(200, 310, SpanKind::recv, 0, 9)}, {});
  const WindowUse u = step_use(d, 0);
  require_partition(u);
  REQUIRE(u.ranks[0].waits.size() == 1);
  CHECK(u.ranks[0].waits[0].ready == 200);
  CHECK(u.ranks[0].waits[0].peer == 1);
  CHECK(u.ranks[1].waits.empty());   // the send began before the recv was posted
  CHECK(u.ranks[0].exposed == 150);  // 200..350
  CHECK(u.ranks[0].idle == 100);     // 100..200
}

TEST_CASE("two mesh groups' collectives at once wait only for their own group's ranks",
          "[timeline-view]") {
  // A mesh tp=2 inside dp=2: tp groups {0,1} (group 1) and {2,3} (group 2)
  // all-reduce in the same step; matching by kind and ordinal alone would
  // join all four and make ranks 0 and 1 wait for rank 3.
  RunData d = make_data(4);
  auto ar = [](int64_t b, int group) {
    Span s = make(b, 400, SpanKind::all_reduce, Lane::comm);
    s.group = group;
    return s;
  };
  append(d, 0, {compute(0, 100), ar(100, 1)}, {});
  append(d, 1, {compute(0, 150), ar(150, 1)}, {});
  append(d, 2, {compute(0, 200), ar(200, 2)}, {});
  append(d, 3, {compute(0, 300), ar(300, 2)}, {});
  const WindowUse u = step_use(d, 0);
  require_partition(u);
  auto ready_of = [&](int rank) -> int64_t {
    const CommWait* w = u.ranks[rank].wait_of(0);
    return w ? w->ready : -1;
  };
  CHECK(ready_of(0) == 150);  // rank 1, its group's last
  CHECK(u.ranks[0].waits.at(0).peer == 1);
  CHECK(ready_of(1) == -1);
  CHECK(ready_of(2) == 300);  // rank 3
  CHECK(u.ranks[2].waits.at(0).peer == 3);
  CHECK(ready_of(3) == -1);
}

TEST_CASE("a mesh of two or more axes gets a comm lane per axis, waits found through them",
          "[timeline-view][mesh]") {
  // The real run: each comm span lands in the lane of the axis whose group
  // carried it, and every one of them is still found in the rank's comm lane
  // (the waits are indexed by it).
  RunConfig c;
  c.model = "gpt:2x32x4";
  c.seq = 8;
  c.strategy = "1f1b";
  c.mesh = "dp=2,pp=2,tp=2";
  c.world = 8;
  c.batch = 8;
  c.micro_batches = 2;
  c.steps = 2;
  const RunResult r = run_training(c);
  RunData d;
  ingest_result(d, r);
  REQUIRE(d.comm_axes == std::vector<MeshAxis>{MeshAxis::pp, MeshAxis::dp, MeshAxis::tp});
  CHECK(display_lanes(d) == 4);
  const Mesh mesh = run_mesh(c);
  for (int rank = 0; rank < c.world; ++rank) {
    INFO("rank " << rank);
    const RankData& rd = d.ranks[static_cast<size_t>(rank)];
    size_t n = 0;
    for (size_t a = 0; a < d.comm_axes.size(); ++a) {
      const LaneData& lane = display_lane(d, rank, static_cast<int>(a) + 1);
      CHECK(&lane == &rd.axis_lanes[a]);
      CHECK(!lane.spans.empty());
      for (const Span& s : lane.spans) {
        if (s.group != 0) CHECK(s.group == mesh.group_id(rank, d.comm_axes[a]));
        const int64_t i = comm_index_of(rd, s);
        REQUIRE(i >= 0);
        CHECK(rd.lane(Lane::comm).spans[static_cast<size_t>(i)].t_end_ns == s.t_end_ns);
      }
      n += lane.spans.size();
    }
    CHECK(n == rd.lane(Lane::comm).spans.size());
    CHECK(&display_lane(d, rank, 0) == &rd.lane(Lane::compute));
  }
  // One axis, or none: one comm lane, as before.
  const RunData plain = make_data(4);
  CHECK(plain.comm_axes.empty());
  CHECK(display_lanes(plain) == 2);
  CHECK(&display_lane(plain, 1, 1) == &plain.ranks[1].lane(Lane::comm));
  // Rows of 4 lanes stack without overlap, and fit the height they report.
  for (int lanes : {2, 4}) {
    const float lane_h = lane_height_for(900, 16, 8, true, true, lanes);
    const RowsLayout l = rows_layout(16, lane_h, 8, true, true, lanes);
    CHECK(l.lane_y(1, 0) >= l.lane_y(0, lanes - 1) + l.lane_h);
    CHECK(l.height() >= l.lane_y(7, lanes - 1) + l.lane_h);
    CHECK(l.height() <= 900 + 0.01f);
  }
}

TEST_CASE("collectives wait for the last rank to enter the same one", "[timeline-view]") {
  RunData d = make_data(3);
  auto coll = [](int64_t b, int64_t e, SpanKind k) { return make(b, e, k, Lane::comm); };
  // Each rank: an all-gather, some compute, an all-reduce, more compute, a second all-reduce.
  append(d, 0,
         {compute(0, 100), coll(20, 60, SpanKind::all_gather), coll(100, 400, SpanKind::all_reduce),
          compute(400, 500), coll(500, 600, SpanKind::all_reduce)},
         {});
  append(d, 1,
         {compute(0, 250), coll(30, 60, SpanKind::all_gather), coll(250, 400, SpanKind::all_reduce),
          compute(400, 450), coll(450, 600, SpanKind::all_reduce)},
         {});
  append(d, 2,
         {compute(0, 300), coll(50, 60, SpanKind::all_gather), coll(300, 400, SpanKind::all_reduce),
          compute(400, 520), coll(520, 600, SpanKind::all_reduce)},
         {});
  const WindowUse u = step_use(d, 0);
  require_partition(u);
  auto ready_of = [&](int rank, SpanKind kind, int n) -> int64_t {
    const LaneData& lane = d.ranks[rank].lane(Lane::comm);
    int seen = 0;
    for (uint32_t i = 0; i < lane.spans.size(); ++i)
      if (lane.spans[i].kind == kind && seen++ == n) {
        const CommWait* w = u.ranks[rank].wait_of(i);
        return w ? w->ready : -1;
      }
    return -2;
  };
  // The all-gathers: rank 2 entered last, at 50.
  CHECK(ready_of(0, SpanKind::all_gather, 0) == 50);
  CHECK(ready_of(1, SpanKind::all_gather, 0) == 50);
  CHECK(ready_of(2, SpanKind::all_gather, 0) == -1);
  // The first all-reduce: rank 2 at 300; the second: rank 2 at 520. The n-th
  // of a kind matches the n-th, whatever other kinds ran in between.
  CHECK(ready_of(0, SpanKind::all_reduce, 0) == 300);
  CHECK(ready_of(1, SpanKind::all_reduce, 0) == 300);
  CHECK(ready_of(2, SpanKind::all_reduce, 0) == -1);
  CHECK(ready_of(0, SpanKind::all_reduce, 1) == 520);
  CHECK(ready_of(1, SpanKind::all_reduce, 1) == 520);
  CHECK(ready_of(2, SpanKind::all_reduce, 1) == -1);
  for (const CommWait& w : u.ranks[0].waits) CHECK(w.peer == 2);
  // Rank 0 waited 100..300 and 500..520 with nothing to compute: idle.
  CHECK(u.ranks[0].idle == 220);
  CHECK(u.ranks[0].computing == 200);
  CHECK(u.ranks[0].exposed == 180);  // 300..400 and 520..600
  // The all-gather waits ran while rank 0 computed: not idle either way.
  CHECK(u.ranks[2].idle == 0);

  // A rank whose second all-reduce is not recorded yet: the others' can't be matched.
  RunData e = make_data(2);
  append(
      e, 0,
      {compute(0, 100), coll(100, 200, SpanKind::all_reduce), coll(200, 300, SpanKind::all_reduce)},
      {});
  append(e, 1, {compute(0, 150), coll(150, 200, SpanKind::all_reduce)}, {});
  const WindowUse v = step_use(e, 0);
  REQUIRE(v.ranks[0].waits.size() == 1);
  CHECK(v.ranks[0].waits[0].ready == 150);
  require_partition(v);
}

TEST_CASE("the breakdown of a real pipeline step names its bubble", "[timeline-view]") {
  RunConfig cfg;
  cfg.model = "mlp:4x32";
  cfg.strategy = "gpipe";
  cfg.world = 2;
  cfg.batch = 16;
  cfg.micro_batches = 4;
  cfg.steps = 3;
  RunResult r = run_training(cfg);
  RunData d;
  reset_run_data(d, cfg, cfg.world, r.t0_ns);
  for (int k = 0; k < cfg.world; ++k) {
    Recorder::Snapshot s = r.recorders[k]->snapshot();
    for (Span& x : s.spans) x.t_begin_ns -= r.t0_ns, x.t_end_ns -= r.t0_ns;
    append(d, k, std::move(s.spans), {});
  }
  // Every message: its span waits exactly when its partner (the recv's send,
  // the send's recv) began later, and then until that begin. Which way round
  // it goes depends on thread scheduling; the rule does not.
  auto partner_begin = [&](int rank, const Span& s) -> int64_t {
    const SpanKind other = s.kind == SpanKind::recv ? SpanKind::send : SpanKind::recv;
    for (const Span& x : d.ranks[1 - rank].lane(Lane::comm).spans)
      if (x.kind == other && x.flow_id == s.flow_id) return x.t_begin_ns;
    return -1;
  };
  int64_t stage1_idle = 0;
  int waits_checked = 0;
  for (int step = 0; step < cfg.steps; ++step) {
    const WindowUse u = step_use(d, step);
    REQUIRE(u.duration() > 0);
    require_partition(u);
    stage1_idle += u.ranks[1].idle;
    for (int rank = 0; rank < 2; ++rank) {
      const LaneData& comm = d.ranks[rank].lane(Lane::comm);
      const auto [first, last] = span_window(comm, u.begin, u.end);
      for (size_t i = first; i < last; ++i) {
        const Span& s = comm.spans[i];
        if (s.step != step || (s.kind != SpanKind::send && s.kind != SpanKind::recv)) continue;
        const int64_t p = partner_begin(rank, s);
        REQUIRE(p >= 0);
        const CommWait* w = u.ranks[rank].wait_of(static_cast<uint32_t>(i));
        CHECK((w != nullptr) == (p > s.t_begin_ns));
        if (w) {
          CHECK(w->ready == std::min(p, s.t_end_ns));
          CHECK(w->peer == 1 - rank);
          ++waits_checked;
        }
        // Activations go up (rank 0 sends, rank 1 receives), gradients down.
        const bool activation = (s.kind == SpanKind::send) == (rank == 0);
        std::string tag = activation ? "F" : "B";
        tag += std::to_string(s.micro_batch);
        CHECK(micro_batch_tag(s) == tag);
      }
    }
  }
  // Stage 1 has nothing to do while stage 0 runs the first forward and the
  // last backward of a step: some of its time is the bubble.
  CHECK(stage1_idle > 0);
  CHECK(waits_checked > 0);
  CHECK(std::string(idle_name(cfg.strategy)) == "bubble");
  const std::vector<StageRow> rows = stage_rows(r);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].bubble_formula == Approx(1.0 / 5.0));  // (P-1)/(M+P-1) = 1/5
  CHECK(rows[1].in_flight_expected == 4);
  CHECK(rows[0].kept_per_micro_batch > 0);
  CHECK(rows[0].in_flight_measured ==
        Approx(static_cast<double>(rows[0].peak_activation_bytes) / rows[0].kept_per_micro_batch));
}

TEST_CASE("span labels name pipeline messages like the blocks they carry", "[timeline-view]") {
  Span send = p2p(0, 1, SpanKind::send, 1, 1, 3);
  send.rank = 0;
  Span recv = p2p(0, 1, SpanKind::recv, 0, 1, 3);
  recv.rank = 1;
  CHECK(span_label(send, false) == "send F3 \xE2\x86\x92r1");
  CHECK(span_label(recv, false) == "recv F3 \xE2\x86\x90r0");
  Span grad = p2p(0, 1, SpanKind::recv, 2, 1, 5);  // rank 1 receives B5's gradient from rank 2
  grad.rank = 1;
  CHECK(span_label(grad, false) == "recv B5 \xE2\x86\x90r2");
  CHECK(span_label(grad, true).find("4.00 KiB") != std::string::npos);
  Span loss = compute(0, 1, SpanKind::loss, 2);
  CHECK(span_label(loss, false) == "loss F2");
  for (const Span& s : {send, recv, grad, loss})
    CHECK(span_label(s, true).find("mb") == std::string::npos);
  Span plain = p2p(0, 1, SpanKind::send, 1, 1);
  plain.layer = 3;
  CHECK(span_label(plain, false) == "send L3 \xE2\x86\x92r1");
  // In Chinese: the step labels and the words on spans.
  const Tr zh{lesson::Lang::zh};
  const RunData d = make_data(2, "gpipe");
  CHECK(step_label(d, 3, zh) == "第 3 步");
  Span other = compute(0, 1, SpanKind::other, -1);
  CHECK(span_label(other, false, zh) == "其他操作");
  CHECK(span_label(other, false) == "other");
}

TEST_CASE("pipeline blocks: a micro-batch's layers form one run, recompute is R",
          "[timeline-view]") {
  RunData d = make_data(1, "gpipe");
  std::vector<Span> s;
  int64_t t = 0;
  auto add = [&](SpanKind k, int mb, int layer) {
    s.push_back(compute(t, t + 10, k, mb, layer));
    t += 10;
  };
  add(SpanKind::other, 0, -1);  // the data load goes with F0
  add(SpanKind::forward, 0, 0);
  add(SpanKind::forward, 0, 1);
  add(SpanKind::forward, 1, 0);
  add(SpanKind::forward, 1, 1);
  add(SpanKind::loss, 1, -1);
  add(SpanKind::forward, 1, 0);  // the backward's recompute starts over at layer 0
  add(SpanKind::forward, 1, 1);
  add(SpanKind::backward, 1, 1);
  add(SpanKind::backward, 1, 0);
  add(SpanKind::optimizer, -1, -1);
  append(d, 0, s, {});
  std::vector<PhaseRun> runs;
  REQUIRE(phase_runs(d.ranks[0].lane(Lane::compute), 0, 1000, 100, runs));
  REQUIRE(runs.size() == 4);
  CHECK(runs[0].label() == "F0");
  CHECK(runs[0].count == 3);
  CHECK(runs[1].label() == "F1");
  CHECK(runs[1].count == 3);
  CHECK(runs[2].label() == "R1");
  CHECK(runs[2].count == 2);
  CHECK(runs[3].label() == "B1");
  CHECK(runs[3].t_begin == 80);
  CHECK(runs[3].t_end == 100);
  // A window that starts inside a run still sees the whole run.
  runs.clear();
  REQUIRE(phase_runs(d.ranks[0].lane(Lane::compute), 45, 55, 100, runs));
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].label() == "F1");
  CHECK(runs[0].t_begin == 30);
  // Too many spans in view: no runs (nothing would be readable anyway).
  runs.clear();
  CHECK_FALSE(phase_runs(d.ranks[0].lane(Lane::compute), 0, 1000, 5, runs));
  CHECK(runs.empty());
}

TEST_CASE("narrow runs back to back share a label", "[timeline-view]") {
  Viewport vp;
  vp.t_begin = 0;
  vp.t_end = 1000;
  vp.x0 = 0;
  vp.width = 1000;  // 1 px per ns
  auto run = [](int64_t b, int64_t e, char letter, int mb) {
    PhaseRun r;
    r.t_begin = b;
    r.t_end = e;
    r.letter = letter;
    r.micro_batch = mb;
    return r;
  };
  const auto width = [](const std::string& s) { return 8.0f * static_cast<float>(s.size()); };
  // Five narrow forwards in a row, then one micro-batch's F and B, then a wide block.
  const std::vector<PhaseRun> runs = {
      run(0, 5, 'F', 0),   run(5, 10, 'F', 1),    run(10, 15, 'F', 2),   run(15, 20, 'F', 3),
      run(21, 26, 'F', 4), run(200, 205, 'F', 7), run(205, 210, 'B', 7), run(300, 400, 'B', 6)};
  const std::vector<RunGroup> g = group_runs(runs, vp, 4, 3, width);
  REQUIRE(g.size() == 3);
  CHECK(g[0].label == "F0-4");
  CHECK(g[0].count == 5);
  CHECK(g[1].label == "F7 B7");
  CHECK(g[2].label == "B6");

  // naive-mp (M = 1): one step's B0 and the next step's F0 are back to back,
  // yet not one block; and a run of forwards stops at the step's end.
  std::vector<PhaseRun> two = {run(0, 100, 'F', 0), run(100, 105, 'B', 0), run(105, 110, 'F', 0),
                               run(110, 200, 'B', 0)};
  two[0].step = two[1].step = 0;
  two[2].step = two[3].step = 1;
  const std::vector<RunGroup> t = group_runs(two, vp, 4, 3, width);
  REQUIRE(t.size() == 4);
  CHECK(t[1].label == "B0");
  CHECK(t[2].label == "F0");
  two[2].step = 0;  // the same step: then they do share a label
  CHECK(group_runs(two, vp, 4, 3, width)[1].label == "B0 F0");
  std::vector<PhaseRun> fw = {run(0, 5, 'F', 0), run(5, 10, 'F', 1), run(10, 15, 'F', 0)};
  fw[2].step = 1;
  const std::vector<RunGroup> f = group_runs(fw, vp, 4, 3, width);
  REQUIRE(f.size() == 2);
  CHECK(f[0].label == "F0-1");
  CHECK(f[1].label == "F0");
}

TEST_CASE("labels never overlap each other or another block", "[timeline-view]") {
  // Random lanes of blocks with labels of random widths, 1 to 8 ranks' worth.
  uint64_t rng = 12345;
  auto next = [&](float lo, float hi) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * static_cast<float>(rng % 10000) / 10000.0f;
  };
  for (int lane = 0; lane < 16; ++lane) {
    std::vector<LabelRequest> req;
    float x = 0;
    while (x < 1500) {
      LabelRequest r;
      r.x0 = x + next(0, 40);
      r.x1 = r.x0 + next(1, 80);
      r.width = next(10, 60);
      x = r.x1;
      req.push_back(r);
    }
    for (size_t k = 0; k < req.size(); ++k)
      req[k].limit = k + 1 < req.size() ? req[k + 1].x0 : 1500;
    const std::vector<LabelPlace> p = place_labels(req, 3);
    REQUIRE(p.size() == req.size());
    float last_end = -1e9f;
    int shown = 0;
    for (size_t k = 0; k < p.size(); ++k) {
      if (!p[k].shown) continue;
      ++shown;
      const float a = p[k].x, b = p[k].x + req[k].width;
      CHECK(a >= last_end + 3);  // apart from the label before
      last_end = b;
      if (p[k].inside) {
        CHECK(a >= req[k].x0);
        CHECK(b <= req[k].x1);
      } else {
        CHECK(a >= req[k].x1);     // after its own block
        CHECK(b <= req[k].limit);  // before the next block
      }
    }
    CHECK(shown > 0);
  }

  // Step labels and axis labels: kept boxes do not touch.
  const std::vector<std::pair<float, float>> boxes = {{0, 50},   {30, 50},  {60, 50},
                                                      {200, 50}, {245, 10}, {900, 200}};
  const std::vector<bool> keep = keep_apart(boxes, 8, 1000);
  CHECK(keep == std::vector<bool>{true, false, true, true, false, false});
}

TEST_CASE("rows: gutter labels and step labels do not overlap for 1 to 8 ranks at 1x-2.5x",
          "[timeline-view]") {
  for (float scale : {1.0f, 1.25f, 1.6f, 2.0f, 2.5f}) {
    const float font = 16 * scale, small = font * 0.85f;
    for (int world = 1; world <= 8; ++world)
      for (float avail : {200.0f, 500.0f, 900.0f, 2000.0f}) {
        const float lane_h = lane_height_for(avail, font, world, true, true);
        CHECK(lane_h >= font + 6);  // a line of text and its margins, at any size
        const RowsLayout l = rows_layout(font, lane_h, world, true, true);
        // The step labels sit in their own band under the axis, above the lanes.
        CHECK(l.steps_h >= font);
        CHECK(l.axis_h >= font);
        CHECK(l.rows_top() >= l.axis_h + l.steps_h);
        // Boxes of every gutter text, top to bottom: rank name and "compute"
        // in the compute lane, layers and "comm" in the comm lane.
        std::vector<std::pair<float, float>> ys;
        for (int r = 0; r < world; ++r) {
          const float y0 = text_y_in_lane(l, r, 0, font), y1 = text_y_in_lane(l, r, 1, small);
          ys.push_back({y0, y0 + font});
          ys.push_back({y1, y1 + small});
          CHECK(y0 >= l.lane_y(r, 0));
          CHECK(y0 + font <= l.lane_y(r, 1));
          CHECK(y1 >= l.lane_y(r, 1));
          CHECK(y1 + small <= l.lane_y(r, 1) + l.lane_h);
        }
        CHECK(ys.front().first >= l.rows_top());
        for (size_t k = 1; k < ys.size(); ++k) CHECK(ys[k].first >= ys[k - 1].second);
        CHECK(ys.back().second <= l.height());
      }
    // The rows' share of the view: all of them when the tables fit under them,
    // else at least their smallest readable lanes while the tables keep a peek.
    for (int world = 1; world <= 8; ++world) {
      const float rows_min = rows_layout(font, font + 6, world, true, true).height();
      const float tall = rows_height(3000, font, world, 500, 40);
      CHECK(tall >= rows_min);
      CHECK(tall <= rows_layout(font, font * 4, world, true, true).height() + 0.01f);
      const float cramped = rows_height(rows_min + 100, font, world, 400, 60);
      CHECK(cramped == Approx(std::max(font * 6, std::min(rows_min, rows_min + 40))));
      // Bigger text, taller lanes: presenter mode grows the rows with the font.
      CHECK(lane_height_for(tall, font, world, true, true) >= font + 6);
    }
  }
}

TEST_CASE("axis tick labels are distinct at every zoom", "[timeline-view]") {
  const float width = 1400, char_px = 8;
  // Around 1.02 s into a run, from a 20 s window down to 0.5 µs: 20 zoom levels.
  double span = 20e9;
  for (int z = 0; z < 20; ++z, span /= 2.8) {
    for (double centre : {1.02e9, 0.0 + span * 0.5, 3.7e6}) {
      const double t0 = centre - span * 0.5, t1 = centre + span * 0.5;
      const std::vector<AxisTick> ticks = time_ticks(t0, t1, width, char_px);
      INFO("zoom " << z << " window " << span << " ns at " << centre);
      REQUIRE(ticks.size() >= 2);
      std::set<std::string> labels;
      size_t widest = 0;
      for (const AxisTick& t : ticks) {
        labels.insert(t.label);
        widest = std::max(widest, t.label.size());
        CHECK(t.t >= t0 - 1e-6 * span);
        CHECK(t.t <= t1 + 1e-6 * span);
      }
      CHECK(labels.size() == ticks.size());
      // Spaced so that centred labels do not touch.
      const double px = (ticks[1].t - ticks[0].t) * width / span;
      CHECK(px >= static_cast<double>(widest - 1) * char_px);  // µ is 2 bytes, 1 glyph
    }
  }
  // The case from the issue: 5 ms steps at 1.02 s read 1.020 s, 1.025 s, ...
  const std::vector<AxisTick> t = time_ticks(1.015e9, 1.035e9, 600, 8);
  REQUIRE(t.size() >= 2);
  CHECK(t[0].label != t[1].label);
  CHECK(t[0].label.find(" s") != std::string::npos);
}

TEST_CASE("hundreds of flows in view are bundled into a few lines", "[timeline-view]") {
  Viewport vp;
  vp.t_begin = 0;
  vp.t_end = 1e6;
  vp.x0 = 100;
  vp.width = 1000;
  std::vector<Flow> flows;
  for (int i = 0; i < 600; ++i) {
    Flow f;
    f.id = i + 1;
    f.from_rank = i % 2;
    f.to_rank = 1 - i % 2;
    f.t_send = i * 1600;
    f.t_recv = f.t_send + 5000;
    flows.push_back(f);
  }
  std::vector<FlowLine> few;
  flow_lines(std::vector<Flow>(flows.begin(), flows.begin() + 20), vp, 100, 16, few);
  CHECK(few.size() == 20);
  for (const FlowLine& l : few) CHECK(l.count == 1);

  std::vector<FlowLine> many;
  flow_lines(flows, vp, 100, 16, many);
  uint32_t total = 0;
  for (const FlowLine& l : many) {
    total += l.count;
    CHECK(l.from_rank != l.to_rank);
  }
  CHECK(total == 600);
  CHECK(many.size() <= 2 * (1000 / 16 + 2));  // per direction, one line per 16 px column
}

TEST_CASE("one step fits the step's window, live shows the last finished step", "[timeline-view]") {
  RunData d = make_data(2);
  for (int step = 0; step < 3; ++step) {
    const int64_t b = 1000 + step * 1000;
    append(d, 0, {compute(b, b + 600, SpanKind::forward, -1, -1, step)}, {});
    append(d, 1, {compute(b + 100, b + 800, SpanKind::forward, -1, -1, step)}, {});
  }
  CHECK(step_range(d, 1) == std::pair<double, double>{2000, 2800});
  CHECK(step_to_show(d, 2500, false) == 1);
  CHECK(step_to_show(d, 3500, true) == 1);  // step 2 is still running
  CHECK(step_to_show(d, 10, false) == 0);
  Viewport vp;
  fit_steps(vp, d, true, 2500, false);
  CHECK(vp.t_begin < 2000);
  CHECK(vp.t_begin > 1900);
  CHECK(vp.t_end > 2800);
  CHECK(vp.t_end < 2900);
  // A playhead just before its step's window (ranks overlapping steps) stays in view.
  d.step_begin[1] = 1900;
  fit_steps(vp, d, true, 1950, false);
  CHECK(vp.t_begin <= 1950);
  CHECK(vp.t_end > 2800);
  fit_steps(vp, d, false, 2500, false);
  CHECK(vp.t_begin < 1000);
  CHECK(vp.t_end > 3800);
}

TEST_CASE("idle where two steps' windows overlap is one stretch, drawn and named once",
          "[timeline-view]") {
  // Rank 0 starts step 1 (F0, then waits for rank 1) while rank 1 still runs
  // step 0's optimizer: the steps' windows overlap, and both see rank 0 idle.
  RunData d = make_data(2, "gpipe");
  append(
      d, 0,
      {compute(0, 100, SpanKind::forward, 0, 0, 0), compute(200, 220, SpanKind::forward, 0, 0, 1),
       compute(600, 700, SpanKind::backward, 0, 0, 1)},
      {});
  append(d, 1,
         {compute(100, 180, SpanKind::forward, 0, 1, 0),
          compute(180, 500, SpanKind::optimizer, -1, -1, 0),
          compute(500, 600, SpanKind::forward, 0, 1, 1)},
         {});
  const std::vector<WindowUse> uses = {step_use(d, 0), step_use(d, 1)};
  REQUIRE(uses[0].end > uses[1].begin);  // the windows overlap
  // Each window on its own sees rank 0 idle from 220 on: two overlapping stretches.
  const auto meets = [](const std::vector<Interval>& v, int64_t t) {
    return std::any_of(v.begin(), v.end(),
                       [&](const Interval& i) { return i.first <= t && t < i.second; });
  };
  CHECK(meets(uses[0].ranks[0].idle_intervals, 300));
  CHECK(meets(uses[1].ranks[0].idle_intervals, 300));
  const std::vector<Interval> m = merged_idle(uses, 0);
  REQUIRE(!m.empty());
  for (size_t k = 1; k < m.size(); ++k) CHECK(m[k].first > m[k - 1].second);  // apart, in order
  int covering = 0;
  for (const Interval& i : m) covering += i.first <= 300 && 300 < i.second;
  CHECK(covering == 1);
  CHECK(meets(m, 400));
  CHECK_FALSE(meets(m, 210));  // computing F0 of step 1
  CHECK_FALSE(meets(m, 650));
  // Everything idle in either window is idle in the union, and nothing else.
  for (int64_t t = 0; t < 700; t += 5) {
    const bool any =
        meets(uses[0].ranks[0].idle_intervals, t) || meets(uses[1].ranks[0].idle_intervals, t);
    CHECK(meets(m, t) == any);
  }
  CHECK(merged_idle({}, 0).empty());
  CHECK(merged_idle(uses, 7).empty());
}

TEST_CASE("a label on a block of narrow spans knows when it sits over their gaps",
          "[timeline-view]") {
  Viewport vp;
  vp.t_begin = 0;
  vp.t_end = 1000;
  vp.x0 = 0;
  vp.width = 1000;  // 1 px per ns
  RunData d = make_data(1, "gpipe");
  // One solid block 0..100, then three slivers with gaps 200..300.
  append(d, 0,
         {compute(0, 50, SpanKind::forward, 0, 0), compute(50, 100, SpanKind::forward, 0, 1),
          compute(200, 210, SpanKind::forward, 1, 0), compute(250, 260, SpanKind::forward, 1, 1),
          compute(290, 300, SpanKind::loss, 1)},
         {});
  const LaneData& lane = d.ranks[0].lane(Lane::compute);
  CHECK(covered_share(lane, 0, 2, vp, 10, 90) == Approx(1.0f));
  CHECK(covered_share(lane, 2, 5, vp, 200, 300) == Approx(0.3f));
  CHECK(covered_share(lane, 2, 5, vp, 230, 245) == Approx(0.0f));
  CHECK(covered_share(lane, 0, 2, vp, 80, 120) == Approx(0.5f));
  // Only the block's own spans count.
  CHECK(covered_share(lane, 0, 1, vp, 40, 60) == Approx(0.5f));
  CHECK(covered_share(lane, 0, 2, vp, 60, 60) == 0.0f);
}

TEST_CASE("span labels: the app's English words are the traces' (core/record/span_label.h)",
          "[timeline]") {
  for (int k = 0; k < kNumSpanKinds; ++k) {
    const SpanKind kind = static_cast<SpanKind>(k);
    if (kind == SpanKind::other) continue;  // the app draws "?" where a bar is narrow
    INFO(to_string(kind));
    CHECK(std::string(kind_short(kind)) == kind_abbrev(kind));
  }
  Span s;
  s.kind = SpanKind::send;
  s.rank = 0;
  s.peer = 1;
  s.micro_batch = 3;
  s.bytes = 1024;
  CHECK(span_label(s, false) == "send F3 \xE2\x86\x92r1");
  CHECK(span_label(s, false) == shardlab::span_title(s, false));
  s.kind = SpanKind::forward;
  s.layer = 2;
  s.bytes = 0;
  CHECK(span_label(s, true) == shardlab::span_title(s, true));
  CHECK(span_label(s, true) == "F3 L2");
}

TEST_CASE(
    "timeline: the schedule text under a pipeline is the order its stages ran, the "
    "playhead's action marked",
    "[timeline][schedule]") {
  RunConfig c = test::small_run("mlp:4x32", "1f1b", 4, 16, 1, OptimizerKind::adamw, 2);
  c.micro_batches = 8;
  const RunResult r = run_training(c);
  RunData d;
  reset_run_data(d, r.cfg, r.cfg.world, r.t0_ns);
  ingest_result(d, r);
  const Schedule want = named_schedule("1f1b", 4, 8);
  const std::vector<ScheduleRow> rows = schedule_rows(d, 1, 1e300);
  REQUIRE(rows.size() == 4);
  for (const ScheduleRow& row : rows) {
    INFO("stage " << row.stage);
    std::string text;
    for (const ScheduleCell& cell : row.cells) {
      text += (text.empty() ? "" : " ") + cell.text;
      CHECK(cell.done);  // the playhead is past the step
    }
    std::string expected;
    for (const Action& a : want.ranks[row.stage])
      expected += (expected.empty() ? "" : " ") + to_string(a, 1);
    CHECK(text == expected);
    CHECK(row.cells.back().current);
  }
  // At stage 3's first backward's start: that action is current, the forward before it done,
  // and every later action still to come.
  const std::vector<TimedAction> last = actions_in_spans(d.ranks[3].lane(Lane::compute).spans, 1);
  REQUIRE(last.size() == 16);
  const double t = static_cast<double>(last[1].begin);  // B0 (stage 3 runs F0 B0 F1 B1 ...)
  const std::vector<ScheduleRow> at = schedule_rows(d, 1, t);
  const std::vector<ScheduleCell>& cells = at[3].cells;
  CHECK(cells[1].text == "B0");
  CHECK(cells[1].current);
  CHECK(cells[0].done);
  for (size_t i = 2; i < cells.size(); ++i) CHECK((!cells[i].done && !cells[i].current));
  // Not a pipeline: no schedule.
  CHECK(schedule_rows(make_data(2, "ddp"), 0, 0).empty());
}
