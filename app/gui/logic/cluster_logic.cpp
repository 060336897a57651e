// Card contents and travelling pieces (see cluster_logic.h).
#include "app/gui/logic/cluster_logic.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <tuple>

#include "app/gui/logic/palette.h"
#include "app/gui/logic/timeline_logic.h"
#include "core/parallel/strategy.h"

namespace shardlab::gui {

float fade_alpha(int64_t t_free, int64_t t, int64_t fade_ns) {
  if (t < t_free) return 1.0f;
  if (fade_ns <= 0 || t - t_free >= fade_ns) return 0.0f;
  return 1.0f - static_cast<float>(t - t_free) / static_cast<float>(fade_ns);
}

std::vector<Holding> holdings_at(const std::vector<Residency>& res, int64_t t, int64_t fade_ns,
                                 const ParamLayers& params) {
  std::vector<Holding> out;
  for (const Residency& r : res) {
    if (r.t_alloc_ns > t) continue;
    if (!r.alive_at(t) && t - r.t_free_ns >= fade_ns) continue;  // long gone: skip the parse
    float alpha = 1.0f;
    BufferName name = parse_buffer_name(r.name, params);
    if (!r.alive_at(t)) {
      // Only temporary full copies linger: they are the ones people should see go.
      if (!is_temporary(name.kind)) continue;
      alpha = fade_alpha(r.t_free_ns, t, fade_ns);
      if (alpha <= 0) continue;
    }
    out.push_back(Holding{&r, std::move(name), alpha});
  }
  return out;
}

void mark_gather_progress(std::vector<Holding>& holdings, const LaneData& comm, int64_t t) {
  for (Holding& h : holdings) {
    if (h.name.kind != HoldKind::gathered || h.name.layer < 0) continue;
    // The comm lane is sorted by begin: start at the copy's allocation.
    const auto first =
        std::lower_bound(comm.spans.begin(), comm.spans.end(), h.res->t_alloc_ns,
                         [](const Span& s, int64_t at) { return s.t_begin_ns < at; });
    const Span* fill = nullptr;
    for (auto it = first; it != comm.spans.end() && it->t_begin_ns < h.res->t_free_ns; ++it)
      if (it->kind == SpanKind::all_gather && it->layer >= h.name.layer &&
          it->layer <= h.name.layer_last) {
        fill = &*it;
        break;
      }
    if (!fill || t >= fill->t_end_ns) continue;  // filled (or not filled by a gather we saw)
    const double dur = static_cast<double>(std::max<int64_t>(1, fill->t_end_ns - fill->t_begin_ns));
    const double progress =
        t <= fill->t_begin_ns ? 0.0 : static_cast<double>(t - fill->t_begin_ns) / dur;
    h.gather_progress = static_cast<float>(progress);
  }
}

int card_column(MemCategory c, const BufferName& n) {
  switch (c) {
    case MemCategory::params:
      return 0;
    case MemCategory::grads:
      return 1;
    case MemCategory::optimizer_state:
      return 2;
    default:
      break;
  }
  if (n.layer < 0 || !is_temporary(n.kind)) return -1;
  return n.role == Role::grad ? 1 : n.role == Role::optimizer ? 2 : 0;
}

CardContents card_contents(const std::vector<Holding>& holdings, int num_layers) {
  CardContents c;
  c.num_layers = std::max(0, num_layers);
  for (const Holding& h : holdings) c.num_layers = std::max(c.num_layers, h.name.layer_last + 1);
  for (auto& col : c.slots) col.assign(c.num_layers + 1, {});
  // How much of each layer a rank holds for good (full or shard, not gathered):
  // per buffer base name ("layers.3.weight", "layers.3.weight.exp_avg", ...) the
  // covered fraction, averaged over the layer's base names. Generic on purpose:
  // no knowledge of how many tensors a layer or an optimizer has.
  std::array<std::vector<std::map<std::string, double>>, kCardColumns> cover;
  for (auto& v : cover) v.assign(c.num_layers, {});
  for (const Holding& h : holdings) {
    if (h.alpha >= 1.0f) c.bytes[static_cast<int>(h.res->category)] += h.res->bytes;
    const BufferName& n = h.name;
    const int col = card_column(h.res->category, n);
    if (col < 0) continue;
    const bool on_host = h.res->pool == Pool::host;
    c.any_on_host |= on_host;
    SlotPiece p{n.fraction_begin(), n.fraction_end(), n.kind,           h.alpha,
                h.res->bytes,       on_host,          h.gather_progress};
    if (n.layer < 0) {
      c.slots[col][c.num_layers].push_back(p);
      c.has_unlayered = true;
      continue;
    }
    for (int l = n.layer; l <= n.layer_last; ++l) {
      c.slots[col][l].push_back(p);
      double& covered = cover[col][l][n.base];
      if (!is_temporary(n.kind) && h.alpha >= 1.0f)
        covered = std::min(1.0, covered + (p.end - p.begin));
    }
  }
  for (int col = 0; col < kCardColumns; ++col) {
    double sum = 0;
    for (const auto& bases : cover[col]) {
      if (bases.empty()) continue;
      double layer = 0;
      for (const auto& [base, f] : bases) layer += f;
      sum += layer / static_cast<double>(bases.size());
    }
    c.held_fraction[col] = c.num_layers ? sum / c.num_layers : 0.0;
  }
  return c;
}

std::vector<const Span*> active_spans(const LaneData& lane, int64_t t) {
  std::vector<const Span*> out;
  const auto it = std::upper_bound(lane.max_end.begin(), lane.max_end.end(), t);
  for (size_t i = static_cast<size_t>(it - lane.max_end.begin()); i < lane.spans.size(); ++i) {
    const Span& s = lane.spans[i];
    if (s.t_begin_ns > t) break;
    if (s.t_end_ns > t) out.push_back(&s);
  }
  return out;
}

std::vector<Piece> pieces_in_flight(const RunData& d, int64_t t) {
  std::vector<Piece> out;
  const int W = d.world;
  for (int r = 0; r < W; ++r) {
    for (const Span* s : active_spans(d.ranks[r].lane(Lane::comm), t)) {
      const double dur = static_cast<double>(std::max<int64_t>(1, s->t_end_ns - s->t_begin_ns));
      const float p = static_cast<float>((t - s->t_begin_ns) / dur);
      Piece base;
      base.from = r;
      base.layer = s->layer;
      base.kind = s->kind;
      base.progress = p;
      base.bytes = s->bytes;
      base.micro_batch = s->micro_batch;
      const double w = 1.0 / W;
      // dp's copies: one span on the receiving device, peer = where it comes from.
      const bool pulled = s->peer >= 0 && s->peer < W && s->peer != r;
      auto from_peer = [&](int column) {
        Piece q = base;
        q.from = s->peer;
        q.to = r;
        q.column = column;
        out.push_back(q);
      };
      auto to_all = [&](int column, auto frac_for) {
        for (int j = 0; j < W; ++j) {
          if (j == r) continue;
          Piece q = base;
          q.to = j;
          q.column = column;
          std::tie(q.frac_begin, q.frac_end) = frac_for(j);
          out.push_back(q);
        }
      };
      switch (s->kind) {
        case SpanKind::all_gather:
          to_all(0, [&](int) { return std::pair{r * w, (r + 1) * w}; });
          break;
        case SpanKind::reduce_scatter:
          to_all(1, [&](int j) { return std::pair{j * w, (j + 1) * w}; });
          break;
        case SpanKind::all_reduce:
          // First half: shard j of the gradient goes to rank j to be summed;
          // second half: the summed shard r comes back to everyone.
          base.progress = p < 0.5f ? 2 * p : 2 * p - 1;
          if (p < 0.5f)
            to_all(1, [&](int j) { return std::pair{j * w, (j + 1) * w}; });
          else
            to_all(1, [&](int) { return std::pair{r * w, (r + 1) * w}; });
          break;
        case SpanKind::broadcast:
          if (pulled)
            from_peer(0);
          else if (r == (s->peer >= 0 ? s->peer : 0))
            to_all(0, [&](int) { return std::pair{0.0, 1.0}; });
          break;
        case SpanKind::reduce: {
          const int root = s->peer >= 0 ? s->peer : 0;
          if (r != root) {
            Piece q = base;
            q.to = root;
            q.column = 1;
            out.push_back(q);
          }
          break;
        }
        case SpanKind::scatter:  // root hands every other rank its slice (dp)
          if (pulled)
            from_peer(-1);
          else if (r == (s->peer >= 0 ? s->peer : 0))
            to_all(-1, [&](int) { return std::pair{0.0, 1.0}; });
          break;
        case SpanKind::gather: {  // every rank's outputs go to the root (dp)
          const int root = s->peer >= 0 ? s->peer : 0;
          if (r != root) {
            Piece q = base;
            q.to = root;
            q.column = -1;
            out.push_back(q);
          }
          break;
        }
        case SpanKind::send:
          // A send whose recv is recorded travels as its flow (below); until
          // then (a live run records a span when it ends) its own span is all there is.
          if (s->peer >= 0 && s->peer < W && s->peer != r &&
              (s->flow_id == 0 || d.pending_flows.count(s->flow_id))) {
            Piece q = base;
            q.to = s->peer;
            q.column = -1;  // activations or their gradients: not a model state
            out.push_back(q);
          }
          break;
        default:
          break;
      }
    }
  }
  // Messages: from the send's begin to the recv's end. The send's span may end
  // as soon as its bytes are queued (the note then waits in the mailbox until
  // the receiver, maybe waiting for a core, takes it) or long after the
  // receiver has them (its completion waiting for a core): neither is where
  // the note is.
  for (const Flow& f : d.flows) {
    if (t < f.t_send || t >= f.t_recv || f.from_rank < 0 || f.from_rank >= W || f.to_rank < 0 ||
        f.to_rank >= W)
      continue;
    Piece q;
    q.from = f.from_rank;
    q.to = f.to_rank;
    q.layer = f.layer;
    q.kind = SpanKind::send;
    q.column = -1;
    q.bytes = f.bytes;
    q.micro_batch = f.micro_batch;
    q.progress = static_cast<float>(static_cast<double>(t - f.t_send) /
                                    static_cast<double>(std::max<int64_t>(1, f.t_recv - f.t_send)));
    out.push_back(q);
  }
  return out;
}

float ease_in_out(float p) {
  p = std::clamp(p, 0.0f, 1.0f);
  return p * p * (3 - 2 * p);
}

Vec2 travel_position(Vec2 a, Vec2 b, float progress, float arc) {
  const float s = ease_in_out(progress);
  const float dx = b.x - a.x, dy = b.y - a.y;
  const float len = std::sqrt(dx * dx + dy * dy);
  Vec2 p{a.x + dx * s, a.y + dy * s};
  if (len > 0) {
    const float lift = arc * std::sin(3.14159265f * s);
    p.x += -dy / len * lift;
    p.y += dx / len * lift;
  }
  return p;
}

std::vector<Vec2> ring_positions(int n, Vec2 center, float rx, float ry, float start) {
  std::vector<Vec2> out;
  for (int i = 0; i < n; ++i) {
    const float a = start + 6.2831853f * static_cast<float>(i) / static_cast<float>(n);
    out.push_back({center.x + rx * std::cos(a), center.y + ry * std::sin(a)});
  }
  return out;
}

Gear gear_of_layer(int layer) {
  switch (((layer % 3) + 3) % 3) {
    case 0:
      return Gear::tent;
    case 1:
      return Gear::food;
    default:
      return Gear::water;
  }
}

const char* gear_name(Gear g, const Tr& tr) {
  switch (g) {
    case Gear::tent:
      return tr("tent");
    case Gear::food:
      return tr("food");
    case Gear::water:
      return tr("water");
  }
  return "?";
}

// ---- Words ----------------------------------------------------------------

Naming camping_naming(int num_layers) {
  Naming n;
  n.who = "hiker";  // i18n: not shown (a key: the words come from tr())
  n.letters = num_layers > 0 && num_layers <= 26;
  n.message = "note";  // i18n: not shown (a key: the words come from tr())
  return n;
}

std::string layer_name(int layer, const Naming& n) {
  if (layer < 0) return "?";
  if (n.letters && layer < 26) return std::string(1, static_cast<char>('a' + layer));
  return "L" + std::to_string(layer);
}

std::string layer_kind_caption(const std::string& kind, const Tr& tr) {
  if (kind == "embedding") return tr("emb");
  if (kind == "block") return tr("block");
  if (kind == "head") return tr("head");
  return "";
}

std::string part_name(int layer, int part, const Naming& n, const Tr& tr) {
  if (part < 0) return layer_name(layer, n);
  if (n.letters && layer >= 0 && layer < 26) return layer_name(layer, n) + std::to_string(part);
  return strf(tr("%s shard %d"), layer_name(layer, n).c_str(), part);
}

namespace {

// Chinese without the spaces the formats put between two Chinese words
// ("1 号队员 把" -> "1 号队员把"); spaces next to Latin letters, digits and
// arrows stay ("rank 0 把", "第 3 步").
std::string tidy_chinese(const std::string& s) {
  // The code point of the UTF-8 character that ends just before `end`, or
  // starts at `begin`; 0 at the string's ends.
  auto before = [&](size_t end) -> uint32_t {
    if (end == 0) return 0;
    size_t b = end - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    const auto c = static_cast<unsigned char>(s[b]);
    if (c < 0x80) return c;
    uint32_t cp = c & (c >= 0xF0 ? 0x07 : c >= 0xE0 ? 0x0F : 0x1F);
    for (size_t i = b + 1; i < end; ++i) cp = cp << 6 | (static_cast<unsigned char>(s[i]) & 0x3F);
    return cp;
  };
  auto after = [&](size_t begin) -> uint32_t {
    if (begin >= s.size()) return 0;
    size_t e = begin + 1;
    while (e < s.size() && (static_cast<unsigned char>(s[e]) & 0xC0) == 0x80) ++e;
    return before(e);
  };
  // Ideographs, CJK punctuation and full-width forms.
  auto wide = [](uint32_t cp) { return cp >= 0x3000 && cp <= 0xFFEF; };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == ' ' && wide(before(i)) && wide(after(i + 1))) continue;
    out += s[i];
  }
  return out;
}

