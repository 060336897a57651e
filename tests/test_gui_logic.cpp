// The GUI's view logic without a window: culling and folding of spans, memory
// stacks, what each card holds at time t, travelling pieces, replay, compare
// rows, and the worker-thread sessions on real runs.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "app/gui/logic/buffer_name.h"
#include "app/gui/logic/cluster_logic.h"
#include "app/gui/logic/compare_logic.h"
#include "app/gui/logic/format.h"
#include "app/gui/logic/frame_pacing.h"
#include "app/gui/logic/memory_logic.h"
#include "app/gui/logic/palette.h"
#include "app/gui/logic/replay_logic.h"
#include "app/gui/logic/run_data.h"
#include "app/gui/logic/run_session.h"
#include "app/gui/logic/timeline_logic.h"
#include "app/gui/logic/wait_logic.h"
#include "core/parallel/model_state.h"

using namespace shardlab;
using namespace shardlab::gui;

namespace {

Span span(int64_t b, int64_t e, SpanKind k = SpanKind::forward, Lane lane = Lane::compute,
          int layer = -1) {
  Span s;
  s.t_begin_ns = b;
  s.t_end_ns = e;
  s.kind = k;
  s.lane = lane;
  s.layer = layer;
  s.step = 0;
  return s;
}

AllocEvent alloc(int64_t t, uint64_t id, int64_t bytes, MemCategory c, const std::string& name) {
  AllocEvent e;
  e.t_ns = t;
  e.buffer_id = id;
  e.delta_bytes = bytes;
  e.category = c;
  e.name = name;
  return e;
}

RunData make_data(int world) {
  RunData d;
  RunConfig cfg;
  cfg.model = "mlp:4x16";
  cfg.world = world;
  reset_run_data(d, cfg, world, 0);
  return d;
}

Viewport viewport(double t0, double t1, float width) {
  Viewport vp;
  vp.t_begin = t0;
  vp.t_end = t1;
  vp.x0 = 0;
  vp.width = width;
  return vp;
}

// Every span index in [first, last) is covered by exactly one block, in order.
void require_partition(const std::vector<DrawSpan>& blocks, size_t first, size_t last) {
  size_t next = first;
  for (const DrawSpan& b : blocks) {
    REQUIRE(b.first == next);
    REQUIRE(b.count >= 1);
    next += b.count;
  }
  REQUIRE(next == last);
}

}  // namespace

TEST_CASE("buffer names: layer, shard and gathered status are read robustly", "[gui]") {
  BufferName n = parse_buffer_name("layers.3.weight");
  CHECK(n.layer == 3);
  CHECK(n.layer_last == 3);
  CHECK(n.kind == HoldKind::full);
  CHECK(n.fraction_begin() == 0.0);
  CHECK(n.fraction_end() == 1.0);

  n = parse_buffer_name("layers.3.weight[shard 1/4]");
  CHECK(n.layer == 3);
  CHECK(n.kind == HoldKind::shard);
  CHECK(n.shard_index == 1);
  CHECK(n.shard_count == 4);
  CHECK(n.fraction_begin() == Approx(0.25));
  CHECK(n.fraction_end() == Approx(0.5));
  CHECK(n.base == "layers.3.weight");

  n = parse_buffer_name("layers.12.weight.exp_avg[shard 3/4]");
  CHECK(n.layer == 12);
  CHECK(n.shard_index == 3);
  CHECK(n.base == "layers.12.weight.exp_avg");

  n = parse_buffer_name("layers.3.weight[gathered]");
  CHECK(n.kind == HoldKind::gathered);
  CHECK(n.fraction_end() == 1.0);

  // Prefixes, unit ranges, spaces, 1-based "4/4", micro-batches, nonsense.
  CHECK(parse_buffer_name("fsdp.layers.5.flat_param[ shard 0 / 2 ]").layer == 5);
  n = parse_buffer_name("fsdp.unit[layers.2-3]");  // a group is not the name
  CHECK(n.layer == -1);
  n = parse_buffer_name("layers.2-3.flat[shard 1/2]");
  CHECK(n.layer == 2);
  CHECK(n.layer_last == 3);
  n = parse_buffer_name("layers.1.weight[shard 4/4]");
  CHECK(n.shard_index == 3);
  n = parse_buffer_name("layers.1.weight[shard 9/4]");
  CHECK(n.kind == HoldKind::shard);
  CHECK(n.shard_index == -1);
  CHECK(n.fraction_end() == Approx(0.25));
  n = parse_buffer_name("layers.2.output[mb 3]");
  CHECK(n.layer == 2);
  CHECK(n.micro_batch == 3);
  CHECK(n.kind == HoldKind::full);
  CHECK(parse_buffer_name("ddp.bucket.0").layer == -1);
  CHECK(parse_buffer_name("mylayers.3.x").layer == -1);
  CHECK(parse_buffer_name("layers.3x.weight").layer == -1);
  CHECK(parse_buffer_name("layers.").layer == -1);
  CHECK(parse_buffer_name("layers.7.weight[shard 1/2").layer == 7);  // unbalanced bracket
  CHECK(parse_buffer_name("").layer == -1);
}

