// The cluster and camping views' logic without a window: where travelling
// pieces go (corridors, never over a card), what each rank is doing, the "now"
// sentences, pipeline notes, arrival tags, and layouts from 1x to 2.5x fonts.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "app/gui/logic/cluster_logic.h"
#include "app/gui/logic/run_data.h"
#include "core/mesh.h"
#include "core/run/runner.h"

using namespace shardlab;
using namespace shardlab::gui;

namespace {

Span comm(int64_t b, int64_t e, SpanKind k, int layer, int peer = -1, int mb = -1) {
  Span s;
  s.t_begin_ns = b;
  s.t_end_ns = e;
  s.kind = k;
  s.lane = Lane::comm;
  s.layer = layer;
  s.peer = peer;
  s.micro_batch = mb;
  s.step = 0;
  return s;
}

RunData make_data(int world, int layers = 4) {
  RunData d;
  RunConfig cfg;
  cfg.model = "mlp:" + std::to_string(layers) + "x16";
  cfg.world = world;
  reset_run_data(d, cfg, world, 0);
  d.num_layers = layers;
  return d;
}

Residency res(const std::string& name, MemCategory c, int64_t t0 = 0, int64_t t1 = 1000000) {
  Residency r;
  r.name = name;
  r.category = c;
  r.bytes = 64;
  r.t_alloc_ns = t0;
  r.t_free_ns = t1;
  return r;
}

constexpr float kBaseFont = 16.0f;
const float kScales[] = {1.0f, 1.25f, 1.5f, 2.0f, 2.5f};

}  // namespace

TEST_CASE("cluster layout: pieces travel in corridors and never cover a card", "[cluster-view]") {
  for (int world : {2, 3, 4, 8}) {
    for (float scale : kScales) {
      const float font = kBaseFont * scale;
      const ClusterLayout L = cluster_layout(world, Rect{0, 0, 1580, 700}, font);
      INFO("world " << world << ", scale " << scale);
      REQUIRE(static_cast<int>(L.cards.size()) == world);
      for (int a = 0; a < world; ++a) {
        for (int b = a + 1; b < world; ++b) CHECK_FALSE(L.cards[a].overlaps(L.cards[b]));
        for (const Rect& c : L.corridors) CHECK_FALSE(L.cards[a].overlaps(c));
      }
      // Every pair, with the piece leaving the params column of its card.
      for (int from = 0; from < world; ++from)
        for (int to = 0; to < world; ++to) {
          if (from == to) continue;
          const CardLayout ca = card_layout(L.cards[from], font, 8);
          const CardLayout cb = card_layout(L.cards[to], font, 8);
          const std::vector<Vec2> route = piece_route(L, from, to, ca.column_x(0), cb.column_x(0));
          REQUIRE(route.size() >= 3);
          // Starts under the source, ends under the destination.
          CHECK(route.front().y > L.cards[from].y1);
          CHECK(route.back().y > L.cards[to].y1);
          CHECK(route.back().x > L.cards[to].x0);
          CHECK(route.back().x < L.cards[to].x1);
          const Vec2 sz = piece_size(L, 0.0, 1.0 / world, ca.col_w);
          CHECK(sz.y <= L.lane_h);
          const float len = route_length(route);
          for (int k = 0; k <= 40; ++k) {
            const Vec2 p = point_along(route, len * static_cast<float>(k) / 40);
            const Rect chip{p.x - sz.x * 0.5f, p.y - sz.y * 0.5f, p.x + sz.x * 0.5f,
                            p.y + sz.y * 0.5f};
            for (int c = 0; c < world; ++c) {
              INFO("piece " << from << "->" << to << " at " << k << "/40 over card " << c);
              CHECK_FALSE(chip.overlaps(L.cards[c]));
            }
          }
        }
      // Lanes of different senders in one corridor are apart by a piece's height.
      if (L.ncols > 1) CHECK(L.lane_y(0, 1) - L.lane_y(0, 0) >= piece_size(L, 0, 1, 100).y);
    }
  }
}

TEST_CASE("card layout: lines and grid never overlap, 1x to 2.5x", "[cluster-view]") {
  for (int world : {2, 4, 8})
    for (float scale : kScales) {
      const float font = kBaseFont * scale;
      // The cards' canvas in a 1600x1000 window shrinks as the bars above it grow
      // (measured: ~640 px at 1x, ~220 px at 2.5x); the layout then grows and scrolls.
      const float height = 640 - 280 * (scale - 1);
      for (int rows : {3, 8}) {
        const ClusterLayout L = cluster_layout_fitting(world, Rect{0, 0, 1580, height}, font, rows);
        CHECK(L.corridors.back().y1 >= height - 0.5f);
        for (int a = 0; a < world; ++a)
          for (int b = a + 1; b < world; ++b) CHECK_FALSE(L.cards[a].overlaps(L.cards[b]));
        const CardLayout c = card_layout(L.cards[0], font, rows);
        INFO("world " << world << ", scale " << scale << ", rows " << rows);
        const std::vector<Rect> parts{c.title, c.held, c.status, c.headers, c.grid, c.footer};
        for (size_t i = 0; i < parts.size(); ++i) {
          if (parts[i].h() <= 0) continue;  // a line dropped for room
          CHECK(c.card.contains(parts[i]));
          for (size_t j = i + 1; j < parts.size(); ++j)
            if (parts[j].h() > 0) CHECK_FALSE(parts[i].overlaps(parts[j]));
        }
        CHECK(c.row_h >= std::max(6.0f, font * 0.55f) - 0.01f);
        CHECK(c.status.h() > 0);  // what the rank does is never dropped
      }
    }
}