// The camping skin's words ("hiker 2", "note") rather than the cluster's ("rank 2", "message").
bool hikers(const Naming& n) {
  return std::string_view(n.who) == "hiker";
}
std::string who_one(const Naming& n, int rank, const Tr& tr) {
  return strf(hikers(n) ? tr("hiker %d") : tr("rank %d"), rank);
}
const char* message_word(const Naming& n, const Tr& tr) {
  return std::string_view(n.message) == "note" ? tr("note") : tr("message");
}

std::string join_numbers(const std::vector<int>& v, const Tr& tr) {
  std::vector<std::string> parts;
  for (int x : v) parts.push_back(std::to_string(x));
  return tr.join(parts);
}

// "a0, a1, a2" / "a0、a1、a2" (a plain list, no "and").
std::string join_list(const std::vector<std::string>& v, const Tr& tr) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? (tr.zh() ? "\xE3\x80\x81" : ", ") : "") + v[i];
  return out;
}

// " (x)" / "（x）".
std::string paren(const std::string& s, const Tr& tr) {
  return tr.zh() ? "\xEF\xBC\x88" + s + "\xEF\xBC\x89" : " (" + s + ")";
}

// Between the parts of a status or a "now" line: "; " / "；".
const char* part_sep(const Tr& tr) {
  return tr.zh() ? "\xEF\xBC\x9B" : "; ";
}

