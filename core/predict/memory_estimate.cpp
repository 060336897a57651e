// The memory preflight (see memory_estimate.h): the allocator's bookkeeping
// replayed without memory, the shared pieces every strategy's plan is built
// from, the process's own share, the memory available, and the refusal.
#include "core/predict/memory_estimate.h"

#include "core/model/model_family.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "core/device/gpu.h"
#include "core/parallel/strategy.h"
#include "core/predict/meta_memory.h"
#include "core/record/recorder.h"

namespace shardlab {

// ---------------------------------------------------------------------------
// The estimate

namespace {

// What one recorded event costs the recorder: the struct, and an AllocEvent's
// name on the heap (past the 15 characters a std::string keeps inline, names
// like "layers.3.flat[shard 1/4].exp_avg" are); vectors grow by doubling, so
// up to twice that is reserved.
constexpr int64_t kAllocEventBytes = static_cast<int64_t>(sizeof(AllocEvent)) + 48;
constexpr int64_t kSpanBytes = static_cast<int64_t>(sizeof(Span));
constexpr int64_t kMarkBytes = static_cast<int64_t>(sizeof(Mark));
constexpr int64_t kGrowth = 2;
// Per step beside the records: the runner's loss shares (16 B per rank) and
// completion counter (4 B), the losses and step times (8 B each), every
// rank's own step times (8 B, reserved twice over), a viewer's loss copy.
constexpr int64_t kHistoryPerStep = 4 + 8 + 8 + 8;
constexpr int64_t kHistoryPerRankStep = 16 + 8 * kGrowth;
// --trace turns every record into an nlohmann::json object (a tree of maps,
// measured ~10x the record) and then its text; --record into ~4x.
constexpr int64_t kTraceFactor = 10;
constexpr int64_t kRecordingFactor = 4;
constexpr int64_t kJsonPerStep = 64;
// A rank thread's own: its stack as touched, Gloo's pairs and buffers
// (measured ~0.3 MiB per rank).
constexpr int64_t kRankOverhead = int64_t{1} << 20;
// A GPU rank's cuBLAS handle and workspace, streams and events.
constexpr int64_t kGpuRankOverhead = int64_t{64} << 20;
// What a rank process adds to its private memory after the preflight, beside what its rank
// allocates (its threads' stacks and malloc arenas, BLAS's packing buffer): measured 1-2 MiB
// (mlp:4x64 and mlp:8x256, 3 processes, OMP_NUM_THREADS=1: 0.9 MiB dirty at the preflight).
constexpr int64_t kProcessStartup = int64_t{2} << 20;
// The baseline is rounded up to this: the processes of a group measure a few pages apart,
// and must agree on their one-line refusal (the launcher shows a line once when alike).
constexpr int64_t kProcessBaselineStep = int64_t{4} << 20;
// Where /proc cannot be read: what the measurement gives here.
constexpr int64_t kProcessBaselineUnknown = int64_t{4} << 20;

// a + b and a * b, saturating: --steps 2147483647 with a large model must not wrap.
int64_t add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}
int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

}  // namespace

int64_t MemoryEstimate::largest_rank() const {
  int64_t m = 0;
  for (const RankMemoryEstimate& r : ranks)
    m = std::max(m, add(r.device_bytes(), device == DeviceKind::cpu ? r.host_bytes() : 0));
  return m;
}

