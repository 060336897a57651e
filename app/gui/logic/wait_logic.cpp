// Waiting versus moving bytes in comm spans, and a step's time use per rank
// (see wait_logic.h).
#include "app/gui/logic/wait_logic.h"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "app/gui/logic/timeline_logic.h"
#include "core/parallel/strategy.h"
#include "core/predict/pipeline_analysis.h"

namespace shardlab::gui {

namespace {

// Sorted, merged.
std::vector<Interval> merged(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (i.second <= i.first) continue;
    if (!out.empty() && i.first <= out.back().second)
      out.back().second = std::max(out.back().second, i.second);
    else
      out.push_back(i);
  }
  return out;
}

int64_t length(const std::vector<Interval>& v) {
  int64_t n = 0;
  for (const Interval& i : v) n += i.second - i.first;
  return n;
}

// Both sorted and merged.
int64_t overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t n = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) n += hi - lo;
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return n;
}

// [begin, end) minus the sorted, merged `cover`.
std::vector<Interval> gaps(int64_t begin, int64_t end, const std::vector<Interval>& cover) {
  std::vector<Interval> out;
  int64_t t = begin;
  for (const Interval& c : cover) {
    if (c.second <= t) continue;
    if (c.first >= end) break;
    if (c.first > t) out.push_back({t, c.first});
    t = std::max(t, c.second);
  }
  if (t < end) out.push_back({t, end});
  return out;
}

struct Found {
  const Span* span = nullptr;
  int rank = -1;
};

}  // namespace

const CommWait* RankUse::wait_of(uint32_t index) const {
  const auto it = std::lower_bound(waits.begin(), waits.end(), index,
                                   [](const CommWait& w, uint32_t i) { return w.span < i; });
  return it != waits.end() && it->span == index ? &*it : nullptr;
}

const char* idle_name(const std::string& strategy, const Tr& tr) {
  return is_pipeline_strategy(strategy) ? tr("bubble") : tr("waiting");
}

std::vector<Interval> merged_idle(const std::vector<WindowUse>& uses, int rank) {
  std::vector<Interval> all;
  for (const WindowUse& u : uses)
    if (rank >= 0 && rank < static_cast<int>(u.ranks.size()))
      all.insert(all.end(), u.ranks[rank].idle_intervals.begin(),
                 u.ranks[rank].idle_intervals.end());
  std::sort(all.begin(), all.end());
  std::vector<Interval> out;
  for (const Interval& iv : all) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second)
      out.back().second = std::max(out.back().second, iv.second);
    else
      out.push_back(iv);
  }
  return out;
}

namespace {

// Where to look for the spans of `step`: from its first span to the first span
// of the step after next (ranks drift apart a little), or the run's end.
std::pair<int64_t, int64_t> search_window(const RunData& d, int step) {
  if (step < 0 || static_cast<size_t>(step) >= d.step_begin.size() || d.step_begin[step] < 0)
    return {0, 0};
  const int64_t from = d.step_begin[step];
  int64_t to = d.t_end;
  for (size_t s = step + 2; s < d.step_begin.size(); ++s)
    if (d.step_begin[s] >= 0) {
      to = d.step_begin[s];
      break;
    }
  return {from, std::max(from, to)};
}

}  // namespace

std::pair<int64_t, int64_t> step_window(const RunData& d, int step) {
  const auto [from, to] = search_window(d, step);
  if (to <= from) return {0, 0};
  int64_t compute_lo = INT64_MAX, any_lo = INT64_MAX, hi = INT64_MIN;
  for (const RankData& r : d.ranks)
    for (int l = 0; l < 2; ++l) {
      const LaneData& lane = r.lanes[l];
      const auto [first, last] =
          span_window(lane, static_cast<double>(from), static_cast<double>(to));
      for (size_t i = first; i < last; ++i) {
        const Span& s = lane.spans[i];
        if (s.step != step) continue;
        any_lo = std::min(any_lo, s.t_begin_ns);
        if (l == static_cast<int>(Lane::compute)) compute_lo = std::min(compute_lo, s.t_begin_ns);
        hi = std::max(hi, s.t_end_ns);
      }
    }
  const int64_t lo = compute_lo != INT64_MAX ? compute_lo : any_lo;
  if (lo >= hi) return {0, 0};
  return {lo, hi};
}

WindowUse step_use(const RunData& d, int step) {
  const auto [lo, hi] = step_window(d, step);
  return window_use(d, lo, hi);
}

