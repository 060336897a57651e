// Incremental ingest of recorder contents into the UI's RunData (see run_data.h).
#include "app/gui/logic/run_data.h"

#include <algorithm>

#include "core/model/model.h"
#include "core/parallel/strategy.h"

namespace shardlab::gui {

void LaneData::insert(std::vector<Span> fresh) {
  if (fresh.empty()) return;
  auto by_begin = [](const Span& a, const Span& b) { return a.t_begin_ns < b.t_begin_ns; };
  std::stable_sort(fresh.begin(), fresh.end(), by_begin);
  const size_t old = spans.size();
  spans.insert(spans.end(), fresh.begin(), fresh.end());
  // Spans are recorded when they end, so a long span can arrive after shorter
  // ones that began later: merge instead of assuming append order.
  size_t from = old;
  if (old > 0 && spans[old].t_begin_ns < spans[old - 1].t_begin_ns) {
    const auto first_late =
        std::upper_bound(spans.begin(), spans.begin() + old, spans[old], by_begin);
    from = static_cast<size_t>(first_late - spans.begin());
    std::inplace_merge(first_late, spans.begin() + old, spans.end(), by_begin);
  }
  max_end.resize(spans.size());
  for (size_t i = from; i < spans.size(); ++i)
    max_end[i] = std::max(i ? max_end[i - 1] : INT64_MIN, spans[i].t_end_ns);
}

size_t RunData::span_count() const {
  size_t n = 0;
  for (const RankData& r : ranks) n += r.lanes[0].spans.size() + r.lanes[1].spans.size();
  return n;
}

int64_t RunData::t_live() const {
  int64_t t = -1;
  for (const RankData& r : ranks)
    if (r.t_last_span_end > 0) t = t < 0 ? r.t_last_span_end : std::min(t, r.t_last_span_end);
  return t < 0 ? t_end : t;
}

int RunData::step_at(int64_t t) const {
  int best = -1;
  for (size_t s = 0; s < step_begin.size(); ++s)
    if (step_begin[s] >= 0 && step_begin[s] <= t) best = static_cast<int>(s);
  return best;
}

void reset_run_data(RunData& d, const RunConfig& cfg, int world, int64_t t0_ns) {
  const uint64_t version = d.version + 1;
  d = RunData{};
  d.cfg = cfg;
  d.world = world;
  d.t0_ns = t0_ns;
  d.ranks.resize(world);
  d.version = version;
  try {
    const ModelLayout layout = make_layout(cfg);
    d.num_layers = layout.num_layers();
    for (const ParamInfo& p : layout.params()) d.param_layers.emplace_back(p.name, p.layer);
    for (const LayerInfo& l : layout.layers()) d.layer_kinds.push_back(l.kind);
  } catch (const std::exception&) {
    d.num_layers = 0;  // names still tell the layers; cards grow to fit them
  }
  // A comm lane per axis where more than one axis has groups.
  try {
    const Mesh mesh = run_mesh(cfg);
    if (mesh.world() == world)
      for (const MeshGroup& g : mesh.groups()) {
        if (static_cast<size_t>(g.id) >= d.group_ranks.size()) {
          d.group_ranks.resize(g.id + 1);
          d.group_axes.resize(g.id + 1, MeshAxis::dp);
        }
        d.group_ranks[static_cast<size_t>(g.id)] = g.ranks;
        d.group_axes[static_cast<size_t>(g.id)] = g.axis;
      }
    std::vector<MeshAxis> axes;
    for (const auto& [axis, size] : mesh.axes())
      if (size > 1) axes.push_back(axis);
    if (axes.size() >= 2 && mesh.world() == world) {
      d.comm_axes = axes;
      for (const MeshGroup& g : mesh.groups()) {
        if (static_cast<size_t>(g.id) >= d.group_axis.size()) d.group_axis.resize(g.id + 1, -1);
        const auto it = std::find(axes.begin(), axes.end(), g.axis);
        if (g.id > 0 && it != axes.end()) d.group_axis[g.id] = static_cast<int>(it - axes.begin());
      }
      for (RankData& r : d.ranks) r.axis_lanes.resize(axes.size());
      for (int r = 0; r < world; ++r) {
        std::string c;
        for (MeshAxis axis : axes)
          c += (c.empty() ? "" : " ") + std::string(to_string(axis)) +
               std::to_string(mesh.coord(r, axis));
        d.rank_coords.push_back(std::move(c));
      }
      d.mesh_row_ranks = world / mesh.size(axes.front());
    }
    // Where each rank's tp slice lies in every layer.
    if (const int tp = mesh.size(MeshAxis::tp); tp > 1 && mesh.world() == world) {
      const ModelSpec spec = make_layout(cfg).spec();
      for (int r = 0; r < world; ++r)
        d.rank_slices.emplace_back(ModelLayout(spec, TensorSlice{tp, mesh.coord(r, MeshAxis::tp)}));
    }
  } catch (const std::exception&) {
    d.comm_axes.clear();  // a config a run would refuse: one comm lane, the world's
    d.group_axis.clear();
    d.group_ranks.clear();
    d.group_axes.clear();
    d.rank_coords.clear();
    d.mesh_row_ranks = 0;
    d.rank_slices.clear();
  }
}

void append(RunData& d, int rank, std::vector<Span> spans, std::vector<AllocEvent> allocs) {
  if (rank < 0 || rank >= d.world || (spans.empty() && allocs.empty())) return;
  RankData& r = d.ranks[rank];
  std::vector<int64_t> times;
  times.reserve(spans.size() * 2 + allocs.size());
  std::array<std::vector<Span>, kNumLanes> by_lane;
  for (Span& s : spans) {
    s.rank = rank;
    d.t_end = std::max(d.t_end, s.t_end_ns);
    r.t_last_span_end = std::max(r.t_last_span_end, s.t_end_ns);
    if (d.t_first_span < 0 || s.t_begin_ns < d.t_first_span) d.t_first_span = s.t_begin_ns;
    d.kinds_seen[static_cast<int>(s.kind)] = true;
    times.push_back(s.t_begin_ns);
    times.push_back(s.t_end_ns);
    if (s.step >= 0) {
      if (static_cast<size_t>(s.step) >= d.step_begin.size()) d.step_begin.resize(s.step + 1, -1);
      int64_t& b = d.step_begin[s.step];
      if (b < 0 || s.t_begin_ns < b) b = s.t_begin_ns;
    }
    if (s.flow_id != 0 && (s.kind == SpanKind::send || s.kind == SpanKind::recv)) {
      Flow& f = d.pending_flows[s.flow_id];
      f.id = s.flow_id;
      if (s.kind == SpanKind::send) {
        f.from_rank = rank;
        f.t_send = s.t_begin_ns;
        f.bytes = s.bytes;
        f.micro_batch = s.micro_batch;
        f.layer = s.layer;
        f.step = s.step;
      } else {
        f.to_rank = rank;
        f.t_recv = s.t_end_ns;
      }
      if (f.from_rank >= 0 && f.to_rank >= 0) {
        d.flows.push_back(f);
        d.pending_flows.erase(s.flow_id);
      }
    }
    d.has_disk |= s.lane == Lane::disk;
    by_lane[std::min<int>(static_cast<int>(s.lane), kNumLanes - 1)].push_back(s);
  }
  if (!d.comm_axes.empty()) {
    std::vector<std::vector<Span>> by_axis(d.comm_axes.size());
    for (const Span& s : by_lane[static_cast<int>(Lane::comm)]) {
      const int a = s.group >= 0 && static_cast<size_t>(s.group) < d.group_axis.size()
                        ? d.group_axis[static_cast<size_t>(s.group)]
                        : -1;
      by_axis[static_cast<size_t>(std::max(a, 0))].push_back(s);
    }
    for (size_t a = 0; a < by_axis.size(); ++a) r.axis_lanes[a].insert(std::move(by_axis[a]));
  }
  for (int l = 0; l < kNumLanes; ++l) r.lanes[l].insert(std::move(by_lane[l]));

  if (!allocs.empty()) {
    for (const AllocEvent& e : allocs) {
      d.t_end = std::max(d.t_end, e.t_ns);
      times.push_back(e.t_ns);
      d.has_host_memory |= e.pool == Pool::host;
    }
    r.allocs.insert(r.allocs.end(), std::make_move_iterator(allocs.begin()),
                    std::make_move_iterator(allocs.end()));
    // Recomputed whole: a few thousand events per run, and it keeps pairing simple.
    r.residency = residency(r.allocs);
    r.device_series = category_series(r.allocs, Pool::device);
    r.host_series = category_series(r.allocs, Pool::host);
    r.disk_series = category_series(r.allocs, Pool::disk);
  }

  std::sort(times.begin(), times.end());
  const size_t old = d.event_times.size();
  d.event_times.insert(d.event_times.end(), times.begin(), times.end());
  std::inplace_merge(d.event_times.begin(), d.event_times.begin() + old, d.event_times.end());
  d.event_times.erase(std::unique(d.event_times.begin(), d.event_times.end()), d.event_times.end());
  ++d.version;
}

bool ingest(RunData& d, const std::vector<std::shared_ptr<Recorder>>& recorders) {
  bool changed = false;
  const int n = std::min<int>(d.world, static_cast<int>(recorders.size()));
  std::vector<Span> spans;
  std::vector<AllocEvent> allocs;
  for (int rank = 0; rank < n; ++rank) {
    RankData& r = d.ranks[rank];
    spans.clear();
    allocs.clear();
    recorders[rank]->spans_since(r.spans_read, spans);
    recorders[rank]->allocs_since(r.allocs_read, allocs);
    if (spans.empty() && allocs.empty()) continue;
    r.spans_read += spans.size();
    r.allocs_read += allocs.size();
    for (Span& s : spans) {
      s.t_begin_ns -= d.t0_ns;
      s.t_end_ns -= d.t0_ns;
    }
    for (AllocEvent& e : allocs) e.t_ns -= d.t0_ns;
    append(d, rank, std::move(spans), std::move(allocs));
    spans = {};
    allocs = {};
    changed = true;
  }
  return changed;
}

void ingest_result(RunData& d, const RunResult& r) {
  reset_run_data(d, r.cfg, r.cfg.world, r.t0_ns);
  ingest(d, r.recorders);
}

std::vector<int> group_members(const RunData& d, int group) {
  if (group > 0 && static_cast<size_t>(group) < d.group_ranks.size() &&
      !d.group_ranks[static_cast<size_t>(group)].empty())
    return d.group_ranks[static_cast<size_t>(group)];
  std::vector<int> all(static_cast<size_t>(std::max(0, d.world)));
  for (int r = 0; r < d.world; ++r) all[static_cast<size_t>(r)] = r;
  return all;
}

const char* group_axis_name(const RunData& d, int group) {
  if (d.comm_axes.empty() || group <= 0 || static_cast<size_t>(group) >= d.group_axes.size())
    return nullptr;
  return to_string(d.group_axes[static_cast<size_t>(group)]);
}

const LaneData& display_lane(const RunData& d, int rank, int l) {
  const RankData& r = d.ranks[static_cast<size_t>(rank)];
  if (l <= 0) return r.lane(Lane::compute);
  if (is_disk_lane(d, l)) return r.lane(Lane::disk);
  if (d.comm_axes.empty() || static_cast<size_t>(l - 1) >= r.axis_lanes.size())
    return r.lane(Lane::comm);
  return r.axis_lanes[static_cast<size_t>(l - 1)];
}

int64_t comm_index_of(const RankData& r, const Span& s) {
  const std::vector<Span>& all = r.lane(Lane::comm).spans;
  auto it = std::lower_bound(all.begin(), all.end(), s.t_begin_ns,
                             [](const Span& a, int64_t t) { return a.t_begin_ns < t; });
  for (; it != all.end() && it->t_begin_ns == s.t_begin_ns; ++it)
    if (it->t_end_ns == s.t_end_ns && it->kind == s.kind && it->group == s.group &&
        it->bytes == s.bytes && it->peer == s.peer)
      return it - all.begin();
  return -1;
}

}  // namespace shardlab::gui
