// Run summaries: final loss, median step time, peak memory per rank by
// category, bytes sent per rank per step, and a word when ranks outnumber cores.
#include "app/summary.h"
#include "core/parallel/model_state.h"
#include "core/parallel/strategy.h"
#include "core/run_options.h"

#include <algorithm>
#include <cstdio>

#include "core/comm/cores.h"
#include "core/model/model.h"
#include "core/predict/memory_estimate.h"

namespace shardlab::app {

std::string human_bytes(double b) {
  char buf[32];
  const char* unit[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) {
    b /= 1024;
    ++u;
  }
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, unit[u]);
  return buf;
}

std::string oversubscription_line(const RunResult& r, int cores) {
  // GPU ranks compute on their devices, timed by CUDA events: only CPU ranks'
  // compute takes turns on the cores.
  if (r.placement.kind != DeviceKind::cpu) return "";
  return oversubscription_note(r.cfg.world, cores);
}

namespace {
// gpt, single and the data-parallel family: the transformer blocks' share of
// the measured activations, from Korthikanti et al.'s formula (model_state.h).
void print_block_activations(const RunResult& r) {
  const RunConfig& c = r.cfg;
  if (c.model.rfind("gpt:", 0) != 0 || r.ranks.empty()) return;
  const StrategyInfo& info = strategy_info(c.strategy);
  if (info.has_stages()) return;  // micro-batches in flight: the pipeline report
  const ModelSpec spec = resolve_model(c);
  const int rows = info.rows_per_pass(c, 0);
  const int typical = std::min(info.typical_rank(c), static_cast<int>(r.ranks.size()) - 1);
  // On a dp × tp mesh each rank keeps its tp share (Korthikanti §4.2).
  const int tp = tensor_parallel_degree(c);
  const BlockActivations b = block_activations(spec.seq, rows, spec.dim, spec.heads, c.precision,
                                               spec.flash_attention, tp, c.sequence_parallel);
  const size_t act = static_cast<size_t>(MemCategory::activations);
  std::printf(
      "    activations: %d blocks x %s (Korthikanti et al. 2022 without dropout, %s, + LayerNorm "
      "statistics%s; s=%d b=%d h=%d a=%d%s) = %s of rank %s's measured %s\n",
      spec.layers, human_bytes(b.total()).c_str(), b.formula.c_str(),
      spec.flash_attention ? " and flash attention's logsumexp, 4·a·s·b" : "", spec.seq, rows,
      spec.dim, spec.heads, tp > 1 ? (" t=" + std::to_string(tp)).c_str() : "",
      human_bytes(spec.layers * b.total()).c_str(), std::to_string(typical).c_str(),
      human_bytes(static_cast<double>(r.ranks[typical].memory.device.peak[act])).c_str());
}

// The memory preflight's predicted peak in use per rank (device pool), or
// nothing when the run's settings no longer validate here (a GPU run read elsewhere).
std::vector<int64_t> predicted_peaks(const RunConfig& cfg) {
  std::vector<int64_t> peaks;
  try {
    for (const RankMemoryEstimate& e : estimate_memory(cfg).ranks)
      peaks.push_back(e.at_report.device.peak_total);
  } catch (const std::exception&) {
    peaks.clear();
  }
  return peaks;
}
// A mesh of more than one axis: what each rank sent over each axis's group,
// ranks that sent the same grouped ("ranks 0-3: tp 1.00 MiB, pp 16.00 KiB").
void print_traffic_by_axis(const RunResult& r) {
  const RunConfig& c = r.cfg;
  if (c.mesh.empty() || r.ranks.empty()) return;
  const Mesh mesh = run_mesh(c);
  int axes = 0;
  for (MeshAxis axis : kMeshAxes) axes += mesh.size(axis) > 1;
  if (axes < 2) return;
  auto text_of = [&](const RankReport& rr) {
    std::string t;
    // Innermost first: tp's all-reduces of activations, pp's one activation
    // per micro-batch, dp's gradients once a step.
    for (MeshAxis axis : {MeshAxis::tp, MeshAxis::pp, MeshAxis::dp}) {
      if (mesh.size(axis) < 2) continue;
      t += (t.empty() ? "" : ", ") + std::string(to_string(axis)) + " " +
           human_bytes(rr.sent_by_axis_per_step[static_cast<size_t>(axis)]);
    }
    double axes_total = 0;
    for (double b : rr.sent_by_axis_per_step) axes_total += b;
    if (const double rest = rr.bytes_sent_per_step - axes_total; rest >= 1)
      t += ", other " + human_bytes(rest);
    return t;
  };
  std::printf("  sent per step over each axis's group (the table's sent/step, split):\n");
  size_t first = 0;
  for (size_t i = 1; i <= r.ranks.size(); ++i) {
    const std::string t = text_of(r.ranks[first]);
    if (i < r.ranks.size() && text_of(r.ranks[i]) == t) continue;
    const std::string who = first + 1 == i
                                ? "rank " + std::to_string(first)
                                : "ranks " + std::to_string(first) + "-" + std::to_string(i - 1);
    std::printf("    %-11s %s\n", who.c_str(), t.c_str());
    first = i;
  }
}
}  // namespace

