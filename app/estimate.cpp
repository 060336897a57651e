// `shardlab estimate`: predicted model-state memory and communication per rank
// for the data-parallel family, from the ZeRO paper's accounting (core/parallel/model_state.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "app/args.h"
#include "app/commands.h"
#include "app/config_args.h"
#include "core/comm/placement.h"
#include "core/io/atomic_file.h"
#include "core/model/model.h"
#include "core/parallel/model_state.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/strategy.h"
#include "core/predict/mesh_estimate.h"
#include "core/predict/meta_memory.h"
#include "core/run_options.h"

namespace shardlab::app {

namespace {

const char* kEstimateHelp = R"(usage: shardlab estimate --params N --world W --strategy S [options]

Model-state memory per rank (parameters, gradients, optimizer state) and
communication per step, from the ZeRO paper's accounting (Rajbhandari et al.
2020: K = 12 for mixed-precision Adam). Activations, buffers and padding are
not model states; 'shardlab run' prints these predictions beside what it measures.

  --params N          number of parameters Ψ, e.g. 7.5e9 (or --model)
  --model SPEC        take Ψ from a model, e.g. mlp:8x1024 or gpt:2x64x4
  --world N           data-parallel ranks N
  --strategy S        single, ddp, dp, zero1, zero2, zero3, fsdp
  --precision P       fp32 | bf16 | fp16 (default fp32; bf16/fp16 = mixed precision)
  --optimizer NAME    adamw | sgd (default adamw)
  --no-reshard        fsdp: keep gathered params from forward to backward (2Ψ traffic)
  --seq T             gpt: context length (default 64); with --model gpt:LxCxH the estimate
                      adds one transformer block's activations (Korthikanti et al. 2022)
  --attention A       gpt: naive | flash (default naive, as a run on the CPU). flash keeps no
                      a·s² attention matrix: Korthikanti's 5·a·s/h term goes (2·a·s/h without
                      dropout), one fp32 logsumexp per position and head (4·a·s·b bytes) comes
  --batch B           global batch for the activations and the run's peak (default 64)
  --data FILE         gpt: the text whose vocabulary sets V (default assets/corpus.txt)
  --json              print one JSON object
  --ops FILE          with --model: write each rank's ordered operation list from the meta run
                      (JSON lines: a header, then one line per rank): compute spans with the
                      matrix FLOPs of their kernels, communication ops where issued (kind,
                      bytes, peer) and where waited for; setup, two steps and the export

A mesh (tensor, pipeline and data parallel), or a pipeline strategy, takes a gpt:
  --mesh AXES         e.g. dp=2,pp=2,tp=2 (--world: the product); --mesh-order as 'run' takes
  --strategy S        gpipe, 1f1b or naive-mp (the schedule on the pp axis)
  --micro-batches M   --sequence-parallel, --dp-zero1, --recompute: as 'shardlab run' takes them
and prints, per pipeline stage, Megatron-LM's accounting of the weights a tp rank keeps
(12h² + 13h a block, its matrices cut in t), the model states, Korthikanti et al.'s
activations per block with and without sequence parallelism and recomputation, the
micro-batches in flight, the bubble (P−1)/(M+P−1), and the bytes each axis's group carries
per step (tp's all-reduces, pp's activations and gradients, dp's gradients), each beside
the meta run's figure: what this implementation allocates and sends.
A data-parallel strategy (ddp, zero1, zero2, zero3, fsdp) with --mesh dp=D,tp=T (a gpt
or an mlp; --sequence-parallel with a gpt) gets the ZeRO accounting below over the dp
axis, N = D, of one tp slice's Ψ, and the meta run's bytes over each axis's group.

With --model, also the peak this implementation reaches per rank at --batch
(default 64, 'shardlab run's default), everything included, by category, and its
model states beside the formula's: the strategy's own code run on meta devices
that hold no memory, what the memory check before every run predicts. Any world
and size: GPT-3 (--model gpt:96x12288x96 --seq 2048 --world 1024 --batch 1024)
takes seconds.

bytes per parameter (P params + G grads + K optimizer):
  fp32  AdamW 4 + 4 + 8 = 16   SGD 4 + 4 + 0 = 8
  mixed AdamW 2 + 2 + 12 = 16  SGD 2 + 2 + 4 (fp32 master) = 8
per rank:  single, ddp (P+G+K)Ψ     zero1 (P+G)Ψ + KΨ/N     zero2 PΨ + (G+K)Ψ/N
           zero3, fsdp (P+G+K)Ψ/N   dp: device 0 (P+G+K)Ψ, the others (P+G)Ψ
traffic:   ddp, zero1, zero2 2Ψ     zero3, fsdp 3Ψ (fsdp --no-reshard 2Ψ)
           dp: device 0 sends (N−1)Ψ, the others Ψ; on a ring a rank sends (N−1)/N of the volume
)";

double parse_params(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v < 1 || v > 1e15 || v != std::floor(v))
    throw ConfigError("--params '" + text +
                      "' is invalid (valid: a whole number of parameters from 1 to 1e15, e.g. "
                      "7.5e9)");
  return v;
}

std::string gb(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f GB", bytes / 1e9);
  return buf;
}

