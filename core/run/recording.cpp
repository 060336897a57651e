// Recording files: JSON (readable with jq, self-describing: kinds, lanes and
// categories by name, so enum order never matters), spans and allocations as
// one short array per line, final weights as base64 float32 (exact, a third of
// decimal's size). Loading trusts nothing: every field is checked for type,
// range and consistency with the run's settings before a RunResult exists.
#include "core/run/recording.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>

#include "core/device/gpu.h"
#include "core/io/atomic_file.h"
#include "core/io/json_file.h"
#include "core/model/model.h"
#include "core/parallel/strategy.h"
#include "core/run_options.h"

namespace shardlab {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "shardlab-recording";
// A trace's metadata "run": a recording without events or weights.
constexpr const char* kTraceRunFormat = "shardlab-trace-run";
constexpr int64_t kMaxTimeNs = int64_t{1} << 52;     // ~52 days after the run start
constexpr int64_t kMaxBytes = int64_t{1} << 50;      // 1 PiB: far above any real buffer
constexpr int64_t kMaxClockZero = int64_t{1} << 62;  // steady clocks start near boot
constexpr size_t kMaxText = 4096;                    // names, summaries, dates
constexpr int kMaxDepth = 32;                        // the format itself needs 6
constexpr double kMaxStepMs = 1e9;                   // 11 days
constexpr int64_t kMaxRanks = 1 << 20;               // far above any world size
const std::vector<std::string> kSpanColumns = {
    "t_begin_ns", "t_end_ns", "lane",    "kind",         "layer",      "micro_batch", "step",
    "bytes",      "peer",     "flow_id", "cpu_begin_ns", "cpu_end_ns", "op",          "made_ahead"};
// Files written before spans had CPU clocks and op ids: the first ten columns;
// before batches were made ahead, thirteen.
constexpr size_t kSpanColumnsV1 = 10;
constexpr size_t kSpanColumnsV2 = 13;
const std::vector<std::string> kMarkColumns = {"kind",     "id",           "t_begin_ns",
                                               "t_end_ns", "cpu_begin_ns", "cpu_end_ns"};
const std::vector<std::string> kAllocColumns = {"t_ns",     "delta_bytes", "buffer_id",
                                                "category", "pool",        "name"};

// A value from the file inside a one-line message: control characters escaped,
// long values cut.
std::string shown(const std::string& s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 60; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += s[i];
    }
  }
  if (s.size() > 60) out += "...";
  return out + "'";
}

std::string describe(const json& v) {
  if (v.is_string()) return "the string " + shown(v.get_ref<const std::string&>());
  if (v.is_number() || v.is_boolean() || v.is_null()) return v.dump();
  return std::string("an ") + v.type_name();
}

// Every check goes through here: the file, where in it, what is wrong.
class Checker {
 public:
  // `kind` names the file in messages: "recording", or "trace" for a trace read back.
  explicit Checker(std::string file, std::string kind = "recording")
      : file_(std::move(file)), kind_(std::move(kind)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw ConfigError(kind_ + " '" + file_ + "': " + (where.empty() ? "" : where + ": ") + what);
  }

  // `v` must be an object with exactly these keys.
  // `want` must all be there; `optional` may be (fields added since version 1
  // began, so older files still load).
  void keys(const json& v, const std::string& where, const std::vector<const char*>& want,
            const std::vector<const char*>& optional = {}) const {
    if (!v.is_object()) fail(where, "expected an object, got " + describe(v));
    for (const char* k : want)
      if (!v.contains(k)) fail(where, std::string("missing key '") + k + "'");
    std::string valid;
    for (const char* k : want) valid += std::string(valid.empty() ? "" : ", ") + k;
    for (const char* k : optional) valid += std::string(valid.empty() ? "" : ", ") + k;
    auto named = [](const std::vector<const char*>& list, const std::string& k) {
      return std::find_if(list.begin(), list.end(), [&](const char* w) { return k == w; }) !=
             list.end();
    };
    for (const auto& [k, _] : v.items())
      if (!named(want, k) && !named(optional, k))
        fail(where, "unknown key " + shown(k) + " (valid: " + valid + ")");
  }

