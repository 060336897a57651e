// Writing recordings (recording.h): JSON readable with jq and self-describing
// (kinds, lanes and categories by name, so enum order never matters), spans and
// allocations one short array per line, final weights as base64 float32 (exact,
// a third of decimal's size). What is written is loaded back before it is saved.
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>

#include "core/device/gpu.h"
#include "core/io/atomic_file.h"
#include "core/io/config_json.h"
#include "core/run/recording.h"
#include "core/run/recording_format.h"

namespace shardlab {
namespace {

using nlohmann::json;
using namespace recording_format;

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    return name;
  }
  return "";
}

// Rows one per line, keys in reading order: a recording is meant to be looked at.
std::string layout(const json& j) {
  std::string out = "{";
  bool first = true;
  auto key = [&](const std::string& k) {
    out += first ? "" : ",\n";
    first = false;
    out += json(k).dump() + ":";
  };
  for (const char* k :
       {"format", "version", "origin", "config", "placement", "clock_zero_ns", "processes",
        "losses", "final_params", "span_columns", "alloc_columns", "mark_columns"}) {
    if (!j.contains(k)) continue;  // "processes" is optional
    key(k);
    out += j.at(k).dump();
  }
  key("ranks");
  out += "[";
  const json& ranks = j.at("ranks");
  for (size_t r = 0; r < ranks.size(); ++r) {
    const json& rank = ranks[r];
    out += r ? ",\n{" : "\n{";
    bool first_key = true;
    for (const char* k : {"rank", "step_ms", "bytes_sent_per_step", "sent_by_axis_per_step",
                          "memory", "spans", "allocs", "marks"}) {
      if (!rank.contains(k)) continue;  // older content had no marks
      out += first_key ? "" : ",\n";
      first_key = false;
      out += json(k).dump() + ":";
      const json& v = rank.at(k);
      if (std::string(k) == "spans" || std::string(k) == "allocs" || std::string(k) == "marks") {
        out += "[";
        for (size_t i = 0; i < v.size(); ++i) out += (i ? ",\n" : "\n") + v[i].dump();
        out += "]";
      } else {
        out += v.dump();
      }
    }
    out += "}";
  }
  out += "]}\n";
  return out;
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

RecordingOrigin describe_origin(const RunResult& run) {
  RecordingOrigin o;
  o.cpu = cpu_model_name();
  if (run.placement.kind == DeviceKind::cuda) o.gpus.push_back(cuda_status());
  const std::string what = run.placement.device_name.empty() ? "cpu" : run.placement.device_name;
  const std::string name = o.gpus.empty() ? o.cpu : o.gpus.front();
  o.device = name.empty() ? what : what + " (" + name + ")";
  o.date = utc_now();
  utsname u{};
  const std::string os = ::uname(&u) == 0 ? std::string(" on ") + u.sysname + " " + u.machine : "";
  o.shardlab = "shardlab, recording format " + std::to_string(kRecordingVersion) + os;
  return o;
}

namespace {

// The recording's content; without `events`, the part a trace's metadata carries
// (no spans, allocations or weights: the trace's events hold the first two), and
// with `only_rank` >= 0 that rank's report alone.
json run_json(const RunResult& r, const RecordingOrigin& origin, bool events, int only_rank) {
  json ranks = json::array();
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    if (only_rank >= 0 && static_cast<int>(i) != only_rank) continue;
    const RankReport& rr = r.ranks[i];
    json spans = json::array(), allocs = json::array(), marks = json::array();
    if (i < r.recorders.size() && r.recorders[i]) {
      const Recorder::Snapshot snap = r.recorders[i]->snapshot();
      // A trace's events cannot hold the marks: its metadata carries them.
      for (const Mark& m : snap.marks)
        marks.push_back({to_string(m.kind), m.id, m.t_begin_ns - r.t0_ns, m.t_end_ns - r.t0_ns,
                         m.cpu_begin_ns, m.cpu_end_ns});
    }
    if (events && i < r.recorders.size() && r.recorders[i]) {
      const Recorder::Snapshot snap = r.recorders[i]->snapshot();
      for (const Span& s : snap.spans)
        spans.push_back({s.t_begin_ns - r.t0_ns, s.t_end_ns - r.t0_ns, to_string(s.lane),
                         to_string(s.kind), s.layer, s.micro_batch, s.step, s.bytes, s.peer,
                         s.flow_id, s.cpu_begin_ns, s.cpu_end_ns, s.op, s.made_ahead, s.group,
                         s.staleness});
      for (const AllocEvent& a : snap.allocs)
        allocs.push_back({a.t_ns - r.t0_ns, a.delta_bytes, a.buffer_id, to_string(a.category),
                          to_string(a.pool), a.name});
    }
    json row = {
        {"rank", i},
        {"step_ms", rr.step_ms},
        {"bytes_sent_per_step", rr.bytes_sent_per_step},
        {"memory", {{"device", pool_json(rr.memory.device)}, {"host", pool_json(rr.memory.host)}}}};
    if (rr.memory.disk.peak_total > 0) row["memory"]["disk"] = pool_json(rr.memory.disk);
    // A mesh's axes (older files have none; a one-axis run's is its total).
    json by_axis = json::object();
    for (MeshAxis axis : kMeshAxes)
      if (const double b = rr.sent_by_axis_per_step[static_cast<size_t>(axis)]; b > 0)
        by_axis[to_string(axis)] = b;
    if (!by_axis.empty()) row["sent_by_axis_per_step"] = std::move(by_axis);
    if (events) {
      row["spans"] = std::move(spans);
      row["allocs"] = std::move(allocs);
    }
    row["marks"] = std::move(marks);
    ranks.push_back(std::move(row));
  }
  json losses = json::array();
  for (double l : r.losses) losses.push_back(loss_json(l));
  const Placement& p = r.placement;
  json gpus = origin.gpus;
  const auto* weights = reinterpret_cast<const unsigned char*>(r.final_params.data());
  const size_t weight_bytes = r.final_params.size() * sizeof(float);
  json out = {{"format", kFormat},
              {"version", kRecordingVersion},
              {"origin",
               {{"device", origin.device},
                {"cpu", origin.cpu},
                {"gpus", gpus},
                {"date", origin.date},
                {"shardlab", origin.shardlab}}},
              {"config", config_json(r.cfg)},
              {"placement",
               {{"kind", p.kind == DeviceKind::cuda ? "cuda" : "cpu"},
                {"guarded", p.guarded},
                {"gpu_of_rank", p.gpu_of_rank},
                {"comm", to_string(p.comm)},
                {"device_name", p.device_name},
                {"summary", p.summary}}},
              {"clock_zero_ns", r.t0_ns},
              {"losses", std::move(losses)},
              {"span_columns", kSpanColumns},
              {"alloc_columns", kAllocColumns},
              {"mark_columns", kMarkColumns},
              {"ranks", std::move(ranks)}};
  if (events)
    out["final_params"] = {{"dtype", "float32-le"},
                           {"count", r.final_params.size()},
                           {"crc32", hex32(crc32(weights, weight_bytes))},
                           {"base64", base64_encode(weights, weight_bytes)}};
  // A run of one process per rank, or one resumed from a checkpoint: what a
  // threaded fresh run does not have (absent there, as in older recordings).
  if (!r.clock_offset_ns.empty() || r.resumed_after_step > 0)
    out["processes"] = {{"clock_offset_ns", r.clock_offset_ns},
                        {"clock_rtt_ns", r.clock_rtt_ns},
                        {"resumed_after_step", r.resumed_after_step}};
  return out;
}

}  // namespace