nlohmann::json summary_json(const RunResult& r) {
  const RunConfig& c = r.cfg;
  nlohmann::json j;
  j["model"] = c.model;
  j["params"] = make_layout(c).unique_total();
  j["strategy"] = c.strategy;
  j["world"] = c.world;
  j["batch"] = c.batch;
  j["steps"] = c.steps;
  j["optimizer"] = to_string(c.optimizer.kind);
  j["lr"] = c.optimizer.lr;
  j["seed"] = c.seed;
  j["device"] = r.placement.device_name;
  j["backend"] = to_string(r.placement.comm);
  j["placement"] = r.placement.summary;
  if (!c.attention.empty()) j["attention"] = c.attention;  // gpt: naive or flash, as it ran
  if (!r.clock_offset_ns.empty()) {
    j["process_rank"] = r.process_rank;
    j["clock_offset_ns"] = r.clock_offset_ns;
    j["clock_rtt_ns"] = r.clock_rtt_ns;
  }
  const int cores = cores_available();
  const std::string oversubscribed = oversubscription_line(r, cores);
  j["cores_available"] = cores;
  j["oversubscribed"] = !oversubscribed.empty();
  if (!oversubscribed.empty()) j["oversubscription"] = oversubscribed;
  j["final_loss"] = r.losses.empty() ? 0.0 : r.losses.back();
  j["losses"] = r.losses;
  j["median_step_ms"] = r.median_step_ms;
  j["step_ms"] = r.step_ms;
  nlohmann::json ranks = nlohmann::json::array();
  const std::vector<int64_t> predicted = predicted_peaks(c);
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    const RankReport& rr = r.ranks[i];
    nlohmann::json peak;
    for (int k = 0; k < kNumMemCategories; ++k)
      peak[to_string(static_cast<MemCategory>(k))] = rr.memory.device.peak[k];
    ranks.push_back({{"rank", i},
                     {"peak_bytes_by_category", peak},
                     {"peak_bytes_total", rr.memory.device.peak_total},
                     {"host_peak_bytes_total", rr.memory.host.peak_total},
                     {"bytes_sent_per_step", rr.bytes_sent_per_step},
                     {"median_step_ms", steady_median(rr.step_ms)}});
    if (rr.memory.disk.peak_total > 0)  // --offload nvme:DIR
      ranks.back()["disk_peak_bytes_total"] = rr.memory.disk.peak_total;
    if (!c.mesh.empty()) {
      nlohmann::json by_axis;
      for (MeshAxis axis : kMeshAxes)
        by_axis[to_string(axis)] = rr.sent_by_axis_per_step[static_cast<size_t>(axis)];
      ranks.back()["sent_by_axis_per_step"] = by_axis;
    }
    if (i < predicted.size()) ranks.back()["predicted_peak_bytes_total"] = predicted[i];
  }
  j["ranks"] = ranks;
  pipeline_report_json(r, j);
  model_state_report_json(r, j);
  server_report_json(r, j);
  return j;
}