  const json& array(const json& v, const std::string& where, size_t min_size = 0,
                    size_t max_size = std::numeric_limits<size_t>::max()) const {
    if (!v.is_array()) fail(where, "expected an array, got " + describe(v));
    if (v.size() < min_size || v.size() > max_size)
      fail(where, "has " + std::to_string(v.size()) + " entries (valid: " +
                      (min_size == max_size
                           ? std::to_string(min_size)
                           : std::to_string(min_size) + " to " + std::to_string(max_size)) +
                      ")");
    return v;
  }

  int64_t integer(const json& v, const std::string& where, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) fail(where, "expected an integer, got " + describe(v));
    bool ok;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      ok = hi >= 0 && u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo;
    } else {
      ok = v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
    }
    if (!ok)
      fail(where, v.dump() + " is out of range (valid: " + std::to_string(lo) + " to " +
                      std::to_string(hi) + ")");
    return v.get<int64_t>();
  }

  uint64_t unsigned_integer(const json& v, const std::string& where) const {
    if (!v.is_number_unsigned()) fail(where, "expected a non-negative integer, got " + describe(v));
    return v.get<uint64_t>();
  }

  // A finite number in [lo, hi]: NaN cannot even be written in JSON, and
  // infinities or overflowed literals are refused here.
  double number(const json& v, const std::string& where, double lo, double hi) const {
    if (!v.is_number()) fail(where, "expected a number, got " + describe(v));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      fail(where, v.dump() + " is out of range (valid: " + json(lo).dump() + " to " +
                      json(hi).dump() + ")");
    return x;
  }

  bool boolean(const json& v, const std::string& where) const {
    if (!v.is_boolean()) fail(where, "expected true or false, got " + describe(v));
    return v.get<bool>();
  }

  // One line of text (it may end up in a status line or a message).
  std::string text(const json& v, const std::string& where, bool allow_empty = true) const {
    if (!v.is_string()) fail(where, "expected a string, got " + describe(v));
    const std::string& s = v.get_ref<const std::string&>();
    if (s.size() > kMaxText)
      fail(where, "is " + std::to_string(s.size()) + " bytes long (valid: up to " +
                      std::to_string(kMaxText) + ")");
    if (!allow_empty && s.empty()) fail(where, "is empty");
    for (unsigned char c : s)
      if (c < 0x20 || c == 0x7f) fail(where, shown(s) + " contains a control character");
    return s;
  }

  // A name from a fixed list, e.g. a span kind.
  template <typename E, int N>
  E name(const json& v, const std::string& where, const char* what) const {
    if (!v.is_string())
      fail(where, std::string("expected a ") + what + " name, got " + describe(v));
    const std::string& s = v.get_ref<const std::string&>();
    std::string valid;
    for (int i = 0; i < N; ++i) {
      const char* n = to_string(static_cast<E>(i));
      if (s == n) return static_cast<E>(i);
      valid += std::string(i ? ", " : "") + n;
    }
    fail(where, shown(s) + " is not a " + what + " (valid: " + valid + ")");
  }

 private:
  std::string file_;
  std::string kind_;
};

std::string at(const std::string& where, const char* key) {
  return where.empty() ? key : where + "." + key;
}
std::string at(const std::string& where, size_t i) {
  return where + "[" + std::to_string(i) + "]";
}

// ---- base64 (RFC 4648, padded) for the final weights

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const unsigned char* p, size_t n) {
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{p[i + 2]} : 0);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < n ? kB64[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kB64[v & 63] : '=';
  }
  return out;
}