TEST_CASE("dp: broadcast, scatter and gather pieces come from the receivers' spans",
          "[cluster-view]") {
  // dp records each copy once, on the device that is not device 0, peer = 0.
  RunData d = make_data(3, 4);
  append(d, 1,
         {comm(100, 200, SpanKind::broadcast, 2, 0), comm(300, 400, SpanKind::scatter, -1, 0),
          comm(500, 600, SpanKind::gather, 3, 0)},
         {});
  append(d, 2, {comm(100, 200, SpanKind::broadcast, 2, 0)}, {});

  std::vector<Piece> p = pieces_in_flight(d, 150);
  REQUIRE(p.size() == 2);
  for (const Piece& q : p) {
    CHECK(q.kind == SpanKind::broadcast);
    CHECK(q.from == 0);  // the weights come from device 0 ...
    CHECK(q.to != 0);    // ... to each other device
    CHECK(q.layer == 2);
    CHECK(q.column == 0);
    CHECK(q.frac_begin == 0.0);
    CHECK(q.frac_end == 1.0);
  }
  // Device 0 records no span, but it is sending: its status must say so.
  const std::string s0 = rank_status(d, p, 0, 150, Naming{});
  CHECK(s0 == "sending L2 to ranks 1 and 2 (broadcast)");
  CHECK(rank_status(d, p, 0, 150, Naming{}, true) == "BC L2 \xE2\x86\x92 1 and 2");
  CHECK(rank_status(d, p, 1, 150, Naming{}) == "receiving L2 from rank 0 (broadcast)");
  CHECK(now_line(d, p, 150, Naming{}) ==
        "Rank 0 sends the weights of L2 to ranks 1 and 2 (broadcast).");

  p = pieces_in_flight(d, 350);
  REQUIRE(p.size() == 1);
  CHECK(p[0].kind == SpanKind::scatter);
  CHECK(p[0].from == 0);
  CHECK(p[0].to == 1);
  CHECK(now_line(d, p, 350, Naming{}) == "Rank 0 hands rank 1 its slice of the batch (scatter).");
  CHECK(rank_status(d, p, 0, 350, Naming{}) == "sending batch slice to rank 1 (scatter)");

  p = pieces_in_flight(d, 550);
  REQUIRE(p.size() == 1);
  CHECK(p[0].kind == SpanKind::gather);
  CHECK(p[0].from == 1);
  CHECK(p[0].to == 0);
  CHECK(rank_status(d, p, 0, 550, Naming{}) == "receiving outputs from rank 1 (gather)");
  CHECK(arrival_tags(p, Naming{})[0].text == "GA out \xE2\x86\x90 rank 1");
  CHECK(rank_status(d, p, 1, 550, Naming{}) == "sending outputs to rank 0 (gather)");
  CHECK(now_line(d, p, 550, Naming{}).rfind("Rank 1 sends ", 0) == 0);  // one sender: "sends"
  // Nobody busy at all.
  CHECK(rank_status(d, pieces_in_flight(d, 700), 0, 700, Naming{}) == "idle");

  // A collective broadcast (Gloo: every rank records it, peer -1) goes out from rank 0 only.
  RunData c = make_data(3, 4);
  for (int r = 0; r < 3; ++r) append(c, r, {comm(0, 100, SpanKind::broadcast, 1)}, {});
  p = pieces_in_flight(c, 50);
  REQUIRE(p.size() == 2);
  for (const Piece& q : p) CHECK(q.from == 0);
}

