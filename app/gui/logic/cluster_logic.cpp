// The cluster view's model: what each card holds at a time, the pieces in
// flight between ranks, and the motion they travel with (see cluster_logic.h).
// Its words are in cluster_words.cpp, its geometry in cluster_layout.cpp and
// camp_layout.cpp.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <tuple>

#include "app/gui/logic/cluster_logic.h"
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
    if (r.t_alloc_ns > t || r.pool == Pool::disk) continue;      // a card holds memory, not files
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

CardContents card_contents(const std::vector<Holding>& holdings, int num_layers,
                           const SliceMap* slices) {
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
    // A tensor-parallel slice: the buffer's values where they lie in the whole
    // layer (a flat group's shard of the slice's layer, or one parameter),
    // and its share of what it stands for.
    if (slices && !slices->empty() && n.layer == n.layer_last) {
      double share = 0;
      const bool flat = n.base.find(".flat") != std::string::npos;  // i18n: not shown
      const LayerParts parts = flat ? slices->layer_part(n.layer, p.begin, p.end)
                                    : slices->param_part(n.base, n.layer, &share);
      if (!parts.empty()) {
        for (const auto& [b, e] : parts) {
          SlotPiece q = p;
          q.begin = b;
          q.end = e;
          c.slots[col][n.layer].push_back(q);
          if (flat) share += e - b;
        }
        double& covered = cover[col][n.layer][n.base];
        if (!is_temporary(n.kind) && h.alpha >= 1.0f) covered = std::min(1.0, covered + share);
        continue;
      }
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
      base.group = s->group;
      // A collective's ranks: its group's (a mesh axis's), by coordinate; a
      // piece's part of the layer is the receiver's or sender's place in it.
      const std::vector<int> members = group_members(d, s->group);
      const int G = static_cast<int>(members.size());
      auto place = [&](int rank) {
        const auto it = std::find(members.begin(), members.end(), rank);
        return it == members.end() ? 0 : static_cast<int>(it - members.begin());
      };
      const double w = 1.0 / std::max(1, G);
      const int me = place(r);
      const int first = members.empty() ? 0 : members.front();
      // dp's copies: one span on the receiving device, peer = where it comes from.
      const bool pulled = s->peer >= 0 && s->peer < W && s->peer != r;
      auto from_peer = [&](int column) {
        Piece q = base;
        q.from = s->peer;
        q.to = r;
        q.column = column;
        out.push_back(q);
      };
      // To every other rank of the group; frac_for gets the receiver's place.
      auto to_all = [&](int column, auto frac_for) {
        for (int k = 0; k < G; ++k) {
          const int j = members[static_cast<size_t>(k)];
          if (j == r || j < 0 || j >= W) continue;
          Piece q = base;
          q.to = j;
          q.column = column;
          std::tie(q.frac_begin, q.frac_end) = frac_for(k);
          out.push_back(q);
        }
      };
      switch (s->kind) {
        case SpanKind::all_gather:
          to_all(0, [&](int) { return std::pair{me * w, (me + 1) * w}; });
          break;
        case SpanKind::reduce_scatter:
          to_all(1, [&](int k) { return std::pair{k * w, (k + 1) * w}; });
          break;
        case SpanKind::all_reduce:
          // First half: shard k of the gradient goes to the group's k-th rank
          // to be summed; second half: the summed shard comes back to everyone.
          base.progress = p < 0.5f ? 2 * p : 2 * p - 1;
          if (p < 0.5f)
            to_all(1, [&](int k) { return std::pair{k * w, (k + 1) * w}; });
          else
            to_all(1, [&](int) { return std::pair{me * w, (me + 1) * w}; });
          break;
        case SpanKind::broadcast:
          if (pulled)
            from_peer(0);
          else if (r == (s->peer >= 0 ? s->peer : first))
            to_all(0, [&](int) { return std::pair{0.0, 1.0}; });
          break;
        case SpanKind::reduce: {
          const int root = s->peer >= 0 ? s->peer : first;
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
          else if (r == (s->peer >= 0 ? s->peer : first))
            to_all(-1, [&](int) { return std::pair{0.0, 1.0}; });
          break;
        case SpanKind::gather: {  // every rank's outputs go to the root (dp)
          const int root = s->peer >= 0 ? s->peer : first;
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
    q.exported = f.step < 0;
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
  std::sort(mbs.begin(), mbs.end());
  mbs.erase(std::unique(mbs.begin(), mbs.end()), mbs.end());
  return mbs;
}

bool is_pipeline(const std::string& strategy) {
  return is_pipeline_strategy(strategy);
}

}  // namespace shardlab::gui