MemoryEstimate estimate_memory(const RunConfig& cfg, const RunOutputs& outputs) {
  validate(cfg, {}, kMaxPredictWorld);
  const ModelLayout layout = make_layout(cfg);
  const Placement place = plan_placement(cfg);
  MemoryEstimate e;
  e.device = place.kind;

  // The real strategy, run on meta devices: setup, the first steps and the
  // export, every allocation counted by the real allocator, none made.
  const MetaMemory meta = predict_memory_meta(cfg, MetaOptions{.count_records = cfg.record});
  int64_t ranks_host = 0, records = 0;
  for (const MetaRankMemory& m : meta.ranks) {
    const int r = m.rank;
    RankMemoryEstimate re;
    re.rank = r;
    re.at_report = m.at_report;
    re.at_end = m.at_end;
    re.outside = m.outside_peak;
    if (cfg.record)
      re.record_per_step =
          kGrowth * (m.records_per_step.allocs * kAllocEventBytes +
                     m.records_per_step.spans * kSpanBytes + m.records_per_step.marks * kMarkBytes);
    re.gpu = place.kind == DeviceKind::cuda ? place.gpu_of_rank[r] : -1;
    ranks_host = add(ranks_host, add(re.host_bytes(), kRankOverhead));
    if (place.kind == DeviceKind::cpu)
      ranks_host = add(ranks_host, re.device_bytes());
    else
      // Beside the allocator: the synthetic data's T, uploaded once per rank that
      // makes targets (counted for every rank: a pipeline's first stage does not).
      e.gpu_total[re.gpu] = add(e.gpu_total[re.gpu],
                                re.device_bytes() + kGpuRankOverhead +
                                    (layout.input_is_tokens() ? 0
                                                              : static_cast<int64_t>(layout.dim()) *
                                                                    layout.dim() * int64_t{4}));
    records = add(records, re.record_per_step);
    e.ranks.push_back(std::move(re));
  }

  const int64_t f32 = sizeof(float);
  const int64_t state = static_cast<int64_t>(layout.state_total()) * f32;
  // What the dataset holds in host memory (the generator's T, a corpus's tokens).
  const int64_t d = layout.input_is_tokens() ? 0 : layout.dim();
  e.shared = layout.family().data_bytes(layout, cfg);
  if (!outputs.caller_holds_init) e.shared += state;
  if (outputs.save_init) e.shared += state;
  if (outputs.save_final) e.shared += state;
  if (outputs.save_data)  // x and y of every step, and the generator that makes them
    e.shared =
        add(e.shared,
            add(mul(mul(static_cast<int64_t>(layout.act_numel(0) + layout.target_numel()) * f32,
                        cfg.batch),
                    cfg.steps),
                d * d * f32));
  int64_t output_factor = 1;
  if (outputs.trace) output_factor += kTraceFactor;
  if (outputs.recording) output_factor += kRecordingFactor;
  e.per_step = add(mul(records, output_factor), kHistoryPerStep + kHistoryPerRankStep * cfg.world +
                                                    (outputs.json ? kJsonPerStep : 0));
  e.steps_total = mul(e.per_step, cfg.steps);
  if (cfg.ranks_on_host > 0) {
    e.processes = cfg.ranks_on_host;
    e.process_baseline = process_baseline_bytes();
    e.per_process = add(add(e.process_baseline, e.shared), e.steps_total);
    e.processes_total = mul(e.per_process, e.processes);
    e.host_total = add(ranks_host, e.processes_total);
  } else {
    e.host_total = add(add(e.shared, ranks_host), e.steps_total);
  }
  return e;
}

int64_t process_baseline_bytes() {
  // Private_Dirty: the pages only this process has written (its heap, its libraries' written
  // data). Private_Clean is left out: it is file pages no other process maps at this moment,
  // which the page cache shares as soon as a sibling maps them too.
  std::ifstream f("/proc/self/smaps_rollup");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("Private_Dirty:", 0) == 0) {
      std::istringstream in(line.substr(line.find(':') + 1));
      int64_t kib = 0;
      if (!(in >> kib)) break;
      const int64_t bytes = add(mul(kib, 1024), kProcessStartup);
      return mul((bytes + kProcessBaselineStep - 1) / kProcessBaselineStep, kProcessBaselineStep);
    }
  return kProcessBaselineUnknown;
}

// ---------------------------------------------------------------------------
// The memory available

int64_t parse_memory_size(const std::string& text) {
  if (text.empty()) return -1;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(v) || v < 0) return -1;
  std::string suffix(end);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.size() == 2 && (suffix[1] == 'i' || suffix[1] == 'I')) suffix.pop_back();
  double mult = 1;
  if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K':
        mult = 1024.0;
        break;
      case 'M':
        mult = 1024.0 * 1024;
        break;
      case 'G':
        mult = 1024.0 * 1024 * 1024;
        break;
      case 'T':
        mult = 1024.0 * 1024 * 1024 * 1024;
        break;
      default:
        return -1;
    }
  } else if (!suffix.empty()) {
    return -1;
  }
  const double bytes = v * mult;
  if (bytes >= 9.0e18) return -1;
  return static_cast<int64_t>(bytes);
}

namespace {

std::optional<int64_t> env_limit() {
  const char* env = std::getenv("SHARDLAB_MEMORY_LIMIT");
  if (!env || !*env) return std::nullopt;
  const int64_t bytes = parse_memory_size(env);
  if (bytes < 0)
    throw ConfigError(std::string("SHARDLAB_MEMORY_LIMIT '") + env +
                      "' is invalid (valid: a number of bytes, or with K, M, G or T, e.g. 8G)");
  return bytes;
}

// The first number after `key` at the start of a line of `path`, or −1.
int64_t read_keyed(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) {
      std::istringstream in(line.substr(key.size()));
      int64_t v = -1;
      if (in >> v) return v;
    }
  return -1;
}

// The one number in `path` ("max" and anything unreadable: −1).
int64_t read_number(const std::string& path) {
  std::ifstream f(path);
  int64_t v = -1;
  if (!(f >> v)) return -1;
  return v;
}

