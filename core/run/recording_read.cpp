// Reading recordings (recording.h). Loading trusts nothing: every field is
// checked for type, range and consistency with the run's settings before a
// RunResult exists, and each refusal is one line naming the file and the field.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>

#include "core/io/config_json.h"
#include "core/io/json_file.h"
#include "core/model/model.h"
#include "core/parallel/strategy.h"
#include "core/run/recording.h"
#include "core/run/recording_format.h"

namespace shardlab {
namespace {

using nlohmann::json;
using namespace recording_format;

// Settings a recording can have been made with: recording on, and settings
// shardlab accepts on this machine's CPU (a GPU recording must open on a laptop
// without GPUs).
RunConfig recording_config_checked(const JsonChecker& ck, const RunConfig& c,
                                   const std::string& w) {
  if (!c.record)
    ck.fail(at(w, "record"), "false: a recording needs the run's spans (record must be true)");
  RunConfig here = c;
  here.device = "cpu";
  here.backend = "auto";
  try {
    validate(here);
  } catch (const ConfigError& e) {
    ck.fail(w, std::string("settings shardlab refuses: ") + e.what());
  }
  return c;
}

// The run's settings: every key this build writes (seq, data, attention, tf32
// and the options newer than the format, --mesh, only when set).
RunConfig recording_config(const JsonChecker& ck, const json& j, const std::string& w) {
  std::vector<const char*> required = {"model",   "strategy",   "world", "batch",
                                       "steps",   "optimizer",  "seed",  "device",
                                       "backend", "timeout_ms", "record"};
  for (const OptionRow& r : option_rows())
    if (!r.only_when_set) required.push_back(r.json_key);
  return recording_config_checked(ck, config_from_json(ck, j, w, required), w);
}

Placement placement_from_json(const JsonChecker& ck, const json& j, const std::string& w,
                              int world) {
  ck.keys(j, w, {"kind", "guarded", "gpu_of_rank", "comm", "device_name", "summary"});
  Placement p;
  const std::string kind = ck.text(j["kind"], at(w, "kind"));
  if (kind != "cpu" && kind != "cuda")
    ck.fail(at(w, "kind"), shown(kind) + " is not a device kind (valid: cpu, cuda)");
  p.kind = kind == "cuda" ? DeviceKind::cuda : DeviceKind::cpu;
  p.guarded = ck.boolean(j["guarded"], at(w, "guarded"));
  const size_t gpus = p.kind == DeviceKind::cuda ? static_cast<size_t>(world) : 0;
  const json& g = ck.array(j["gpu_of_rank"], at(w, "gpu_of_rank"), gpus, gpus);
  for (size_t i = 0; i < g.size(); ++i)
    p.gpu_of_rank.push_back(
        static_cast<int>(ck.integer(g[i], at(at(w, "gpu_of_rank"), i), 0, 1023)));
  const std::string comm = ck.text(j["comm"], at(w, "comm"));
  bool found = false;
  for (CommKind k : {CommKind::gloo, CommKind::gloo_staged, CommKind::nccl})
    if (comm == to_string(k)) {
      p.comm = k;
      found = true;
    }
  if (!found)
    ck.fail(at(w, "comm"),
            shown(comm) + " is not a communicator (valid: gloo, gloo+host-staging, nccl)");
  p.device_name = ck.text(j["device_name"], at(w, "device_name"));
  p.summary = ck.text(j["summary"], at(w, "summary"));
  return p;
}

PoolStats pool_from_json(const JsonChecker& ck, const json& j, const std::string& w) {
  ck.keys(j, w, {"current", "peak", "current_total", "peak_total", "cached"});
  PoolStats p;
  std::vector<const char*> cats;
  for (int c = 0; c < kNumMemCategories; ++c)
    cats.push_back(to_string(static_cast<MemCategory>(c)));
  for (const char* part : {"current", "peak"}) {
    const json& o = j[part];
    ck.keys(o, at(w, part), cats);
    auto& dst = std::string(part) == "current" ? p.current : p.peak;
    for (int c = 0; c < kNumMemCategories; ++c)
      dst[c] = ck.integer(o[cats[c]], at(at(w, part), cats[c]), 0, kMaxBytes);
  }
  p.current_total = ck.integer(j["current_total"], at(w, "current_total"), 0, kMaxBytes);
  p.peak_total = ck.integer(j["peak_total"], at(w, "peak_total"), 0, kMaxBytes);
  p.cached = ck.integer(j["cached"], at(w, "cached"), 0, kMaxBytes);
  // What the accounting allocator guarantees, so a file that breaks it was edited.
  int64_t sum_current = 0, sum_peak = 0;
  for (int c = 0; c < kNumMemCategories; ++c) {
    if (p.current[c] > p.peak[c])
      ck.fail(at(at(w, "current"), cats[c]),
              std::to_string(p.current[c]) + " is above its peak " + std::to_string(p.peak[c]));
    sum_current += p.current[c];
    sum_peak += p.peak[c];
  }
  if (p.current_total != sum_current)
    ck.fail(at(w, "current_total"), std::to_string(p.current_total) +
                                        " is not the sum of the categories (" +
                                        std::to_string(sum_current) + ")");
  if (p.peak_total < p.current_total || p.peak_total > sum_peak)
    ck.fail(at(w, "peak_total"), std::to_string(p.peak_total) +
                                     " is impossible (valid: " + std::to_string(p.current_total) +
                                     " to " + std::to_string(sum_peak) + ")");
  return p;
}

double loss_from_json(const JsonChecker& ck, const json& v, const std::string& w) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    ck.fail(w, shown(s) + " is not a loss (valid: a number, \"NaN\", \"Infinity\", \"-Infinity\")");
  }
  return ck.number(v, w, -std::numeric_limits<double>::max(), std::numeric_limits<double>::max());
}