// A size that reads at any scale: 1.234 GB, 12.345 MB, 4.2 kB, 512 bytes (10^3 steps).
std::string short_bytes(double bytes) {
  char buf[64];
  if (bytes >= 1e9)
    return gb(bytes);
  else if (bytes >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3f MB", bytes / 1e6);
  else if (bytes >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1f kB", bytes / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  return buf;
}

std::string num(double v) {
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e18)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

nlohmann::json state_json(const ModelStateBytes& m) {
  return {{"params", m.params},
          {"grads", m.grads},
          {"optimizer_state", m.optimizer},
          {"total", m.total()},
          {"total_gb", m.total() / 1e9},
          {"formula", m.formula},
          {"pool", m.on_host ? "host" : "device"}};
}

nlohmann::json comm_json(const CommPrediction& c) {
  return {{"formula", c.formula},
          {"by_operation", c.by_operation},
          {"volume_elements", c.volume_elements},
          {"bytes_per_element", c.bytes_per_element},
          {"volume_bytes", c.volume_bytes},
          {"volume_gb", c.volume_bytes / 1e9},
          {"sent_bytes", c.sent_bytes},
          {"sent_gb", c.sent_bytes / 1e9}};
}

void print_state(const char* who, const ModelStateBytes& m) {
  std::printf("  %s: %s = %s bytes (%s)%s\n", who, m.formula.c_str(), num(m.total()).c_str(),
              gb(m.total()).c_str(), m.on_host ? " in host memory" : "");
  std::printf("    params %s (%s), grads %s (%s), optimizer state %s (%s)\n", num(m.params).c_str(),
              gb(m.params).c_str(), num(m.grads).c_str(), gb(m.grads).c_str(),
              num(m.optimizer).c_str(), gb(m.optimizer).c_str());
}

void print_comm(const char* who, const CommPrediction& c, bool ring) {
  std::printf("  %s: %s × %d bytes = %s bytes (%s)", who, c.formula.c_str(), c.bytes_per_element,
              num(c.volume_bytes).c_str(), gb(c.volume_bytes).c_str());
  if (ring)
    std::printf("; on a ring each rank sends (N−1)/N of it: %s bytes (%s)",
                num(c.sent_bytes).c_str(), gb(c.sent_bytes).c_str());
  std::printf("\n");
  if (!c.by_operation.empty()) std::printf("    by operation: %s\n", c.by_operation.c_str());
}

// --ops: one JSON line of what ran, then one per rank with its operation list.
void write_ops(const std::string& path, const RunConfig& cfg, const MetaMemory& m) {
  AtomicFile out(path);
  nlohmann::json head = {{"model", cfg.model},
                         {"strategy", cfg.strategy},
                         {"world", cfg.world},
                         {"batch", cfg.batch},
                         {"precision", cfg.precision},
                         {"steps", m.steps},
                         {"device", m.device == DeviceKind::cuda ? "cuda" : "cpu"},
                         {"ops",
                          "compute: {op, step, layer, mb, flops}; issue: {op, id, step, "
                          "layer, mb, bytes, peer}; wait: {wait: id, step}"}};
  std::string line = head.dump() + "\n";
  out.write(line.data(), line.size());
  for (const MetaRankMemory& r : m.ranks) {
    nlohmann::json ops = nlohmann::json::array();
    for (const MetaOp& op : r.ops) {
      nlohmann::json o;
      if (op.what == MetaOp::What::wait) {
        o = {{"wait", op.id}, {"step", op.step}};
      } else {
        o = {{"op", to_string(op.kind)}, {"step", op.step}};
        if (op.layer >= 0) o["layer"] = op.layer;
        if (op.micro_batch >= 0) o["mb"] = op.micro_batch;
        if (op.what == MetaOp::What::compute) {
          o["flops"] = op.flops;
        } else {
          o["id"] = op.id;
          o["bytes"] = op.bytes;
          if (op.peer >= 0) o["peer"] = op.peer;
        }
      }
      ops.push_back(std::move(o));
    }
    line = nlohmann::json{{"rank", r.rank}, {"ops", std::move(ops)}}.dump() + "\n";
    out.write(line.data(), line.size());
  }
  if (!out.commit()) throw std::runtime_error("cannot write --ops '" + path + "': " + out.reason());
}

int64_t peak_of(const MetaRankMemory& r) {
  return r.at_report.device.peak_total + r.at_report.host.peak_total;
}

// Consecutive ranks whose predicted memory is the same, printed once: a world
// of 1024 reads as a line or two.
struct RankGroup {
  int first = 0, last = 0;
  int64_t peak = 0;                                        // both pools, the peak of the sum
  std::array<int64_t, kNumMemCategories> category_peak{};  // both pools
  int64_t model_states() const {
    return category_peak[static_cast<int>(MemCategory::params)] +
           category_peak[static_cast<int>(MemCategory::grads)] +
           category_peak[static_cast<int>(MemCategory::optimizer_state)];
  }
  std::string who(int world) const {
    if (first == 0 && last == world - 1) return world > 1 ? "every rank" : "rank 0";
    if (first == last) return "rank " + std::to_string(first);
    return "ranks " + std::to_string(first) + "-" + std::to_string(last);
  }
  bool same(const RankGroup& o) const { return peak == o.peak && category_peak == o.category_peak; }
};

std::vector<RankGroup> rank_groups(const MetaMemory& m) {
  std::vector<RankGroup> groups;
  for (const MetaRankMemory& r : m.ranks) {
    RankGroup g;
    g.first = g.last = r.rank;
    g.peak = peak_of(r);
    for (int c = 0; c < kNumMemCategories; ++c)
      g.category_peak[c] = r.at_report.device.peak[c] + r.at_report.host.peak[c];
    if (!groups.empty() && groups.back().same(g))
      groups.back().last = r.rank;
    else
      groups.push_back(g);
  }
  return groups;
}

// What the stage's ranks hold or send in the meta run, as "x" or "x to y"
// when they differ (ZeRO-1's replicas own different parameters).
struct MetaRange {
  double lo = 0, hi = 0;
  bool any = false;
  void add(double v) {
    lo = any ? std::min(lo, v) : v;
    hi = any ? std::max(hi, v) : v;
    any = true;
  }
};

std::string bytes_text(double v) {
  return num(v) + " B (" + short_bytes(v) + ")";
}

std::string range_text(const MetaRange& r, bool bytes = true) {
  auto one = [&](double v) { return bytes ? bytes_text(v) : num(v); };
  return r.lo == r.hi ? one(r.lo) : one(r.lo) + " to " + one(r.hi);
}

// `estimate --mesh`, or a pipeline strategy: Megatron's accounting per stage
// (core/predict/mesh_estimate.h) beside the meta run's figures.
int estimate_mesh_cmd(const Args& a) {
  for (const char* key : {"params", "ops"})
    if (a.has(key))
      throw ConfigError(std::string("--") + key +
                        " does not apply to a mesh or a pipeline strategy: their accounting needs "
                        "the layers' shapes (valid: --model gpt:LxCxH)");
  if (a.has("no-reshard") || a.has("offload"))
    throw ConfigError(std::string(a.has("offload") ? "--offload" : "--no-reshard") +
                      " applies to the data-parallel strategies, not to a mesh or a pipeline");
  if (!a.has("model"))
    throw ConfigError("--model is required with --mesh (valid: e.g. --model gpt:2x64x4)");
  RunConfig cfg;
  cfg.model = a.str("model", "");
  if (a.has("seq")) {
    cfg.seq = a.integer("seq", 0, "1 to 4096");
    if (cfg.seq < 1 || cfg.seq > 4096)
      throw ConfigError("--seq " + std::to_string(cfg.seq) + " is invalid (valid: 1 to 4096)");
  }
  cfg.data = a.str("data", "");
  cfg.attention = a.str("attention", "");
  cfg.strategy = a.str("strategy", "1f1b");
  cfg.mesh = a.str("mesh", "");
  cfg.mesh_order = a.str("mesh-order", "");
  cfg.world = a.has("world")  ? a.integer("world", 1, "1 to 1000000")
              : a.has("mesh") ? parse_mesh(cfg.mesh, cfg.mesh_order).world()
                              : 1;
  cfg.batch = a.integer("batch", 64, "a positive integer");
  cfg.micro_batches = a.integer("micro-batches", cfg.micro_batches, "a positive integer");
  cfg.precision = a.str("precision", "fp32");
  cfg.optimizer.kind = optimizer_kind_from(a);
  cfg.sequence_parallel = a.has("sequence-parallel");
  cfg.dp_zero1 = a.has("dp-zero1");
  cfg.recompute = a.has("recompute");
  cfg.steps = 2;
  const StrategyInfo* info = find_strategy(cfg.strategy);
  if (!is_pipeline_strategy(cfg.strategy) || !info->reads_option(StrategyOption::mesh))
    throw ConfigError("--strategy " + cfg.strategy +
                      " runs no mesh (valid: " + strategy_names_where([](const StrategyInfo& i) {
                        return i.has_stages() && i.reads_option(StrategyOption::mesh);
                      }) +
                      "; " + strategy_names_where([](const StrategyInfo& i) {
                        return i.is_data_parallel() && i.reads_option(StrategyOption::mesh);
                      }) +
                      " on a mesh of dp and tp)");
  validate(cfg);  // what a run would refuse, in the run's words
  const MeshEstimate e = estimate_mesh(cfg);
  const MetaMemory meta = predict_memory_meta(cfg);
  const BytesPerParam bpp = bytes_per_param(cfg.precision, cfg.optimizer.kind);
  auto cat = [](const MetaRankMemory& r, MemCategory c) {
    return static_cast<double>(r.at_report.device.peak[static_cast<int>(c)] +
                               r.at_report.host.peak[static_cast<int>(c)]);
  };
  struct StageMeta {
    std::vector<int> ranks;
    MetaRange params, states, activations, peak;
    std::array<MetaRange, std::size(kMeshAxes)> sent;
  };
  std::vector<StageMeta> sm(e.stages.size());
  for (const MetaRankMemory& r : meta.ranks) {
    StageMeta& m = sm[static_cast<size_t>(pipeline_stage_of(cfg, r.rank))];
    m.ranks.push_back(r.rank);
    m.params.add(cat(r, MemCategory::params) / bpp.params);
    m.states.add(cat(r, MemCategory::params) + cat(r, MemCategory::grads) +
                 cat(r, MemCategory::optimizer_state));
    m.activations.add(cat(r, MemCategory::activations));
    m.peak.add(static_cast<double>(peak_of(r)));
    for (size_t x = 0; x < std::size(kMeshAxes); ++x) m.sent[x].add(r.sent_by_axis_per_step[x]);
  }
  auto ranks_text = [](const std::vector<int>& ranks) {
    std::string t;
    for (size_t i = 0; i < ranks.size(); ++i) t += (i ? ", " : "") + std::to_string(ranks[i]);
    return t;
  };
  const double psi = static_cast<double>(make_layout(cfg).unique_total());

  if (a.has("json")) {
    nlohmann::json j;
    j["model"] = cfg.model;
    j["params"] = psi;
    j["strategy"] = cfg.strategy;
    j["mesh"] = e.mesh.text();
    j["world"] = cfg.world;
    j["tp"] = e.tp;
    j["pp"] = e.pp;
    j["dp"] = e.dp;
    j["batch"] = cfg.batch;
    j["micro_batches"] = e.micro_batches;
    j["rows_per_micro_batch"] = e.rows_per_micro_batch;
    j["seq"] = e.seq;
    j["vocab"] = e.vocab;
    j["vocab_padded"] = e.vocab_padded;
    j["precision"] = cfg.precision;
    j["optimizer"] = to_string(cfg.optimizer.kind);
    j["sequence_parallel"] = e.sequence_parallel;
    j["bubble_formula"] = e.bubble;
    nlohmann::json stages = nlohmann::json::array();
    for (size_t i = 0; i < e.stages.size(); ++i) {
      const MeshStageEstimate& g = e.stages[i];
      const StageMeta& m = sm[i];
      nlohmann::json sent;
      for (MeshAxis axis : kMeshAxes) {
        const size_t x = static_cast<size_t>(axis);
        if (e.mesh.size(axis) < 2) continue;
        sent[to_string(axis)] = {{"formula", g.sent_formula[x]},
                                 {"bytes", g.sent[x]},
                                 {"meta_run_bytes", {m.sent[x].lo, m.sent[x].hi}}};
      }
      stages.push_back({{"stage", g.stage},
                        {"ranks", m.ranks},
                        {"layers", {g.first_layer, g.last_layer}},
                        {"blocks", g.blocks},
                        {"params",
                         {{"formula", g.params_formula},
                          {"value", g.params},
                          {"meta_run", {m.params.lo, m.params.hi}}}},
                        {"model_states_bytes",
                         {{"formula", g.model_states.formula},
                          {"value", g.model_states.total()},
                          {"meta_run", {m.states.lo, m.states.hi}}}},
                        {"activations_bytes",
                         {{"in_flight", g.in_flight},
                          {"block", g.block_activations},
                          {"blocks_in_flight", g.activations},
                          {"meta_run", {m.activations.lo, m.activations.hi}}}},
                        {"meta_run_peak_bytes", {m.peak.lo, m.peak.hi}},
                        {"sent_per_step", sent}});
    }
    j["stages"] = stages;
    nlohmann::json kr = nlohmann::json::array();
    for (const auto& k : e.korthikanti)
      kr.push_back({{"what", k.what}, {"formula", k.formula}, {"bytes", k.bytes}});
    j["korthikanti_block_16bit_with_dropout"] = kr;
    std::cout << j.dump() << "\n";
    return 0;
  }

  std::printf(
      "shardlab estimate: %s (Ψ = %s parameters), %s on mesh %s (world %d), batch %d = %d "
      "pipeline%s × %d micro-batch%s × %d sequence%s of s = %d, %s, %s%s\n",
      cfg.model.c_str(), num(psi).c_str(), cfg.strategy.c_str(), e.mesh.text().c_str(), cfg.world,
      cfg.batch, e.dp, e.dp > 1 ? "s" : "", e.micro_batches, e.micro_batches > 1 ? "es" : "",
      e.rows_per_micro_batch, e.rows_per_micro_batch > 1 ? "s" : "", e.seq, cfg.precision.c_str(),
      to_string(cfg.optimizer.kind), e.sequence_parallel ? ", sequence parallel" : "");
  std::printf("  h = %d, a = %d heads, V = %d", e.dim, e.heads, e.vocab);
  if (e.tp > 1) std::printf(" (V' = %d, padded to a multiple of t = %d)", e.vocab_padded, e.tp);
  std::printf("; bubble (P−1)/(M+P−1) = %.1f%%\n", 100 * e.bubble);
  std::printf(
      "per rank of each stage: the formulas (Megatron-LM; Korthikanti et al. 2022), then the meta "
      "run's figure (this implementation's own code on devices that hold no memory):\n");
  for (size_t i = 0; i < e.stages.size(); ++i) {
    const MeshStageEstimate& g = e.stages[i];
    const StageMeta& m = sm[i];
    std::string what = g.embedding ? "the embedding" : "";
    if (g.blocks)
      what += (what.empty() ? "" : ", ") + std::to_string(g.blocks) + " block" +
              (g.blocks > 1 ? "s" : "");
    if (g.head) what += (what.empty() ? "" : ", ") + std::string("ln_f and lm_head");
    std::printf("stage %d (layers %d-%d: %s), ranks %s:\n", g.stage, g.first_layer,
                g.last_layer - 1, what.c_str(), ranks_text(m.ranks).c_str());
    std::printf("  weights       %s = %s; meta run %s\n", g.params_formula.c_str(),
                num(g.params).c_str(), range_text(m.params, false).c_str());
    std::printf("  model states  %s = %s; meta run %s\n", g.model_states.formula.c_str(),
                bytes_text(g.model_states.total()).c_str(), range_text(m.states).c_str());
    // What Korthikanti's per-block count leaves out, kept on this stage.
    std::string besides = g.embedding ? "the embedding's output" : "";
    if (g.head)
      besides += std::string(besides.empty() ? "" : ", ") + "ln_f's output and the logits";
    besides = besides.empty() ? "" : " (" + besides + " besides)";
    auto plural = [](int n, const char* word, const char* ending) {
      return std::to_string(n) + " " + word + (n == 1 ? "" : ending);
    };
    const std::string block = short_bytes(g.block_activations);
    const std::string how =
        cfg.recompute
            ? "--recompute: " + plural(g.in_flight, "micro-batch", "es") +
                  " in flight × the stage input + " + plural(g.blocks, "block", "s") +
                  " of one micro-batch recomputed × " + block
            : plural(g.blocks, "block", "s") + " × " + plural(g.in_flight, "micro-batch", "es") +
                  " in flight × " + block + " a block";
    std::printf("  activations   %s = %s; meta run %s%s\n", how.c_str(),
                bytes_text(g.activations).c_str(), range_text(m.activations).c_str(),
                besides.c_str());
    std::printf("  peak          meta run %s, everything included\n", range_text(m.peak).c_str());
    for (MeshAxis axis : {MeshAxis::tp, MeshAxis::pp, MeshAxis::dp}) {
      const size_t x = static_cast<size_t>(axis);
      if (e.mesh.size(axis) < 2) continue;
      std::printf("  sent on %s    %s = %s; meta run %s\n", to_string(axis),
                  g.sent_formula[x].c_str(), bytes_text(g.sent[x]).c_str(),
                  range_text(m.sent[x]).c_str());
    }
  }
  if (cfg.dp_zero1 && e.dp > 1)
    std::printf(
        "  (--dp-zero1: Gloo's reduce to each parameter's owner and broadcast back move more "
        "than the paper's reduce-scatter and all-gather)\n");
  std::printf(
      "one block's activations, Korthikanti et al. Table 2 (16-bit values, with dropout), b = %d, "
      "s = %d, h = %d, a = %d%s:\n",
      e.rows_per_micro_batch, e.seq, e.dim, e.heads,
      e.tp > 1 ? (", t = " + std::to_string(e.tp)).c_str() : "");
  for (const auto& k : e.korthikanti)
    std::printf("  %-52s %-34s %s\n", k.what.c_str(), k.formula.c_str(),
                bytes_text(k.bytes).c_str());
  std::printf(
      "  this implementation keeps %s a block (%s values, no dropout; LayerNorm statistics in "
      "fp32)\n",
      bytes_text(e.stages.empty() ? 0 : e.stages[0].block_activations).c_str(),
      cfg.precision.c_str());
  return 0;
}

}  // namespace

int cmd_estimate(int argc, char** argv) {
  const Args a(argc, argv, "estimate",
               {"params", "model", "world", "strategy", "precision", "optimizer", "seq", "batch",
                "data", "attention", "ops", "mesh", "mesh-order", "micro-batches"},
               {"json", "no-reshard", "offload", "offload-params", "sequence-parallel", "dp-zero1",
                "recompute"});
  if (a.help()) {
    std::printf("%s", kEstimateHelp);
    return 0;
  }
  if (a.has("offload-params"))
    throw ConfigError(
        "--offload-params: estimate does not model a disk yet (valid: leave it out; `shardlab "
        "run` with --offload nvme:DIR --offload-params reports its memory and disk bytes)");
  // A data-parallel strategy on a dp × tp mesh is ZeRO's accounting over the
  // dp axis with one tp slice's Ψ, below; a pipeline's is Megatron's per stage.
  const StrategyInfo* named = a.get("strategy") ? find_strategy(*a.get("strategy")) : nullptr;
  const bool dp_mesh = a.has("mesh") && named && named->is_data_parallel() &&
                       named->reads_option(StrategyOption::mesh);
  if (!dp_mesh && (a.has("mesh") || (named && named->has_stages()))) return estimate_mesh_cmd(a);
  for (const char* key :
       {"mesh-order", "micro-batches", "sequence-parallel", "dp-zero1", "recompute"})
    if (a.has(key) &&
        !(dp_mesh && (std::string(key) == "mesh-order" || std::string(key) == "sequence-parallel")))
      throw ConfigError(std::string("--") + key +
                        " applies to a mesh or a pipeline strategy only (valid: with --mesh, or "
                        "--strategy " +
                        strategy_names_where([](const StrategyInfo& i) { return i.has_stages(); }) +
                        ")");
  ModelStateInput in;
  int seq = 0;  // gpt: --seq (0: the run's default)
  if (a.has("seq")) {
    seq = a.integer("seq", 0, "1 to 4096");
    if (seq < 1 || seq > 4096)
      throw ConfigError("--seq " + std::to_string(seq) + " is invalid (valid: 1 to 4096)");
  }
  const int batch = a.integer("batch", 64, "a positive integer");
  if (batch < 1)
    throw ConfigError("--batch " + std::to_string(batch) +
                      " is invalid (valid: a positive integer)");
  for (const char* key : {"seq", "data", "attention"})
    if (a.has(key) && !(a.get("model") && a.get("model")->rfind("gpt:", 0) == 0))
      throw ConfigError(std::string("--") + key +
                        " applies to --model gpt:LxCxH only (valid: e.g. --model gpt:2x64x4 "
                        "--seq 64)");
  RunConfig attention_of;  // --attention checked as a run checks it (default: the CPU's)
  attention_of.attention = a.str("attention", "");
  const bool flash = effective_attention(attention_of) == "flash";
  if (a.has("params") && a.has("model"))
    throw ConfigError("give either --params or --model, not both");
  if (dp_mesh && !a.has("model"))
    throw ConfigError("--model is required with --mesh (valid: e.g. --model gpt:2x64x4)");
  if (auto p = a.get("params"))
    in.params = parse_params(*p);
  else if (auto m = a.get("model")) {
    RunConfig c;
    c.model = *m;
    if (auto t = a.get("seq")) c.seq = a.integer("seq", 0, "1 to 65536");
    in.params = static_cast<double>(make_layout(c).unique_total());
  } else
    throw ConfigError("--params is required (e.g. --params 7.5e9, or --model mlp:8x1024)");
  if (!a.has("world") && !dp_mesh) throw ConfigError("--world is required (e.g. --world 64)");
  if (!a.has("strategy"))
    throw ConfigError("--strategy is required (valid: " + model_state_strategy_names() + ")");
  in.world = a.has("world") ? a.integer("world", 1)
                            : parse_mesh(a.str("mesh", ""), a.str("mesh-order", "")).world();
  if (in.world < 1 || in.world > 1000000)
    throw ConfigError("--world " + std::to_string(in.world) + " is invalid (valid: 1 to 1000000)");
  in.strategy = a.str("strategy", "ddp");
  in.precision = a.str("precision", "fp32");
  in.optimizer = optimizer_kind_from(a);
  in.reshard_after_forward = !a.has("no-reshard");
  in.offload = a.has("offload");
  // The formulas here put offloaded states in host memory; a disk is not modelled yet.
  if (const auto v = a.flag_value("offload"); v && !parse_offload_value(*v).empty())
    throw ConfigError("--offload " + *v +
                      ": estimate does not model a disk yet (valid: --offload for host memory; "
                      "`shardlab run` with --offload nvme:DIR reports its memory and disk bytes)");
  for (const StrategyOption o : {StrategyOption::offload, StrategyOption::no_reshard}) {
    const StrategyInfo* info = find_strategy(in.strategy);
    const std::string key = std::string(flag_name(o)).substr(2);  // without the leading "--"
    if (!a.has(key) || (info && info->reads_option(o))) continue;
    const std::string readers = strategies_reading(o);
    throw ConfigError(std::string(flag_name(o)) + " applies to strateg" +
                      (readers.find(',') == std::string::npos ? "y " : "ies ") + readers + " only");
  }
  if (in.offload)
    if (const StrategyInfo* info = find_strategy(in.strategy); info && !info->offload_to_host)
      throw ConfigError("--offload: " + in.strategy +
                        " offloads only its optimizer state, to a disk, which estimate does not "
                        "model yet (valid: --strategy fsdp --offload, every state in host memory)");
  check_model_state_input(in);
  // On a mesh: the run's own checks, then N = dp and Ψ = one tp slice's.
  const int world = in.world;  // every rank of the run
  // The run this estimate describes (with --model): what a run with these
  // settings would be, the meta run's configuration.
  const RunConfig run_cfg = [&] {
    RunConfig c;
    c.model = a.str("model", "");
    c.seq = seq;
    c.data = a.str("data", "");
    c.attention = a.str("attention", "");
    c.batch = batch;
    c.strategy = in.strategy;
    c.world = world;
    c.mesh = a.str("mesh", "");
    c.mesh_order = a.str("mesh-order", "");
    c.sequence_parallel = a.has("sequence-parallel");
    c.precision = in.precision;
    c.optimizer.kind = in.optimizer;
    c.reshard_after_forward = in.reshard_after_forward;
    c.offload = in.offload;
    return c;
  }();
  int tp = 1;
  if (dp_mesh) {
    validate(run_cfg, {}, kMaxPredictWorld);  // what a run would refuse, in the run's words
    const ModelStateInput m = model_state_input(run_cfg, in.params);
    in.world = m.world;
    in.params = m.params;
    tp = run_mesh(run_cfg).size(MeshAxis::tp);
  }

  // With a model: the whole peak per rank as the run's memory check predicts it
  // (activations, buffers and padding included): the strategy's own setup, two
  // steps and export run on meta devices that hold no memory, under the real
  // allocator (core/predict/meta_memory.h), where a prediction may lay out any
  // world and any size.
  std::optional<MetaMemory> meta;
  std::string no_peak;  // why the run's peak is not predicted (a configuration a run refuses)
  if (a.has("ops") && !a.has("model"))
    throw ConfigError("--ops needs --model (valid: e.g. --model gpt:2x64x4 --ops ops.jsonl)");
  if (a.has("model")) {
    const RunConfig& cfg = run_cfg;
    const std::string ops_path = a.str("ops", "");
    std::string why;
    if (a.has("ops") && !check_file_writable(ops_path, &why))
      throw ConfigError("--ops '" + ops_path + "': " + why);
    try {
      meta = predict_memory_meta(cfg, MetaOptions{.keep_ops = a.has("ops")});
      if (a.has("ops")) write_ops(ops_path, cfg, *meta);
    } catch (const ConfigError& e) {
      no_peak = e.what();  // e.g. a batch of 64 that does not divide over the world
    }
  }
  const std::vector<RankGroup> groups = meta ? rank_groups(*meta) : std::vector<RankGroup>{};

  const ModelStateBytes state = predict_model_state(in, 0);
  // The ZeRO paper's model states for a rank (dp: device 0 and the others differ).
  auto formula_states = [&](int rank) {
    return rank == 0 ? state.total() : predict_model_state(in, rank).total();
  };
  const CommPrediction comm = predict_comm(in, 0);
  // dp: device 0 and its replicas hold and send different things.
  const bool dp = is_controller(in.strategy) && in.world > 1;
  const BytesPerParam bpp = bytes_per_param(in.precision, in.optimizer);
  // gpt: a transformer block's activations (Korthikanti et al. 2022), at the
  // rows one data-parallel rank computes.
  std::optional<BlockActivations> acts, other;  // other: with the other --attention
  std::optional<ModelSpec> spec;
  int rank_batch = batch;
  if (auto m = a.get("model"); m && m->rfind("gpt:", 0) == 0) {
    RunConfig c;
    c.model = *m;
    c.seq = seq;
    c.data = a.str("data", "");
    spec = resolve_model(c);
    rank_batch = std::max(1, batch / std::max(1, in.world));
    const bool sp = run_cfg.sequence_parallel;
    acts = block_activations(spec->seq, rank_batch, spec->dim, spec->heads, in.precision, flash, tp,
                             sp);
    other = block_activations(spec->seq, rank_batch, spec->dim, spec->heads, in.precision, !flash,
                              tp, sp);
  }

  if (a.has("json")) {
    nlohmann::json j;
    j["params"] = in.params;
    j["world"] = in.world;
    if (dp_mesh) {
      j["mesh"] = run_cfg.mesh;
      j["ranks"] = world;
      j["tp"] = tp;
      j["sequence_parallel"] = run_cfg.sequence_parallel;
    }
    j["strategy"] = in.strategy;
    j["precision"] = in.precision;
    j["optimizer"] = to_string(in.optimizer);
    j["bytes_per_param"] = {
        {"params", bpp.params}, {"grads", bpp.grads}, {"optimizer_state", bpp.optimizer}};
    j["model_states_per_rank"] = state_json(state);
    j["comm_per_step"] = comm_json(comm);
    if (dp) {
      j["replica_model_states"] = state_json(predict_model_state(in, 1));
      j["replica_comm_per_step"] = comm_json(predict_comm(in, 1));
    }
    if (meta) {
      std::vector<int64_t> peaks;
      for (const MetaRankMemory& r : meta->ranks) peaks.push_back(peak_of(r));
      j["run_peak_bytes_per_rank"] = peaks;
      nlohmann::json gj = nlohmann::json::array();
      for (const RankGroup& g : groups) {
        nlohmann::json cats;
        for (int c = 0; c < kNumMemCategories; ++c)
          cats[to_string(static_cast<MemCategory>(c))] = g.category_peak[c];
        gj.push_back({{"ranks", {g.first, g.last}},
                      {"peak_bytes", g.peak},
                      {"category_peak_bytes", cats},
                      {"model_states_bytes", g.model_states()},
                      {"model_states_over_formula_bytes",
                       g.model_states() - static_cast<int64_t>(formula_states(g.first))}});
      }
      j["run_peak_groups"] = gj;
    }
    if (!no_peak.empty()) j["run_peak_not_predicted"] = no_peak;
    if (acts)
      j["block_activations"] = {{"batch_per_rank", rank_batch},
                                {"seq", spec->seq},
                                {"attention", flash ? "flash" : "naive"},
                                {"korthikanti_16bit_with_dropout", acts->with_dropout_16bit},
                                {"without_dropout", acts->without_dropout},
                                {"layernorm_stats", acts->layernorm_stats},
                                {"softmax_stats", acts->softmax_stats},
                                {"total", acts->total()},
                                {"formula", acts->formula},
                                {flash ? "total_naive" : "total_flash", other->total()}};
    std::cout << j.dump() << "\n";
    return 0;
  }

  if (dp_mesh)
    std::printf(
        "shardlab estimate: Ψ = %s parameters of one tp slice (t = %d; the model has %s), N = %d "
        "ranks of the dp axis, %s on mesh %s (world %d), %s, %s\n",
        num(in.params).c_str(), tp,
        num(static_cast<double>(make_layout(run_cfg).unique_total())).c_str(), in.world,
        in.strategy.c_str(), run_cfg.mesh.c_str(), world,
        in.precision == "fp32" ? "fp32" : (in.precision + " mixed precision").c_str(),
        to_string(in.optimizer));
  else
    std::printf("shardlab estimate: Ψ = %s parameters, N = %d ranks, %s, %s, %s\n",
                num(in.params).c_str(), in.world, in.strategy.c_str(),
                in.precision == "fp32" ? "fp32" : (in.precision + " mixed precision").c_str(),
                to_string(in.optimizer));
  std::printf("bytes per parameter: %d params + %d grads + %d optimizer state (K)\n", bpp.params,
              bpp.grads, bpp.optimizer);
  std::printf("model states per rank (ZeRO paper accounting; GB = 10^9 bytes):\n");
  print_state(dp ? "device 0" : "every rank", state);
  if (dp) print_state("devices 1..N-1", predict_model_state(in, 1));
  std::printf("communication per step%s:\n",
              dp_mesh ? " over the dp axis's group (the tp groups carry the layers' own "
                        "all-reduces, not model states)"
                      : "");
  print_comm(dp ? "device 0 sends" : "every rank", comm, !dp);
  if (dp) print_comm("devices 1..N-1 send", predict_comm(in, 1), false);
  std::printf(
      "not included: activations, communication buckets and gathered copies, temporaries, "
      "padding of shards\n");
  if (acts) {
    std::printf(
        "activations of one transformer block, b = %d sequences per rank, s = %d, h = %d, a = %d, "
        "--attention %s (Korthikanti et al. 2022):\n",
        rank_batch, spec->seq, spec->dim, spec->heads, flash ? "flash" : "naive");
    // Korthikanti §4.2: tensor parallelism splits all but 10·s·b·h; sequence
    // parallelism that too.
    const std::string t = std::to_string(tp);
    const std::string paper =
        tp < 2 ? (flash ? "s·b·h·34 (FlashAttention: no 5·a·s/h term)" : "s·b·h·(34 + 5·a·s/h)")
        : run_cfg.sequence_parallel
            ? (flash ? "s·b·h·34/" + t + " (FlashAttention: no 5·a·s/h term)"
                     : "s·b·h·(34 + 5·a·s/h)/" + t)
            : (flash ? "s·b·h·(10 + 24/" + t + ") (FlashAttention: no 5·a·s/h term)"
                     : "s·b·h·(10 + 24/" + t + " + 5·a·s/(h·" + t + "))");
    std::printf("  with dropout, 16-bit: %s = %s bytes\n", paper.c_str(),
                num(acts->with_dropout_16bit).c_str());
    std::printf("  without dropout (Shardlab, nanoGPT at dropout 0), %s: %s = %s bytes\n",
                in.precision.c_str(), acts->formula.c_str(), num(acts->without_dropout).c_str());
    if (flash)
      std::printf(
          "  + LayerNorm mean and 1/std in fp32, 16·s·b = %s bytes, + the softmax's logsumexp per "
          "position and head in fp32, 4·a·s·b = %s bytes: %s bytes a block (%s)\n",
          num(acts->layernorm_stats).c_str(), num(acts->softmax_stats).c_str(),
          num(acts->total()).c_str(), gb(acts->total()).c_str());
    else
      std::printf(
          "  + LayerNorm mean and 1/std in fp32, 16·s·b = %s bytes: %s bytes a block (%s)\n",
          num(acts->layernorm_stats).c_str(), num(acts->total()).c_str(),
          gb(acts->total()).c_str());
    std::printf("  --attention %s would keep %s bytes a block: %s bytes %s\n",
                flash ? "naive" : "flash", num(other->total()).c_str(),
                num(std::fabs(other->total() - acts->total())).c_str(),
                flash ? "more (the a·s² attention matrix)"
                      : "fewer (no a·s² attention matrix; a logsumexp per position and head)");
  }
  // Bytes too, where a GB with three decimals would read 0.000.
  auto one = [](int64_t b) {
    return gb(static_cast<double>(b)) + " (" + num(static_cast<double>(b)) + " bytes)";
  };
  if (meta) {
    std::printf(
        "this implementation at batch %d, everything included (the strategy's own code run on "
        "meta devices that hold no memory: what the memory check before every run predicts):\n",
        batch);
    for (const RankGroup& g : groups) {
      std::printf("  %s: peak %s\n", g.who(world).c_str(), one(g.peak).c_str());
      std::string cats;
      for (int c = 0; c < kNumMemCategories; ++c)
        if (g.category_peak[c])
          cats += std::string(cats.empty() ? "" : ", ") + to_string(static_cast<MemCategory>(c)) +
                  " " + short_bytes(static_cast<double>(g.category_peak[c]));
      std::printf("    each category at its own peak: %s\n", cats.c_str());
      if (dp_mesh) {
        const SentByAxis& sent = meta->ranks[static_cast<size_t>(g.first)].sent_by_axis_per_step;
        std::printf("    sent per step: dp group %s, tp group %s\n",
                    one(static_cast<int64_t>(sent[static_cast<size_t>(MeshAxis::dp)])).c_str(),
                    one(static_cast<int64_t>(sent[static_cast<size_t>(MeshAxis::tp)])).c_str());
      }
      const double formula = formula_states(g.first);
      std::printf(
          "    model states (params + grads + optimizer state) %s: the formula's %s and %s "
          "bytes more (shards padded to equal parts, tied copies, BatchNorm buffers)\n",
          one(g.model_states()).c_str(), num(formula).c_str(),
          num(static_cast<double>(g.model_states()) - formula).c_str());
    }
  } else if (!no_peak.empty()) {
    std::printf(
        "this implementation's peak per rank: not predicted, as a run would refuse this "
        "configuration: %s\n",
        no_peak.c_str());
  }
  return 0;
}

}  // namespace shardlab::app