TEST_CASE("now line: a ZeRO-3 all-gather and pipeline notes, in the camping words",
          "[cluster-view]") {
  RunData d = make_data(3, 3);
  const Naming n = camping_naming(3);
  CHECK(layer_name(0, n) == "a");
  CHECK(part_name(2, 1, n) == "c1");
  CHECK(part_name(2, 1, Naming{}) == "L2 shard 1");

  // Only rank 1's all-gather of layer 0 runs: it hands out its part a1.
  append(d, 1, {comm(100, 200, SpanKind::all_gather, 0)}, {});
  std::vector<Piece> p = pieces_in_flight(d, 150);
  REQUIRE(p.size() == 2);
  CHECK(piece_part(p[0], 3) == 1);
  CHECK(now_line(d, p, 150, n) == "Hiker 1 sends a1 to hikers 0 and 2 (all-gather of layer a).");
  CHECK(rank_status(d, p, 1, 150, n) == "sending a1 to hikers 0 and 2 (all-gather)");
  // The same in Chinese: whole sentences, no spaces between Chinese words.
  const Tr zh{lesson::Lang::zh};
  CHECK(now_line(d, p, 150, n, zh) == "1 号队员把 a1 发给 0 和 2 号队员（a 层的全收集）。");
  CHECK(rank_status(d, p, 1, 150, n, 0, zh) == "正在把 a1 发给 0 和 2 号队员（全收集）");
  CHECK(now_line(d, p, 150, Naming{}, zh) ==
        "rank 1 把 L0 分片 1 发给 rank 0 和 2（L0 的全收集）。");
  CHECK(arrival_tags(p, n, zh)[0].text == "AG a \xE2\x86\x90 1 号队员");

  // Everyone's at once.
  append(d, 0, {comm(100, 200, SpanKind::all_gather, 0)}, {});
  append(d, 2, {comm(100, 200, SpanKind::all_gather, 0)}, {});
  p = pieces_in_flight(d, 150);
  CHECK(p.size() == 6);
  CHECK(now_line(d, p, 150, n) ==
        "Hikers 0, 1 and 2 each send their part of layer a (a0, a1, a2) to the others "
        "(all-gather).");
  CHECK(now_line(d, p, 150, n, zh) ==
        "0、1 和 2 号队员把 a 层中各自的那一份（a0、a1、a2）发给彼此（全收集）。");

  // GPipe: rank 0 sends micro-batch 3's activations on, rank 2 sends a gradient back.
  RunData g = make_data(3, 6);
  g.cfg.strategy = "gpipe";
  append(g, 0, {comm(100, 200, SpanKind::send, 1, 1, 3)}, {});
  append(g, 2, {comm(100, 200, SpanKind::send, 3, 1, 5)}, {});
  p = pieces_in_flight(g, 150);
  REQUIRE(p.size() == 2);
  for (const Piece& q : p) {
    CHECK(q.column == -1);  // a message, not a model state
    CHECK(message_label(q) == (q.from == 0 ? "F3" : "B5"));
  }
  const Naming gn = camping_naming(6);
  CHECK(now_line(g, p, 150, gn) ==
        "Hiker 0 passes note F3 (micro-batch 3's activations) on to hiker 1; hiker 2 passes note "
        "B5 (micro-batch 5's gradient) back to hiker 1.");
  CHECK(rank_status(g, p, 1, 150, gn) == "receiving F3 from hiker 0; receiving B5 from hiker 2");
  CHECK(rank_status(g, p, 0, 150, gn) == "sending F3 to hiker 1");
  CHECK(now_line(g, p, 150, gn, zh) ==
        "0 号队员把纸条 F3（微批次 3 的激活值）传给 1 号队员；2 号队员把纸条 B5（微批次 5 "
        "的梯度）传回给 1 号队员。");
  CHECK(rank_status(g, p, 1, 150, gn, 0, zh) ==
        "正在接收 F3，来自 0 号队员；正在接收 B5，来自 2 号队员");

  // Nothing in flight: what each hiker computes.
  Span f;
  f.t_begin_ns = 300;
  f.t_end_ns = 400;
  f.kind = SpanKind::forward;
  f.lane = Lane::compute;
  f.micro_batch = 4;
  append(g, 1, {f}, {});
  CHECK(now_line(g, pieces_in_flight(g, 350), 350, gn) == "Hiker 1: F4; hikers 0 and 2 wait.");
  CHECK(now_line(g, pieces_in_flight(g, 350), 350, gn, zh) ==
        "1 号队员：F4；0 和 2 号队员在等待。");
}

TEST_CASE("camping: pipeline hikers carry their stage and keep notes, not gear", "[cluster-view]") {
  CHECK(is_pipeline("gpipe"));
  CHECK(is_pipeline("1f1b"));
  CHECK(is_pipeline("naive-mp"));
  CHECK_FALSE(is_pipeline("zero3"));

  // Stage 1 of a 4-layer pipeline: layers 2 and 3, plus activations of two micro-batches.
  const std::vector<Residency> stage{
      res("layers.2.weight", MemCategory::params),
      res("layers.2.bias", MemCategory::params),
      res("layers.3.weight", MemCategory::params),
      res("layers.3.bias", MemCategory::params),
      res("pipeline.input[mb 1]", MemCategory::activations),
      res("layers.3.output[mb 1]", MemCategory::activations),
      res("layers.2.output[mb 0]", MemCategory::activations),
      res("pipeline.grad_output[mb 0]", MemCategory::temporary),
  };
  const std::vector<Holding> h = holdings_at(stage, 10, 0);
  const CardContents c = card_contents(h, 4);
  CHECK(carries_text(c, 2, camping_naming(4)) == "layers c, d");
  CHECK(notes_held(h) == std::vector<int>{0, 1});
  // The notes are activations: none of them is drawn as gear (no parameter slot).
  for (int l = 0; l < 4; ++l)
    for (const SlotPiece& p : c.slots[0][l]) CHECK(p.kind == HoldKind::full);

  // ZeRO-3 on 3 ranks, the classic walk-through: rank 1 holds a1, b1, c1.
  std::vector<Residency> z;
  for (int l = 0; l < 3; ++l) {
    z.push_back(res("layers." + std::to_string(l) + ".weight[shard 1/3]", MemCategory::params));
    z.push_back(res("layers." + std::to_string(l) + ".bias[shard 1/3]", MemCategory::params));
  }
  z.push_back(res("layers.0.weight[gathered]", MemCategory::comm_buffers));
  const CardContents zc = card_contents(holdings_at(z, 10, 0), 3);
  CHECK(carries_text(zc, 3, camping_naming(3)) == "a1, b1, c1 (33%)");
  const Tr zh{lesson::Lang::zh};
  CHECK(carries_text(zc, 3, camping_naming(3), zh) == "a1、b1、c1（33%）");
  CHECK(carries_text(c, 2, camping_naming(4), zh) == "c、d 层");

  // Full replicas (ddp), and dp's replicas, which are only borrowed.
  const std::vector<Residency> full{res("layers.0.weight", MemCategory::params),
                                    res("layers.1.weight", MemCategory::params)};
  CHECK(carries_text(card_contents(holdings_at(full, 10, 0), 2), 2, camping_naming(2)) ==
        "all the gear");
  const std::vector<Residency> replica{res("layers.0.weight[replica]", MemCategory::params)};
  CHECK(carries_text(card_contents(holdings_at(replica, 10, 0), 1), 2, camping_naming(1)) ==
        "no gear of its own");
}