// A sentence as the views show it: capitalised with a full stop, or in
// Chinese with a Chinese full stop and no spaces between Chinese words.
std::string sentence(const std::string& s, const Tr& tr) {
  if (tr.zh()) return tidy_chinese(s) + "\xE3\x80\x82";
  std::string out = s;
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z')
    out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out + ".";
}

std::vector<int> sorted_unique(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// A phrase about a layer: `letters` ("... of layer c") or `plain` ("... of L2")
// with the layer's name, or `none` when there is no layer.
std::string of_layer(int layer, const Naming& n, const char* letters, const char* plain,
                     const char* none) {
  if (layer < 0) return none;
  return strf(n.letters ? letters : plain, layer_name(layer, n).c_str());
}

// What kind of thing a group of pieces carries, for the sentences.
std::string what_of(SpanKind k, int layer, const Naming& n, const Tr& tr) {
  switch (k) {
    case SpanKind::all_gather:
    case SpanKind::broadcast:
      return of_layer(layer, n, tr("the weights of layer %s"), tr("the weights of %s"),
                      tr("the weights"));
    case SpanKind::reduce_scatter:
    case SpanKind::all_reduce:
    case SpanKind::reduce:
      return of_layer(layer, n, tr("the gradients of layer %s"), tr("the gradients of %s"),
                      tr("the gradients"));
    case SpanKind::scatter:
      return layer >= 0 ? tr("their slice of the output gradients")
                        : tr("their slice of the batch");
    case SpanKind::gather:
      return tr("their outputs");
    default:
      return of_layer(layer, n, tr("data of layer %s"), tr("data of %s"), tr("data"));
  }
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks, const Naming& n, const Tr& tr) {
  const std::vector<int> v = sorted_unique(ranks);
  const bool one = v.size() == 1;
  const char* fmt =
      hikers(n) ? (one ? tr("hiker %s") : tr("hikers %s")) : (one ? tr("rank %s") : tr("ranks %s"));
  return strf(fmt, join_numbers(v, tr).c_str());
}

int piece_part(const Piece& p, int world) {
  if (world <= 1) return -1;
  const double w = p.frac_end - p.frac_begin;
  if (std::abs(w * world - 1.0) > 1e-6) return -1;
  return static_cast<int>(std::lround(p.frac_begin * world));
}

std::string message_label(const Piece& p) {
  if (p.kind != SpanKind::send) return "";
  const std::string mb = p.micro_batch >= 0 ? std::to_string(p.micro_batch) : std::string();
  // Activations go down the pipeline (to a later stage), gradients come back.
  return (p.to > p.from ? "F" : "B") + mb;
}

namespace {

// dp's scatter and gather move batch rows, outputs and output gradients, not
// a layer's weights: their layer only says where in the model they belong.
std::string data_name(SpanKind k, int layer, const Tr& tr) {
  if (k == SpanKind::gather) return tr("outputs");
  return layer >= 0 ? tr("output gradients") : tr("batch slice");
}
bool moves_data(SpanKind k) {
  return k == SpanKind::scatter || k == SpanKind::gather;
}

struct GroupKey {
  SpanKind kind;
  int layer;
  bool operator<(const GroupKey& o) const {
    return std::tie(kind, layer) < std::tie(o.kind, o.layer);
  }
};

std::map<GroupKey, std::vector<const Piece*>> group_pieces(const std::vector<Piece>& pieces) {
  std::map<GroupKey, std::vector<const Piece*>> g;
  for (const Piece& p : pieces)
    if (p.kind != SpanKind::send) g[{p.kind, p.layer}].push_back(&p);
  return g;
}

std::string message_sentence(const Piece& p, const Naming& n, const Tr& tr) {
  const std::string lbl = message_label(p);
  const std::string from = who_one(n, p.from, tr), to = who_one(n, p.to, tr);
  const char* msg = message_word(n, tr);
  const bool fwd = p.to > p.from;
  if (p.micro_batch >= 0)
    return strf(fwd ? tr("%s passes %s %s (micro-batch %d's activations) on to %s")
                    : tr("%s passes %s %s (micro-batch %d's gradient) back to %s"),
                from.c_str(), msg, lbl.c_str(), p.micro_batch, to.c_str());
  return strf(fwd ? tr("%s passes %s %s (activations) on to %s")
                  : tr("%s passes %s %s (gradient) back to %s"),
              from.c_str(), msg, lbl.c_str(), to.c_str());
}

// One sentence for one (collective, layer) group.
std::string group_sentence(SpanKind k, int layer, const std::vector<const Piece*>& ps, int world,
                           const Naming& n, const Tr& tr) {
  std::vector<int> senders, receivers;
  for (const Piece* p : ps) {
    senders.push_back(p->from);
    receivers.push_back(p->to);
  }
  senders = sorted_unique(senders);
  receivers = sorted_unique(receivers);
  const bool one = senders.size() == 1;
  const std::string from = rank_list(senders, n, tr), to = rank_list(receivers, n, tr);
  const std::string what = what_of(k, layer, n, tr);
  const char* label = kind_label(k, tr);
  switch (k) {
    case SpanKind::all_gather: {
      if (one) {
        const int part = piece_part(*ps[0], world);
        const std::string mine = part >= 0 ? part_name(layer, part, n, tr)
                                           : of_layer(layer, n, tr("its part of layer %s"),
                                                      tr("its part of %s"), tr("its part"));
        const std::string coll =
            of_layer(layer, n, tr("all-gather of layer %s"), tr("all-gather of %s"), label);
        return strf(tr("%s sends %s to %s (%s)"), from.c_str(), mine.c_str(), to.c_str(),
                    coll.c_str());
      }
      // Everyone at once: name the parts when there are few.
      std::string parts;
      if (layer >= 0 && senders.size() <= 4) {
        std::vector<std::string> names;
        for (int r : senders) {
          for (const Piece* p : ps)
            if (p->from == r) {
              const int part = piece_part(*p, world);
              if (part >= 0) names.push_back(part_name(layer, part, n, tr));
              break;
            }
        }
        if (names.size() == senders.size()) parts = paren(join_list(names, tr), tr);
      }
      if (layer < 0)
        return strf(tr("%s each send their part to the others (all-gather)"), from.c_str());
      return strf(n.letters ? tr("%s each send their part of layer %s%s to the others (all-gather)")
                            : tr("%s each send their part of %s%s to the others (all-gather)"),
                  from.c_str(), layer_name(layer, n).c_str(), parts.c_str());
    }
    case SpanKind::reduce_scatter:
      if (one)
        return strf(tr("%s sends parts of %s to %s, who each sum the part they keep (%s)"),
                    from.c_str(), what.c_str(), to.c_str(), label);
      return strf(tr("%s send each other parts of %s; each sums the part it keeps (%s)"),
                  from.c_str(), what.c_str(), label);
    case SpanKind::all_reduce:
      return strf(one ? tr("%s sums %s with %s (%s)") : tr("%s sum %s with %s (%s)"), from.c_str(),
                  what.c_str(), to.c_str(), label);
    case SpanKind::scatter: {
      const bool single = receivers.size() == 1;
      const char* fmt = layer >= 0
                            ? (single ? tr("%s hands %s its slice of the output gradients (%s)")
                                      : tr("%s hands %s their slices of the output gradients (%s)"))
                            : (single ? tr("%s hands %s its slice of the batch (%s)")
                                      : tr("%s hands %s their slices of the batch (%s)"));
      return strf(fmt, from.c_str(), to.c_str(), label);
    }
    default:  // broadcast, gather, reduce: one sender reads "Rank 1 sends", several "Ranks 1 and 2
              // send"
      return strf(one ? tr("%s sends %s to %s (%s)") : tr("%s send %s to %s (%s)"), from.c_str(),
                  what.c_str(), to.c_str(), label);
  }
}

// What one compute span is, briefly: "F3", "forward L2", "optimizer step".
std::string compute_words(const Span& s, const Naming& n, const Tr& tr) {
  const bool fb = s.kind == SpanKind::forward || s.kind == SpanKind::backward;
  if (fb && s.micro_batch >= 0) return kind_short(s.kind, tr) + std::to_string(s.micro_batch);
  const std::string what =
      s.kind == SpanKind::optimizer ? tr("optimizer step") : kind_label(s.kind, tr);
  if (s.layer < 0) return what;
  const std::string l = layer_name(s.layer, n);
  // Chinese names the layer first: "L2 前向", "c 层反向".
  if (tr.zh()) return (n.letters ? strf(tr("layer %s"), l.c_str()) : l) + " " + what;
  return what + " " + l;
}

}  // namespace

std::string now_line(const RunData& d, const std::vector<Piece>& pieces, int64_t t, const Naming& n,
                     const Tr& tr) {
  const std::string sep = part_sep(tr);
  std::vector<std::string> parts;
  for (const auto& [key, ps] : group_pieces(pieces))
    parts.push_back(group_sentence(key.kind, key.layer, ps, d.world, n, tr));
  for (const Piece& p : pieces)
    if (p.kind == SpanKind::send) parts.push_back(message_sentence(p, n, tr));
  if (!parts.empty()) {
    std::string out;
    const size_t shown = std::min<size_t>(parts.size(), 3);
    for (size_t i = 0; i < shown; ++i) out += (i ? sep : "") + parts[i];
    if (parts.size() > shown)
      out += sep + strf(tr("and %d more"), static_cast<int>(parts.size() - shown));
    return sentence(out, tr);
  }
  // Nobody is sending: say what each rank computes, grouped by what it does.
  std::map<std::string, std::vector<int>> doing;
  std::vector<int> idle;
  for (int r = 0; r < d.world; ++r) {
    std::string what;
    for (const Span* s : active_spans(d.ranks[r].lane(Lane::compute), t)) {
      what = compute_words(*s, n, tr);
      break;
    }
    if (what.empty()) {
      for (const Span* s : active_spans(d.ranks[r].lane(Lane::comm), t)) {
        what = s->kind == SpanKind::recv      ? strf(tr("waits for a %s"), message_word(n, tr))
               : s->kind == SpanKind::barrier ? std::string(tr("waits for the others"))
                                              : strf(tr("waits on %s"), kind_label(s->kind, tr));
        break;
      }
    }
    if (what.empty())
      idle.push_back(r);
    else
      doing[what].push_back(r);
  }
  if (doing.empty() && !idle.empty()) return tr("Nobody is working or sharing right now.");
  if (doing.size() == 1 && idle.empty())
    return sentence(strf(hikers(n) ? tr("every hiker: %s") : tr("every rank: %s"),
                         doing.begin()->first.c_str()),
                    tr);
  std::string out;
  for (const auto& [what, ranks] : doing)
    out += (out.empty() ? "" : sep) +
           strf(tr("%s: %s"), rank_list(ranks, n, tr).c_str(), what.c_str());
  if (!idle.empty())
    out += (out.empty() ? "" : sep) + strf(tr("%s wait"), rank_list(idle, n, tr).c_str());
  return sentence(out, tr);
}

std::string rank_status(const RunData& d, const std::vector<Piece>& pieces, int rank, int64_t t,
                        const Naming& n, int brevity, const Tr& tr) {
  const bool brief = brevity > 0;
  std::vector<std::string> parts;
  // Sending, one phrase per (collective, layer).
  std::map<GroupKey, std::vector<const Piece*>> out_groups, in_groups;
  std::vector<const Piece*> notes_out, notes_in;
  for (const Piece& p : pieces) {
    if (p.kind == SpanKind::send) {
      if (p.from == rank) notes_out.push_back(&p);
      if (p.to == rank) notes_in.push_back(&p);
      continue;
    }
    if (p.from == rank) out_groups[{p.kind, p.layer}].push_back(&p);
    if (p.to == rank) in_groups[{p.kind, p.layer}].push_back(&p);
  }
  for (const auto& [key, ps] : out_groups) {
    std::vector<int> to;
    for (const Piece* p : ps) to.push_back(p->to);
    const int part = brevity >= 2 ? -1 : piece_part(*ps[0], d.world);
    const std::string what = moves_data(key.kind) ? data_name(key.kind, key.layer, tr)
                             : key.layer >= 0     ? part_name(key.layer, part, n, tr)
                                                  : std::string(tr("data"));
    const bool everyone = d.world > 3 && static_cast<int>(sorted_unique(to).size()) == d.world - 1;
    if (brief)
      parts.push_back(std::string(kind_short(key.kind, tr)) + " " + what + " \xE2\x86\x92 " +
                      (everyone ? std::string(tr("all")) : join_numbers(sorted_unique(to), tr)));
    else
      parts.push_back(strf(tr("sending %s to %s (%s)"), what.c_str(),
                           everyone ? (hikers(n) ? tr("every other hiker") : tr("every other rank"))
                                    : rank_list(to, n, tr).c_str(),
                           kind_label(key.kind, tr)));
  }
  for (const Piece* p : notes_out)
    parts.push_back(
        strf(tr("sending %s to %s"), message_label(*p).c_str(), who_one(n, p->to, tr).c_str()));
  for (const auto& [key, ps] : in_groups) {
    std::vector<int> from;
    for (const Piece* p : ps) from.push_back(p->from);
    const std::string what = moves_data(key.kind) ? data_name(key.kind, key.layer, tr)
                             : key.layer >= 0     ? layer_name(key.layer, n)
                                                  : std::string();
    if (brief)
      parts.push_back(std::string(kind_short(key.kind, tr)) + " " +
                      (what.empty() ? what : what + " ") + "\xE2\x86\x90 " +
                      join_numbers(sorted_unique(from), tr));
    else if (what.empty())
      parts.push_back(strf(tr("receiving from %s (%s)"), rank_list(from, n, tr).c_str(),
                           kind_label(key.kind, tr)));
    else
      parts.push_back(strf(tr("receiving %s from %s (%s)"), what.c_str(),
                           rank_list(from, n, tr).c_str(), kind_label(key.kind, tr)));
  }
  for (const Piece* p : notes_in)
    parts.push_back(strf(tr("receiving %s from %s"), message_label(*p).c_str(),
                         who_one(n, p->from, tr).c_str()));
  for (const Span* s : active_spans(d.ranks[rank].lane(Lane::compute), t))
    parts.push_back(strf(tr("computing %s"), compute_words(*s, n, tr).c_str()));
  if (parts.empty())
    for (const Span* s : active_spans(d.ranks[rank].lane(Lane::comm), t)) {
      const bool waiting = s->kind == SpanKind::recv || s->kind == SpanKind::barrier;
      const char* label = kind_label(s->kind, tr);
      if (s->layer >= 0)
        parts.push_back(strf(waiting ? tr("waiting (in %s %s)") : tr("in %s %s"), label,
                             layer_name(s->layer, n).c_str()));
      else
        parts.push_back(strf(waiting ? tr("waiting (in %s)") : tr("in %s"), label));
    }
  if (parts.empty()) return tr("idle");
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i)  // two waits on one layer read as one
    if (std::find(parts.begin(), parts.begin() + static_cast<long>(i), parts[i]) ==
        parts.begin() + static_cast<long>(i))
      out += (out.empty() ? "" : part_sep(tr)) + parts[i];
  return tr.zh() ? tidy_chinese(out) : out;
}

