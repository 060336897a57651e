// `shardlab bench gpu`: the workloads Shardlab is compared on with PyTorch eager
// (bench/gpu-vs-pytorch.sh), each with where its median step went, its model
// TFLOP/s against the GPU's peak, and its peak memory per rank.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/args.h"
#include "app/commands.h"
#include "app/gpu_speed.h"
#include "app/summary.h"
#include "core/device/gpu.h"
#include "core/model/model.h"
#include "core/parallel/strategy.h"
#include "core/predict/memory_estimate.h"
#include "core/run/runner.h"

namespace shardlab::app {

namespace {

const char* kUsage =
    R"(usage: shardlab bench gpu [--device cuda|cpu] [--steps 10] [--only SUBSTRING]
                        [--json] [--tf32] [--no-record]

The workloads of Shardlab's comparison with PyTorch eager (bench/gpu-vs-pytorch.sh),
one run each on one GPU, AdamW lr 1e-3:
  mlp:8x4096 batch 1024 and mlp:8x1024 batch 64, fp32 and bf16;
  gpt:6x384x6 seq 256 batch 64, fp32 and bf16; gpt:4x128x4 seq 64 batch 32, fp32;
  single, ddp, zero1, zero2, zero3, fsdp on mlp:8x1024 batch 64, fp32, at world 2: the
  ranks share a single GPU (Gloo, host staging), or take one each where there are two
  (CUDA_VISIBLE_DEVICES=0 makes them share); the placement line says which.
Columns: median step (steps 1..: step 0 is a warm-up, ~100x slower on a GPU); the
share of that step in each span kind, from the recorded spans of the step nearest the
median on its slowest rank (fwd includes the loss; comm can overlap compute, so the
shares may add to over 100%; idle: no span at all, e.g. kernel launches the GPU waits
for); model TFLOP/s (every Linear 2*rows*in*out forward, twice that backward, plus
attention's QK^T and AV at 2*B*T*T*C each) and its share of the GPU's dense peak for
the precision (H100 SXM/HBM3, H100 PCIe, H200, A100; otherwise "peak ?"); the largest
peak memory of any rank, from the allocator.

  --device D     cuda (default) or cpu: the same table at small sizes (widths and
                 batches / 16, contexts / 4, layers and heads kept), for a machine
                 without a GPU
  --steps N      steps per row (default 10; 2 or more)
  --only S       the rows whose label contains S, e.g. mlp:8x4096/b1024/bf16, gpt:6x384x6,
                 zero3:2 (labels as in the first column)
  --json         one JSON object per row and line, nothing else
  --tf32         fp32 rows with TF32 GEMMs (as torch.backends.cuda.matmul.allow_tf32)
  --no-record    time the rows without recording spans (no shares): like for like with a
                 framework that records nothing; the difference is what recording costs
)";

// One row: a model at a batch, precision, strategy and world.
struct Workload {
  std::string model;  // at its GPU size
  int seq = 0;        // gpt: the context T
  int batch = 0;
  std::string precision = "fp32";
  std::string strategy = "single";
  int world = 1;
  bool strategies = false;  // of the block that compares strategies (labelled by strategy)
};

std::vector<Workload> gpu_workloads() {
  std::vector<Workload> w;
  for (const char* p : {"fp32", "bf16"}) w.push_back({"mlp:8x4096", 0, 1024, p});
  for (const char* p : {"fp32", "bf16"}) w.push_back({"mlp:8x1024", 0, 64, p});
  for (const char* p : {"fp32", "bf16"}) w.push_back({"gpt:6x384x6", 256, 64, p});
  w.push_back({"gpt:4x128x4", 64, 32, "fp32"});
  const std::pair<const char*, int> strategies[] = {{"single", 1}, {"ddp", 2},   {"zero1", 2},
                                                    {"zero2", 2},  {"zero3", 2}, {"fsdp", 2}};
  for (const auto& [s, world] : strategies)
    w.push_back({"mlp:8x1024", 0, 64, "fp32", s, world, true});
  return w;
}

// --device cpu: every width and batch / 16 and the context / 4, layers and
// heads kept, so the whole table runs in seconds on a laptop's cores.
Workload cpu_size(Workload w) {
  ModelSpec spec = ModelSpec::parse(w.model);
  spec.dim /= 16;
  w.model = spec.str();
  w.batch = std::max(w.batch / 16, w.world);
  w.seq /= 4;
  return w;
}

// "mlp:8x4096/b1024/bf16", "gpt:6x384x6/T256/b64/fp32"; the strategy rows
// "zero3:2/mlp:8x1024/b64" (fp32), which no model row's label contains.
std::string label_of(const Workload& w) {
  std::string s =
      w.model + (w.seq ? "/T" + std::to_string(w.seq) : "") + "/b" + std::to_string(w.batch);
  if (w.strategies) return w.strategy + ":" + std::to_string(w.world) + "/" + s;
  return s + "/" + w.precision;
}

// Where one step went, in percent of its duration.
struct Shares {
  double data = 0, forward = 0, backward = 0, optimizer = 0, comm = 0, idle = 0;
};

using Interval = std::pair<int64_t, int64_t>;

// Length of the union of intervals, each clipped to [lo, hi).
int64_t covered(std::vector<Interval> v, int64_t lo, int64_t hi) {
  std::sort(v.begin(), v.end());
  int64_t total = 0, end = lo;
  for (auto [b, e] : v) {
    b = std::max({b, lo, end});
    e = std::min(e, hi);
    if (e > b) {
      total += e - b;
      end = e;
    }
  }
  return total;
}

// The shares of the step nearest the median (steps 1..), on its slowest rank:
// what that rank's spans covered of its own step window (the step mark).
std::optional<Shares> step_shares(const RunResult& r) {
  const size_t n = r.step_ms.size();
  if (n == 0 || r.recorders.empty()) return std::nullopt;
  const double med = steady_median(r.step_ms);
  size_t step = n > 1 ? 1 : 0;
  for (size_t s = step; s < n; ++s)
    if (std::abs(r.step_ms[s] - med) < std::abs(r.step_ms[step] - med)) step = s;
  const int first = r.resumed_after_step;  // the step number of step_ms[0]
  // The slowest rank's window for that step: its step time is the step's.
  Interval window{0, 0};
  const Recorder* rank = nullptr;
  for (const auto& rec : r.recorders) {
    for (const Mark& m : rec->snapshot().marks)
      if (m.kind == MarkKind::step && m.id == static_cast<uint64_t>(first + step) &&
          m.t_end_ns - m.t_begin_ns > window.second - window.first) {
        window = {m.t_begin_ns, m.t_end_ns};
        rank = rec.get();
      }
  }
  if (!rank || window.second <= window.first) return std::nullopt;
  std::vector<Interval> data, forward, backward, optimizer, comm, all;
  for (const Span& sp : rank->snapshot().spans) {
    const Interval iv{sp.t_begin_ns, sp.t_end_ns};
    all.push_back(iv);
    if (sp.lane == Lane::comm) {
      comm.push_back(iv);
      continue;
    }
    switch (sp.kind) {
      case SpanKind::data:
        data.push_back(iv);
        break;
      case SpanKind::forward:
      case SpanKind::loss:
        forward.push_back(iv);
        break;
      case SpanKind::backward:
      case SpanKind::weight:
        backward.push_back(iv);
        break;
      case SpanKind::optimizer:
        optimizer.push_back(iv);
        break;
      default:
        break;  // in no column, but not idle either
    }
  }
  const auto [lo, hi] = window;
  auto pct = [&](const std::vector<Interval>& v) {
    return 100.0 * static_cast<double>(covered(v, lo, hi)) / static_cast<double>(hi - lo);
  };
  Shares s;
  s.data = pct(data);
  s.forward = pct(forward);
  s.backward = pct(backward);
  s.optimizer = pct(optimizer);
  s.comm = pct(comm);
  s.idle = 100.0 - pct(all);
  return s;
}

struct Row {
  std::string label;
  RunConfig cfg;
  std::string precision;  // as it ran: "tf32" for fp32 with TF32 GEMMs
  bool strategy_row = false;
};

}  // namespace

int bench_gpu(int argc, char** argv) {
  const Args a(argc, argv, "bench gpu", {"device", "steps", "only"}, {"json", "tf32", "no-record"});
  if (a.help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string device = a.str("device", "cuda");
  if (device != "cuda" && device != "cpu")
    throw ConfigError("--device '" + device + "' is invalid (valid: cuda, cpu)");
  const int steps = a.integer("steps", 10, "2 or more");
  if (steps < 2)
    throw ConfigError("--steps " + std::to_string(steps) +
                      " is invalid (valid: 2 or more: step 0 is a warm-up, left out)");
  const bool json = a.has("json"), tf32 = a.has("tf32"), no_record = a.has("no-record");
  const std::string only = a.str("only", "");
  const bool cuda = device == "cuda";
  if (cuda && cuda_device_count() == 0)
    throw ConfigError("bench gpu: no usable GPU here (" + cuda_status() +
                      "); --device cpu runs the same table at small sizes");

  std::vector<Row> rows;
  std::string labels;
  for (Workload w : gpu_workloads()) {
    if (!cuda) w = cpu_size(w);
    const std::string label = label_of(w);
    labels += (labels.empty() ? "" : ", ") + label;
    if (label.find(only) == std::string::npos) continue;
    RunConfig base;
    base.model = w.model;
    base.seq = w.seq;
    base.batch = w.batch;
    base.world = w.world;
    base.steps = steps;
    base.device = device;
    base.precision = w.precision;
    RunConfig c = for_strategy(base, w.strategy);
    // TF32 changes fp32 GEMMs only (bf16 ones are on tensor cores already).
    c.tf32 = tf32 && w.precision == "fp32";
    const std::string precision = c.tf32 ? "tf32" : w.precision;
    validate(c);  // every row is checked before any runs, its memory too
    check_memory(c);
    c.record = !no_record;
    rows.push_back({label, c, precision, w.strategies});
  }
  if (rows.empty())
    throw ConfigError("--only '" + only + "' matches no row (valid: a part of a label: " + labels +
                      ")");

  const std::string gpu = cuda ? cuda_status() : "";
  if (!json) {
    std::printf(
        "bench gpu: %s, %d steps per row, AdamW lr 1e-3; median over steps 1.. (step 0 "
        "is a warm-up)\n",
        cuda ? gpu.c_str() : "cpu (small sizes: widths and batches / 16, contexts / 4)", steps);
    std::printf("%-26s %-5s %10s %5s %5s %5s %5s %5s %5s %9s %8s %12s\n", "workload", "prec",
                "median ms", "data", "fwd", "bwd", "opt", "comm", "idle", "TFLOP/s", "of peak",
                "peak mem/rk");
  }
  std::string placement;
  for (const Row& row : rows) {
    const RunResult r = run_training(row.cfg);
    const double ms = steady_median(r.step_ms);
    const double flops = train_step_flops(resolve_model(row.cfg), row.cfg.batch);
    const double tflops = ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0;
    // 0: no peak known (a CPU, or a GPU the table lacks).
    const double peak =
        cuda ? peak_tflops(gpu, row.cfg.precision, row.precision == "tf32").value_or(0) : 0;
    const std::optional<Shares> sh = step_shares(r);
    std::vector<int64_t> peak_mem;
    for (const RankReport& rr : r.ranks) peak_mem.push_back(rr.memory.device.peak_total);
    const int64_t max_mem = *std::max_element(peak_mem.begin(), peak_mem.end());
    if (row.strategy_row) placement = r.placement.summary;
    if (json) {
      nlohmann::json j = {{"label", row.label},
                          {"model", row.cfg.model},
                          {"seq", row.cfg.seq},
                          {"batch", row.cfg.batch},
                          {"strategy", row.cfg.strategy},
                          {"world", row.cfg.world},
                          {"precision", row.precision},
                          {"device", device},
                          {"gpu", gpu},
                          {"placement", r.placement.summary},
                          {"steps", steps},
                          {"median_step_ms", ms},
                          {"step_ms", r.step_ms},
                          {"flops_per_step", flops},
                          {"tflops", tflops},
                          {"peak_tflops", nullptr},
                          {"share_of_peak_pct", nullptr},
                          {"shares_pct", nullptr},
                          {"peak_mem_bytes_per_rank", peak_mem}};
      if (peak > 0) {
        j["peak_tflops"] = peak;
        j["share_of_peak_pct"] = 100 * tflops / peak;
      }
      if (sh)
        j["shares_pct"] = {{"data", sh->data},          {"forward", sh->forward},
                           {"backward", sh->backward},  {"optimizer", sh->optimizer},
                           {"communication", sh->comm}, {"idle", sh->idle}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);  // a row as soon as it ran: the script reads them one by one
      continue;
    }
    char of_peak[16] = "peak ?";
    if (peak > 0) std::snprintf(of_peak, sizeof of_peak, "%.1f%%", 100 * tflops / peak);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%-35s", "(no spans: --no-record)");
    if (sh)
      std::snprintf(buf, sizeof buf, "%4.0f%% %4.0f%% %4.0f%% %4.0f%% %4.0f%% %4.0f%%", sh->data,
                    sh->forward, sh->backward, sh->optimizer, sh->comm, sh->idle);
    std::printf("%-26s %-5s %10.3f %s %9.3g %8s %12s\n", row.label.c_str(), row.precision.c_str(),
                ms, buf, tflops, of_peak, human_bytes(static_cast<double>(max_mem)).c_str());
    std::fflush(stdout);
  }
  if (!json && !placement.empty())
    std::printf("strategy rows' placement (world 2): %s\n", placement.c_str());
  return 0;
}

}  // namespace shardlab::app