TEST_CASE("lane data stays sorted with a running max end when spans arrive out of order", "[gui]") {
  LaneData lane;
  lane.insert({span(100, 200), span(300, 400)});
  lane.insert({span(150, 1000), span(500, 600)});  // a long span recorded late
  REQUIRE(lane.spans.size() == 4);
  for (size_t i = 1; i < lane.spans.size(); ++i) {
    CHECK(lane.spans[i - 1].t_begin_ns <= lane.spans[i].t_begin_ns);
    CHECK(lane.max_end[i - 1] <= lane.max_end[i]);
  }
  CHECK(lane.max_end.back() == 1000);
  // The long span is found from inside its extent although it began before the window.
  const auto [f, l] = span_window(lane, 700, 800);
  bool found = false;
  for (size_t i = f; i < l; ++i) found |= lane.spans[i].t_end_ns == 1000;
  CHECK(found);
}

TEST_CASE("visible spans: wide spans stay single, spans outside are culled", "[gui]") {
  LaneData lane;
  std::vector<Span> in;
  for (int i = 0; i < 10; ++i) in.push_back(span(i * 1000, i * 1000 + 800));
  lane.insert(in);
  std::vector<DrawSpan> out;
  visible_spans(lane, viewport(2500, 6500, 400), 3, out);  // 0.1 px/ns: each span 80 px
  // Spans 2..6 intersect [2500, 6500): span 2 ends at 2800, span 6 begins at 6000.
  REQUIRE(out.size() == 5);
  CHECK(out.front().first == 2);
  CHECK(out.back().first == 6);
  for (const DrawSpan& b : out) {
    CHECK_FALSE(b.folded());
    CHECK(b.x1 - b.x0 == Approx(80).margin(0.01));
  }
  CHECK(out[0].x0 == Approx(-50).margin(0.01));
}

TEST_CASE("visible spans: narrow spans fold, and 100k spans cost few blocks", "[gui]") {
  LaneData lane;
  std::vector<Span> in;
  const int n = 100000;
  for (int i = 0; i < n; ++i)
    in.push_back(span(i * 100, i * 100 + 60, i % 2 ? SpanKind::backward : SpanKind::forward));
  lane.insert(in);
  std::vector<DrawSpan> out;
  const Viewport vp = viewport(0, n * 100.0, 1000);  // 0.0001 px/ns: each span 0.006 px
  visible_spans(lane, vp, 3, out);
  CHECK(out.size() <= 1000 / 3 + 2);
  require_partition(out, 0, n);
  for (const DrawSpan& b : out) CHECK(b.x1 - b.x0 >= 3.0f - 1e-3f);

  // A gap wider than the fold threshold splits folds; a wide span is never folded.
  LaneData mixed;
  mixed.insert({span(0, 10), span(20, 30), span(40, 50), span(10000, 10010), span(20000, 40000)});
  out.clear();
  visible_spans(mixed, viewport(0, 50000, 500), 3, out);  // 0.01 px/ns: 3 px = 300 ns
  REQUIRE(out.size() == 3);
  CHECK(out[0].count == 3);
  CHECK(out[1].count == 1);  // alone: drawn at the minimum width, not a fold
  CHECK(out[1].x1 - out[1].x0 == Approx(3));
  CHECK(out[2].count == 1);
  CHECK(out[2].x1 - out[2].x0 == Approx(200));
  require_partition(out, 0, 5);
}

TEST_CASE("viewport zoom keeps the time under the mouse, pan moves by pixels", "[gui]") {
  Viewport vp = viewport(0, 1000, 100);
  const double t = vp.t_of(25);
  zoom_at(vp, 25, 2.0, 1);
  CHECK(vp.t_of(25) == Approx(t));
  CHECK(vp.t_end - vp.t_begin == Approx(500));
  pan_pixels(vp, 10);  // content follows the mouse to the right: earlier times come in
  CHECK(vp.t_begin == Approx(t - 125 - 50));
  zoom_at(vp, 50, 1e9, 100);
  CHECK(vp.t_end - vp.t_begin == Approx(100));
}

TEST_CASE("span labels: micro-batch ids for F/B, layers and bytes otherwise", "[gui]") {
  Span f = span(0, 1, SpanKind::forward);
  f.micro_batch = 3;
  f.layer = 2;
  CHECK(span_label(f, false) == "F3");
  Span b = f;
  b.kind = SpanKind::backward;
  CHECK(span_label(b, false) == "B3");
  Span ar = span(0, 1, SpanKind::all_reduce, Lane::comm, 4);
  ar.bytes = 1 << 20;
  CHECK(span_label(ar, false) == "AR L4");
  CHECK(span_label(ar, true).find("1.00 MiB") != std::string::npos);
  CHECK(span_label(span(0, 1, SpanKind::forward, Lane::compute, 5), false) == "F L5");
}

