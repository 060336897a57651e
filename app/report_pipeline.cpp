// Pipeline-family report, after the common run summary: per stage, the measured
// bubble beside the schedule's ((P−1)/(M+P−1) for 1f1b), and the measured peak
// activation memory beside
// what the micro-batches expected in flight should hold.
#include <cstdio>
#include <string>

#include "app/summary.h"
#include "core/model/model.h"
#include "core/parallel/pipeline.h"
#include "core/predict/pipeline_analysis.h"

namespace shardlab::app {

namespace {

std::string partition_text(const RunConfig& c) {
  std::string s;
  for (int n : pipeline_partition(c, make_layout(c))) {
    if (!s.empty()) s += ',';
    s += std::to_string(n);
  }
  return s;
}

// "0, 2": the first pipeline's ranks, by stage.
std::string partition_ranks(const RunConfig& c) {
  std::string s;
  for (int r : first_pipeline_ranks(c)) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

void print_pipeline_report(const RunResult& r) {
  const std::vector<StageReport> stages = pipeline_stage_reports(r);
  if (stages.empty()) return;
  const RunConfig& c = r.cfg;
  const int M = micro_batches_run(c);
  const int R = pipeline_replicas(c);
  const int V = pipeline_chunks(c);
  const std::string chunks =
      V > 1 ? " x " + std::to_string(V) + " chunks, chunk c of stage r holding piece c*P+r" : "";
  std::printf("  pipeline: %zu stages%s (layers %s), %d micro-batch%s of %d rows%s\n",
              stages.size(), chunks.c_str(), partition_text(c).c_str(), M, M == 1 ? "" : "es",
              c.batch / R / M,
              c.recompute ? ", --recompute (stage inputs kept, forward re-run in backward)" : "");
  if (R > 1)
    std::printf(
        "  mesh              %s: %d pipelines side by side, each on %d rows of the batch; the "
        "same\n"
        "                    stage of every pipeline all-reduces its gradients over its dp group\n"
        "                    (the stages of the first pipeline below: ranks %s)\n",
        run_mesh(c).text().c_str(), R, c.batch / R, partition_ranks(c).c_str());
  if (const int T = run_mesh(c).size(MeshAxis::tp); T > 1)
    std::printf(
        "  tensor parallel   tp=%d: each stage's layers cut across a tp group of %d ranks, each\n"
        "                    holding 1/%d of a split layer; the group all-reduces activations\n"
        "                    inside the layers (the first slice's figures below)\n",
        T, T, T);
  if (c.sequence_parallel)
    std::printf(
        "  sequence parallel each tp rank holds 1/%d of the tokens around the LayerNorms; the\n"
        "                    all-reduces are reduce-scatters and all-gathers (the same bytes)\n",
        run_mesh(c).size(MeshAxis::tp));
  if (c.dp_zero1)
    std::printf(
        "  ZeRO-1 over dp    each of the %d replicas of a stage keeps the optimizer state of its\n"
        "                    own parameters (whole ones, balanced by size): gradients reduced to\n"
        "                    their owner, the updated parameters broadcast from it\n",
        R);
  if (!c.schedule.empty()) {
    // A learner's schedule: what it costs on dedicated devices with unit costs,
    // beside the formula of the named schedule it is nearest to.
    const Schedule s = run_schedule(c);
    const UnitTiming t = unit_timing(s);
    const NearestFormula nearest = nearest_formula(s);
    std::string alive;
    for (int a : t.peak_alive) alive += (alive.empty() ? "" : "/") + std::to_string(a);
    std::printf(
        "  schedule          %s (run in place of %s's order); on %d dedicated devices with unit\n"
        "                    costs (F 1, B 2, or B 1 + W 1): idle / compute %.3f (%s = %.3f),\n"
        "                    micro-batches alive at most per stage %s\n",
        c.schedule.c_str(), c.strategy.c_str(), s.stages, t.bubble_over_compute(),
        nearest.text.c_str(), nearest.value, alive.c_str());
  }
  std::printf("    bubble = idle share of the compute lane in the step (steps 1..), vs %s\n",
              c.schedule.empty() ? strategy_info(c.strategy).bubble_formula.c_str()
                                 : "the schedule's, with unit costs");
  std::printf(
      "    activations = peak measured by the allocator, vs predicted from the micro-batches in "
      "flight\n");
  std::printf("    %-5s %-8s %9s %9s %13s %13s %12s %10s\n", "stage", "layers", "bubble", "formula",
              "activations", "predicted", "kept per mb", "in flight");
  // With --recompute a micro-batch in flight keeps only its stage input.
  auto per_mb = [&](const StageReport& s) {
    return c.recompute ? stage_input_bytes(c, s.rank) : s.micro_batch_activation_bytes;
  };
  for (const StageReport& s : stages) {
    const std::string& layers = s.layers;
    std::printf("    %-5d %-8s %8.1f%% %8.1f%% %13s %13s %12s %10d%s\n", s.stage, layers.c_str(),
                100 * s.bubble_measured, 100 * s.bubble_formula,
                human_bytes(static_cast<double>(s.peak_activation_bytes)).c_str(),
                human_bytes(static_cast<double>(s.predicted_peak_activation_bytes)).c_str(),
                human_bytes(static_cast<double>(per_mb(s))).c_str(), s.in_flight_expected,
                c.recompute ? " inputs" : "");
  }
  if (!c.record) std::printf("    (--no-record: no spans, so no measured bubble)\n");
}

void pipeline_report_json(const RunResult& r, nlohmann::json& j) {
  const std::vector<StageReport> stages = pipeline_stage_reports(r);
  if (stages.empty()) return;
  const RunConfig& c = r.cfg;
  const int M = micro_batches_run(c);
  nlohmann::json rows = nlohmann::json::array();
  for (const StageReport& s : stages)
    rows.push_back({{"stage", s.stage},
                    {"rank", s.rank},
                    {"first_layer", s.first_layer},
                    {"last_layer", s.last_layer},  // exclusive
                    {"layers", s.layers},
                    {"bubble_measured", s.bubble_measured},
                    {"bubble_formula", s.bubble_formula},
                    {"peak_activation_bytes", s.peak_activation_bytes},
                    {"predicted_peak_activation_bytes", s.predicted_peak_activation_bytes},
                    {"micro_batch_activation_bytes", s.micro_batch_activation_bytes},
                    {"stage_input_bytes", stage_input_bytes(c, s.rank)},
                    {"in_flight_expected", s.in_flight_expected}});
  j["pipeline"] = {{"stages", stages.size()},
                   {"micro_batches", M},
                   {"rows_per_micro_batch", c.batch / M},
                   {"partition", pipeline_partition(c, make_layout(c))},
                   {"recompute", c.recompute},
                   {"bubble_formula", schedule_bubble_formula(r)},
                   {"per_stage", rows}};
}

}  // namespace shardlab::app