std::string fit_parts(const std::string& joined, float w,
                      const std::function<float(const std::string&)>& width, const Tr& tr) {
  if (width(joined) <= w) return joined;
  std::vector<std::string> parts;
  const std::string sep = part_sep(tr);
  for (size_t at = 0;;) {
    const size_t next = joined.find(sep, at);
    parts.push_back(joined.substr(at, next == std::string::npos ? next : next - at));
    if (next == std::string::npos) break;
    at = next + sep.size();
  }
  // The most leading parts that fit with the count of the rest after them.
  for (size_t keep = parts.size() - 1; keep >= 1; --keep) {
    std::string s;
    for (size_t i = 0; i < keep; ++i) s += (i ? sep : "") + parts[i];
    s += sep + strf(tr("+%d more"), static_cast<int>(parts.size() - keep));
    if (width(s) <= w) return s;
  }
  return parts[0];  // even one part with its count is too wide: the part, clipped
}

std::vector<ArrivalTag> arrival_tags(const std::vector<Piece>& pieces, const Naming& n,
                                     const Tr& tr) {
  std::map<std::tuple<int, int, int, int>, ArrivalTag> m;
  for (const Piece& p : pieces) {
    const int mb = p.kind == SpanKind::send ? p.micro_batch : -2;
    ArrivalTag& a = m[{p.to, static_cast<int>(p.kind), p.layer, mb}];
    a.to = p.to;
    a.kind = p.kind;
    a.layer = p.layer;
    a.from.push_back(p.from);
    if (p.kind == SpanKind::send) a.text = message_label(p);
  }
  std::vector<ArrivalTag> out;
  for (auto& [key, a] : m) {
    a.from = sorted_unique(a.from);
    if (a.kind != SpanKind::send) {
      a.text = kind_short(a.kind, tr);
      if (a.kind == SpanKind::gather)
        a.text += std::string(" ") + tr("out");
      else if (moves_data(a.kind))
        a.text += a.layer >= 0 ? " dy" : " x";  // i18n: symbols (the output's gradient, the input)
      else if (a.layer >= 0)
        a.text += " " + layer_name(a.layer, n);
    }
    a.brief = a.text + " \xE2\x86\x90 ";
    for (size_t i = 0; i < a.from.size(); ++i) {
      if (i) a.brief += ',';
      a.brief += std::to_string(a.from[i]);
    }
    a.text += " \xE2\x86\x90 " + rank_list(a.from, n, tr);
    out.push_back(std::move(a));
  }
  return out;
}

