// What the cluster view (and its camping-trip skin) draws at time t: the named
// buffers each rank holds, laid out as layer slots per model-state column, and
// the pieces travelling between ranks during collectives. Everything comes
// from allocation events and comm spans, so it is exact for any strategy.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "app/gui/logic/buffer_name.h"
#include "app/gui/logic/run_data.h"

namespace shardlab::gui {

// A buffer alive at t, or a gathered copy freed less than the fade time ago.
struct Holding {
  const Residency* res = nullptr;
  BufferName name;
  float alpha = 1.0f;  // < 1 while a freed gathered copy fades out
};
std::vector<Holding> holdings_at(const std::vector<Residency>& res, int64_t t, int64_t fade_ns);
float fade_alpha(int64_t t_free, int64_t t, int64_t fade_ns);

// Cards have one column per model state.
inline constexpr int kCardColumns = 3;  // params, grads, optimizer state
// The column a buffer is drawn in, or -1 (the card's footer: activations, comm
// scratch). Model-state categories decide; temporary full copies of a layer
// ([gathered], [unreduced], [replica]) are comm buffers by category and go to
// the column of their role, so a gathered layer shows up beside its shard.
int card_column(MemCategory c, const BufferName& n);

// Part of a layer slot that a rank holds.
struct SlotPiece {
  double begin = 0, end = 1;  // fraction of the layer
  HoldKind kind = HoldKind::full;
  float alpha = 1.0f;
  int64_t bytes = 0;
  bool on_host = false;  // host pool (CPU offload)
};

struct CardContents {
  int num_layers = 0;
  // [column][layer] -> pieces; index num_layers is the "no layer" row (flat buffers).
  std::array<std::vector<std::vector<SlotPiece>>, kCardColumns> slots;
  std::array<int64_t, kNumMemCategories> bytes{};  // alive at t, by category
  bool has_unlayered = false;
  bool any_on_host = false;  // some model states live in host memory (offload)
  // Share of the model-state bytes this rank holds permanently (full or shard),
  // relative to one full copy of params, grads and optimizer state.
  std::array<double, kCardColumns> held_fraction{};
};
// `num_layers` from the model; grown when names mention later layers.
CardContents card_contents(const std::vector<Holding>& holdings, int num_layers);

// A piece of a buffer on its way from one rank to another.
struct Piece {
  int from = 0, to = 0;
  int layer = -1;
  double frac_begin = 0, frac_end = 1;  // the part of the layer that moves
  int column = 0;                       // card column it belongs to
  SpanKind kind = SpanKind::other;
  float progress = 0;  // 0 at the source, 1 at the destination
  int64_t bytes = 0;
};
// Pieces in flight at t, from each rank's running collectives and sends:
// all-gather sends this rank's shard to every other rank; reduce-scatter sends
// shard j to rank j; all-reduce is shown as reduce-scatter then all-gather;
// broadcast goes out from the root (the span's peer, else rank 0).
std::vector<Piece> pieces_in_flight(const RunData& d, int64_t t);

// The comm spans running on `rank` at t.
std::vector<const Span*> active_spans(const LaneData& lane, int64_t t);

struct Vec2 {
  float x = 0, y = 0;
};
// Where a travelling piece is drawn: eased along the straight line from a to b,
// lifted by `arc` pixels at the middle so crossing pieces do not overlap.
Vec2 travel_position(Vec2 a, Vec2 b, float progress, float arc);
float ease_in_out(float p);

// Positions of n hikers around a campfire at `center`, clockwise from `start`
// radians (0 = right of the fire, -pi/2 = above it).
std::vector<Vec2> ring_positions(int n, Vec2 center, float rx, float ry, float start = -1.5707963f);
// The camping skin's gear for a layer: tent, food or water.
enum class Gear { tent, food, water };
Gear gear_of_layer(int layer);
const char* gear_name(Gear g);

}  // namespace shardlab::gui