TEST_CASE("memory columns keep short peaks and carry the state between events", "[gui]") {
  std::vector<CategorySample> s(4);
  s[0].t_ns = 0;
  s[0].bytes[0] = 100;
  s[1].t_ns = 501;
  s[1].bytes[0] = 100;
  s[1].bytes[3] = 1000;  // a 1 ns spike of activations
  s[2].t_ns = 502;
  s[2].bytes[0] = 100;
  s[3].t_ns = 900;
  s[3].bytes[0] = 300;
  std::vector<StackColumn> cols;
  memory_columns(s, viewport(0, 1000, 10), 1, cols);  // 100 ns per column
  REQUIRE(cols.size() == 10);
  CHECK(total(cols[0].bytes) == 100);
  CHECK(total(cols[5].bytes) == 1100);  // the spike survives
  CHECK(total(cols[6].bytes) == 100);
  CHECK(total(cols[9].bytes) == 300);
  CHECK(total(bytes_at(s, 501)) == 1100);
  CHECK(total(bytes_at(s, 600)) == 100);
  CHECK(total(bytes_at(s, -5)) == 0);
  const Peak p = peak_of(s);
  CHECK(p.t == 501);
  CHECK(p.bytes[3] == 1000);
}

TEST_CASE("cards: what a rank holds at t, shards, gathered copies that fade", "[gui]") {
  // ZeRO-3-like rank 0 of 2: shards of every layer for good, one gathered copy for a while.
  std::vector<AllocEvent> ev;
  uint64_t id = 1;
  for (int l = 0; l < 4; ++l) {
    ev.push_back(alloc(0, id++, 100, MemCategory::params,
                       "layers." + std::to_string(l) + ".weight[shard 0/2]"));
    ev.push_back(alloc(0, id++, 100, MemCategory::optimizer_state,
                       "layers." + std::to_string(l) + ".weight.exp_avg[shard 0/2]"));
  }
  ev.push_back(alloc(100, 99, 200, MemCategory::params, "layers.2.weight[gathered]"));
  ev.push_back(alloc(200, 99, -200, MemCategory::params, "layers.2.weight[gathered]"));
  ev.push_back(alloc(100, 98, 50, MemCategory::activations, "layers.2.output"));
  ev.push_back(alloc(200, 98, -50, MemCategory::activations, "layers.2.output"));
  const std::vector<Residency> res = residency(ev);

  CardContents c = card_contents(holdings_at(res, 150, 100), 4);
  REQUIRE(c.num_layers == 4);
  CHECK(c.held_fraction[0] == Approx(0.5));
  CHECK(c.held_fraction[1] == Approx(0.0));
  CHECK(c.held_fraction[2] == Approx(0.5));
  CHECK(c.bytes[static_cast<int>(MemCategory::params)] == 600);
  CHECK(c.bytes[static_cast<int>(MemCategory::activations)] == 50);
  REQUIRE(c.slots[0][2].size() == 2);
  bool gathered = false;
  for (const SlotPiece& p : c.slots[0][2]) {
    if (p.kind == HoldKind::gathered) {
      gathered = true;
      CHECK(p.begin == 0.0);
      CHECK(p.end == 1.0);
      CHECK(p.alpha == 1.0f);
    } else {
      CHECK(p.end == Approx(0.5));
    }
  }
  CHECK(gathered);

  // Freed 50 ns ago with a 100 ns fade: still there, half transparent; not counted in bytes.
  c = card_contents(holdings_at(res, 250, 100), 4);
  REQUIRE(c.slots[0][2].size() == 2);
  CHECK(c.bytes[static_cast<int>(MemCategory::params)] == 400);
  CHECK(c.bytes[static_cast<int>(MemCategory::activations)] == 0);  // freed activations just go
  for (const SlotPiece& p : c.slots[0][2])
    if (p.kind == HoldKind::gathered) CHECK(p.alpha == Approx(0.5f));
  c = card_contents(holdings_at(res, 400, 100), 4);
  CHECK(c.slots[0][2].size() == 1);

  // A DDP rank: full layers, weight and bias: everything held.
  std::vector<AllocEvent> ddp;
  for (int l = 0; l < 3; ++l) {
    ddp.push_back(
        alloc(0, 10 + l, 64, MemCategory::params, "layers." + std::to_string(l) + ".weight"));
    ddp.push_back(
        alloc(0, 20 + l, 8, MemCategory::params, "layers." + std::to_string(l) + ".bias"));
    ddp.push_back(
        alloc(0, 30 + l, 64, MemCategory::grads, "layers." + std::to_string(l) + ".weight.grad"));
  }
  ddp.push_back(alloc(0, 50, 1000, MemCategory::comm_buffers, "ddp.bucket.0"));
  c = card_contents(holdings_at(residency(ddp), 10, 0), 0);  // layer count from the names
  CHECK(c.num_layers == 3);
  CHECK(c.held_fraction[0] == Approx(1.0));
  CHECK(c.held_fraction[1] == Approx(1.0));
  CHECK_FALSE(c.has_unlayered);
  CHECK(c.bytes[static_cast<int>(MemCategory::comm_buffers)] == 1000);

  CHECK(fade_alpha(100, 50, 10) == 1.0f);
  CHECK(fade_alpha(100, 110, 10) == 0.0f);
  CHECK(fade_alpha(100, 105, 10) == Approx(0.5f));
}