struct Limits {
  int world, steps, layers, micro_batches;
};

Span span_from_json(const JsonChecker& ck, const json& row, const std::string& w, int rank,
                    int64_t t0, const Limits& lim, size_t columns) {
  ck.array(row, w, columns, columns);
  auto col = [&](size_t i) { return at(w, i) + " (" + kSpanColumns[i] + ")"; };
  Span s;
  s.rank = rank;
  const int64_t b = ck.integer(row[0], col(0), 0, kMaxTimeNs);
  const int64_t e = ck.integer(row[1], col(1), b, kMaxTimeNs);
  s.t_begin_ns = t0 + b;
  s.t_end_ns = t0 + e;
  s.lane = ck.name<Lane, kNumLanes>(row[2], col(2), "lane");
  s.kind = ck.name<SpanKind, kNumSpanKinds>(row[3], col(3), "span kind");
  s.layer = static_cast<int>(ck.integer(row[4], col(4), -1, lim.layers - 1));
  s.micro_batch =
      static_cast<int>(ck.integer(row[5], col(5), -1, std::max(1, lim.micro_batches) - 1));
  s.step = static_cast<int>(ck.integer(row[6], col(6), -1, lim.steps - 1));
  s.bytes = ck.integer(row[7], col(7), 0, kMaxBytes);
  s.peer = static_cast<int>(ck.integer(row[8], col(8), -1, lim.world - 1));
  s.flow_id = ck.unsigned_integer(row[9], col(9));
  if (columns > kSpanColumnsV1) {
    s.cpu_begin_ns = ck.integer(row[10], col(10), -1, kMaxClockZero);
    s.cpu_end_ns =
        ck.integer(row[11], col(11), s.cpu_begin_ns < 0 ? -1 : s.cpu_begin_ns, kMaxClockZero);
    if ((s.cpu_begin_ns < 0) != (s.cpu_end_ns < 0))
      ck.fail(col(11), "is known while cpu_begin_ns is not (valid: both -1, or both >= 0)");
    s.op = ck.unsigned_integer(row[12], col(12));
  }
  if (columns > kSpanColumnsV2) s.made_ahead = ck.boolean(row[13], col(13));
  if (columns > kSpanColumnsV3)
    s.group = static_cast<int>(ck.integer(row[14], col(14), 0, kMaxGroups));
  if (columns > kSpanColumnsV4)
    s.staleness = static_cast<int>(ck.integer(row[15], col(15), -1, lim.steps));
  return s;
}

