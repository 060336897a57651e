// What the cluster view (and its camping-trip skin) draws at time t: the named
// buffers each rank holds, laid out as layer slots per model-state column, the
// pieces travelling between ranks during collectives, the sentences saying what
// happens now, and where everything goes on screen (no ImGui: tested without a
// window). Everything comes from allocation events and comm spans, so it is
// exact for any strategy.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "app/gui/logic/buffer_name.h"
#include "app/gui/logic/i18n.h"
#include "app/gui/logic/run_data.h"
#include "app/gui/logic/slice_map.h"

namespace shardlab::gui {

// A buffer alive at t, or a gathered copy freed less than the fade time ago.
struct Holding {
  const Residency* res = nullptr;
  BufferName name;
  float alpha = 1.0f;  // < 1 while a freed gathered copy fades out
  // How far a gathered copy's all-gather has gone: 0 until it starts (the copy
  // holds only the rank's own shard), 1 once it ends (and for every buffer that
  // is not a gathered copy). A prefetched buffer is allocated when the gather
  // is issued, which can be well before the communication thread starts moving
  // bytes: until then it is space set aside, not a gathered layer. The other
  // ranks' parts arrive side by side, as the travelling pieces show.
  float gather_progress = 1.0f;
};
// `params` places buffers named after a model's parameters (gpt) in their layer.
std::vector<Holding> holdings_at(const std::vector<Residency>& res, int64_t t, int64_t fade_ns,
                                 const ParamLayers& params = {});
float fade_alpha(int64_t t_free, int64_t t, int64_t fade_ns);
// Sets Holding::gather_progress for the gathered copies of one rank from its comm lane:
// each copy is filled by the first all-gather of its layer that begins after
// the copy was allocated and before it was freed.
void mark_gather_progress(std::vector<Holding>& holdings, const LaneData& comm, int64_t t);

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
  bool on_host = false;          // host pool (CPU offload)
  float gather_progress = 1.0f;  // Holding::gather_progress
  // The share of the piece present: its own part (1/world) plus the others' as
  // they arrive; 1 for all but a gathered copy still being gathered.
  float arrived(int world) const {
    const float own = 1.0f / static_cast<float>(world > 0 ? world : 1);
    return own + (1 - own) * gather_progress;
  }
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
// `num_layers` from the model; grown when names mention later layers. Under
// tensor parallelism `slices` (the rank's) places each buffer where its values
// lie in the whole layer, and the held fractions are of the whole model.
CardContents card_contents(const std::vector<Holding>& holdings, int num_layers,
                           const SliceMap* slices = nullptr);

// A piece of a buffer on its way from one rank to another.
struct Piece {
  int from = 0, to = 0;
  int layer = -1;
  double frac_begin = 0, frac_end = 1;  // the part of the layer that moves
  int column = 0;                       // card column it belongs to
  SpanKind kind = SpanKind::other;
  float progress = 0;  // 0 at the source, 1 at the destination
  int64_t bytes = 0;
  int micro_batch = -1;   // pipeline messages: the micro-batch they belong to
  int group = 0;          // the collective's group (Span::group): 0 the world
  bool exported = false;  // a message outside the steps: the final weights to rank 0
};
// Pieces in flight at t, from each rank's running collectives and sends:
// all-gather sends this rank's shard to every other rank; reduce-scatter sends
// shard j to rank j; all-reduce is shown as reduce-scatter then all-gather;
// broadcast and scatter go out from the root. A collective records its span on
// every rank of its group (peer -1, root the group's first; a mesh's collectives
// stay inside their group), so the root's span sends to all; dp's
// copies record one span on the receiving device with peer = device 0, so such
// a span is one piece from the peer to the span's rank. Gather and reduce go
// from the span's rank to the root. A pipeline message travels from its send's
// begin to its recv's end (its flow), whatever its send's span does meanwhile.
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
const char* gear_name(Gear g, const Tr& tr = Tr{});

// ---- Words: what is happening now, for people ----------------------------

// How the views name things: the cluster says "rank 2" and "L3"; the camping
// skin says "hiker 2" and, for models of up to 26 layers, "layer c" with parts
// "c0, c1, c2" (the classic ZeRO walk-through: rank i holds a_i, b_i, c_i).
// `who` and `message` pick the words; the words themselves come from a Tr
// (Chinese: "rank 2" / "2 号队员", "消息" / "纸条"), so the functions below that
// build text take one, English by default.
struct Naming {
  const char* who = "rank";  // i18n: not shown ("rank" or "hiker": picks the words)
  bool letters = false;
  const char* message = "message";  // i18n: not shown (a pipeline send: "message" or "note")
};
Naming camping_naming(int num_layers);
std::string layer_name(int layer, const Naming& n);  // "L3" or "d"
// A card row's second line for a layer of this kind: "emb", "block", "head";
// empty for the mlp's linear layers, where "L3" says it all.
std::string layer_kind_caption(const std::string& kind, const Tr& tr = Tr{});
// "L3 shard 1" or "d1".
std::string part_name(int layer, int part, const Naming& n, const Tr& tr = Tr{});
// "ranks 0, 2 and 3" ("rank 0、2 和 3", "0、2 和 3 号队员").
std::string rank_list(const std::vector<int>& ranks, const Naming& n, const Tr& tr = Tr{});
// The part index of a piece: which 1/world slice of its layer it carries, -1 = whole.
int piece_part(const Piece& p, int world);
// Pipeline message label: "F3" (activations, to the next stage) or "B3"
// (gradients, back to the previous one); "" when the piece is no pipeline message.
std::string message_label(const Piece& p);

// One line on what the pieces in flight are, grouped by collective and layer:
// "rank 1 sends L2 shard 1 to ranks 0 and 2 (all-gather of L2)", or for all
// senders of one all-gather "ranks 0, 1, 2 each send their part of L2 to the
// others (all-gather)"; pipeline sends read "hiker 0 passes note F3 (micro-batch
// 3's activations) to hiker 1". Without pieces: what the ranks compute.
std::string now_line(const RunData& d, const std::vector<Piece>& pieces, int64_t t, const Naming& n,
                     const Tr& tr = Tr{});

// One rank's status for its card: what it sends or receives (derived from the
// pieces, so a root whose copies are recorded on the receivers is not "idle"),
// else its running spans, else "idle". brevity 1: "AG L4 shard 0 \u2192 1, 2 and 3"
// for narrow cards; 2: also without the part ("AG L4 \u2192 all").
std::string rank_status(const RunData& d, const std::vector<Piece>& pieces, int rank, int64_t t,
                        const Naming& n, int brevity = 0, const Tr& tr = Tr{});

// A "; "-separated status that is still too wide for its line keeps its first
// parts whole and says how many it left out ("RS L4 \u2192 all; +2 more"), so a
// card never shows a word cut in half. `width` measures a string in pixels.
// `tr`: the status's language (Chinese parts are separated by "；").
std::string fit_parts(const std::string& joined, float w,
                      const std::function<float(const std::string&)>& width, const Tr& tr = Tr{});

// Labels at the receivers, one per (receiver, collective, layer), so that many
// pieces in slow replay read "AG L2 \u2190 ranks 1, 2" instead of a pile of tags.
struct ArrivalTag {
  int to = 0;
  SpanKind kind = SpanKind::other;
  int layer = -1;
  std::vector<int> from;  // sorted, unique
  std::string text;
  std::string brief;  // "AG L2 \u2190 1,2" for narrow places
};
std::vector<ArrivalTag> arrival_tags(const std::vector<Piece>& pieces, const Naming& n,
                                     const Tr& tr = Tr{});

// ---- Cluster layout: cards, and corridors the pieces travel in -------------

struct Rect {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  float w() const { return x1 - x0; }
  float h() const { return y1 - y0; }
  // Touching is not overlapping (a hundredth of a pixel of rounding either way).
  bool overlaps(const Rect& o) const {
    constexpr float e = 0.01f;
    return x0 < o.x1 - e && o.x0 < x1 - e && y0 < o.y1 - e && o.y0 < y1 - e;
  }
  bool contains(const Rect& o) const {
    return o.x0 >= x0 - 0.01f && o.x1 <= x1 + 0.01f && o.y0 >= y0 - 0.01f && o.y1 <= y1 + 0.01f;
  }
};

// Inside a card: the text lines, column headers and the slot grid, top to bottom.
struct CardLayout {
  Rect card;
  Rect title, held, status, headers, grid, footer;
  float label_w = 0;  // the row labels' width, left of the grid
  float col_w = 0, row_h = 0;
  int rows = 0;
  float column_x(int col) const { return grid.x0 + (static_cast<float>(col) + 0.5f) * col_w; }
};
CardLayout card_layout(Rect card, float font, int rows);

// Cards in a grid (at most 4 per row) with a corridor under every row of cards
// and a gutter left of every column of cards: pieces travel only there, so
// they never cover a card. A corridor has one lane per card column for the
// pieces leaving that row, as many again for pieces arriving from other rows
// when there are several rows, and a line of arrival tags at its bottom.
struct ClusterLayout {
  int world = 0, ncols = 0, nrows = 0;
  float font = 0, lane_h = 0, gutter = 0;
  int lanes = 0;  // per corridor
  std::vector<Rect> cards;
  std::vector<Rect> corridors;  // one per row of cards, below it
  std::vector<Rect> tag_rows;   // inside each corridor, at its bottom: one tag line
  float lane_y(int row, int lane) const;
  float gutter_x(int col) const;  // centre of the gutter left of card column col
};
// `per_row` > 0: that many cards a row (a mesh's row of ranks), else up to 4.
ClusterLayout cluster_layout(int world, Rect area, float font, int per_row = 0);
// The same, taller than `area` where cards of `rows` layers would not fit in it
// (big presenter fonts in a small window: the view scrolls rather than overlaps).
ClusterLayout cluster_layout_fitting(int world, Rect area, float font, int rows, int per_row = 0);

// The route of a piece: from the bottom edge of the source card under its
// column (x_from, a card-relative x), down into its lane, along the corridor
// (and up or down a gutter between rows) to the destination card's bottom edge
// under x_to. Points are corners of the polyline.
std::vector<Vec2> piece_route(const ClusterLayout& L, int from, int to, float x_from, float x_to);
float route_length(const std::vector<Vec2>& route);
Vec2 point_along(const std::vector<Vec2>& route, float distance);
// The size of a travelling piece in the corridor: never taller than a lane.
Vec2 piece_size(const ClusterLayout& L, double frac_begin, double frac_end, float col_w);

// ---- Camping layout: hikers in rows around the fire, or along a trail -------

// What one hiker's block holds: the figure, the gear grid on its outer side,
// what it holds out towards the others (borrowed gear or pipeline notes), a
// tag line above and its caption below; none of them overlaps another.
struct HikerLayout {
  Vec2 feet;
  float size = 0;  // the figure's height
  Rect figure, gear, hands, tag, caption, block;
  float item = 0;       // one gear icon's size
  float label_h = 0;    // the line under each icon for its layer's name
  float gear_cell = 0;  // the width of one icon's place in the gear grid
  int per_row = 1;
  float side = 1;  // +1: gear to the right of the figure, -1: to the left
  Vec2 gear_center(int layer) const;
  Vec2 hand_center(int slot) const;  // slot-th item held out
};
struct CampLayout {
  Rect area, fire;         // fire: the flames and their caption; empty on a trail
  bool trail = false;      // pipelines: no fire, the hikers walk one trail in rank order
  bool fits = true;        // false: even the smallest figures did not fit (see hikers anyway)
  bool compact = false;    // no names under the icons, no tag line: they did not fit
  float caption_wrap = 0;  // the width the captions were wrapped to
  std::vector<HikerLayout> hikers;
};
// The captions' size once wrapped to `wrap` pixels: the widest line and the
// most lines of any hiker (the panel measures with the font; tests estimate).
using CaptionSize = std::function<std::pair<float, int>(float wrap)>;
// Hikers in one row with the fire in the middle, or (three or more) in two
// rows around it, whichever lets the figures and gear be bigger.
CampLayout camp_layout(int world, int layers, Rect area, float font, const CaptionSize& caption,
                       int hand_slots, bool trail);
// The same, taller than `area` where nothing fits in it (the view then scrolls).
CampLayout camp_layout_fitting(int world, int layers, Rect area, float font,
                               const CaptionSize& caption, int hand_slots, bool trail);

// What a hiker's caption says it carries, from its card: "layers c, d (stage 1)",
// "part 1 of every layer: a1, b1, c1", "all the gear".
std::string carries_text(const CardContents& c, int world, const Naming& n, const Tr& tr = Tr{});
// The micro-batches whose activations a rank keeps at t (pipeline notes it holds).
// With the run's spans, an input buffer whose receive has not completed by t
// (posted a micro-batch ahead) is not a note yet: it waits for one.
std::vector<int> notes_held(const std::vector<Holding>& holdings, const RunData* d = nullptr,
                            int rank = -1, int64_t t = 0);
bool is_pipeline(const std::string& strategy);

}  // namespace shardlab::gui
