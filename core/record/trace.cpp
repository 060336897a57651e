// Chrome Trace Event export: ranks become processes, lanes become threads, allocations
// become per-category memory counters, and matched send/recv spans become flow arrows.
#include "core/record/trace.h"

#include "core/record/span_label.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <stdexcept>

#include "core/io/atomic_file.h"

namespace shardlab {
namespace {

using nlohmann::json;

// Perfetto treats pid 0 as the kernel's swapper and has merged tid 0 into tid 1, so ids
// start at 1; tids are unique across processes because Linux tids are, and the importers
// assume it. Names and sort indices carry the rank, so nobody needs to decode these.
int pid_of(int rank) {
  return rank + 1;
}
int tid_of(int rank, Lane lane) {
  return pid_of(rank) * 10 + static_cast<int>(lane);
}

double to_us(int64_t ns) {
  return static_cast<double>(ns) / 1000.0;
}

// Flow events bind to the slice enclosing their ts on their thread. A point strictly
// inside the slice survives the µs -> ns rounding of importers; 1 µs in from the edge
// keeps the arrow visually at the start of the send and the end of the recv.
double inside_offset_us(double dur_us) {
  return std::min(dur_us / 2, 1.0);
}

// The app's label ("F3 L2", "AG L0", "send F3 →r1"): a trace reads like the
// timeline it was exported from; the kind, layer and micro-batch are in args.
std::string span_name(Span s, int rank) {
  s.rank = rank;  // the direction of a message (F3 up, B3 down) is read against it
  return span_title(s, true);
}

json metadata_event(const char* name, int pid, const json& args, int tid = -1) {
  json e = {{"ph", "M"}, {"name", name}, {"pid", pid}, {"args", args}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

json span_event(const Span& s, int rank, int64_t t0_ns) {
  json args = {{"kind", to_string(s.kind)}};
  if (s.layer >= 0) args["layer"] = s.layer;
  if (s.micro_batch >= 0) args["micro_batch"] = s.micro_batch;
  if (s.step >= 0) args["step"] = s.step;
  if (s.bytes > 0) args["bytes"] = s.bytes;
  if (s.peer >= 0) args["peer"] = s.peer;
  if (s.flow_id != 0) args["flow_id"] = s.flow_id;
  // Thread CPU time (what the span costs on a core of its own) and the comm op
  // its issue and wait marks (in the metadata) name: what 'shardlab project' reads.
  if (s.cpu_begin_ns >= 0) {
    args["cpu_begin_ns"] = s.cpu_begin_ns;
    args["cpu_end_ns"] = s.cpu_end_ns;
  }
  if (s.op != 0) args["op"] = s.op;
  if (s.staleness >= 0) args["staleness"] = s.staleness;  // ps: updates behind its step
  if (s.made_ahead) args["made_ahead"] = true;  // the data loader made this batch beside the step
  if (s.group != 0) args["group"] = s.group;    // a mesh axis's communicator (0: the world's)
  return {{"ph", "X"},
          {"name", span_name(s, rank)},
          {"cat", to_string(s.kind)},
          {"pid", pid_of(rank)},
          {"tid", tid_of(rank, s.lane)},
          {"ts", to_us(s.t_begin_ns - t0_ns)},
          {"dur", to_us(std::max<int64_t>(0, s.t_end_ns - s.t_begin_ns))},
          {"args", std::move(args)}};
}

// One counter sample per distinct timestamp, holding all six categories, so Perfetto
// draws one track per category and the tracks stack into the pool's total.
void add_memory_counters(json& events, const std::vector<AllocEvent>& allocs, int rank,
                         int64_t t0_ns) {
  std::vector<const AllocEvent*> sorted;
  for (const auto& a : allocs) sorted.push_back(&a);
  // Allocations arrive from several threads; stable keeps same-time events in record order.
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const AllocEvent* a, const AllocEvent* b) { return a->t_ns < b->t_ns; });

  for (Pool pool : {Pool::device, Pool::host, Pool::disk}) {
    std::vector<const AllocEvent*> mine;
    for (const AllocEvent* a : sorted)
      if (a->pool == pool) mine.push_back(a);
    if (mine.empty()) continue;

    const std::string name = std::string("memory (") + to_string(pool) + ")";
    std::array<int64_t, kNumMemCategories> bytes{};
    auto sample = [&](double ts) {
      json args = json::object();
      for (int c = 0; c < kNumMemCategories; ++c)
        args[to_string(static_cast<MemCategory>(c))] = bytes[c];
      events.push_back(
          {{"ph", "C"}, {"name", name}, {"pid", pid_of(rank)}, {"ts", ts}, {"args", args}});
    };
    // Start the counter at zero so the first allocation shows as a step up.
    if (mine.front()->t_ns > t0_ns) sample(0.0);
    for (size_t i = 0; i < mine.size(); ++i) {
      bytes[static_cast<int>(mine[i]->category)] += mine[i]->delta_bytes;
      if (i + 1 < mine.size() && mine[i + 1]->t_ns == mine[i]->t_ns) continue;
      sample(to_us(mine[i]->t_ns - t0_ns));
    }
  }
}

// Perfetto keys v1 flows by (id, cat, name), so both ends share all three.
constexpr const char* kFlowCat = "p2p";
constexpr const char* kFlowName = "send\u2192recv";

void add_flows(json& events, const std::vector<Recorder::Snapshot>& ranks, int64_t t0_ns) {
  struct End {
    int rank;
    const Span* span;
  };
  // First span per id wins, so every arrow has exactly one tail and one head.
  std::map<uint64_t, End> sends, recvs;
  for (size_t r = 0; r < ranks.size(); ++r)
    for (const Span& s : ranks[r].spans) {
      if (s.flow_id == 0) continue;
      if (s.kind == SpanKind::send) sends.emplace(s.flow_id, End{static_cast<int>(r), &s});
      if (s.kind == SpanKind::recv) recvs.emplace(s.flow_id, End{static_cast<int>(r), &s});
    }
  for (const auto& [id, send] : sends) {
    auto recv = recvs.find(id);
    if (recv == recvs.end()) continue;
    const Span& s = *send.span;
    const Span& r = *recv->second.span;
    const double s_begin = to_us(s.t_begin_ns - t0_ns);
    const double s_dur = to_us(std::max<int64_t>(0, s.t_end_ns - s.t_begin_ns));
    const double r_end = to_us(r.t_end_ns - t0_ns);
    const double r_dur = to_us(std::max<int64_t>(0, r.t_end_ns - r.t_begin_ns));
    events.push_back({{"ph", "s"},
                      {"id", id},
                      {"cat", kFlowCat},
                      {"name", kFlowName},
                      {"pid", pid_of(send.rank)},
                      {"tid", tid_of(send.rank, s.lane)},
                      {"ts", s_begin + inside_offset_us(s_dur)}});
    // "bp":"e" binds the end to the enclosing recv slice; without it the arrow would
    // attach to whatever slice starts next on that thread.
    events.push_back({{"ph", "f"},
                      {"bp", "e"},
                      {"id", id},
                      {"cat", kFlowCat},
                      {"name", kFlowName},
                      {"pid", pid_of(recv->second.rank)},
                      {"tid", tid_of(recv->second.rank, r.lane)},
                      {"ts", r_end - inside_offset_us(r_dur)}});
  }
}

}  // namespace

json trace_to_json(const std::vector<Recorder::Snapshot>& ranks, int64_t t0_ns,
                   const json& metadata, int only_rank) {
  json events = json::array();
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int rank = static_cast<int>(i);
    if (only_rank >= 0 && rank != only_rank) continue;
    const int pid = pid_of(rank);
    events.push_back(
        metadata_event("process_name", pid, {{"name", "rank " + std::to_string(rank)}}));
    events.push_back(metadata_event("process_sort_index", pid, {{"sort_index", rank}}));
    // The disk lane only where the rank has offload transfers.
    const bool disk = std::any_of(ranks[i].spans.begin(), ranks[i].spans.end(),
                                  [](const Span& s) { return s.lane == Lane::disk; });
    for (Lane lane : {Lane::compute, Lane::comm, Lane::disk}) {
      if (lane == Lane::disk && !disk) continue;
      const int tid = tid_of(rank, lane);
      const char* thread = lane == Lane::compute ? "compute"
                           : lane == Lane::comm  ? "communication"
                                                 : "disk";
      events.push_back(metadata_event("thread_name", pid, {{"name", thread}}, tid));
      events.push_back(
          metadata_event("thread_sort_index", pid, {{"sort_index", static_cast<int>(lane)}}, tid));
    }
    for (const Span& s : ranks[i].spans) events.push_back(span_event(s, rank, t0_ns));
    add_memory_counters(events, ranks[i].allocs, rank, t0_ns);
  }
  add_flows(events, ranks, t0_ns);
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"metadata", metadata}};
}