Mark mark_from_json(const JsonChecker& ck, const json& row, const std::string& w, int64_t t0) {
  ck.array(row, w, kMarkColumns.size(), kMarkColumns.size());
  auto col = [&](size_t i) { return at(w, i) + " (" + kMarkColumns[i] + ")"; };
  Mark m;
  m.kind = ck.name<MarkKind, kNumMarkKinds>(row[0], col(0), "mark kind");
  m.id = ck.unsigned_integer(row[1], col(1));
  const int64_t b = ck.integer(row[2], col(2), 0, kMaxTimeNs);
  m.t_begin_ns = t0 + b;
  m.t_end_ns = t0 + ck.integer(row[3], col(3), b, kMaxTimeNs);
  m.cpu_begin_ns = ck.integer(row[4], col(4), -1, kMaxClockZero);
  m.cpu_end_ns =
      ck.integer(row[5], col(5), m.cpu_begin_ns < 0 ? -1 : m.cpu_begin_ns, kMaxClockZero);
  return m;
}

AllocEvent alloc_from_json(const JsonChecker& ck, const json& row, const std::string& w,
                           int64_t t0) {
  ck.array(row, w, kAllocColumns.size(), kAllocColumns.size());
  auto col = [&](size_t i) { return at(w, i) + " (" + kAllocColumns[i] + ")"; };
  AllocEvent a;
  a.t_ns = t0 + ck.integer(row[0], col(0), 0, kMaxTimeNs);
  a.delta_bytes = ck.integer(row[1], col(1), -kMaxBytes, kMaxBytes);
  a.buffer_id = ck.unsigned_integer(row[2], col(2));
  a.category = ck.name<MemCategory, kNumMemCategories>(row[3], col(3), "memory category");
  a.pool = ck.name<Pool, kNumPools>(row[4], col(4), "memory pool");
  a.name = ck.text(row[5], col(5));
  return a;
}

// A rank's allocation events replayed as its allocator made them (the README
// promises the allocator's invariants are checked): every buffer id allocated
// once and freed at most once, by its own size, pool and category; no free of a
// buffer never allocated; no buffer, and no sum of live buffers, above the
// rank's recorded peak for its pool. Each refusal names the event.
class AllocReplay {
 public:
  AllocReplay(const JsonChecker& ck, const MemStats& memory, int rank)
      : ck_(ck), memory_(memory), rank_(rank) {}

  // `a` is allocs[index], at `where` in the file.
  void apply(const AllocEvent& a, const std::string& where, size_t index) {
    const int p = static_cast<int>(a.pool);
    const int64_t peak = memory_.pool(a.pool).peak_total;
    const std::string pool = std::string("memory.") + to_string(a.pool) + ".peak_total";
    auto it = buffers_.find(a.buffer_id);
    // A zero-byte buffer's free carries delta 0 too: it frees when that buffer is live.
    const bool is_free = a.delta_bytes < 0 || (a.delta_bytes == 0 && it != buffers_.end() &&
                                               it->second.live && it->second.bytes == 0);
    const std::string id = "buffer " + std::to_string(a.buffer_id) + " " + shown(a.name);
    if (!is_free) {
      if (it != buffers_.end())
        ck_.fail(where, "allocates " + id + " again (first allocated at allocs[" +
                            std::to_string(it->second.at) + "]; the allocator never reuses an id)");
      if (a.delta_bytes > peak)
        ck_.fail(where, "allocates " + bytes_text(a.delta_bytes) + " for " + id + ", more than " +
                            "rank " + std::to_string(rank_) + "'s recorded peak of " +
                            bytes_text(peak) + " (" + pool + ")");
      buffers_[a.buffer_id] = {a.delta_bytes, a.category, a.pool, index, true};
      live_[p] += a.delta_bytes;
      largest_[p] = std::max(largest_[p], a.delta_bytes);
      // Files recorded before the allocator logged its events under its lock
      // may show one thread's free after another's allocation that followed
      // it: one buffer's slack.
      if (live_[p] > peak + largest_[p])
        ck_.fail(where, "brings rank " + std::to_string(rank_) + "'s live " + to_string(a.pool) +
                            " memory to " + bytes_text(live_[p]) + ", above its recorded peak of " +
                            bytes_text(peak) + " (" + pool + ")");
      return;
    }
    if (it == buffers_.end()) ck_.fail(where, "frees " + id + ", which was never allocated");
    Buffer& b = it->second;
    if (!b.live)
      ck_.fail(where, "frees " + id + " a second time (allocated at allocs[" +
                          std::to_string(b.at) + "], already freed)");
    if (-a.delta_bytes != b.bytes || a.pool != b.pool || a.category != b.category)
      ck_.fail(where, "frees " + bytes_text(-a.delta_bytes) + " of " + to_string(a.category) +
                          " in the " + to_string(a.pool) + " pool for " + id +
                          ", allocated at allocs[" + std::to_string(b.at) + "] as " +
                          bytes_text(b.bytes) + " of " + to_string(b.category) + " in the " +
                          to_string(b.pool) + " pool");
    b.live = false;
    live_[p] -= b.bytes;
  }