TEST_CASE("pieces travel between ranks during collectives", "[gui]") {
  RunData d = make_data(2);
  Span ag = span(1000, 2000, SpanKind::all_gather, Lane::comm, 1);
  Span rs = span(3000, 4000, SpanKind::reduce_scatter, Lane::comm, 2);
  Span ar = span(5000, 6000, SpanKind::all_reduce, Lane::comm, 3);
  append(d, 0, {ag, rs, ar}, {});
  append(d, 1, {span(1000, 2000, SpanKind::all_gather, Lane::comm, 1)}, {});

  CHECK(pieces_in_flight(d, 500).empty());
  std::vector<Piece> p = pieces_in_flight(d, 1500);
  REQUIRE(p.size() == 2);  // one from each rank to the other
  for (const Piece& q : p) {
    CHECK(q.progress == Approx(0.5f));
    CHECK(q.column == 0);
    CHECK(q.layer == 1);
    CHECK(q.to == 1 - q.from);
    CHECK(q.frac_begin == Approx(q.from * 0.5));  // a rank sends its own shard
  }
  p = pieces_in_flight(d, 3250);
  REQUIRE(p.size() == 1);
  CHECK(p[0].column == 1);
  CHECK(p[0].frac_begin == Approx(0.5));  // shard 1 goes to rank 1
  p = pieces_in_flight(d, 5250);          // all-reduce, reduce-scatter half
  REQUIRE(p.size() == 1);
  CHECK(p[0].frac_begin == Approx(0.5));
  CHECK(p[0].progress == Approx(0.5f));
  p = pieces_in_flight(d, 5750);  // all-gather half: rank 0's summed shard goes out
  REQUIRE(p.size() == 1);
  CHECK(p[0].frac_begin == Approx(0.0));
  CHECK(p[0].progress == Approx(0.5f));

  const Vec2 a{0, 0}, b{100, 0};
  CHECK(travel_position(a, b, 0, 20).x == Approx(0));
  CHECK(travel_position(a, b, 1, 20).x == Approx(100));
  CHECK(travel_position(a, b, 1, 20).y == Approx(0).margin(1e-4));
  CHECK(travel_position(a, b, 0.5f, 20).x == Approx(50));
  CHECK(std::abs(travel_position(a, b, 0.5f, 20).y) == Approx(20));
  float last = -1;
  for (float t = 0; t <= 1.0f; t += 0.05f) {
    CHECK(ease_in_out(t) >= last);
    last = ease_in_out(t);
  }
  const std::vector<Vec2> ring = ring_positions(4, {0, 0}, 10, 10);
  CHECK(ring[0].y == Approx(-10));  // the first hiker at the top by default
  CHECK(ring_positions(2, {0, 0}, 10, 10, 0)[1].x == Approx(-10));
  CHECK(gear_of_layer(0) == Gear::tent);
  CHECK(gear_of_layer(4) == Gear::food);
}

TEST_CASE("run data: flows pair sends with recvs, steps and events are indexed", "[gui]") {
  RunData d = make_data(2);
  Span send = span(100, 200, SpanKind::send, Lane::comm);
  send.flow_id = 7;
  send.bytes = 64;
  send.step = 1;
  Span recv = span(150, 260, SpanKind::recv, Lane::comm);
  recv.flow_id = 7;
  recv.step = 1;
  append(d, 1, {recv}, {});
  CHECK(d.flows.empty());
  append(d, 0, {send, span(0, 50)}, {});
  REQUIRE(d.flows.size() == 1);
  CHECK(d.flows[0].from_rank == 0);
  CHECK(d.flows[0].to_rank == 1);
  CHECK(d.flows[0].t_send == 100);
  CHECK(d.flows[0].t_recv == 260);
  CHECK(d.step_begin.size() == 2);
  CHECK(d.step_begin[0] == 0);
  CHECK(d.step_begin[1] == 100);
  CHECK(d.step_at(120) == 1);
  CHECK(d.t_end == 260);
  CHECK(d.t_first_span == 0);
  CHECK(d.t_live() == 200);  // rank 0's last span ends first
  CHECK(d.event_times == std::vector<int64_t>{0, 50, 100, 150, 200, 260});
  CHECK(d.span_count() == 3);
}