json recording_to_json(const RunResult& r, const RecordingOrigin& origin) {
  if (!r.cfg.record)
    throw std::runtime_error("cannot record a run made with --no-record (it has no spans)");
  return run_json(r, origin, true, -1);
}

json trace_run_json(const RunResult& r, const RecordingOrigin& origin, int only_rank) {
  json j = run_json(r, origin, false, only_rank);
  j["format"] = kTraceRunFormat;
  return j;
}

json trace_metadata(const RunResult& r, const RecordingOrigin& origin, int only_rank) {
  const RunConfig& c = r.cfg;
  return {{"model", c.model},
          {"strategy", c.strategy},
          {"world", c.world},
          {"batch", c.batch},
          {"steps", c.steps},
          {"seed", c.seed},
          {"run", trace_run_json(r, origin, only_rank)}};
}

json trace_metadata(const RunResult& r, int only_rank) {
  return trace_metadata(r, describe_origin(r), only_rank);
}

void check_recording_path(const std::string& path) {
  auto bad = [&](const std::string& what) {
    throw ConfigError("cannot write recording '" + path + "': " + what);
  };
  if (path.empty()) bad("empty path (valid: a file path, e.g. run.shardrec)");
  if (path.back() == '/') bad("it names a directory (valid: a file path, e.g. run.shardrec)");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode))
      bad("it is a symbolic link, and recordings are never written through one (valid: the "
          "path it points to, or remove the link)");
    if (!S_ISREG(st.st_mode))
      bad(std::string("it is ") + file_kind(st.st_mode) + " (valid: a regular file path)");
  } else if (errno != ENOENT) {
    bad(std::strerror(errno));
  }
  const std::string dir = parent_dir(path);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    bad("directory '" + dir + "' does not exist (valid: a file in an existing directory)");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    bad("directory '" + dir + "': " + std::strerror(errno));
}

void save_recording(const std::string& path, const RunResult& run, const RecordingOrigin& origin) {
  check_recording_path(path);
  const json j = recording_to_json(run, origin);
  // What is written must load: check it with the loader before touching the disk.
  try {
    recording_from_json(j, path);
  } catch (const ConfigError& e) {
    throw std::runtime_error(std::string("cannot record this run: ") + e.what());
  }
  std::string text;
  try {
    text = layout(j);
  } catch (const json::exception& e) {
    throw std::runtime_error("cannot record this run: a name is not UTF-8 (" +
                             std::string(e.what()) + ")");
  }

  // A link at `path` was refused above; the shared writer does the rest.
  std::string error;
  if (!write_file_atomic(path, text, &error, false, "recording")) throw std::runtime_error(error);
}

void save_recording(const std::string& path, const RunResult& run) {
  save_recording(path, run, describe_origin(run));
}

}  // namespace shardlab