 private:
  struct Buffer {
    int64_t bytes = 0;
    MemCategory category = MemCategory::temporary;
    Pool pool = Pool::device;
    size_t at = 0;  // its allocation's index
    bool live = false;
  };
  static std::string bytes_text(int64_t n) {
    return std::to_string(n) + " bytes (" + bytes_string(static_cast<double>(n)) + ")";
  }
  const JsonChecker& ck_;
  const MemStats& memory_;
  int rank_;
  std::map<uint64_t, Buffer> buffers_;
  std::array<int64_t, kNumPools> live_{}, largest_{};
};

void check_columns(const JsonChecker& ck, const json& v, const char* key,
                   const std::vector<std::string>& want) {
  ck.array(v, key, want.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    if (v[i] != want[i])
      ck.fail(at(key, i), describe(v[i]) + " (valid: " + json(want).dump() + ")");
}

// The final weights: float32 little-endian in base64, as many as the model has,
// with a CRC-32 that catches a damaged or edited file.
void read_weights(const JsonChecker& ck, const json& fp, const RunConfig& c,
                  const ModelLayout& layout, std::vector<float>& out) {
  ck.keys(fp, "final_params", {"dtype", "count", "crc32", "base64"});
  if (fp["dtype"] != "float32-le")
    ck.fail("final_params.dtype", describe(fp["dtype"]) + " (valid: \"float32-le\")");
  const int64_t total = static_cast<int64_t>(layout.total());
  ck.integer(fp["count"], "final_params.count", total, total);
  if (!fp["base64"].is_string())
    ck.fail("final_params.base64", "expected a string, got " + describe(fp["base64"]));
  std::vector<unsigned char> bytes;
  if (!base64_decode(fp["base64"].get_ref<const std::string&>(), bytes))
    ck.fail("final_params.base64", "is not valid base64");
  if (bytes.size() != static_cast<size_t>(total) * sizeof(float))
    ck.fail("final_params.base64", "holds " + std::to_string(bytes.size()) + " bytes, " + c.model +
                                       " needs " + std::to_string(total * sizeof(float)));
  const std::string crc = hex32(crc32(bytes.data(), bytes.size()));
  if (fp["crc32"] != crc)
    ck.fail("final_params.crc32", describe(fp["crc32"]) + " does not match the weights (crc32 " +
                                      crc + "): the file was damaged or edited");
  out.resize(static_cast<size_t>(total));
  // Little-endian on disk; every platform shardlab builds on is little-endian.
  std::memcpy(out.data(), bytes.data(), bytes.size());
}

}  // namespace

namespace recording_format {

Recording from_json(const json& j, const JsonChecker& ck, bool weights) {
  static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559);
  if (!j.is_object()) ck.fail("", "expected a JSON object at the top, got " + describe(j));
  // Format and version first, so a wrong file gets the message that explains it.
  const char* format = weights ? kFormat : kTraceRunFormat;
  if (!j.contains("format") || j["format"] != format)
    ck.fail("", std::string("not a shardlab ") + (weights ? "recording" : "trace's run") +
                    " (no \"format\": \"" + format + "\")");
  if (!j.contains("version") || !j["version"].is_number_integer())
    ck.fail("version", "missing or not an integer");
  if (j["version"] != kRecordingVersion)
    ck.fail("version", j["version"].dump() + " is not supported (this shardlab reads version " +
                           std::to_string(kRecordingVersion) + ")");
  if (weights)
    ck.keys(j, "",
            {"format", "version", "origin", "config", "placement", "clock_zero_ns", "losses",
             "final_params", "span_columns", "alloc_columns", "ranks"},
            {"processes", "mark_columns"});
  else
    ck.keys(j, "",
            {"format", "version", "origin", "config", "placement", "clock_zero_ns", "losses",
             "span_columns", "alloc_columns", "ranks"},
            {"processes", "mark_columns"});