// Empty optional-like result: returns false on any malformed input.
bool base64_decode(const std::string& s, std::vector<unsigned char>& out) {
  if (s.size() % 4 != 0) return false;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out.clear();
  out.reserve(s.size() / 4 * 3);
  for (size_t i = 0; i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    const int pad = last ? (s[i + 3] == '=') + (s[i + 2] == '=') : 0;
    if (pad == 1 && s[i + 2] == '=') return false;  // "x=y=" is not padding
    int v[4];
    for (int k = 0; k < 4 - pad; ++k)
      if ((v[k] = value(s[i + k])) < 0) return false;
    for (int k = 4 - pad; k < 4; ++k) v[k] = 0;
    const uint32_t x =
        (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out.push_back(static_cast<unsigned char>(x >> 16));
    if (pad < 2) out.push_back(static_cast<unsigned char>(x >> 8));
    if (pad < 1) out.push_back(static_cast<unsigned char>(x));
  }
  return true;
}

// CRC-32 (IEEE 802.3, as zlib's crc32): the weights have no range to check, so a
// flipped bit in them would otherwise load silently.
uint32_t crc32(const unsigned char* p, size_t n) {
  uint32_t table[256];
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// YYYY-MM-DDTHH:MM:SSZ, as utc_now() writes it.
bool is_utc_date(const std::string& s) {
  const char* shape = "dddd-dd-ddTdd:dd:ddZ";
  if (s.size() != 20) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool digit = s[i] >= '0' && s[i] <= '9';
    if (shape[i] == 'd' ? !digit : s[i] != shape[i]) return false;
  }
  return true;
}

// ---- writing

json config_json(const RunConfig& c) {
  const OptimizerConfig& o = c.optimizer;
  json j = {{"model", c.model},
            {"strategy", c.strategy},
            {"world", c.world},
            {"batch", c.batch},
            {"steps", c.steps},
            {"optimizer",
             {{"kind", to_string(o.kind)},
              {"lr", o.lr},
              {"beta1", o.beta1},
              {"beta2", o.beta2},
              {"eps", o.eps},
              {"weight_decay", o.weight_decay}}},
            {"seed", c.seed},
            {"device", c.device},
            {"backend", c.backend},
            {"timeout_ms", c.timeout_ms},
            {"record", c.record}};
  // The strategy options, each under its row's key (core/run_options.h).
  for (const OptionRow& r : option_rows()) {
    switch (r.kind) {
      case OptionKind::integer:
        j[r.json_key] = c.*r.integer;
        break;
      case OptionKind::number:
        j[r.json_key] = c.*r.number;
        break;
      case OptionKind::on_flag:
      case OptionKind::off_flag:
        j[r.json_key] = c.*r.boolean;
        break;
      case OptionKind::choice:
        j[r.json_key] = c.*r.text;
        break;
      case OptionKind::int_list:
        j[r.json_key] = c.*r.list;
        break;
    }
  }
  // A gpt's context and text decide its vocabulary and activations.
  if (c.seq != 0) j["seq"] = c.seq;
  if (!c.attention.empty()) j["attention"] = c.attention;  // gpt: what the run resolved
  if (c.tf32) j["tf32"] = true;  // absent: exact fp32 (and in recordings made before --tf32)
  if (!c.data.empty()) j["data"] = c.data;
  return j;
}

json pool_json(const PoolStats& p) {
  json current = json::object(), peak = json::object();
  for (int c = 0; c < kNumMemCategories; ++c) {
    current[to_string(static_cast<MemCategory>(c))] = p.current[c];
    peak[to_string(static_cast<MemCategory>(c))] = p.peak[c];
  }
  return {{"current", current},
          {"peak", peak},
          {"current_total", p.current_total},
          {"peak_total", p.peak_total},
          {"cached", p.cached}};
}

// A loss can be NaN or infinite (a diverged run); JSON has no literal for them.
json loss_json(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

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
    for (const char* k :
         {"rank", "step_ms", "bytes_sent_per_step", "memory", "spans", "allocs", "marks"}) {
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

// ---- reading

RunConfig config_from_json(const Checker& ck, const json& j, const std::string& w) {
  std::vector<const char*> required = {"model",   "strategy",   "world", "batch",
                                       "steps",   "optimizer",  "seed",  "device",
                                       "backend", "timeout_ms", "record"};
  for (const OptionRow& r : option_rows()) required.push_back(r.json_key);
  ck.keys(j, w, required,
          {"seq", "data", "attention", "tf32"});  // seq, data, attention: gpt only; tf32: when on
  RunConfig c;
  const int max_int = std::numeric_limits<int>::max();
  c.model = ck.text(j["model"], at(w, "model"), false);
  if (j.contains("seq")) c.seq = static_cast<int>(ck.integer(j["seq"], at(w, "seq"), 1, 1 << 20));
  if (j.contains("data")) c.data = ck.text(j["data"], at(w, "data"), false);
  if (j.contains("attention")) {
    c.attention = ck.text(j["attention"], at(w, "attention"));
    if (c.attention != "naive" && c.attention != "flash")
      ck.fail(at(w, "attention"),
              shown(c.attention) + " is not an attention (valid: " + kAttentionValues + ")");
  } else if (c.model.rfind("gpt:", 0) == 0) {
    c.attention = "naive";  // recordings made before --attention ran the materialised one
  }
  c.strategy = ck.text(j["strategy"], at(w, "strategy"), false);
  c.world = static_cast<int>(ck.integer(j["world"], at(w, "world"), 1, 64));
  c.batch = static_cast<int>(ck.integer(j["batch"], at(w, "batch"), 1, max_int));
  c.steps = static_cast<int>(ck.integer(j["steps"], at(w, "steps"), 1, 10'000'000));
  const json& o = j["optimizer"];
  const std::string ow = at(w, "optimizer");
  ck.keys(o, ow, {"kind", "lr", "beta1", "beta2", "eps", "weight_decay"});
  const std::string kind = ck.text(o["kind"], at(ow, "kind"));
  if (kind != "adamw" && kind != "sgd")
    ck.fail(at(ow, "kind"), shown(kind) + " is not an optimizer (valid: adamw, sgd)");
  c.optimizer.kind = kind == "sgd" ? OptimizerKind::sgd : OptimizerKind::adamw;
  const double fmax = std::numeric_limits<float>::max();
  c.optimizer.lr = static_cast<float>(ck.number(o["lr"], at(ow, "lr"), 0, fmax));
  c.optimizer.beta1 = static_cast<float>(ck.number(o["beta1"], at(ow, "beta1"), 0, 1));
  c.optimizer.beta2 = static_cast<float>(ck.number(o["beta2"], at(ow, "beta2"), 0, 1));
  c.optimizer.eps = static_cast<float>(ck.number(o["eps"], at(ow, "eps"), 0, fmax));
  c.optimizer.weight_decay =
      static_cast<float>(ck.number(o["weight_decay"], at(ow, "weight_decay"), 0, fmax));
  c.seed = ck.unsigned_integer(j["seed"], at(w, "seed"));
  c.device = ck.text(j["device"], at(w, "device"));
  c.backend = ck.text(j["backend"], at(w, "backend"));
  c.timeout_ms = static_cast<int>(ck.integer(j["timeout_ms"], at(w, "timeout_ms"), 1, max_int));
  c.record = ck.boolean(j["record"], at(w, "record"));
  // The strategy options, each as its row's kind (core/run_options.h); validate()
  // below checks their ranges as it does the command line's.
  for (const OptionRow& r : option_rows()) {
    const json& v = j[r.json_key];
    const std::string where = at(w, r.json_key);
    switch (r.kind) {
      case OptionKind::integer:
        c.*r.integer = static_cast<int>(ck.integer(v, where, -max_int, max_int));
        break;
      case OptionKind::number:
        c.*r.number = ck.number(v, where, 0, 1e12);
        break;
      case OptionKind::on_flag:
      case OptionKind::off_flag:
        c.*r.boolean = ck.boolean(v, where);
        break;
      case OptionKind::choice:
        c.*r.text = ck.text(v, where);
        break;
      case OptionKind::int_list: {
        const json& list = ck.array(v, where, 0, 4096);
        for (size_t i = 0; i < list.size(); ++i)
          (c.*r.list).push_back(
              static_cast<int>(ck.integer(list[i], at(where, i), -1'000'000, 1'000'000)));
        break;
      }
    }
  }
  if (j.contains("tf32")) c.tf32 = ck.boolean(j["tf32"], at(w, "tf32"));
  if (!c.record)
    ck.fail(at(w, "record"), "false: a recording needs the run's spans (record must be true)");
  // The settings must be ones shardlab accepts. Device and backend are checked
  // on their own: a GPU recording must open on a laptop without GPUs.
  if (c.device != "cpu" && c.device != "cuda" && c.device != "auto" && c.device != "cpu-guarded")
    ck.fail(at(w, "device"),
            shown(c.device) + " is not a device (valid: cpu, cuda, auto, cpu-guarded)");
  if (c.backend != "auto" && c.backend != "gloo" && c.backend != "nccl")
    ck.fail(at(w, "backend"), shown(c.backend) + " is not a backend (valid: auto, gloo, nccl)");
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

Placement placement_from_json(const Checker& ck, const json& j, const std::string& w, int world) {
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

PoolStats pool_from_json(const Checker& ck, const json& j, const std::string& w) {
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

double loss_from_json(const Checker& ck, const json& v, const std::string& w) {
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

Span span_from_json(const Checker& ck, const json& row, const std::string& w, int rank, int64_t t0,
                    const Limits& lim, size_t columns) {
  ck.array(row, w, columns, columns);
  auto col = [&](size_t i) { return at(w, i) + " (" + kSpanColumns[i] + ")"; };
  Span s;
  s.rank = rank;
  const int64_t b = ck.integer(row[0], col(0), 0, kMaxTimeNs);
  const int64_t e = ck.integer(row[1], col(1), b, kMaxTimeNs);
  s.t_begin_ns = t0 + b;
  s.t_end_ns = t0 + e;
  s.lane = ck.name<Lane, 2>(row[2], col(2), "lane");
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
  return s;
}

Mark mark_from_json(const Checker& ck, const json& row, const std::string& w, int64_t t0) {
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

AllocEvent alloc_from_json(const Checker& ck, const json& row, const std::string& w, int64_t t0) {
  ck.array(row, w, kAllocColumns.size(), kAllocColumns.size());
  auto col = [&](size_t i) { return at(w, i) + " (" + kAllocColumns[i] + ")"; };
  AllocEvent a;
  a.t_ns = t0 + ck.integer(row[0], col(0), 0, kMaxTimeNs);
  a.delta_bytes = ck.integer(row[1], col(1), -kMaxBytes, kMaxBytes);
  a.buffer_id = ck.unsigned_integer(row[2], col(2));
  a.category = ck.name<MemCategory, kNumMemCategories>(row[3], col(3), "memory category");
  a.pool = ck.name<Pool, 2>(row[4], col(4), "memory pool");
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
  AllocReplay(const Checker& ck, const MemStats& memory, int rank)
      : ck_(ck), memory_(memory), rank_(rank) {}

  // `a` is allocs[index], at `where` in the file.
  void apply(const AllocEvent& a, const std::string& where, size_t index) {
    const int p = static_cast<int>(a.pool);
    const int64_t peak = (a.pool == Pool::device ? memory_.device : memory_.host).peak_total;
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
  const Checker& ck_;
  const MemStats& memory_;
  int rank_;
  std::map<uint64_t, Buffer> buffers_;
  std::array<int64_t, 2> live_{}, largest_{};
};

void check_columns(const Checker& ck, const json& v, const char* key,
                   const std::vector<std::string>& want) {
  ck.array(v, key, want.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    if (v[i] != want[i])
      ck.fail(at(key, i), describe(v[i]) + " (valid: " + json(want).dump() + ")");
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

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
                         s.flow_id, s.cpu_begin_ns, s.cpu_end_ns, s.op, s.made_ahead});
      for (const AllocEvent& a : snap.allocs)
        allocs.push_back({a.t_ns - r.t0_ns, a.delta_bytes, a.buffer_id, to_string(a.category),
                          to_string(a.pool), a.name});
    }
    json row = {
        {"rank", i},
        {"step_ms", rr.step_ms},
        {"bytes_sent_per_step", rr.bytes_sent_per_step},
        {"memory", {{"device", pool_json(rr.memory.device)}, {"host", pool_json(rr.memory.host)}}}};
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

namespace {

// The final weights: float32 little-endian in base64, as many as the model has,
// with a CRC-32 that catches a damaged or edited file.
void read_weights(const Checker& ck, const json& fp, const RunConfig& c, const ModelLayout& layout,
                  std::vector<float>& out) {
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

// A recording's content, checked (recording_from_json's work); a trace read back
// has no final weights (`weights` false).
Recording from_json(const json& j, const Checker& ck, bool weights) {
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

  r.cfg = config_from_json(ck, j["config"], "config");
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

  // Spans of older files have the first ten or thirteen columns; the marks are
  // newer than the first ten.
  const size_t span_columns =
      j["span_columns"].is_array() && (j["span_columns"].size() == kSpanColumnsV1 ||
                                       j["span_columns"].size() == kSpanColumnsV2)
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
            {"marks"});
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
    const json& mem = rj["memory"];
    ck.keys(mem, at(w, "memory"), {"device", "host"});
    rr.memory.device = pool_from_json(ck, mem["device"], at(at(w, "memory"), "device"));
    rr.memory.host = pool_from_json(ck, mem["host"], at(at(w, "memory"), "host"));

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

}  // namespace

Recording recording_from_json(const json& j, const std::string& file) {
  return from_json(j, Checker(file), true);
}

Recording recording_from_trace(const json& t, const std::string& file) {
  const Checker ck(file, "trace");
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
          {ts, end_ns, tid % 10 == 0 ? "compute" : "comm", args["kind"], arg("layer", -1),
           arg("micro_batch", -1), arg("step", -1), arg("bytes", 0), arg("peer", -1),
           arg("flow_id", json(uint64_t{0})), arg("cpu_begin_ns", -1), arg("cpu_end_ns", -1),
           arg("op", json(uint64_t{0})), arg("made_ahead", false)});
      continue;
    }
    if (!e.contains("name") || !e["name"].is_string()) continue;
    const std::string& name = e["name"].get_ref<const std::string&>();
    int pool = -1;
    for (Pool p : {Pool::device, Pool::host})
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

Recording load_run_file(const std::string& path) {
  // One bound for both, the README's: a parsed JSON document takes many times
  // its file's size in memory, and a 300 MB trace ran a bounded machine out of
  // it (traces hold fewer events per MiB than recordings, so longer runs are
  // best opened from their recording).
  const json j = read_json_file(path, "recording or trace", kRecordingMaxBytes, kMaxDepth);
  if (j.is_object() && j.contains("traceEvents")) return recording_from_trace(j, path);
  return recording_from_json(j, path);
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

Recording load_recording(const std::string& path) {
  // The format is 6 levels deep; read_json_file refuses deep nesting up front,
  // so a hostile file costs no more than its size.
  const json j = read_json_file(path, "recording", kRecordingMaxBytes, kMaxDepth);
  return recording_from_json(j, path);
}

}  // namespace shardlab