TEST_CASE("replay: playhead speed, end, and stepping event by event", "[gui]") {
  Playhead p;
  p.t = 0;
  p.playing = true;
  p.speed = 1e-3;
  advance(p, 1.0, 1e9);  // one wall second at 1/1000x = 1 ms of the run
  CHECK(p.t == Approx(1e6));
  advance(p, 1e6, 2e6);
  CHECK(p.t == 2e6);
  CHECK_FALSE(p.playing);
  const std::vector<int64_t> ev{10, 20, 30};
  CHECK(next_event(ev, 0) == 10);
  CHECK(next_event(ev, 10) == 20);
  CHECK(next_event(ev, 30) == 30);
  CHECK(prev_event(ev, 20) == 10);
  CHECK(prev_event(ev, 5) == 5);
  CHECK(speed_from_slider(0) == Approx(kMinSpeed));
  CHECK(speed_from_slider(1) == Approx(kMaxSpeed));
  CHECK(slider_from_speed(speed_from_slider(0.37)) == Approx(0.37));
  CHECK(format_speed(1e-3) == "1/1000\xC3\x97");
  CHECK(format_speed(1.0) == "1\xC3\x97");
}

TEST_CASE("formatting and axis ticks", "[gui]") {
  CHECK(loss_name("mlp:3x96") == "MSE over the global batch");
  CHECK(loss_name("gpt:2x64x4") == "cross-entropy over every position of the global batch");
  CHECK(loss_name("nope:1") == "over the global batch");
  CHECK(loss_name("mlp:3x96", Tr{lesson::Lang::zh}) == "全局批次上的 MSE");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(3 << 20) == "3.00 MiB");
  CHECK(format_time_ns(1.5e6) == "1.5 ms");
  const std::vector<double> t = nice_ticks(0, 10, 5);
  CHECK(t == std::vector<double>{0, 2, 4, 6, 8, 10});
}

TEST_CASE("compare: rows, CSV, and the strategy list", "[gui]") {
  RunResult r;
  r.cfg.strategy = "ddp";
  r.cfg.world = 2;
  r.median_step_ms = 1.25;
  r.losses = {2.0, 1.0};
  r.ranks.resize(2);
  r.ranks[0].memory.device.peak_total = 1000;
  r.ranks[1].memory.device.peak_total = 2000;
  r.ranks[0].bytes_sent_per_step = 10;
  r.ranks[1].bytes_sent_per_step = 30;
  const CompareRow row = compare_row(r);
  CHECK(row.peak_bytes == std::vector<int64_t>{1000, 2000});
  CHECK(row.sent_bytes_per_step == 30);
  CHECK(row.final_loss == 1.0);
  const std::string csv = compare_csv({row});
  CHECK(csv.rfind("strategy,world,median_step_ms,peak_mem_bytes_rank0,peak_mem_bytes_rank1,", 0) ==
        0);
  CHECK(csv.find("\nddp,2,1.2500,1000,2000,30,") != std::string::npos);

  RunConfig base;
  base.world = 2;
  const std::vector<RunConfig> list = parse_compare_list("ddp,single:1", base);
  REQUIRE(list.size() == 2);
  CHECK(list[1].strategy == "single");
  CHECK(list[1].world == 1);
  CHECK_THROWS_AS(parse_compare_list("nope", base), ConfigError);
  CHECK_THROWS_AS(parse_compare_list("ddp:0", base), ConfigError);
  CHECK_THROWS_AS(parse_compare_list("ddp,ddp,ddp,ddp,ddp,ddp,ddp", base), ConfigError);
  // `single` refuses world 2, so it is not in the default list for these settings.
  for (const RunConfig& c : default_compare_configs(base)) CHECK(c.strategy != "single");
}

TEST_CASE("run session: a real run streams into the UI's data, Step runs one step", "[gui]") {
  RunConfig cfg;
  cfg.model = "mlp:2x16";
  cfg.strategy = "ddp";
  cfg.world = 2;
  cfg.batch = 8;
  cfg.steps = 3;
  RunSession session;
  RunData data;
  std::vector<double> losses;
  auto wait_for = [&](auto done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done() && std::chrono::steady_clock::now() < until) {
      session.poll(data, losses);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    session.poll(data, losses);
  };

  session.start(cfg, /*paused=*/true);  // the Step button on a fresh form
  wait_for([&] { return session.steps_done() >= 1 && session.state() == RunState::paused; });
  CHECK(session.state() == RunState::paused);
  CHECK(session.steps_done() == 1);
  session.resume();
  wait_for([&] { return session.state() == RunState::finished; });
  REQUIRE(session.state() == RunState::finished);
  REQUIRE(session.result() != nullptr);
  CHECK(losses.size() == 3);
  CHECK(losses == session.result()->losses);
  REQUIRE(data.world == 2);
  for (const RankData& r : data.ranks) {
    CHECK(!r.lane(Lane::compute).spans.empty());
    CHECK(!r.lane(Lane::comm).spans.empty());
    CHECK(!r.residency.empty());
  }
  CHECK(data.kinds_seen[static_cast<int>(SpanKind::all_reduce)]);
  CHECK(data.step_begin.size() == 3);
  // DDP holds the whole model on every rank.
  // At the last span the model is still allocated; after it, teardown frees everything.
  CHECK(data.t_live() < data.t_end);
  const CardContents c =
      card_contents(holdings_at(data.ranks[1].residency, data.t_live(), 0), data.num_layers);
  CHECK(c.num_layers == 2);
  CHECK(c.held_fraction[0] == Approx(1.0));
  CHECK(c.held_fraction[2] == Approx(1.0));

  session.start(cfg, false);
  session.reset();  // cancels at the next step boundary and joins
  CHECK(session.state() == RunState::idle);
}