void write_trace(const std::string& path, const std::vector<Recorder::Snapshot>& ranks,
                 int64_t t0_ns, const json& metadata, int only_rank) {
  write_trace_json(path, trace_to_json(ranks, t0_ns, metadata, only_rank));
}

namespace {

// ", e.g. 't.rank1.json'" when the names given follow 'shardlab run --trace's
// T.rank<R>.json: the file a missing rank would have written.
std::string sibling_hint(const std::vector<std::string>& names, int rank) {
  for (const std::string& n : names) {
    const size_t at = n.rfind(".rank");
    if (at == std::string::npos) continue;
    size_t end = at + 5;
    while (end < n.size() && n[end] >= '0' && n[end] <= '9') ++end;
    if (end == at + 5) continue;
    return ", e.g. '" + n.substr(0, at + 5) + std::to_string(rank) + n.substr(end) + "'";
  }
  return "";
}

}  // namespace

json merge_traces(const std::vector<json>& traces, const std::vector<std::string>& names) {
  json events = json::array();
  json ranks = json::array();
  std::set<int> pids;
  // Arrow ends by flow id: a send's span and a recv's span, in any file.
  struct End {
    json span;
  };
  std::map<uint64_t, End> sends, recvs;
  int base = 0;        // the file holding rank 0 gives the merged trace its run settings and losses
  int64_t world = -1;  // from the files' metadata; -1 until one says
  std::string world_from;
  for (size_t f = 0; f < traces.size(); ++f) {
    const std::string name = f < names.size() ? names[f] : "trace " + std::to_string(f);
    const json& t = traces[f];
    if (!t.is_object() || !t.contains("traceEvents") || !t["traceEvents"].is_array())
      throw std::runtime_error("'" + name + "' is not a Shardlab trace (no traceEvents array)");
    std::set<int> mine;
    for (const json& e : t["traceEvents"]) {
      if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string() || !e.contains("pid") ||
          !e["pid"].is_number_integer())
        throw std::runtime_error("'" + name +
                                 "' is not a Shardlab trace (an event without ph/pid)");
      const std::string ph = e["ph"].get<std::string>();
      if (ph == "s" || ph == "f") continue;  // rebuilt below, across files
      mine.insert(e["pid"].get<int>());
      if (ph == "X" && e.contains("args") && e["args"].is_object() &&
          e["args"].contains("flow_id") && e["args"]["flow_id"].is_number_unsigned()) {
        const uint64_t id = e["args"]["flow_id"].get<uint64_t>();
        const std::string kind = e["args"].value("kind", "");
        if (kind == "send") sends.emplace(id, End{e});
        if (kind == "recv") recvs.emplace(id, End{e});
      }
      events.push_back(e);
    }
    if (mine.count(pid_of(0))) base = static_cast<int>(f);
    for (int pid : mine) {
      if (pid < pid_of(0))
        throw std::runtime_error("'" + name + "' holds pid " + std::to_string(pid) +
                                 ", which is no rank's (not a Shardlab trace?)");
      if (!pids.insert(pid).second)
        throw std::runtime_error("'" + name + "' holds rank " + std::to_string(pid - 1) +
                                 ", which an earlier file holds too (merge each rank once)");
    }
    const json meta = t.value("metadata", json::object());
    if (meta.is_object() && meta.contains("world") && meta["world"].is_number_integer()) {
      const int64_t w = meta["world"].get<int64_t>();
      if (world < 0) {
        world = w;
        world_from = name;
      } else if (w != world) {
        throw std::runtime_error("'" + name + "' is of a run of world " + std::to_string(w) +
                                 ", '" + world_from + "' of world " + std::to_string(world) +
                                 " (valid: the traces of one run)");
      }
    }
    ranks.push_back(meta);
  }
  // Every rank of the run, or the merge would show a run that never was (and
  // say nothing of it): the world from the files' metadata, else up to the
  // highest rank given.
  if (world < 0) world = pids.empty() ? 0 : *pids.rbegin();
  for (int pid : pids)
    if (pid - 1 >= world)
      throw std::runtime_error("rank " + std::to_string(pid - 1) +
                               " is beyond the run's world of " + std::to_string(world) +
                               " (valid: the traces of one run)");
  for (int64_t r = 0; r < world; ++r)
    if (!pids.count(pid_of(static_cast<int>(r))))
      throw std::runtime_error("no trace holds rank " + std::to_string(r) + " of the run's " +
                               std::to_string(world) + " (valid: every rank's trace" +
                               sibling_hint(names, static_cast<int>(r)) + ")");
  for (const auto& [id, send] : sends) {
    auto recv = recvs.find(id);
    if (recv == recvs.end()) continue;
    const json& s = send.span;
    const json& r = recv->second.span;
    const double s_dur = s.value("dur", 0.0), r_dur = r.value("dur", 0.0);
    events.push_back({{"ph", "s"},
                      {"id", id},
                      {"cat", kFlowCat},
                      {"name", kFlowName},
                      {"pid", s["pid"]},
                      {"tid", s["tid"]},
                      {"ts", s.value("ts", 0.0) + inside_offset_us(s_dur)}});
    events.push_back({{"ph", "f"},
                      {"bp", "e"},
                      {"id", id},
                      {"cat", kFlowCat},
                      {"name", kFlowName},
                      {"pid", r["pid"]},
                      {"tid", r["tid"]},
                      {"ts", r.value("ts", 0.0) + r_dur - inside_offset_us(r_dur)}});
  }
  json metadata = ranks.empty() ? json::object() : ranks[static_cast<size_t>(base)];
  if (metadata.is_object()) {
    metadata.erase("rank");
    metadata["ranks"] = ranks;
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"metadata", metadata}};
}

void write_trace_json(const std::string& path, const json& trace) {
  // Replace rather than throw on bad UTF-8: a stray byte in a buffer name should not
  // cost the user the whole trace.
  const std::string text = trace.dump(-1, ' ', false, json::error_handler_t::replace);
  AtomicFile out(path);
  if (!out.write(text.data(), text.size()) || !out.commit())
    throw std::runtime_error("cannot write trace to '" + path + "': " + out.reason());
}

}  // namespace shardlab