  Recording rec;
  RunResult& r = rec.run;
  const json& o = j["origin"];
  ck.keys(o, "origin", {"device", "cpu", "gpus", "date", "shardlab"});
  rec.origin.device = ck.text(o["device"], "origin.device", false);
  rec.origin.cpu = ck.text(o["cpu"], "origin.cpu");
  const json& gpus = ck.array(o["gpus"], "origin.gpus", 0, 1024);
  for (size_t i = 0; i < gpus.size(); ++i)
    rec.origin.gpus.push_back(ck.text(gpus[i], at("origin.gpus", i)));
  rec.origin.date = ck.text(o["date"], "origin.date", false);
  if (!is_utc_date(rec.origin.date))
    ck.fail("origin.date",
            shown(rec.origin.date) + " is not a UTC date (valid: e.g. " + "2026-11-23T16:40:05Z)");
  rec.origin.shardlab = ck.text(o["shardlab"], "origin.shardlab");

  r.cfg = recording_config(ck, j["config"], "config");
  const RunConfig& c = r.cfg;
  const ModelLayout layout = make_layout(c);  // parsed fine in validate()
  r.placement = placement_from_json(ck, j["placement"], "placement", c.world);
  r.t0_ns = ck.integer(j["clock_zero_ns"], "clock_zero_ns", 0, kMaxClockZero);
  if (j.contains("processes")) {
    const json& pj = j["processes"];
    ck.keys(pj, "processes", {"clock_offset_ns", "clock_rtt_ns", "resumed_after_step"});
    r.resumed_after_step = static_cast<int>(
        ck.integer(pj["resumed_after_step"], "processes.resumed_after_step", 0, c.steps - 1));
    const size_t world = static_cast<size_t>(c.world);
    for (const char* k : {"clock_offset_ns", "clock_rtt_ns"}) {
      const std::string w = std::string("processes.") + k;
      // Empty for a threaded run that resumed; else one entry per rank.
      const json& a = ck.array(pj[k], w, 0, world);
      if (!a.empty() && a.size() != world)
        ck.fail(w, "has " + std::to_string(a.size()) + " entries (valid: 0 or " +
                       std::to_string(world) + ")");
      std::vector<int64_t>& out =
          std::string(k) == "clock_offset_ns" ? r.clock_offset_ns : r.clock_rtt_ns;
      for (size_t i = 0; i < a.size(); ++i)
        out.push_back(ck.integer(a[i], at(w, i), -kMaxClockZero, kMaxClockZero));
    }
  }

  const size_t steps = static_cast<size_t>(c.steps);
  // A resumed run timed only the steps after its checkpoint.
  const size_t timed = steps - static_cast<size_t>(r.resumed_after_step);
  const json& losses = ck.array(j["losses"], "losses", steps, steps);
  for (size_t s = 0; s < steps; ++s)
    r.losses.push_back(loss_from_json(ck, losses[s], at("losses", s)));

  if (weights) read_weights(ck, j["final_params"], c, layout, r.final_params);

  // Spans of older files have the first ten, thirteen or fourteen columns; the marks are
  // newer than the first ten.
  const size_t span_columns =
      j["span_columns"].is_array() && (j["span_columns"].size() == kSpanColumnsV1 ||
                                       j["span_columns"].size() == kSpanColumnsV2 ||
                                       j["span_columns"].size() == kSpanColumnsV3 ||
                                       j["span_columns"].size() == kSpanColumnsV4)
          ? j["span_columns"].size()
          : kSpanColumns.size();
  check_columns(
      ck, j["span_columns"], "span_columns",
      std::vector<std::string>(kSpanColumns.begin(), kSpanColumns.begin() + span_columns));
  check_columns(ck, j["alloc_columns"], "alloc_columns", kAllocColumns);
  const bool has_marks = j.contains("mark_columns");
  if (has_marks) check_columns(ck, j["mark_columns"], "mark_columns", kMarkColumns);