TEST_CASE("gpt: buffers with PyTorch names sit in their table layer, not in 'flat'",
          "[cluster-view]") {
  // single/ddp/dp and the pipelines hold gpt's tensors whole under their own
  // names: the run's layout says which layer each belongs to.
  RunConfig cfg;
  cfg.model = "gpt:2x16x2";
  cfg.seq = 8;
  cfg.world = 1;
  RunData d;
  reset_run_data(d, cfg, 1, 0);
  REQUIRE(d.num_layers == 4);
  // Card rows say what each layer is; the mlp's rows keep their bare "L3".
  REQUIRE(d.layer_kinds.size() == 4);
  CHECK(layer_kind_caption(d.layer_kinds[0]) == "emb");
  CHECK(layer_kind_caption(d.layer_kinds[2]) == "block");
  CHECK(layer_kind_caption(d.layer_kinds[3]) == "head");
  CHECK(layer_kind_caption("linear").empty());
  std::vector<Residency> all;
  for (const auto& [name, layer] : d.param_layers) {
    all.push_back(res(name, MemCategory::params));
    all.push_back(res(name + ".grad", MemCategory::grads));
    all.push_back(res(name + ".exp_avg", MemCategory::optimizer_state));
    all.push_back(res(name + ".exp_avg_sq", MemCategory::optimizer_state));
  }
  const std::vector<Holding> h = holdings_at(all, 10, 0, d.param_layers);
  auto layer_of = [&](const std::string& name) {
    for (const Holding& x : h)
      if (x.res->name == name) return x.name.layer;
    return -99;
  };
  CHECK(layer_of("transformer.wte.weight") == 0);
  CHECK(layer_of("transformer.wpe.weight.grad") == 0);
  CHECK(layer_of("transformer.h.0.attn.c_attn.weight.exp_avg") == 1);
  CHECK(layer_of("transformer.h.1.mlp.c_proj.bias") == 2);
  CHECK(layer_of("transformer.ln_f.weight") == 3);
  CHECK(layer_of("lm_head.weight.exp_avg_sq") == 3);  // the tied copy, held by the head
  const CardContents c = card_contents(h, d.num_layers);
  CHECK_FALSE(c.has_unlayered);
  for (int col = 0; col < kCardColumns; ++col) CHECK(c.held_fraction[col] == Approx(1.0));
  // Without the layout the same names have no layer (the card's "flat" row).
  CHECK(card_contents(holdings_at(all, 10, 0), d.num_layers).has_unlayered);
  // A prefix of another name is not a match: "h.1" is not "h.10".
  const ParamLayers many{{"transformer.h.1.ln_1.weight", 2}, {"transformer.h.10.ln_1.weight", 11}};
  CHECK(parse_buffer_name("transformer.h.10.ln_1.weight.grad", many).layer == 11);
  CHECK(parse_buffer_name("transformer.h.1.ln_1.weightx", many).layer == -1);
}

TEST_CASE("arrival tags: one per receiver and layer, never a pile", "[cluster-view]") {
  RunData d = make_data(4, 4);
  for (int r = 0; r < 4; ++r) append(d, r, {comm(100, 200, SpanKind::all_gather, 2)}, {});
  const std::vector<Piece> p = pieces_in_flight(d, 150);
  REQUIRE(p.size() == 12);
  const std::vector<ArrivalTag> tags = arrival_tags(p, Naming{});
  REQUIRE(tags.size() == 4);  // one per receiver, not one per piece
  for (const ArrivalTag& t : tags) CHECK(t.from.size() == 3);
  CHECK(tags[0].to == 0);
  CHECK(tags[0].text == "AG L2 \xE2\x86\x90 ranks 1, 2 and 3");
  CHECK(arrival_tags(p, camping_naming(4))[1].text == "AG c \xE2\x86\x90 hikers 0, 2 and 3");

  // Two collectives into one rank stay two tags, and a pipeline note names itself.
  RunData g = make_data(3, 3);
  append(g, 0, {comm(100, 200, SpanKind::send, 0, 1, 2)}, {});
  append(g, 2, {comm(100, 200, SpanKind::send, 2, 1, 1)}, {});
  const std::vector<ArrivalTag> gt = arrival_tags(pieces_in_flight(g, 150), Naming{});
  REQUIRE(gt.size() == 2);
  CHECK(gt[0].text == "F2 \xE2\x86\x90 rank 0");
  CHECK(gt[1].text == "B1 \xE2\x86\x90 rank 2");
}