void print_summary(const RunResult& r) {
  const RunConfig& c = r.cfg;
  std::printf("\nSummary — %s, %s, world %d%s, batch %d, %d steps\n", c.model.c_str(),
              c.strategy.c_str(), c.world, c.mesh.empty() ? "" : (" (" + c.mesh + ")").c_str(),
              c.batch, c.steps);
  std::printf("  placement         %s\n", r.placement.summary.c_str());
  if (!c.attention.empty())  // gpt: what --attention resolved to
    std::printf("  attention         %s\n",
                c.attention == "flash"
                    ? "flash (FlashAttention-2: one logsumexp per position and head kept, "
                      "no T x T matrix)"
                    : "naive (the [B,H,T,T] probabilities kept for backward)");
  const std::string oversubscribed = oversubscription_line(r, cores_available());
  if (!oversubscribed.empty()) std::printf("  cores             %s\n", oversubscribed.c_str());
  if (!r.clock_offset_ns.empty()) {
    // Each process's clock against rank 0's, measured at rendezvous (the trace
    // already shows every rank on rank 0's clock).
    std::string line;
    for (size_t i = 1; i < r.clock_offset_ns.size(); ++i) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%srank %zu %+.1f us (round trip %.1f us)", i > 1 ? ", " : "",
                    i, static_cast<double>(r.clock_offset_ns[i]) / 1e3,
                    i < r.clock_rtt_ns.size() ? static_cast<double>(r.clock_rtt_ns[i]) / 1e3 : 0.0);
      line += buf;
    }
    if (!line.empty()) std::printf("  clocks vs rank 0  %s\n", line.c_str());
  }
  std::printf("  final loss        %.6g\n", r.losses.empty() ? 0.0 : r.losses.back());
  if (!r.skipped_steps.empty()) {
    // fp16's loss scaler skipped these updates (numbered as the progress lines count).
    std::string steps;
    for (size_t i = 0; i < r.skipped_steps.size(); ++i)
      steps += (i ? ", " : "") + std::to_string(r.skipped_steps[i] + 1);
    std::printf("  skipped steps     %zu (fp16 gradients overflowed; the scale halved): %s\n",
                r.skipped_steps.size(), steps.c_str());
  }
  std::printf("  median step time %8.3f ms\n", r.median_step_ms);
  std::printf("  peak memory per rank (measured by the allocator), and bytes sent per step:\n");
  std::printf("    %-5s %11s %11s %11s %11s %11s %11s %11s %13s\n", "rank", "params", "grads",
              "optimizer", "activations", "comm bufs", "temporary", "peak total", "sent/step");
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    const PoolStats& m = r.ranks[i].memory.device;
    std::printf("    %-5zu", i);
    for (int k = 0; k < kNumMemCategories; ++k)
      std::printf(" %11s", human_bytes(m.peak[k]).c_str());
    std::printf(" %11s %13s\n", human_bytes(m.peak_total).c_str(),
                human_bytes(r.ranks[i].bytes_sent_per_step).c_str());
  }
  // What the memory preflight predicted before the run, beside what was measured.
  const std::vector<int64_t> predicted = predicted_peaks(c);
  if (predicted.size() == r.ranks.size()) {
    std::string line;
    const bool same = std::equal(predicted.begin() + 1, predicted.end(), predicted.begin());
    if (same)
      line = human_bytes(static_cast<double>(predicted[0])) +
             (predicted.size() > 1 ? " every rank" : "");
    else
      for (size_t i = 0; i < predicted.size(); ++i)
        line += (i ? ", " : "") + std::string("rank ") + std::to_string(i) + " " +
                human_bytes(static_cast<double>(predicted[i]));
    std::printf("    predicted peak total (memory preflight, before the run): %s\n", line.c_str());
  }
  // --offload nvme:DIR: the disk pool, what each rank kept in its file instead.
  if (!r.ranks.empty() && r.ranks[0].memory.disk.peak_total > 0) {
    std::string line;
    for (size_t i = 0; i < r.ranks.size(); ++i)
      line += (i ? ", " : "") + std::string("rank ") + std::to_string(i) + " " +
              human_bytes(static_cast<double>(r.ranks[i].memory.disk.peak_total));
    std::printf("    on disk (%s in the offload file under %s): %s\n",
                c.offload_params ? "parameter shards and optimizer state" : "optimizer state",
                nvme_offload_dir(c).c_str(), line.c_str());
  }
  print_traffic_by_axis(r);
  print_block_activations(r);
  print_pipeline_report(r);
  print_model_state_report(r);
  print_server_report(r);
}

}  // namespace shardlab::app