  const Limits lim{c.world, c.steps, layout.num_layers(), c.micro_batches};
  const json& ranks =
      ck.array(j["ranks"], "ranks", static_cast<size_t>(c.world), static_cast<size_t>(c.world));
  r.step_ms.assign(timed, 0.0);
  for (int rank = 0; rank < c.world; ++rank) {
    const std::string w = at("ranks", static_cast<size_t>(rank));
    const json& rj = ranks[rank];
    ck.keys(rj, w, {"rank", "step_ms", "bytes_sent_per_step", "memory", "spans", "allocs"},
            {"marks", "sent_by_axis_per_step"});
    if (rj.contains("marks") && !has_marks)
      ck.fail(at(w, "marks"), "present, but the file has no \"mark_columns\"");
    ck.integer(rj["rank"], at(w, "rank"), rank, rank);
    RankReport rr;
    const json& ms = ck.array(rj["step_ms"], at(w, "step_ms"), timed, timed);
    for (size_t s = 0; s < timed; ++s) {
      rr.step_ms.push_back(ck.number(ms[s], at(at(w, "step_ms"), s), 0, kMaxStepMs));
      // The run's step time is its slowest rank's, as run_training computes it.
      r.step_ms[s] = std::max(r.step_ms[s], rr.step_ms[s]);
    }
    rr.bytes_sent_per_step =
        ck.number(rj["bytes_sent_per_step"], at(w, "bytes_sent_per_step"), 0, 1e18);
    if (rj.contains("sent_by_axis_per_step")) {
      const std::string wa = at(w, "sent_by_axis_per_step");
      const json& by_axis = rj["sent_by_axis_per_step"];
      ck.keys(by_axis, wa, {}, {"dp", "pp", "tp"});
      for (MeshAxis axis : kMeshAxes)
        if (by_axis.contains(to_string(axis)))
          rr.sent_by_axis_per_step[static_cast<size_t>(axis)] =
              ck.number(by_axis[to_string(axis)], at(wa, to_string(axis)), 0, 1e18);
    }
    const json& mem = rj["memory"];
    ck.keys(mem, at(w, "memory"), {"device", "host"}, {"disk"});
    rr.memory.device = pool_from_json(ck, mem["device"], at(at(w, "memory"), "device"));
    rr.memory.host = pool_from_json(ck, mem["host"], at(at(w, "memory"), "host"));
    if (mem.contains("disk"))  // --offload nvme:DIR's file (recordings since it)
      rr.memory.disk = pool_from_json(ck, mem["disk"], at(at(w, "memory"), "disk"));

    auto recorder = std::make_shared<Recorder>(rank, true);
    const json& spans = ck.array(rj["spans"], at(w, "spans"));
    for (size_t i = 0; i < spans.size(); ++i)
      recorder->add_span(
          span_from_json(ck, spans[i], at(at(w, "spans"), i), rank, r.t0_ns, lim, span_columns));
    if (rj.contains("marks")) {
      const json& marks = ck.array(rj["marks"], at(w, "marks"));
      for (size_t i = 0; i < marks.size(); ++i)
        recorder->add_mark(mark_from_json(ck, marks[i], at(at(w, "marks"), i), r.t0_ns));
    }
    const json& allocs = ck.array(rj["allocs"], at(w, "allocs"));
    AllocReplay replay(ck, rr.memory, rank);
    for (size_t i = 0; i < allocs.size(); ++i) {
      const std::string wi = at(at(w, "allocs"), i);
      AllocEvent a = alloc_from_json(ck, allocs[i], wi, r.t0_ns);
      replay.apply(a, wi, i);
      recorder->add_alloc(std::move(a));
    }
    r.ranks.push_back(std::move(rr));
    r.recorders.push_back(std::move(recorder));
  }
  r.median_step_ms = steady_median(r.step_ms);
  return rec;
}

}  // namespace recording_format

Recording recording_from_json(const json& j, const std::string& file) {
  return from_json(j, JsonChecker(file), true);
}

Recording load_run_file(const std::string& path) {
  // One bound for both, the README's: a parsed JSON document takes many times
  // its file's size in memory, and a 300 MB trace ran a bounded machine out of
  // it (traces hold fewer events per MiB than recordings, so longer runs are
  // best opened from their recording).
  const json j = read_json_file(path, "recording or trace", kRecordingMaxBytes, kMaxDepth);
  if (j.is_object() && j.contains("traceEvents")) return recording_from_trace(j, path);
  return recording_from_json(j, path);
}

Recording load_recording(const std::string& path) {
  // The format is 6 levels deep; read_json_file refuses deep nesting up front,
  // so a hostile file costs no more than its size.
  const json j = read_json_file(path, "recording", kRecordingMaxBytes, kMaxDepth);
  return recording_from_json(j, path);
}

}  // namespace shardlab