TEST_CASE("camping layout: hikers, gear, captions and the fire never overlap, 1x to 2.5x",
          "[cluster-view]") {
  for (bool trail : {false, true})
    for (int world : {1, 2, 3, 4, 8})
      for (int layers : {2, 3, 8})
        for (float scale : kScales) {
          const float font = kBaseFont * scale;
          // What the camping canvas gets in a 1600x1000 window: less as the
          // bars and the text above it grow with the font.
          // (measured: 720 px at 1x, 461 px at 2x, ~290 px at 2.5x with the
          // introduction folded away); where nothing fits, the scene grows and scrolls.
          const float height = 720 - 290 * (scale - 1);
          // Captions of ~40 characters (0.55 font each), wrapped as the panel wraps them.
          const CaptionSize caption = [&](float wrap) {
            const float text_w = font * 0.55f * 40;
            return std::pair{std::min(text_w, wrap),
                             1 + static_cast<int>(std::ceil(text_w / wrap))};
          };
          const Rect area{0, 0, 1580, height};
          const CampLayout L = camp_layout_fitting(world, layers, area, font, caption, 3, trail);
          CHECK(L.fits);
          CHECK(L.area.y1 >= area.y1);
          // Where it fits as it is, it is not grown.
          if (camp_layout(world, layers, area, font, caption, 3, trail).fits)
            CHECK(L.area.y1 == area.y1);
          INFO("world " << world << ", layers " << layers << ", scale " << scale << ", trail "
                        << trail);
          REQUIRE(static_cast<int>(L.hikers.size()) == world);
          CHECK(L.trail == trail);
          if (!trail) CHECK(L.fire.w() > 0);
          for (int a = 0; a < world; ++a) {
            const HikerLayout& h = L.hikers[a];
            CHECK(L.area.contains(h.block));
            if (!trail) CHECK_FALSE(h.block.overlaps(L.fire));
            for (int b = a + 1; b < world; ++b) CHECK_FALSE(h.block.overlaps(L.hikers[b].block));
            // Inside one hiker: nothing sits on anything else, captions included.
            const std::vector<Rect> parts{h.tag, h.figure, h.gear, h.hands, h.caption};
            for (size_t i = 0; i < parts.size(); ++i) {
              CHECK(h.block.contains(parts[i]));
              for (size_t j = i + 1; j < parts.size(); ++j)
                CHECK_FALSE(parts[i].overlaps(parts[j]));
            }
            // Gear grows with the font (presenter mode), and every item has its place.
            // (crowded big-font scenes may shrink it below the font: never below 20 px
            // with up to four hikers, 16 px with eight).
            CHECK(h.item >= (world <= 4 ? 20.0f : 16.0f));
            if (scale <= 1.5f && world <= 4) CHECK(h.item >= font * 1.1f - 0.01f);
            for (int l = 0; l < layers; ++l) {
              const Vec2 g = h.gear_center(l);
              const Rect icon{g.x - h.item * 0.5f, g.y - h.item * 0.5f, g.x + h.item * 0.5f,
                              g.y + h.item * 0.5f};
              CHECK(h.gear.contains(icon));
              // Its label line under it, inside the gear area, not on the next icon.
              const Rect label{icon.x0, g.y + h.item * 0.62f, icon.x1,
                               g.y + h.item * 0.62f + h.label_h};
              if (!L.compact) CHECK(h.gear.contains(label));
              if (l + h.per_row < layers) {
                const Vec2 below = h.gear_center(l + h.per_row);
                CHECK(label.y1 <= below.y - h.item * 0.5f + 0.01f);
              }
            }
            for (int k = 0; k < 3; ++k) {
              const Vec2 c = h.hand_center(k);
              CHECK(h.hands.contains(Rect{c.x - h.item * 0.5f, c.y - h.item * 0.5f,
                                          c.x + h.item * 0.5f, c.y + h.item * 0.5f}));
            }
          }
        }
}

