// The cluster view's words: names of layers and parts (plain, or the camping
// trip's gear), what each rank is doing now, what arrives and what a card
// carries, in English and Chinese (see cluster_logic.h).
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

// One collective on one layer, in one communicator group (a mesh's tp groups
// all-reduce at once, each among its own ranks).
struct GroupKey {
  SpanKind kind;
  int layer;
  int group = 0;
  bool operator<(const GroupKey& o) const {
    return std::tie(kind, layer, group) < std::tie(o.kind, o.layer, o.group);
  }
};

std::map<GroupKey, std::vector<const Piece*>> group_pieces(const std::vector<Piece>& pieces) {
  std::map<GroupKey, std::vector<const Piece*>> g;
  for (const Piece& p : pieces)
    if (p.kind != SpanKind::send) g[{p.kind, p.layer, p.group}].push_back(&p);
  return g;
}

// The collective's name, and on a mesh its axis: "all-reduce", "all-reduce in a tp group".
std::string collective_label(const RunData& d, SpanKind k, int group, const Tr& tr) {
  const char* axis = group_axis_name(d, group);
  return axis ? strf(tr("%s in a %s group"), kind_label(k, tr), axis) : kind_label(k, tr);
}

std::string message_sentence(const Piece& p, const Naming& n, const Tr& tr) {
  const std::string lbl = message_label(p);
  const std::string from = who_one(n, p.from, tr), to = who_one(n, p.to, tr);
  const char* msg = message_word(n, tr);
  const bool fwd = p.to > p.from;
  if (p.exported)  // after the last step: a part of the final weights, gathered on rank 0
    return strf(tr("%s sends %s its part of the final weights (the export)"), from.c_str(),
                to.c_str());
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
                           const std::string& label_text, const Naming& n, const Tr& tr) {
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
  const char* label = label_text.c_str();
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
  const bool fb =
      s.kind == SpanKind::forward || s.kind == SpanKind::backward || s.kind == SpanKind::weight;
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
    parts.push_back(group_sentence(key.kind, key.layer, ps,
                                   static_cast<int>(group_members(d, key.group).size()),
                                   collective_label(d, key.kind, key.group, tr), n, tr));
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
    if (p.from == rank) out_groups[{p.kind, p.layer, p.group}].push_back(&p);
    if (p.to == rank) in_groups[{p.kind, p.layer, p.group}].push_back(&p);
  }
  for (const auto& [key, ps] : out_groups) {
    std::vector<int> to;
    for (const Piece* p : ps) to.push_back(p->to);
    const int G = static_cast<int>(group_members(d, key.group).size());
    const int part = brevity >= 2 ? -1 : piece_part(*ps[0], G);
    const std::string what = moves_data(key.kind) ? data_name(key.kind, key.layer, tr)
                             : key.layer >= 0     ? part_name(key.layer, part, n, tr)
                                                  : std::string(tr("data"));
    // "all": every other rank of its group, where the group is more than a pair.
    const bool everyone = G > 3 && static_cast<int>(sorted_unique(to).size()) == G - 1;
    if (brief)
      parts.push_back(std::string(kind_short(key.kind, tr)) + " " + what + " \xE2\x86\x92 " +
                      (everyone ? std::string(tr("all")) : join_numbers(sorted_unique(to), tr)));
    else
      parts.push_back(strf(tr("sending %s to %s (%s)"), what.c_str(),
                           everyone ? (hikers(n) ? tr("every other hiker") : tr("every other rank"))
                                    : rank_list(to, n, tr).c_str(),
                           collective_label(d, key.kind, key.group, tr).c_str()));
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
                           collective_label(d, key.kind, key.group, tr).c_str()));
    else
      parts.push_back(strf(tr("receiving %s from %s (%s)"), what.c_str(),
                           rank_list(from, n, tr).c_str(),
                           collective_label(d, key.kind, key.group, tr).c_str()));
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

}  // namespace shardlab::gui