WindowUse window_use(const RunData& d, int64_t begin, int64_t end) {
  WindowUse out;
  out.begin = begin;
  out.end = std::max(begin, end);
  const int W = d.world;
  out.ranks.resize(W);
  if (end <= begin) return out;

  // The comm spans meeting the window, per rank, and the steps they belong to.
  std::vector<std::pair<size_t, size_t>> in_view(W);
  int step_lo = INT32_MAX, step_hi = -1;
  for (int r = 0; r < W; ++r) {
    const LaneData& lane = d.ranks[r].lane(Lane::comm);
    in_view[r] = span_window(lane, static_cast<double>(begin), static_cast<double>(end));
    for (size_t i = in_view[r].first; i < in_view[r].second; ++i) {
      const int s = lane.spans[i].step;
      if (s >= 0) step_lo = std::min(step_lo, s), step_hi = std::max(step_hi, s);
    }
  }

  // Partners are looked for in whole steps around those: a collective's rank
  // in its step counts from the step's start, and a sender may have run ahead
  // into the step before.
  int64_t ext_lo = begin, ext_hi = end;
  if (step_hi >= 0) {
    for (int s = std::max(0, step_lo - 1); s <= step_hi; ++s) {
      const auto [f, t] = search_window(d, s);
      if (t > f) ext_lo = std::min(ext_lo, f), ext_hi = std::max(ext_hi, t);
    }
  }
  std::unordered_map<uint64_t, Found> sends, recvs;
  // Collective entries per (group, step, kind): who entered the n-th one when.
  // The group (Span::group) keeps two mesh groups' collectives at once apart.
  struct Key {
    int group;
    int step;
    SpanKind kind;
    bool operator==(const Key& o) const {
      return group == o.group && step == o.step && kind == o.kind;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<int64_t>()((static_cast<int64_t>(k.group) * (int64_t{1} << 24) + k.step) *
                                      kNumSpanKinds +
                                  static_cast<int>(k.kind));
    }
  };
  std::vector<std::unordered_map<Key, std::vector<const Span*>, KeyHash>> entries(W);
  std::vector<std::unordered_map<uint32_t, size_t>> nth(W);  // comm span index -> n
  for (int r = 0; r < W; ++r) {
    const LaneData& lane = d.ranks[r].lane(Lane::comm);
    const auto [first, last] =
        span_window(lane, static_cast<double>(ext_lo), static_cast<double>(ext_hi));
    for (size_t i = first; i < last; ++i) {
      const Span& s = lane.spans[i];
      if (s.flow_id != 0 && s.kind == SpanKind::send) sends[s.flow_id] = {&s, r};
      if (s.flow_id != 0 && s.kind == SpanKind::recv) recvs[s.flow_id] = {&s, r};
      if (is_collective(s.kind) && s.step >= 0) {
        // Counting from the step's start needs the whole step in the scan.
        if (d.step_begin[s.step] < ext_lo) continue;
        auto& list = entries[r][Key{s.group, s.step, s.kind}];
        nth[r][static_cast<uint32_t>(i)] = list.size();
        list.push_back(&s);
      }
    }
  }
  // The last entry into the n-th collective of (step, kind), and who made it;
  // none when a rank that runs this kind in the step has not recorded it yet.
  auto last_entry = [&](const Key& key, size_t n) -> Found {
    Found f;
    for (int r = 0; r < W; ++r) {
      const auto it = entries[r].find(key);
      if (it == entries[r].end() || it->second.empty()) continue;
      if (n >= it->second.size()) return {};
      const Span* e = it->second[n];
      if (!f.span || e->t_begin_ns > f.span->t_begin_ns) f = {e, r};
    }
    return f;
  };

  for (int r = 0; r < W; ++r) {
    RankUse& u = out.ranks[r];
    const LaneData& cl = d.ranks[r].lane(Lane::compute);
    const LaneData& ml = d.ranks[r].lane(Lane::comm);
    auto clip = [&](int64_t a, int64_t b) {
      return Interval{std::max(a, begin), std::min(b, end)};
    };
    std::vector<Interval> busy, moving;
    {
      const auto [first, last] =
          span_window(cl, static_cast<double>(begin), static_cast<double>(end));
      for (size_t i = first; i < last; ++i)
        if (cl.spans[i].step >= 0)  // set-up and tear-down are not training
          busy.push_back(clip(cl.spans[i].t_begin_ns, cl.spans[i].t_end_ns));
    }
    for (size_t i = in_view[r].first; i < in_view[r].second; ++i) {
      const Span& s = ml.spans[i];
      if (s.t_end_ns <= begin || s.step < 0) continue;  // earlier; or not training
      Found partner;
      if (s.kind == SpanKind::recv && s.flow_id) {
        const auto it = sends.find(s.flow_id);
        if (it != sends.end()) partner = it->second;
      } else if (s.kind == SpanKind::send && s.flow_id) {
        const auto it = recvs.find(s.flow_id);
        if (it != recvs.end()) partner = it->second;
      } else if (is_collective(s.kind)) {
        const auto it = nth[r].find(static_cast<uint32_t>(i));
        if (it != nth[r].end()) partner = last_entry(Key{s.group, s.step, s.kind}, it->second);
      }
      int64_t ready = s.t_begin_ns;
      if (partner.span && partner.rank != r)
        ready = std::clamp(partner.span->t_begin_ns, s.t_begin_ns, s.t_end_ns);
      if (ready > s.t_begin_ns) u.waits.push_back({static_cast<uint32_t>(i), ready, partner.rank});
      moving.push_back(clip(ready, s.t_end_ns));
    }
    busy = merged(std::move(busy));
    moving = merged(std::move(moving));
    u.computing = length(busy);
    u.hidden = overlap(busy, moving);
    u.exposed = length(moving) - u.hidden;
    std::vector<Interval> both = busy;
    both.insert(both.end(), moving.begin(), moving.end());
    u.idle_intervals = gaps(begin, end, merged(std::move(both)));
    u.idle = length(u.idle_intervals);
  }
  return out;
}

}  // namespace shardlab::gui