// ---- Cluster layout -------------------------------------------------------

CardLayout card_layout(Rect card, float font, int rows) {
  CardLayout c;
  c.card = card;
  c.rows = std::max(1, rows);
  const float pad = std::max(6.0f, font * 0.4f);
  const float x0 = card.x0 + pad, x1 = card.x1 - pad;
  const float line = font * 1.2f;
  // Lines drop out, least needed first, when the card is too short for them
  // and a readable grid (presenter fonts on many cards).
  const float min_grid = static_cast<float>(c.rows) * std::max(3.0f, font * 0.35f);
  const float avail = card.h() - pad;
  bool footer = true, held = true;
  auto needed = [&] {
    return font * 1.3f + (held ? line : 0) + line + line + (footer ? 2 * line : 0) + min_grid;
  };
  if (needed() > avail) footer = false;
  if (needed() > avail) held = false;
  float y = card.y0 + pad * 0.5f;
  auto take = [&](float h) {
    Rect r{x0, y, x1, y + h};
    y += h;
    return r;
  };
  c.title = take(font * 1.3f);
  c.held = held ? take(line) : Rect{x0, y, x1, y};
  c.status = take(line);
  c.headers = take(line);
  const float bottom = card.y1 - pad * 0.5f;
  c.footer = footer ? Rect{x0, bottom - 2 * line, x1, bottom} : Rect{x0, bottom, x1, bottom};
  c.label_w = font * 2.6f;
  c.grid = Rect{x0 + c.label_w, y, x1, c.footer.y0 - pad * 0.3f};
  c.col_w = c.grid.w() / kCardColumns;
  c.row_h = std::clamp(c.grid.h() / static_cast<float>(c.rows), 3.0f, font * 4.5f);
  c.grid.y1 = c.grid.y0 + c.row_h * static_cast<float>(c.rows);
  return c;
}