TEST_CASE("a card's status too wide for its line keeps whole parts and counts the rest",
          "[cluster-view]") {
  const auto width = [](const std::string& s) { return 8.0f * static_cast<float>(s.size()); };
  const std::string status =
      "RS L4 \xE2\x86\x92 all; RS L4 \xE2\x86\x90 3; AG L3 \xE2\x86\x90 1 and 2; computing F L4";
  CHECK(fit_parts(status, 1000, width) == status);  // fits: as it is
  for (float w = 40; w < width(status); w += 8) {
    const std::string s = fit_parts(status, w, width);
    INFO(w << ": " << s);
    CHECK(status.rfind(s.substr(0, s.find("; +")), 0) == 0);  // whole leading parts
    if (s.find("; +") != std::string::npos) {
      CHECK(width(s) <= w);
      CHECK(s.find(" more") == s.size() - 5);
    } else {
      CHECK(s == "RS L4 \xE2\x86\x92 all");  // too narrow even for one part and a count
    }
  }
  CHECK(fit_parts(status, 8.0f * 35, width) ==
        "RS L4 \xE2\x86\x92 all; RS L4 \xE2\x86\x90 3; +2 more");
  CHECK(fit_parts("idle", 8, width) == "idle");
  // A Chinese status is cut at its "；" and counts the rest in Chinese.
  const std::string zh_status = "RS L4 \xE2\x86\x92 全部；AG L3 \xE2\x86\x90 1 和 2；正在计算 F4";
  CHECK(fit_parts(zh_status, 8.0f * 25, width, Tr{lesson::Lang::zh}) ==
        "RS L4 \xE2\x86\x92 全部；+2 项");
}

TEST_CASE("a pipeline note travels until its recv ends, not until its send's span ends",
          "[cluster-view]") {
  RunData d = make_data(2, 2);
  Span send = comm(100, 500, SpanKind::send, 0, 1, 3);  // its completion came late
  send.flow_id = 5;
  Span recv = comm(50, 200, SpanKind::recv, 1, 0, 3);  // posted early, data in at 200
  recv.flow_id = 5;
  append(d, 0, {send}, {});
  append(d, 1, {recv}, {});
  std::vector<Piece> p = pieces_in_flight(d, 150);
  REQUIRE(p.size() == 1);
  CHECK(p[0].from == 0);
  CHECK(p[0].to == 1);
  CHECK(p[0].micro_batch == 3);
  CHECK(p[0].progress == Approx(0.5));      // from the send's begin (100) to the recv's end (200)
  CHECK(pieces_in_flight(d, 300).empty());  // arrived, though the send's span goes on

  // A send that ends at once (its bytes queued) while the receiver is not yet
  // there: the note waits in between until the recv ends.
  RunData m = make_data(2, 2);
  Span quick = comm(100, 110, SpanKind::send, 0, 1, 4);
  quick.flow_id = 6;
  Span late = comm(250, 300, SpanKind::recv, 1, 0, 4);
  late.flow_id = 6;
  append(m, 0, {quick}, {});
  append(m, 1, {late}, {});
  p = pieces_in_flight(m, 200);
  REQUIRE(p.size() == 1);
  CHECK(p[0].micro_batch == 4);
  CHECK(p[0].kind == SpanKind::send);
  CHECK(p[0].progress == Approx(0.5));  // 100 .. 300
  CHECK(pieces_in_flight(m, 90).empty());
  CHECK(pieces_in_flight(m, 300).empty());

  // After the last step (step -1): a part of the final weights on its way to
  // rank 0, not a pipeline's gradient.
  RunData x = make_data(2, 2);
  Span out = comm(100, 200, SpanKind::send, -1, 0);
  out.flow_id = 7;
  out.step = -1;
  Span in = comm(100, 200, SpanKind::recv, -1, 1);
  in.flow_id = 7;
  in.step = -1;
  append(x, 1, {out}, {});
  append(x, 0, {in}, {});
  p = pieces_in_flight(x, 150);
  REQUIRE(p.size() == 1);
  CHECK(p[0].exported);
  CHECK(now_line(x, p, 150, Naming{}).find("Rank 1 sends rank 0 its part of the final weights") !=
        std::string::npos);

  // Its recv not recorded yet (a live run): the send's span is all there is.
  RunData e = make_data(2, 2);
  append(e, 0, {send}, {});
  p = pieces_in_flight(e, 300);
  REQUIRE(p.size() == 1);
  CHECK(p[0].progress == Approx(0.5));
}

TEST_CASE("camping: an input posted for a note that has not arrived is not a kept note",
          "[cluster-view]") {
  RunData d = make_data(2, 2);
  // Stage 1 posts the receive of micro-batch 1 at 10; the data is in at 200.
  Span recv = comm(10, 200, SpanKind::recv, 1, 0, 1);
  append(d, 1, {recv}, {});
  const std::vector<Residency> stage{
      res("layers.1.weight", MemCategory::params),
      res("pipeline.input[mb 0]", MemCategory::activations, 0),  // no recv recorded for it
      res("pipeline.input[mb 1]", MemCategory::activations, 10),
      res("layers.1.output[mb 0]", MemCategory::activations, 0),
  };
  const std::vector<Holding> early = holdings_at(stage, 100, 0);
  CHECK(notes_held(early) == std::vector<int>{0, 1});  // by the buffers alone
  CHECK(notes_held(early, &d, 1, 100) == std::vector<int>{0});
  CHECK(notes_held(holdings_at(stage, 300, 0), &d, 1, 300) == std::vector<int>{0, 1});
}