TEST_CASE("run session: a rank thread stuck for good fails the run and is left behind", "[gui]") {
  RunConfig cfg;
  cfg.model = "mlp:2x16";
  cfg.strategy = "ddp";
  cfg.world = 3;
  cfg.batch = 12;
  cfg.steps = 6;
  cfg.timeout_ms = 1000;
  // Rank 2 blocks before step 3 outside any communication, until the test lets go.
  auto release = std::make_shared<std::atomic<bool>>(false);
  RunSession session;
  session.set_before_step([release](int rank, int step) {
    if (rank != 2 || step != 2) return;
    while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  auto wait_for = [&](auto done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  const auto t0 = std::chrono::steady_clock::now();
  session.start(cfg, false);
  wait_for([&] { return session.state() == RunState::failed; });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(session.error());
  REQUIRE(session.state() == RunState::failed);
  // The peers time out (1 s), then 2 s of grace: well within the timeout + 5 s.
  CHECK(seconds < 1.0 + 5.0);
  CHECK_THAT(session.error(), Catch::Contains("rank 2 (step 3) did not return") &&
                                  Catch::Contains("stuck outside any communication"));
  CHECK(!release->load());  // the thread is still stuck: nobody waited for it

  // Reset does not wait for it, and the next run is this session's own.
  const auto t1 = std::chrono::steady_clock::now();
  session.reset();
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() < 1.0);
  CHECK(session.state() == RunState::idle);
  CHECK(session.left_behind() == 1);
  session.set_before_step(nullptr);
  cfg.world = 2;
  cfg.steps = 2;
  session.start(cfg, false);
  wait_for([&] { return session.state() == RunState::finished; });
  CHECK(session.state() == RunState::finished);
  CHECK(session.error().empty());

  // Let go: the stuck rank returns into a failed run, and the worker left behind ends.
  release->store(true);
  wait_for([&] { return session.left_behind() == 0; });
  CHECK(session.left_behind() == 0);
  CHECK(session.state() == RunState::finished);  // its late end changed nothing here

  // Reset while the run is still in its timeout (nothing failed yet): it
  // returns once the stuck thread is named, rather than waiting for it forever.
  auto release2 = std::make_shared<std::atomic<bool>>(false);
  session.set_before_step([release2](int rank, int step) {
    if (rank != 2 || step != 2) return;
    while (!release2->load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  cfg.world = 3;
  cfg.steps = 6;
  session.start(cfg, false);
  wait_for([&] { return session.steps_done() >= 2; });
  const auto t2 = std::chrono::steady_clock::now();
  session.reset();
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count() < 1.0 + 5.0);
  CHECK(session.state() == RunState::idle);
  CHECK(session.left_behind() == 1);
  release2->store(true);
  wait_for([&] { return session.left_behind() == 0; });
  CHECK(session.left_behind() == 0);
}

TEST_CASE("compare session runs configurations in turn and reports invalid ones", "[gui]") {
  RunConfig base;
  base.model = "mlp:2x16";
  base.batch = 8;
  base.steps = 2;
  base.world = 2;
  RunConfig bad = base;
  bad.strategy = "single";  // world 2: invalid, with the CLI's message
  CompareSession s;
  std::vector<CompareEntry> entries;
  s.start({base, bad});
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (s.busy() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  s.poll(entries);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].done);
  CHECK(entries[0].error.empty());
  CHECK(entries[0].row.peak_bytes.size() == 2);
  CHECK(entries[0].data.span_count() > 0);
  CHECK(entries[1].done);
  CHECK(entries[1].error.find("--world") != std::string::npos);
  // Step bounds for the timelines' "from step" and memory over time: one per
  // step and the end. A lesson's pair of runs goes through the same filler.
  CHECK(entries[0].bounds.size() == 3);
  CompareEntry lesson_entry;
  fill_compare_entry(lesson_entry, std::make_unique<RunResult>(*entries[0].result));
  CHECK(lesson_entry.done);
  CHECK(lesson_entry.bounds == entries[0].bounds);
  CHECK(lesson_entry.row.peak_bytes == entries[0].row.peak_bytes);
}

TEST_CASE("step breakdown: compute, comm, the part of comm hidden behind compute, idle", "[gui]") {
  // One rank: its collectives have no one to wait for, so every comm span moves bytes.
  RunData d = make_data(1);
  Span c1 = span(0, 100), c2 = span(150, 300);
  Span m1 = span(250, 500, SpanKind::all_reduce, Lane::comm);
  Span other = span(600, 700);
  other.step = 1;
  append(d, 0, {c1, c2, m1, other}, {});
  const WindowUse u = step_use(d, 0);
  CHECK(u.begin == 0);
  CHECK(u.end == 500);
  const RankUse& b = u.ranks[0];
  CHECK(b.computing == 250);
  CHECK(b.hidden == 50);
  CHECK(b.exposed == 200);
  CHECK(b.idle == 50);  // 100..150
  CHECK(b.idle_intervals == std::vector<Interval>{{100, 150}});
  CHECK(step_use(d, 1).duration() == 100);
  CHECK(step_use(d, 5).duration() == 0);
}

TEST_CASE("byte axis ticks are round in the unit that fits", "[gui]") {
  const std::vector<ByteTick> t = byte_ticks(1.45 * 1024 * 1024, 4);
  REQUIRE(t.size() >= 3);
  CHECK(t[0].label == "0");
  CHECK(t[1].label == "0.5 MiB");
  CHECK(t[1].bytes == 512 * 1024);
  CHECK(byte_ticks(800, 4).back().label == "800 B");
}

TEST_CASE("next collective: 35% into the next comm span on any rank", "[gui]") {
  RunData d = make_data(2);
  append(d, 0,
         {span(100, 200, SpanKind::all_reduce, Lane::comm),
          span(500, 700, SpanKind::all_gather, Lane::comm)},
         {});
  append(
      d, 1,
      {span(300, 400, SpanKind::recv, Lane::comm), span(450, 470, SpanKind::broadcast, Lane::comm)},
      {});
  CHECK(next_collective(d, 0) == Approx(135));
  CHECK(next_collective(d, 135) == Approx(457));  // recv is skipped: its send moves the piece
  CHECK(next_collective(d, 457) == Approx(570));
  CHECK(next_collective(d, 570) == Approx(570));
}

TEST_CASE(
    "cards follow the naming scheme of core/parallel/sharding.h: roles, temporary copies, host",
    "[gui]") {
  BufferName n = parse_buffer_name("layers.2-3.flat[unreduced].grad");
  CHECK(n.kind == HoldKind::unreduced);
  CHECK(n.role == Role::grad);
  CHECK(n.layer == 2);
  CHECK(n.layer_last == 3);
  CHECK(parse_buffer_name("layers.3.flat[shard 1/4].exp_avg_sq").role == Role::optimizer);
  CHECK(parse_buffer_name("layers.0.weight[replica]").kind == HoldKind::replica);
  CHECK(parse_buffer_name("layers.0.weight[replica]").role == Role::param);

  // zero3-like: gathered params and unreduced grads are comm buffers by category,
  // but belong in the params / grads columns of their layer.
  std::vector<AllocEvent> ev;
  ev.push_back(alloc(0, 1, 100, MemCategory::params, "layers.0.flat[shard 1/2]"));
  ev.push_back(alloc(0, 2, 100, MemCategory::grads, "layers.0.flat[shard 1/2].grad"));
  ev.push_back(alloc(10, 3, 200, MemCategory::comm_buffers, "layers.0.flat[gathered]"));
  ev.push_back(alloc(10, 4, 200, MemCategory::comm_buffers, "layers.0.flat[unreduced].grad"));
  ev.push_back(alloc(10, 5, 64, MemCategory::comm_buffers, "gloo.scratch"));
  AllocEvent host =
      alloc(0, 6, 100, MemCategory::optimizer_state, "layers.0.flat[shard 1/2].exp_avg");
  host.pool = Pool::host;
  ev.push_back(host);
  CardContents c = card_contents(holdings_at(residency(ev), 20, 0), 1);
  REQUIRE(c.slots[0][0].size() == 2);
  REQUIRE(c.slots[1][0].size() == 2);
  CHECK(is_temporary(c.slots[0][0][1].kind));
  CHECK(c.slots[1][0][1].kind == HoldKind::unreduced);
  REQUIRE(c.slots[2][0].size() == 1);
  CHECK(c.slots[2][0][0].on_host);
  CHECK(c.any_on_host);
  CHECK(c.held_fraction[0] == Approx(0.5));  // the gathered copy is not held for good
  CHECK(c.bytes[static_cast<int>(MemCategory::comm_buffers)] == 464);
  CHECK(card_column(MemCategory::comm_buffers, parse_buffer_name("gloo.scratch")) == -1);
  CHECK(card_column(MemCategory::comm_buffers, parse_buffer_name("layers.1.flat[shard 0/2]")) ==
        -1);
}

TEST_CASE("memory panel: a gpt run shows a block's activations by Korthikanti's formula",
          "[gui][gpt]") {
  RunConfig c;
  c.model = "gpt:2x64x4";
  c.seq = 32;
  c.batch = 8;
  c.world = 2;
  c.strategy = "zero3";
  std::vector<std::string> lines = gui::block_activation_lines(c, 0);
  REQUIRE(lines.size() == 4);
  // 2 × 32·4·64·(32 + 2·4·32/64) + 16·32·4 bytes = 591872 = 578.0 KiB (fp32, b = 8 / 2).
  CHECK(lines[0] ==
        "2 blocks \xC3\x97 " + gui::format_bytes(block_activations(32, 4, 64, 4, "fp32").total()));
  CHECK(block_activations(32, 4, 64, 4, "fp32").total() == 591872.0);
  CHECK(lines[1] == "2\xC2\xB7sbh(32+2as/h)+LN");
  CHECK(lines[3] == "b=4 sequences");
  // A 4-stage pipeline: embedding | block | block | head, each stage its own count.
  c.strategy = "gpipe";
  c.world = 4;
  c.micro_batches = 4;
  CHECK(gui::block_activation_lines(c, 0) == std::vector<std::string>{"no transformer block here"});
  CHECK(gui::block_activation_lines(c, 1)[0].rfind("1 block ", 0) == 0);
  CHECK(gui::block_activation_lines(c, 1)[3] == "b=2 per micro-batch");
  CHECK(gui::block_activation_lines(c, 3).size() == 1);
  // In Chinese: the same lines in the lessons' words, the formula as it is.
  const Tr zh{lesson::Lang::zh};
  CHECK(gui::block_activation_lines(c, 0, zh) ==
        std::vector<std::string>{"这里没有 Transformer 块"});
  const std::vector<std::string> zh_lines = gui::block_activation_lines(c, 1, zh);
  REQUIRE(zh_lines.size() == 4);
  CHECK(zh_lines[0].rfind("1 个块 \xC3\x97 ", 0) == 0);
  CHECK(zh_lines[1] == gui::block_activation_lines(c, 1)[1]);
  CHECK(zh_lines[3] == "b=2（每个微批次）");
  // The palette's names for people (legends, cards, sentences) follow the glossary.
  CHECK(std::string(kind_label(SpanKind::reduce_scatter, zh)) == "规约散射");
  CHECK(std::string(kind_label(SpanKind::reduce_scatter)) == "reduce-scatter");
  CHECK(std::string(category_label(MemCategory::optimizer_state, zh)) == "优化器状态");
  CHECK(std::string(kind_short(SpanKind::all_gather, zh)) == "AG");
  c.world = 2;  // stages: embedding + block 0 | block 1 + head
  CHECK(gui::block_activation_lines(c, 0)[0].rfind("1 block ", 0) == 0);
  // --attention flash: no a·s² term, a logsumexp per position and head instead; the
  // compare view's label says which attention a run used.
  c.attention = "flash";
  lines = gui::block_activation_lines(c, 0);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "1 block \xC3\x97 " +
                        gui::format_bytes(block_activations(32, 2, 64, 4, "fp32", true).total()));
  CHECK(lines[1] ==
        "2\xC2\xB7sbh\xC2\xB7"
        "32+LN+lse");
  CHECK(lines[2] == "Korthikanti, no dropout, flash");
  CHECK(gui::block_activation_lines(c, 0, zh)[2] == "Korthikanti，无 dropout，flash 注意力");
  CHECK(gui::config_label(c) ==
        "gpipe \xC3\x97"
        "2 M=4 flash attention");
  CHECK(gui::config_label(c, zh) ==
        "gpipe \xC3\x97"
        "2 M=4 flash 注意力");
  c.attention = "";
  c.model = "mlp:4x16";
  c.seq = 0;
  CHECK(gui::block_activation_lines(c, 0).empty());
}

TEST_CASE("frame pacing: an idle app sleeps until input, a moving one draws 30 frames a second",
          "[gui]") {
  shardlab::gui::FramePacer p;
  // First frames after start draw at once, then the idle app sleeps.
  for (int i = 0; i < shardlab::gui::FramePacer::kFramesAfterEvent; ++i)
    CHECK(p.wait_seconds(false, 0.0) == 0.0);
  CHECK(p.wait_seconds(false, 0.0) == shardlab::gui::FramePacer::kIdleSeconds);
  // A timeout draws one frame and sleeps again; input draws a few.
  p.woke(false);
  CHECK(p.wait_seconds(false, 0.0) == shardlab::gui::FramePacer::kIdleSeconds);
  p.woke(true);
  CHECK(p.wait_seconds(false, 0.0) == 0.0);
  // Animating: what is left of a 30th of a second, never negative.
  CHECK(p.wait_seconds(true, 0.01) == Approx(1.0 / 30 - 0.01));
  CHECK(p.wait_seconds(true, 0.5) == 0.0);
  // The frames after it stops show the last state.
  CHECK(p.wait_seconds(false, 0.0) == 0.0);
}