ClusterLayout cluster_layout(int world, Rect area, float font) {
  ClusterLayout L;
  L.world = std::max(1, world);
  L.font = font;
  L.ncols = std::min(L.world, 4);
  L.nrows = (L.world + L.ncols - 1) / L.ncols;
  L.lanes = L.ncols * (L.nrows > 1 ? 2 : 1);
  const float tag_h = font * 1.3f;
  // Lanes as tall as a small font, less when many rows would leave no room for cards.
  const float budget = area.h() * 0.3f - static_cast<float>(L.nrows) * tag_h;
  L.lane_h = std::max(
      4.0f, std::min(font * 1.3f, budget / static_cast<float>(std::max(1, L.nrows * L.lanes))));
  L.gutter = std::max(font * 0.8f, L.lane_h * 1.8f);
  const float corridor_h = static_cast<float>(L.lanes) * L.lane_h + L.lane_h * 0.6f + tag_h;
  const float card_w = (area.w() - L.gutter * static_cast<float>(L.ncols)) / L.ncols;
  const float card_h =
      std::max(font * 3, (area.h() - corridor_h * static_cast<float>(L.nrows)) / L.nrows);
  for (int r = 0; r < L.world; ++r) {
    const int col = r % L.ncols, row = r / L.ncols;
    const float x = area.x0 + L.gutter + static_cast<float>(col) * (card_w + L.gutter);
    const float y = area.y0 + static_cast<float>(row) * (card_h + corridor_h);
    L.cards.push_back({x, y, x + card_w, y + card_h});
  }
  for (int row = 0; row < L.nrows; ++row) {
    const float y = area.y0 + static_cast<float>(row) * (card_h + corridor_h) + card_h;
    L.corridors.push_back({area.x0, y, area.x1, y + corridor_h});
    L.tag_rows.push_back({area.x0, y + corridor_h - tag_h, area.x1, y + corridor_h});
  }
  return L;
}

ClusterLayout cluster_layout_fitting(int world, Rect area, float font, int rows) {
  // Grown (the view then scrolls) until every card has a readable grid under
  // its title, status and column headers.
  const float min_row = std::max(6.0f, font * 0.55f);
  for (int i = 0;; ++i) {
    ClusterLayout L = cluster_layout(world, area, font);
    const CardLayout c = card_layout(L.cards[0], font, rows);
    const bool fits = c.row_h >= min_row && c.card.contains(c.grid);
    if (fits || i >= 40) return L;
    area.y1 = area.y0 + area.h() * 1.12f + font;
  }
}

float ClusterLayout::lane_y(int row, int lane) const {
  const Rect& c = corridors[static_cast<size_t>(std::clamp(row, 0, nrows - 1))];
  return c.y0 + lane_h * 0.6f + (static_cast<float>(lane) + 0.5f) * lane_h;
}

float ClusterLayout::gutter_x(int col) const {
  return cards[static_cast<size_t>(col)].x0 - gutter * 0.5f;
}

std::vector<Vec2> piece_route(const ClusterLayout& L, int from, int to, float x_from, float x_to) {
  const Rect& a = L.cards[static_cast<size_t>(from)];
  const Rect& b = L.cards[static_cast<size_t>(to)];
  const int row_a = from / L.ncols, row_b = to / L.ncols;
  const float edge = L.lane_h * 0.5f;  // the piece waits just below a card, never on it
  const float ya = L.lane_y(row_a, from % L.ncols);
  std::vector<Vec2> r{{x_from, a.y1 + edge}, {x_from, ya}};
  if (row_a == row_b) {
    r.push_back({x_to, ya});
  } else {
    // Along the corridor to the gutter left of the destination's column, along
    // the gutter to the destination row's corridor, on an arrivals lane.
    const float gx = L.gutter_x(to % L.ncols);
    const float yb = L.lane_y(row_b, L.ncols + from % L.ncols);
    r.push_back({gx, ya});
    r.push_back({gx, yb});
    r.push_back({x_to, yb});
  }
  r.push_back({x_to, b.y1 + edge});
  // Drop zero-length legs, so the corners are real corners.
  std::vector<Vec2> out;
  for (const Vec2& p : r)
    if (out.empty() || std::abs(out.back().x - p.x) + std::abs(out.back().y - p.y) > 0.01f)
      out.push_back(p);
  return out;
}

float route_length(const std::vector<Vec2>& route) {
  float len = 0;
  for (size_t i = 1; i < route.size(); ++i)
    len += std::hypot(route[i].x - route[i - 1].x, route[i].y - route[i - 1].y);
  return len;
}

Vec2 point_along(const std::vector<Vec2>& route, float distance) {
  if (route.empty()) return {};
  float left = std::max(0.0f, distance);
  for (size_t i = 1; i < route.size(); ++i) {
    const float seg = std::hypot(route[i].x - route[i - 1].x, route[i].y - route[i - 1].y);
    if (left <= seg && seg > 0) {
      const float k = left / seg;
      return {route[i - 1].x + (route[i].x - route[i - 1].x) * k,
              route[i - 1].y + (route[i].y - route[i - 1].y) * k};
    }
    left -= seg;
  }
  return route.back();
}

Vec2 piece_size(const ClusterLayout& L, double frac_begin, double frac_end, float col_w) {
  const float h = L.lane_h * 0.8f;
  // As wide as the part of the layer it carries, within what a gutter lets pass.
  // One row of cards: pieces never enter a gutter, so they may be wider.
  const float widest = L.nrows == 1 ? std::min(col_w, h * 5) : std::min(col_w, L.gutter * 0.9f);
  const float w = std::clamp(static_cast<float>(frac_end - frac_begin) * col_w, h, widest);
  return {std::max(w, std::min(h, widest)), h};
}

// ---- Camping layout -------------------------------------------------------

Vec2 HikerLayout::gear_center(int layer) const {
  const float cell_w = gear_cell;
  const int col = layer % per_row, row = layer / per_row;
  const float row_h = item * 1.25f + label_h;  // icon, then its small label below
  return {gear.x0 + (static_cast<float>(col) + 0.5f) * cell_w,
          gear.y0 + static_cast<float>(row) * row_h + item * 0.6f};
}

Vec2 HikerLayout::hand_center(int slot) const {
  const int per = std::max(1, static_cast<int>(std::floor(hands.w() / (item * 1.15f) + 0.01f)));
  return {hands.x0 + (static_cast<float>(slot % per) + 0.5f) * item * 1.15f,
          hands.y0 + label_h + (static_cast<float>(slot / per) + 0.5f) * item * 1.15f};
}