TEST_CASE("a gathered copy fills as its all-gather runs, not when it is set aside",
          "[cluster-view]") {
  // Prefetch allocates layer 1's copy when the gather is issued; the comm
  // thread starts moving bytes later. Until then the rank holds its own shard.
  RunData d = make_data(4, 2);
  LaneData& lane = d.ranks[0].lanes[static_cast<int>(Lane::comm)];
  lane.insert({comm(100, 200, SpanKind::all_gather, 0), comm(300, 400, SpanKind::all_gather, 1),
               comm(600, 700, SpanKind::all_gather, 1)});
  std::vector<Residency> all{res("layers.1.flat[gathered]", MemCategory::comm_buffers, 150, 500),
                             res("layers.1.flat[gathered]", MemCategory::comm_buffers, 550, 800),
                             res("layers.0.flat[shard 0/4]", MemCategory::params, 0, 1000)};
  auto arrived_at = [&](int64_t t) {
    std::vector<Holding> h = holdings_at(all, t, 0);
    mark_gather_progress(h, lane, t);
    std::vector<float> out;
    for (const Holding& x : h) out.push_back(x.gather_progress);
    return out;
  };
  // At 160 layer 0's gather runs, but the copy is layer 1's: nothing has come.
  CHECK(arrived_at(160) == std::vector<float>{0.0f, 1.0f});
  CHECK(arrived_at(350)[0] == Approx(0.5));
  CHECK(arrived_at(450) == std::vector<float>{1.0f, 1.0f});
  // The second copy is filled by the gather after it, not by the one before.
  CHECK(arrived_at(560) == std::vector<float>{0.0f, 1.0f});
  CHECK(arrived_at(750) == std::vector<float>{1.0f, 1.0f});
  // Drawn that way: the card's slot piece carries it, its own quarter present.
  std::vector<Holding> h = holdings_at(all, 560, 0);
  mark_gather_progress(h, lane, 560);
  const CardContents c = card_contents(h, 2);
  REQUIRE(c.slots[0][1].size() == 1);
  CHECK(c.slots[0][1][0].arrived(4) == 0.25f);

  // The real strategies: every gathered copy ZeRO-3 and FSDP set aside is
  // matched to the all-gather that fills it (nothing arrived when set aside).
  for (const char* strategy : {"zero3", "fsdp"}) {
    RunConfig cfg;
    cfg.model = "mlp:4x32";
    cfg.strategy = strategy;
    cfg.world = 4;
    cfg.batch = 8;
    cfg.steps = 2;
    RunData real;
    reset_run_data(real, cfg, 4, 0);
    ingest_result(real, run_training(cfg));
    for (int r = 0; r < 4; ++r) {
      int gathered = 0;
      for (const Residency& x : real.ranks[r].residency) {
        const std::vector<Residency> just{x};  // outlives `one`, which points into it
        std::vector<Holding> one = holdings_at(just, x.t_alloc_ns, 0, real.param_layers);
        REQUIRE(one.size() == 1);
        if (one[0].name.kind != HoldKind::gathered) continue;
        ++gathered;
        mark_gather_progress(one, real.ranks[r].lane(Lane::comm), x.t_alloc_ns);
        INFO(strategy << " rank " << r << ": " << x.name);
        CHECK(one[0].gather_progress == 0.0f);
      }
      INFO(strategy << " rank " << r);
      CHECK(gathered > 0);
    }
  }
}

TEST_CASE("mesh: a collective's pieces stay inside its group, the cards laid out as the mesh",
          "[cluster-view][mesh]") {
  // dp=2,tp=2 (pp,dp,tp order): tp groups {0,1} and {2,3}, dp groups {0,2}
  // and {1,3}. Both tp groups all-reduce at once: nothing crosses between them.
  RunData d;
  RunConfig cfg;
  cfg.model = "mlp:4x16";
  cfg.strategy = "gpipe";
  cfg.mesh = "dp=2,tp=2";
  cfg.world = 4;
  reset_run_data(d, cfg, 4, 0);
  REQUIRE(d.rank_coords.size() == 4);
  CHECK(d.rank_coords[3] == "dp1 tp1");
  CHECK(d.mesh_row_ranks == 2);  // a row of cards per dp coordinate
  const Mesh mesh = parse_mesh(cfg.mesh);
  auto in_group = [](Span s, int group) {
    s.group = group;
    return s;
  };
  for (int r = 0; r < 4; ++r)
    append(d, r, {in_group(comm(0, 100, SpanKind::all_reduce, 1), mesh.group_id(r, MeshAxis::tp))},
           {});
  std::vector<Piece> p = pieces_in_flight(d, 20);  // the first half: each shard to its summer
  REQUIRE(p.size() == 4);
  for (const Piece& q : p) {
    CHECK(mesh.group_id(q.from, MeshAxis::tp) == mesh.group_id(q.to, MeshAxis::tp));
    // Half of the layer each: the receiver's place in its group of 2.
    CHECK(q.frac_end - q.frac_begin == Approx(0.5));
    CHECK(q.frac_begin == Approx(0.5 * mesh.coord(q.to, MeshAxis::tp)));
  }
  CHECK(rank_status(d, p, 0, 20, Naming{}) ==
        "sending L1 shard 1 to rank 1 (all-reduce in a tp group); receiving L1 from rank 1 "
        "(all-reduce in a tp group)");
  const std::string now = now_line(d, p, 20, Naming{});
  CHECK(now.find("ranks 0 and 1") != std::string::npos);
  CHECK(now.find("ranks 2 and 3") != std::string::npos);
  CHECK(now.find("ranks 0, 1, 2 and 3") == std::string::npos);

  // A broadcast in a dp group goes out from the group's first rank.
  RunData b;
  reset_run_data(b, cfg, 4, 0);
  for (int r : {1, 3})
    append(b, r, {in_group(comm(0, 100, SpanKind::broadcast, 2), mesh.group_id(r, MeshAxis::dp))},
           {});
  p = pieces_in_flight(b, 50);
  REQUIRE(p.size() == 1);
  CHECK(p[0].from == 1);
  CHECK(p[0].to == 3);

  // The cards: one row per dp coordinate, at any font size.
  for (float scale : kScales) {
    const ClusterLayout L =
        cluster_layout(4, Rect{0, 0, 1200, 800}, kBaseFont * scale, d.mesh_row_ranks);
    CHECK(L.ncols == 2);
    CHECK(L.nrows == 2);
    for (size_t i = 0; i < L.cards.size(); ++i)
      for (size_t j = i + 1; j < L.cards.size(); ++j) CHECK(!L.cards[i].overlaps(L.cards[j]));
  }
}

