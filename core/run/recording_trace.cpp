// A Chrome trace read back as a recording (recording.h): spans from its slices,
// memory from its counters, the rest from the metadata's "run", then checked as
// a recording is.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "core/run/recording.h"
#include "core/run/recording_format.h"

namespace shardlab {

using nlohmann::json;
using namespace recording_format;

Recording recording_from_trace(const json& t, const std::string& file) {
  const JsonChecker ck(file, "trace");
  if (!t.is_object() || !t.contains("traceEvents") || !t["traceEvents"].is_array())
    ck.fail("", "not a Chrome trace (no traceEvents array)");
  const json meta = t.contains("metadata") ? t["metadata"] : json::object();
  if (!meta.is_object() || !meta.contains("run") || !meta["run"].is_object())
    ck.fail("metadata",
            "holds no run (valid: a trace written by 'shardlab run --trace' or "
            "merged by 'shardlab trace merge', from this version on)");
  json run = meta["run"];
  // The ranks' reports: this file's, and in a merged trace each merged file's.
  std::map<int64_t, json> reports;
  auto take = [&](const json& r, const std::string& w) {
    if (!r.is_object() || !r.contains("ranks")) ck.fail(w, "missing key 'ranks'");
    const json& list = ck.array(r["ranks"], w + ".ranks");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string wi = at(w + ".ranks", i);
      if (!list[i].is_object() || !list[i].contains("rank")) ck.fail(wi, "missing key 'rank'");
      reports.emplace(ck.integer(list[i]["rank"], at(wi, "rank"), 0, kMaxRanks), list[i]);
    }
  };
  take(run, "metadata.run");
  if (meta.contains("ranks") && meta["ranks"].is_array())
    for (size_t i = 0; i < meta["ranks"].size(); ++i) {
      const json& m = meta["ranks"][i];
      if (m.is_object() && m.contains("run")) take(m["run"], at("metadata.ranks", i) + ".run");
    }
  if (!run.contains("config") || !run["config"].is_object() || !run["config"].contains("world"))
    ck.fail("metadata.run.config", "missing key 'world'");
  const int64_t world =
      ck.integer(run["config"]["world"], "metadata.run.config.world", 1, kMaxRanks);
  json ranks = json::array();
  for (int64_t r = 0; r < world; ++r) {
    auto it = reports.find(r);
    if (it == reports.end())
      ck.fail("", "holds no report of rank " + std::to_string(r) + " of " + std::to_string(world) +
                      " (valid: the whole run's trace, or every rank's merged with 'shardlab "
                      "trace merge')");
    json row = it->second;
    row["spans"] = json::array();
    row["allocs"] = json::array();
    ranks.push_back(std::move(row));
  }

  // Events back into the recording's rows. Slices are spans; memory counters
  // hold each category's total, which becomes one buffer per category whose
  // size changes (a free of the old total and an allocation of the new, at one
  // instant): the totals and peaks are exact, the buffers' names are not in a trace.
  auto us_to_ns = [](double us) { return static_cast<int64_t>(std::llround(us * 1000.0)); };
  const double max_us = static_cast<double>(kMaxTimeNs) / 1000.0;
  struct Held {
    int64_t bytes = 0;
    uint64_t id = 0;
  };
  std::map<std::pair<int64_t, int>, std::array<Held, kNumMemCategories>> held;  // (rank, pool)
  uint64_t next_id = 1;
  const json& events = t["traceEvents"];
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    const std::string w = at("traceEvents", i);
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string())
      ck.fail(w, "expected an event object with \"ph\"");
    const std::string& ph = e["ph"].get_ref<const std::string&>();
    if (ph != "X" && ph != "C") continue;  // metadata and arrows: rebuilt from the spans
    if (!e.contains("pid")) ck.fail(w, "missing key 'pid'");
    const int64_t rank = ck.integer(e["pid"], at(w, "pid"), 1, world) - 1;  // pid = rank + 1
    if (!e.contains("ts")) ck.fail(w, "missing key 'ts'");
    // A process's clock, shifted onto rank 0's, may start a few µs before rank 0's zero.
    const int64_t ts =
        std::max<int64_t>(0, us_to_ns(ck.number(e["ts"], at(w, "ts"), -max_us, max_us)));
    if (!e.contains("args") || !e["args"].is_object()) ck.fail(w, "missing object 'args'");
    const json& args = e["args"];
    if (ph == "X") {
      if (!e.contains("dur") || !e.contains("tid")) ck.fail(w, "missing key 'dur' or 'tid'");
      const double dur = ck.number(e["dur"], at(w, "dur"), 0, max_us);
      const int64_t tid = ck.integer(e["tid"], at(w, "tid"), 0, kMaxRanks * 10 + 9);
      if (!args.contains("kind")) ck.fail(at(w, "args"), "missing key 'kind'");
      auto arg = [&](const char* k, json fallback) {
        return args.contains(k) ? args[k] : fallback;
      };
      // tid = pid * 10 + lane (trace.cpp).
      const int64_t end_ns = std::max(ts, us_to_ns(e["ts"].get<double>() + dur));
      ranks[rank]["spans"].push_back(
          {ts, end_ns, to_string(static_cast<Lane>(std::min<int64_t>(tid % 10, kNumLanes - 1))),
           args["kind"], arg("layer", -1), arg("micro_batch", -1), arg("step", -1), arg("bytes", 0),
           arg("peer", -1), arg("flow_id", json(uint64_t{0})), arg("cpu_begin_ns", -1),
           arg("cpu_end_ns", -1), arg("op", json(uint64_t{0})), arg("made_ahead", false),
           arg("group", 0), arg("staleness", -1)});
      continue;
    }
    if (!e.contains("name") || !e["name"].is_string()) continue;
    const std::string& name = e["name"].get_ref<const std::string&>();
    int pool = -1;
    for (Pool p : {Pool::device, Pool::host, Pool::disk})
      if (name == std::string("memory (") + to_string(p) + ")") pool = static_cast<int>(p);
    if (pool < 0) continue;  // a counter Shardlab did not write
    auto& cats = held[{rank, pool}];
    for (int c = 0; c < kNumMemCategories; ++c) {
      const char* cat = to_string(static_cast<MemCategory>(c));
      if (!args.contains(cat)) continue;
      const int64_t bytes = ck.integer(args[cat], at(at(w, "args"), cat), 0, kMaxBytes);
      Held& h = cats[c];
      if (bytes == h.bytes) continue;
      const char* pool_name = to_string(static_cast<Pool>(pool));
      const std::string label = std::string(cat) + " (total; a trace names no buffers)";
      if (h.bytes > 0) ranks[rank]["allocs"].push_back({ts, -h.bytes, h.id, cat, pool_name, label});
      h = Held{bytes, next_id++};
      if (bytes > 0) ranks[rank]["allocs"].push_back({ts, bytes, h.id, cat, pool_name, label});
    }
  }
  run["ranks"] = std::move(ranks);
  run["span_columns"] = kSpanColumns;  // the rows above, whichever version wrote the trace
  Recording rec = from_json(run, ck, false);
  rec.from_trace = true;
  return rec;
}

}  // namespace shardlab