namespace {

// Places one hiker's block in `cell` at figure size s; side: where its gear goes.
HikerLayout place_hiker(Rect cell, float s, float item, int layers, int per_row, int hand_slots,
                        int hand_per_row, float font, float caption_w, int caption_lines,
                        float side, float hand_min, bool compact) {
  HikerLayout h;
  h.size = s;
  h.item = item;
  h.per_row = per_row;
  h.side = side;
  h.label_h = compact ? 0.0f : font * 0.9f;
  const int gear_rows = (layers + per_row - 1) / per_row;
  // A gear cell is wide enough for its label ("c1") as well as for the icon.
  h.gear_cell = std::max(item * 1.25f, h.label_h * 1.6f);
  const float gear_w = static_cast<float>(per_row) * h.gear_cell;
  const float gear_h = static_cast<float>(gear_rows) * (item * 1.25f + h.label_h);
  const int hand_rows = (hand_slots + hand_per_row - 1) / hand_per_row;
  const float hand_w = std::max(static_cast<float>(hand_per_row) * item * 1.15f, hand_min);
  const float hand_h = h.label_h + static_cast<float>(hand_rows) * item * 1.15f;
  const float fig_w = s * 0.7f;
  const float gap = font * 0.4f;
  const float main_w = gear_w + gap + fig_w + gap + hand_w;
  const float main_h = std::max({s, gear_h, hand_h});
  const float tag_h = compact ? 0.0f : font * 1.25f;
  const float cap_h = static_cast<float>(caption_lines) * font * 1.2f;
  const float block_w = std::max(main_w, caption_w);
  const float block_h = tag_h + main_h + gap + cap_h;
  const float bx = (cell.x0 + cell.x1 - block_w) * 0.5f;
  const float by = (cell.y0 + cell.y1 - block_h) * 0.5f;
  h.block = {bx, by, bx + block_w, by + block_h};
  h.tag = {bx, by, bx + block_w, by + tag_h};
  const float my = by + tag_h;
  const float mx = bx + (block_w - main_w) * 0.5f;
  // side < 0: [gear][figure][hands]; side > 0: [hands][figure][gear].
  const float gx = side < 0 ? mx : mx + hand_w + gap + fig_w + gap;
  const float fx = side < 0 ? mx + gear_w + gap : mx + hand_w + gap;
  const float hx = side < 0 ? mx + gear_w + gap + fig_w + gap : mx;
  h.gear = {gx, my, gx + gear_w, my + gear_h};
  h.figure = {fx, my + main_h - s, fx + fig_w, my + main_h};
  h.hands = {hx, my, hx + hand_w, my + hand_h};
  h.feet = {fx + s * 0.37f, my + main_h};
  const float cy = my + main_h + gap;
  h.caption = {bx, cy, bx + block_w, cy + cap_h};
  return h;
}

}  // namespace

namespace {

// Where each hiker may stand: in one row (the fire in the middle of it), or in
// two rows above and below the fire. On a trail there is no fire and the
// second row walks back, right to left.
std::vector<Rect> camp_cells(int world, Rect area, float font, bool trail, int nrows, Rect& fire) {
  world = std::max(1, world);
  nrows = world > 2 ? std::clamp(nrows, 1, 2) : 1;
  const int top = (world + nrows - 1) / nrows;
  const float fire_s = std::min(area.w(), area.h()) * 0.05f;
  const float fire_h = trail ? 0.0f : fire_s * 2.6f + font * 1.4f;
  const float fire_w = trail ? 0.0f : std::max(fire_s * 3.0f, font * 10.0f);
  const float cx = (area.x0 + area.x1) * 0.5f, cy = (area.y0 + area.y1) * 0.5f;
  fire = trail
             ? Rect{}
             : Rect{cx - fire_w * 0.5f, cy - fire_h * 0.5f, cx + fire_w * 0.5f, cy + fire_h * 0.5f};
  std::vector<Rect> cells(static_cast<size_t>(world));
  if (nrows == 1) {
    // Left of the fire the first half, right of it the rest (a trail: all in a row).
    const int left = trail ? world : (world + 1) / 2;
    const float lw = trail ? area.w() : fire.x0 - area.x0;
    const float rw = area.x1 - fire.x1;
    for (int r = 0; r < world; ++r) {
      Rect& c = cells[static_cast<size_t>(r)];
      if (r < left) {
        const float w = lw / static_cast<float>(left);
        c = {area.x0 + w * r, area.y0, area.x0 + w * (r + 1), area.y1};
      } else {
        const float w = rw / static_cast<float>(world - left);
        c = {fire.x1 + w * (r - left), area.y0, fire.x1 + w * (r - left + 1), area.y1};
      }
    }
    return cells;
  }
  for (int r = 0; r < world; ++r) {
    const int row = r < top ? 0 : 1;
    const int in_row = row == 0 ? top : world - top;
    // The second row runs right to left, so ranks go round the fire (and the
    // trail snakes back): rank top is under rank top - 1.
    const int k = row == 0 ? r : in_row - 1 - (r - top);
    const float y0 = row == 0 ? area.y0 : (trail ? cy : fire.y1);
    const float y1 = row == 0 ? (trail ? cy : fire.y0) : area.y1;
    const float w = area.w() / static_cast<float>(in_row);
    cells[static_cast<size_t>(r)] = {area.x0 + w * k, y0, area.x0 + w * (k + 1), y1};
  }
  return cells;
}

}  // namespace

CampLayout camp_layout_fitting(int world, int layers, Rect area, float font,
                               const CaptionSize& caption, int hand_slots, bool trail) {
  for (int i = 0;; ++i) {
    CampLayout L = camp_layout(world, layers, area, font, caption, hand_slots, trail);
    if (L.fits || i >= 30) return L;
    area.y1 = area.y0 + area.h() * 1.12f + font;
  }
}