TEST_CASE("tp: a card draws its slice where the values lie, a block per column, a stripe per row",
          "[cluster-view][mesh][tp]") {
  // mlp:4x8 on tp=2: layers.0 column-parallel (weight rows 0-3 or 4-7 of
  // [8, 8], its bias cut alike), layers.1 row-parallel (columns 0-3 or 4-7 of
  // every row, the bias whole).
  RunConfig cfg;
  cfg.model = "mlp:4x8";
  cfg.strategy = "zero3";
  cfg.mesh = "dp=2,tp=2";
  cfg.world = 4;
  RunData d;
  reset_run_data(d, cfg, 4, 0);
  REQUIRE(d.rank_slices.size() == 4);
  const SliceMap& s1 = d.rank_slices[1];  // tp rank 1
  // Column layer: the whole slice is one block of the layer (weight rows 4-7
  // at values 32..63 of 72, bias 68..71): two runs, not touching.
  const LayerParts col = s1.layer_part(0, 0, 1);
  REQUIRE(col.size() == 2);
  CHECK(col[0].first == Approx(32.0 / 72));
  CHECK(col[0].second == Approx(64.0 / 72));
  CHECK(col[1].first == Approx(68.0 / 72));
  CHECK(col[1].second == Approx(1.0));
  // Row layer: columns 4-7 of each of the 8 rows (stripes), and the whole bias.
  const LayerParts row = s1.layer_part(1, 0, 1);
  REQUIRE(row.size() == 8);
  CHECK(row[0].first == Approx(4.0 / 72));
  CHECK(row[0].second == Approx(8.0 / 72));
  CHECK(row[7].first == Approx(60.0 / 72));
  CHECK(row[7].second == Approx(1.0));  // the last stripe runs into the whole bias
  // A ZeRO shard of the slice's layer: the first half of its 36 values (32 of
  // the weight, 4 of the bias) is rows 4-5 and half of row 6 of the weight.
  const LayerParts half = s1.layer_part(0, 0, 0.5);
  REQUIRE(half.size() == 1);
  CHECK(half[0].first == Approx(32.0 / 72));
  CHECK(half[0].second == Approx(50.0 / 72));
  double share = 0;
  const LayerParts bias = s1.param_part("layers.1.bias.exp_avg", 1, &share);
  REQUIRE(bias.size() == 1);
  CHECK(share == 1.0);  // replicated
  CHECK(s1.param_part("layers.0.weight", 0, &share).size() == 1);
  CHECK(share == 0.5);
  CHECK(s1.param_part("layers.9.weight", 0, &share).empty());

  // The card: a rank holding a ZeRO shard of its tp slice holds 1/4 of every
  // split layer's values; drawn where they lie.
  std::vector<Residency> all;
  for (int l = 0; l < 4; ++l)
    all.push_back(res("layers." + std::to_string(l) + ".flat[shard 1/2]", MemCategory::params));
  const CardContents c = card_contents(holdings_at(all, 10, 0), 4, &d.rank_slices[3]);
  REQUIRE(c.slots[0][0].size() == 2);
  CHECK(c.slots[0][0][0].begin == Approx(50.0 / 72));  // the second half of tp rank 1's block
  // The row layer's second half of 40 values: rows 5-7's stripes, the last
  // running into the whole bias.
  CHECK(c.slots[0][1].size() == 3);
  CHECK(c.held_fraction[0] < 0.4);  // not the half the shard names
  CHECK(c.held_fraction[0] > 0.25);
  // Without a tp axis nothing is mapped.
  RunConfig plain = cfg;
  plain.mesh = "dp=4";
  RunData p;
  reset_run_data(p, plain, 4, 0);
  CHECK(p.rank_slices.empty());
}