// What the process's cgroup still allows: its limit less what it uses, page
// cache that can be dropped (inactive files) aside, as `docker stats` counts.
// −1 without a limit. cgroup v2 first, then v1.
int64_t cgroup_available() {
  std::string dir = "/sys/fs/cgroup";
  {
    std::ifstream f("/proc/self/cgroup");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("0::", 0) == 0 && line.size() > 4) {
        const std::string own = dir + line.substr(3);
        if (std::ifstream(own + "/memory.max")) dir = own;
      }
  }
  int64_t limit = read_number(dir + "/memory.max");
  int64_t usage = read_number(dir + "/memory.current");
  int64_t inactive = read_keyed(dir + "/memory.stat", "inactive_file ");
  if (limit < 0) {
    const std::string v1 = "/sys/fs/cgroup/memory";
    limit = read_number(v1 + "/memory.limit_in_bytes");
    usage = read_number(v1 + "/memory.usage_in_bytes");
    inactive = read_keyed(v1 + "/memory.stat", "total_inactive_file ");
  }
  // v1 says "no limit" with a number near 2^63.
  if (limit < 0 || limit >= (int64_t{1} << 60) || usage < 0) return -1;
  return std::max<int64_t>(0, limit - (usage - std::max<int64_t>(0, inactive)));
}

}  // namespace

MemoryLimit host_memory_limit() {
  if (auto env = env_limit()) return {*env, "SHARDLAB_MEMORY_LIMIT"};
  MemoryLimit m;
  const int64_t kib = read_keyed("/proc/meminfo", "MemAvailable:");
  if (kib >= 0) m = {kib * 1024, "MemAvailable"};
  const int64_t cg = cgroup_available();
  if (cg >= 0 && (m.bytes < 0 || cg < m.bytes)) m = {cg, "cgroup memory limit"};
  return m;
}

MemoryLimit gpu_memory_limit(int gpu) {
  if (auto env = env_limit()) return {*env, "SHARDLAB_MEMORY_LIMIT"};
  int64_t free_bytes = 0, total_bytes = 0;
  if (!cuda_memory_info(gpu, &free_bytes, &total_bytes)) return {};
  return {free_bytes, "cudaMemGetInfo"};
}

// ---------------------------------------------------------------------------
// The refusal

namespace {

std::string what_runs(const RunConfig& cfg, bool with_steps) {
  std::string s = cfg.model + ", " + cfg.strategy + ", world " + std::to_string(cfg.world);
  if (with_steps) s += ", " + std::to_string(cfg.steps) + " steps";
  return s;
}

}  // namespace

void check_memory(const RunConfig& cfg, const RunOutputs& outputs) {
  if (cfg.force) return;
  const MemoryEstimate e = estimate_memory(cfg, outputs);
  if (e.ranks.empty()) return;
  const std::string force = ", or --force to try anyway";
  // Every process keeps its own history: the steps' part of the total is per process.
  const int64_t steps_all = mul(e.steps_total, std::max(1, e.processes));
  const bool steps_heavy = steps_all > e.host_total / 2;
  const std::string advice =
      steps_heavy ? std::string("use fewer --steps") + (cfg.record ? " or --no-record" : "")
      : outputs.save_data && e.shared > e.host_total / 2
          ? std::string("use fewer --steps or a smaller --batch with --save-data")
      : cfg.world == 1 ? std::string("use a smaller model or batch")
                       : std::string("use a smaller model, batch or world");

  const MemoryLimit host = host_memory_limit();
  if (host.bytes >= 0 && e.host_total > host.bytes) {
    const auto text = [](int64_t b) { return bytes_string(static_cast<double>(b)); };
    // One process per rank: what the processes hold, each for itself, beside their ranks.
    const std::string processes =
        e.processes == 0
            ? ""
            : "of it " + text(e.processes_total) + " for the " + std::to_string(e.processes) +
                  " processes (" + text(e.process_baseline) +
                  " each at start-up, and each one's own weights, data and history)";
    std::string need = "needs about " + text(e.host_total);
    if (steps_heavy)
      need += " (" + text(steps_all) + " of it records and history, " + text(e.per_step) +
              " a step" +
              (e.processes ? " in each of the " + std::to_string(e.processes) + " processes" : "") +
              ")";
    else if (e.device == DeviceKind::cpu && cfg.world > 1)
      need = "needs about " + text(e.largest_rank()) + " per rank (" + text(e.host_total) +
             " in all" + (e.processes ? ", " + processes : "") + ")";
    else if (e.device == DeviceKind::cuda)
      need += " of host memory" + (e.processes ? " (" + processes + ")" : "");
    else if (e.processes)
      need += " (" + processes + ")";
    throw MemoryRefused(what_runs(cfg, steps_heavy) + " " + need + " but " +
                        bytes_string(static_cast<double>(host.bytes)) + " is available (" +
                        host.source + "); " + advice + force);
  }
  for (const auto& [gpu, bytes] : e.gpu_total) {
    const MemoryLimit limit = gpu_memory_limit(gpu);
    if (limit.bytes < 0 || bytes <= limit.bytes) continue;
    std::string ranks;
    for (const RankMemoryEstimate& r : e.ranks)
      if (r.gpu == gpu) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r.rank);
    throw MemoryRefused(what_runs(cfg, false) + " needs about " +
                        bytes_string(static_cast<double>(bytes)) +
                        " on cuda:" + std::to_string(gpu) + " (rank" +
                        (ranks.find(',') != std::string::npos ? "s " : " ") + ranks + ") but " +
                        bytes_string(static_cast<double>(limit.bytes)) + " is free there (" +
                        limit.source + "); " + advice + force);
  }
}

}  // namespace shardlab