CampLayout camp_layout(int world, int layers, Rect area, float font, const CaptionSize& caption,
                       int hand_slots, bool trail) {
  world = std::max(1, world);
  layers = std::max(1, layers);
  hand_slots = std::max(1, hand_slots);
  const float cx = (area.x0 + area.x1) * 0.5f;
  const int hand_per_row = std::min(hand_slots, 3);
  // For each arrangement (and gear grid width), the biggest figure whose block
  // fits every cell, gear growing with it; when even the smallest figure does
  // not fit (many hikers, big presenter fonts), the gear may shrink below the
  // font size. The arrangement with the biggest gear wins.
  CampLayout best;
  float best_score = -1;
  // Compact (no name under each icon, arrival tags only in the "now" line) is
  // the last resort, for many hikers or layers at big presenter fonts.
  for (bool compact : {false, true}) {
    for (int nrows : world > 2 ? std::vector<int>{2, 1} : std::vector<int>{1}) {
      Rect fire;
      const std::vector<Rect> cells = camp_cells(world, area, font, trail, nrows, fire);
      float wrap = area.w();
      for (const Rect& c : cells) wrap = std::min(wrap, c.w() * 0.9f);
      const auto [caption_w, caption_lines] = caption(wrap);
      for (int per_row = layers; per_row >= 1; --per_row) {
        // Of the grids with the same number of rows, only the narrowest.
        if (per_row > 1 &&
            (layers + per_row - 1) / per_row == (layers + per_row - 2) / (per_row - 1))
          continue;  // as many gear rows as a narrower grid: no gain
        auto fits_all = [&](float size, float item, float hmin) {
          for (const Rect& c : cells) {
            const HikerLayout h =
                place_hiker(c, size, item, layers, per_row, hand_slots, hand_per_row, font,
                            caption_w, caption_lines, 1, hmin, compact);
            if (h.block.w() > c.w() * 0.98f || h.block.h() > c.h() * 0.98f) return false;
          }
          return true;
        };
        float s = font * 1.5f, item_min = font * 0.5f, hand_min = font * 2.0f, score = 0;
        bool found = false;
        for (const auto& [imin, hmin] : {std::pair{1.1f, 4.5f}, {0.75f, 3.0f}, {0.5f, 2.0f}}) {
          for (float size = font * 14; size >= font * 1.5f; size *= 0.93f)
            if (fits_all(size, std::max(size * 0.36f, font * imin), font * hmin)) {
              s = size, item_min = font * imin, hand_min = font * hmin, found = true;
              // Two rows round the fire read best: they win a near tie.
              score = std::max(size * 0.36f, font * imin) * (nrows == 2 ? 1.15f : 1.0f);
              break;
            }
          if (found) break;
        }
        if (!found && (compact || best_score >= 0)) continue;
        CampLayout L;
        L.area = area;
        L.trail = trail;
        L.fire = fire;
        L.caption_wrap = wrap;
        L.fits = found;
        L.compact = compact;
        const float item = std::max(s * 0.36f, item_min);
        for (const Rect& c : cells) {
          // Gear on the side away from the fire (or, on a trail, behind the hiker).
          const float side = trail ? -1.0f : ((c.x0 + c.x1) * 0.5f < cx ? -1.0f : 1.0f);
          L.hikers.push_back(place_hiker(c, s, item, layers, per_row, hand_slots, hand_per_row,
                                         font, caption_w, caption_lines, side, hand_min, compact));
        }
        // A layout that fits beats one that does not, whatever its size.
        const float rank_score = score + (found ? 1e6f : 0.0f);
        if (rank_score > best_score) {
          best_score = rank_score;
          best = std::move(L);
        }
      }
    }
    if (best.fits && !best.hikers.empty()) break;
  }
  return best;
}

std::string carries_text(const CardContents& c, int world, const Naming& n, const Tr& tr) {
  std::vector<int> full, shard_layers;
  std::vector<int> shard_part;
  for (int l = 0; l < c.num_layers; ++l) {
    // The union of the non-temporary pieces of this layer's parameters.
    std::vector<std::pair<double, double>> iv;
    for (const SlotPiece& p : c.slots[0][static_cast<size_t>(l)])
      if (!is_temporary(p.kind) && p.alpha >= 1.0f) iv.push_back({p.begin, p.end});
    std::sort(iv.begin(), iv.end());
    double covered = 0, reach = 0;
    for (const auto& [b, e] : iv) {
      const double from = std::max(b, reach);
      if (e > from) covered += e - from;
      reach = std::max(reach, e);
    }
    if (covered >= 0.999) {
      full.push_back(l);
    } else if (covered > 0) {
      shard_layers.push_back(l);
      shard_part.push_back(
          world > 1 && !iv.empty() ? static_cast<int>(std::lround(iv.front().first * world)) : -1);
    }
  }
  std::string out;
  if (c.num_layers > 0 && static_cast<int>(full.size()) == c.num_layers) {
    out = tr("all the gear");
  } else if (!full.empty() && shard_layers.empty()) {
    std::string list;
    bool contiguous = full.back() - full.front() + 1 == static_cast<int>(full.size());
    if (full.size() > 3 && contiguous) {
      list = strf(tr("%s to %s"), layer_name(full.front(), n).c_str(),
                  layer_name(full.back(), n).c_str());
    } else {
      std::vector<std::string> names;
      for (int l : full) names.push_back(layer_name(l, n));
      list = join_list(names, tr);
    }
    out = strf(full.size() == 1 ? tr("layer %s") : tr("layers %s"), list.c_str());
  } else if (!shard_layers.empty()) {
    const double pct = 100.0 * c.held_fraction[0];
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f%%", pct);
    const bool same_part = std::all_of(shard_part.begin(), shard_part.end(),
                                       [&](int p) { return p == shard_part[0]; });
    if (shard_layers.size() <= 4 && same_part && shard_part[0] >= 0) {
      std::vector<std::string> names;
      for (size_t i = 0; i < shard_layers.size(); ++i)
        names.push_back(part_name(shard_layers[i], shard_part[i], n, tr));
      out = join_list(names, tr) + paren(buf, tr);
    } else {
      out = same_part && shard_part[0] >= 0
                ? strf(tr("part %d of every layer (%s)"), shard_part[0], buf)
                : strf(tr("%s of the gear"), buf);
    }
  } else {
    out = tr("no gear of its own");
  }
  if (c.any_on_host) out = strf(tr("%s, kept in the car (host memory)"), out.c_str());
  return out;
}

namespace {

// Whether `rank`'s receive of micro-batch `mb`'s input, posted at `posted`, has
// its data at t: its recv span (the first of that micro-batch from the stage
// before, begun once posted) has ended.
bool received_by(const RunData& d, int rank, int mb, int64_t posted, int64_t t) {
  const LaneData& lane = d.ranks[rank].lane(Lane::comm);
  const auto [first, last] =
      span_window(lane, static_cast<double>(posted), static_cast<double>(t) + 1);
  for (size_t i = first; i < last; ++i) {
    const Span& s = lane.spans[i];
    if (s.kind == SpanKind::recv && s.micro_batch == mb && s.peer == rank - 1 &&
        s.t_begin_ns >= posted)
      return s.t_end_ns <= t;
  }
  return false;
}

}  // namespace

std::vector<int> notes_held(const std::vector<Holding>& holdings, const RunData* d, int rank,
                            int64_t t) {
  std::vector<int> mbs;
  for (const Holding& h : holdings) {
    if (h.alpha < 1.0f || h.res->category != MemCategory::activations || h.name.micro_batch < 0)
      continue;
    if (d && rank >= 0 && rank < d->world && h.name.base == "pipeline.input" &&
        !received_by(*d, rank, h.name.micro_batch, h.res->t_alloc_ns, t))
      continue;  // a receive posted early: the buffer waits for its note, it holds none yet
    mbs.push_back(h.name.micro_batch);
  }
  return sorted_unique(mbs);
}

bool is_pipeline(const std::string& strategy) {
  return is_pipeline_strategy(strategy);
}

}  // namespace shardlab::gui
