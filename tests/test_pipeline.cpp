// The pipeline family (naive-mp, gpipe, 1f1b) against its specification: the
// same weights as `single`, the schedule order each stage really ran, the
// activations it really held, send/recv flows that pair up in the trace, and
// one clear error for every bad setting.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/parallel/pipeline.h"
#include "core/parallel/strategy.h"
#include "core/predict/memory_estimate.h"
#include "core/predict/pipeline_analysis.h"
#include "core/record/span_label.h"
#include "core/record/trace.h"
#include "core/run/runner.h"
#include "tests/run_util.h"

using namespace shardlab;
using nlohmann::json;
using shardlab::test::CliResult;
using shardlab::test::max_rel_diff;
using shardlab::test::run_cli;

namespace {

// Micro-batches sum a gradient in another order than `single`'s one GEMM;
// AdamW divides each small gradient by its own running size, so 20 steps grow
// that rounding to 2.5e-5 of the largest weight where OpenBLAS runs its
// Haswell kernels (an AMD EPYC), under 2e-5 with its SkylakeX ones. A wrong
// gradient moves the weights by far more.
constexpr double kWeightsTol = 5e-5;

RunConfig small_config(const std::string& strategy, int world, OptimizerKind opt) {
  // 5 layers: uneven stages at P = 2 (3,2), 3 (2,2,1), 4 (2,1,1,1); batch 32:
  // divisible by M = 1, 4, 8
  return test::small_run("mlp:5x32", strategy, world, 32, 11, opt);
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

int64_t peak_activations(const RunResult& r, int rank) {
  return r.ranks[rank].memory.device.peak[static_cast<int>(MemCategory::activations)];
}

}  // namespace

TEST_CASE("naive-mp, gpipe (with and without recompute), 1f1b and zb-h1 match single",
          "[pipeline]") {
  for (OptimizerKind opt : {OptimizerKind::adamw, OptimizerKind::sgd}) {
    const RunResult ref = run_training(small_config("single", 1, opt));
    const auto& l = ref.losses;
    if (opt == OptimizerKind::adamw)  // it really trains
      REQUIRE(l[17] + l[18] + l[19] < 0.9 * (l[0] + l[1] + l[2]));
    for (int P = 2; P <= 4; ++P) {
      struct Variant {
        std::string strategy;
        int M;
        bool recompute;
      };
      std::vector<Variant> variants = {{"naive-mp", 1, false}};
      for (int M : {1, 4, 8}) {
        for (const char* s : {"gpipe", "1f1b"})
          for (bool recompute : {false, true}) variants.push_back({s, M, recompute});
        variants.push_back({"zb-h1", M, false});
      }
      std::map<int, std::vector<float>> first_by_m;  // the first result per M
      for (const Variant& v : variants) {
        RunConfig c = small_config(v.strategy, P, opt);
        c.micro_batches = v.M;
        c.recompute = v.recompute;
        const RunResult r = run_training(c);
        INFO(to_string(opt) << " P=" << P << " " << v.strategy << " M=" << v.M
                            << (v.recompute ? " --recompute" : ""));
        REQUIRE(max_rel_diff(r.final_params, ref.final_params) < kWeightsTol);
        for (int s = 0; s < c.steps; ++s)
          REQUIRE(r.losses[s] == Approx(ref.losses[s]).epsilon(1e-4));
        // Same micro-batches, gradients accumulated in the same order: the
        // schedules, recomputation and zb-h1's B/W split change when, not
        // what, so they agree bit for bit.
        auto [it, fresh] = first_by_m.emplace(v.M, r.final_params);
        if (!fresh) REQUIRE(r.final_params == it->second);
      }
    }
  }
}

TEST_CASE("an explicit --partition trains to the same weights", "[pipeline]") {
  const RunResult ref = run_training(small_config("single", 1, OptimizerKind::adamw));
  for (const char* strategy : {"gpipe", "1f1b"}) {
    RunConfig c = small_config(strategy, 3, OptimizerKind::adamw);
    c.partition = {1, 3, 1};
    c.micro_batches = 4;
    const RunResult r = run_training(c);
    INFO(strategy);
    REQUIRE(max_rel_diff(r.final_params, ref.final_params) < kWeightsTol);
  }
}

TEST_CASE("partition balanced by parameter count, topology as a value", "[pipeline]") {
  const ModelLayout l5(ModelSpec::parse("mlp:5x32")), l8(ModelSpec::parse("mlp:8x16"));
  REQUIRE(balanced_partition(l5, 1) == std::vector<int>{5});
  REQUIRE(balanced_partition(l5, 2) == std::vector<int>{3, 2});
  REQUIRE(balanced_partition(l5, 3) == std::vector<int>{2, 2, 1});
  REQUIRE(balanced_partition(l5, 4) == std::vector<int>{2, 1, 1, 1});
  REQUIRE(balanced_partition(l5, 5) == std::vector<int>{1, 1, 1, 1, 1});
  REQUIRE(balanced_partition(l8, 3) == std::vector<int>{3, 3, 2});
  REQUIRE(balanced_partition(l8, 4) == std::vector<int>{2, 2, 2, 2});

  RunConfig c = small_config("gpipe", 3, OptimizerKind::adamw);
  REQUIRE(pipeline_partition(c, l5) == std::vector<int>{2, 2, 1});
  c.partition = {1, 3, 1};
  REQUIRE(pipeline_partition(c, l5) == std::vector<int>{1, 3, 1});

  const StageTopology t0 = stage_topology(0, {1, 3, 1});
  const StageTopology t1 = stage_topology(1, {1, 3, 1});
  const StageTopology t2 = stage_topology(2, {1, 3, 1});
  REQUIRE((t0.first_layer == 0 && t0.last_layer == 1 && t0.prev == -1 && t0.next == 1));
  REQUIRE((t0.is_first && !t0.is_last && t0.stages == 3));
  REQUIRE((t1.first_layer == 1 && t1.last_layer == 4 && t1.prev == 0 && t1.next == 2));
  REQUIRE((!t1.is_first && !t1.is_last));
  REQUIRE((t2.first_layer == 4 && t2.last_layer == 5 && t2.prev == 1 && t2.next == -1));
  REQUIRE((!t2.is_first && t2.is_last));

  // Tags name the micro-batch, the boundary and the direction, never the same
  // for two messages of a step.
  std::set<int> tags;
  for (int mb = 0; mb < 8; ++mb)
    for (int boundary = 0; boundary < 6; ++boundary)
      for (PipeDirection d : {PipeDirection::activation, PipeDirection::gradient})
        REQUIRE(tags.insert(pipe_tag(mb, boundary, 6, d)).second);
  REQUIRE(*tags.rbegin() < kGatherParamsTag);

  // Interleaved: 2 ranks, 2 chunks each, model stages 0..3 dealt round-robin;
  // rank 1's chunk 0 (model stage 1) sends on to rank 0's chunk 1 (stage 2).
  const StageTopology c10 = stage_topology(1, {1, 1, 2, 1}, 2, 0);
  REQUIRE((c10.model_stage == 1 && c10.first_layer == 1 && c10.last_layer == 2));
  REQUIRE((c10.prev == 0 && c10.next == 0 && !c10.is_first && !c10.is_last));
  const StageTopology c01 = stage_topology(0, {1, 1, 2, 1}, 2, 1);
  REQUIRE((c01.model_stage == 2 && c01.first_layer == 2 && c01.last_layer == 4));
  REQUIRE((c01.prev == 1 && c01.next == 1));
  REQUIRE(stage_topology(1, {1, 1, 2, 1}, 2, 1).is_last);
  REQUIRE(bubble_formula(4, 8) == Approx(3.0 / 11));
  REQUIRE(bubble_formula(1, 8) == 0);
}

TEST_CASE("1f1b holds fewer activations than gpipe, and each stage runs the expected order",
          "[pipeline]") {
  // Hand-written, not generated: warm-up P − rank − 1 forwards, then F/B, then the last Bs.
  const std::vector<std::string> one_f_one_b[4] = {
      words("F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"),
      words("F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7"),
      words("F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7"),
      words("F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"),
  };
  const std::vector<std::string> gpipe = words("F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
  auto with_recompute = [](const std::vector<std::string>& order) {
    std::vector<std::string> out;
    for (const std::string& o : order) {
      if (o[0] == 'B') out.push_back(std::string("R").append(o, 1));
      out.push_back(o);
    }
    return out;
  };

  std::map<std::string, RunResult> runs;
  for (const char* strategy : {"gpipe", "1f1b"})
    for (bool recompute : {false, true}) {
      RunConfig c;
      c.model = "mlp:8x256";
      c.strategy = strategy;
      c.world = 4;
      c.micro_batches = 8;
      c.batch = 64;
      c.steps = 3;
      c.recompute = recompute;
      c.timeout_ms = 20000;
      runs.emplace(std::string(strategy) + (recompute ? "+recompute" : ""), run_training(c));
    }

  // Stage 0 of 1f1b holds P = 4 micro-batches of activations, gpipe all M = 8.
  const double ratio = static_cast<double>(peak_activations(runs.at("gpipe"), 0)) /
                       static_cast<double>(peak_activations(runs.at("1f1b"), 0));
  INFO("gpipe / 1f1b peak activations on stage 0: " << ratio);
  REQUIRE(ratio >= 1.5);

  for (const auto& [name, r] : runs) {
    const bool is_1f1b = name.rfind("1f1b", 0) == 0;
    for (int rank = 0; rank < 4; ++rank) {
      INFO(name << " stage " << rank);
      // Measured by the allocator, equal to what the micro-batches in flight hold.
      REQUIRE(peak_activations(r, rank) == predicted_peak_activation_bytes(r.cfg, rank));
      const StageTopology t = stage_topology(rank, {2, 2, 2, 2});
      const auto snap = r.recorders[rank]->snapshot();
      std::vector<std::string> expected = is_1f1b ? one_f_one_b[rank] : gpipe;
      if (r.cfg.recompute) expected = with_recompute(expected);
      for (int step = 0; step < r.cfg.steps; ++step)
        REQUIRE(schedule_order(snap, step, t.first_layer, t.last_layer) == expected);
      // Every forward and backward span carries its micro-batch.
      for (const Span& s : snap.spans)
        if (s.kind == SpanKind::forward || s.kind == SpanKind::backward)
          REQUIRE(s.micro_batch >= 0);
    }
  }
  // With --recompute only stage inputs stay: far less than without.
  REQUIRE(peak_activations(runs.at("gpipe+recompute"), 0) * 2 <
          peak_activations(runs.at("gpipe"), 0));
  // gpipe holds M micro-batches on every stage; 1f1b P − rank.
  // (Stage 3 keeps one tensor less per micro-batch: the model's last layer has no GELU.)
  const RunConfig& cfg = runs.at("gpipe").cfg;
  REQUIRE(peak_activations(runs.at("gpipe"), 0) == 8 * micro_batch_activation_bytes(cfg, 0));
  REQUIRE(peak_activations(runs.at("gpipe"), 3) == 8 * micro_batch_activation_bytes(cfg, 3));
  REQUIRE(peak_activations(runs.at("1f1b"), 0) == 4 * micro_batch_activation_bytes(cfg, 0));
  REQUIRE(peak_activations(runs.at("1f1b"), 3) == 1 * micro_batch_activation_bytes(cfg, 3));
  REQUIRE(micro_batch_activation_bytes(cfg, 0) == 8 * 256 * 4 * 5);  // input, 2 outputs, 2 pre-GELU
}

TEST_CASE("zb-h1 holds 1f1b's peak activations: its W waits with less than a forward keeps",
          "[pipeline]") {
  // The zero-bubble paper's claim (§3.1): ZB-H1's peak memory is 1F1B's, P
  // micro-batches on the first stage. Here in bytes, measured by each rank's
  // allocator and predicted by the meta run (the preflight), on an MLP and a GPT.
  for (const char* model : {"mlp:8x256", "gpt:2x32x2"}) {
    std::map<std::string, RunResult> runs;
    for (const char* strategy : {"1f1b", "zb-h1"}) {
      RunConfig c = test::small_run(model, strategy, 4, 32, 2, OptimizerKind::adamw);
      c.micro_batches = 8;
      runs.emplace(strategy, run_training(c));
    }
    const MemoryEstimate predicted = estimate_memory(runs.at("zb-h1").cfg);
    int64_t most_1f1b = 0, most_zb = 0;
    for (int rank = 0; rank < 4; ++rank) {
      const int64_t zb = peak_activations(runs.at("zb-h1"), rank);
      INFO(model << " stage " << rank << ": zb-h1 " << zb << " B, 1f1b "
                 << peak_activations(runs.at("1f1b"), rank) << " B");
      REQUIRE(
          zb ==
          predicted.ranks[rank].at_report.device.peak[static_cast<int>(MemCategory::activations)]);
      most_1f1b = std::max(most_1f1b, peak_activations(runs.at("1f1b"), rank));
      most_zb = std::max(most_zb, zb);
    }
    INFO(model);
    // The first stage, which holds the most under 1f1b (P micro-batches), holds the same.
    REQUIRE(peak_activations(runs.at("zb-h1"), 0) == peak_activations(runs.at("1f1b"), 0));
    // With stages alike (the MLP's), no stage holds more than that. The GPT's
    // last stage is not alike: its lm_head's W keeps the logits' gradient,
    // [rows, vocabulary], for the micro-batches it holds back, more than the
    // one micro-batch 1f1b's last stage keeps.
    if (std::string(model).rfind("mlp", 0) == 0) REQUIRE(most_zb == most_1f1b);
  }
}

TEST_CASE("naive-mp holds one whole batch and keeps one stage busy at a time", "[pipeline]") {
  RunConfig c;
  c.model = "mlp:8x256";
  c.strategy = "naive-mp";
  c.world = 4;
  c.batch = 64;
  c.steps = 4;
  const RunResult r = run_training(c);
  // Causality, not timing: stage k can only start once stage k−1 has handed
  // over, so the forward, loss, data and backward spans of different ranks never
  // overlap (the optimizer steps run side by side at the end and are left out).
  std::vector<std::pair<int64_t, int64_t>> work;
  for (int rank = 0; rank < 4; ++rank) {
    INFO("stage " << rank);
    REQUIRE(peak_activations(r, rank) == predicted_peak_activation_bytes(c, rank));
    REQUIRE(expected_in_flight(c, rank) == 1);
    const auto snap = r.recorders[rank]->snapshot();
    REQUIRE(schedule_order(snap, 2, 2 * rank, 2 * rank + 2) == words("F0 B0"));
    for (const Span& s : snap.spans)
      if (s.step == 2 && s.lane == Lane::compute && s.kind != SpanKind::optimizer)
        work.push_back({s.t_begin_ns, s.t_end_ns});
  }
  std::sort(work.begin(), work.end());
  for (size_t i = 1; i < work.size(); ++i) REQUIRE(work[i].first >= work[i - 1].second);
  const std::vector<double> bubble = bubble_share_per_rank(r);
  REQUIRE(bubble.size() == 4);
  for (double b : bubble) REQUIRE((b > 0 && b < 1));
  REQUIRE(bubble_formula(4, 1) == Approx(0.75));

  // The measure works for any strategy (the compare view calls it for all).
  RunConfig d = c;
  d.strategy = "ddp";
  d.world = 2;
  const RunResult ddp = run_training(d);
  const std::vector<double> ddp_bubble = bubble_share_per_rank(ddp);
  REQUIRE(ddp_bubble.size() == 2);
  for (double b : ddp_bubble) REQUIRE((b >= 0 && b < 1));
  REQUIRE(pipeline_stage_reports(ddp).empty());
}

TEST_CASE("bubble share: idle compute lane inside the group's step window", "[pipeline]") {
  // Hand-made spans, so the numbers are exact: the measure, not a run, is under test.
  RunResult r;
  for (int rank = 0; rank < 3; ++rank) r.recorders.push_back(std::make_shared<Recorder>(rank));
  auto span = [&](int rank, int step, int64_t begin, int64_t end, Lane lane = Lane::compute) {
    Span s;
    s.t_begin_ns = begin;
    s.t_end_ns = end;
    s.lane = lane;
    s.kind = lane == Lane::compute ? SpanKind::forward : SpanKind::send;
    s.step = step;
    r.recorders[rank]->add_span(s);
  };
  span(0, 0, -100, -50);  // step 0 is left out: it would give rank 1 a bubble of 1
  // Step 1, window [0, 40): rank 0 busy 20, rank 1 busy 20 (a nested span counts
  // once, the comm lane not at all).
  span(0, 1, 0, 10);
  span(0, 1, 30, 40);
  span(1, 1, 10, 30);
  span(1, 1, 12, 20);
  span(1, 1, 0, 40, Lane::comm);
  // Step 2, window [100, 200): rank 0 busy throughout, rank 1 half.
  span(0, 2, 100, 200);
  span(1, 2, 150, 200);
  const std::vector<double> b = bubble_share_per_rank(r);
  REQUIRE(b.size() == 3);
  REQUIRE(b[0] == Approx((0.5 + 0.0) / 2));
  REQUIRE(b[1] == Approx((0.5 + 0.5) / 2));
  REQUIRE(b[2] == 0);  // nothing recorded
  // Only one step: step 0 is all there is, and it counts.
  RunResult one;
  one.recorders.push_back(std::make_shared<Recorder>(0));
  Span s;
  s.t_begin_ns = 0, s.t_end_ns = 10, s.step = 0, s.kind = SpanKind::forward;
  one.recorders[0]->add_span(s);
  s.t_begin_ns = 30, s.t_end_ns = 40;
  one.recorders[0]->add_span(s);
  REQUIRE(bubble_share_per_rank(one) == std::vector<double>{0.5});
  REQUIRE(bubble_share_per_rank(RunResult{}).empty());
}

TEST_CASE("send/recv flows in the exported trace pair up one to one", "[pipeline]") {
  for (const char* strategy : {"gpipe", "1f1b", "interleaved"}) {
    const bool chunked = std::string(strategy) == "interleaved";
    // Interleaved: 2 ranks of 2 chunks, so rank 0 and rank 1 send both ways.
    RunConfig c = small_config(strategy, chunked ? 2 : 3, OptimizerKind::adamw);
    c.micro_batches = 4;
    c.steps = 2;
    const int P = c.world, V = chunked ? 2 : 1;
    const RunResult r = run_training(c);
    std::vector<Recorder::Snapshot> snaps;
    for (const auto& rec : r.recorders) snaps.push_back(rec->snapshot());
    const json t = json::parse(trace_to_json(snaps, r.t0_ns).dump());

    struct Ends {
      int starts = 0, finishes = 0;
      int send_pid = -1, recv_pid = -1;
    };
    std::map<uint64_t, Ends> flows;
    std::map<uint64_t, json> send_span, recv_span;  // by flow id
    int sends = 0, recvs = 0;
    for (const json& e : t["traceEvents"]) {
      if (e["ph"] == "s") ++flows[e["id"].get<uint64_t>()].starts;
      if (e["ph"] == "f") ++flows[e["id"].get<uint64_t>()].finishes;
      if (e["ph"] != "X") continue;
      const std::string kind = e["args"]["kind"];
      if (kind != "send" && kind != "recv") continue;
      REQUIRE(e["args"].contains("flow_id"));
      const uint64_t id = e["args"]["flow_id"].get<uint64_t>();
      auto& spans = kind == "send" ? send_span : recv_span;
      REQUIRE(spans.emplace(id, e).second);  // one span per end
      (kind == "send" ? sends : recvs)++;
    }
    INFO(strategy);
    // M = 4, 2 steps: (P·V − 1)·M activations and as many gradients per step,
    // and each other rank's V parameter slices to rank 0 at the end.
    REQUIRE(sends == 2 * (2 * (P * V - 1) * 4) + (P - 1) * V);
    REQUIRE(recvs == sends);
    REQUIRE(flows.size() == static_cast<size_t>(sends));
    for (const auto& [id, f] : flows) {
      REQUIRE(f.starts == 1);
      REQUIRE(f.finishes == 1);
      const json& s = send_span.at(id);
      const json& rv = recv_span.at(id);
      // The arrow joins the send and the receive of the same message: same
      // micro-batch, same boundary layer, from one neighbour to the other.
      REQUIRE(s["args"].value("micro_batch", -1) == rv["args"].value("micro_batch", -1));
      REQUIRE(s["args"].value("layer", -1) == rv["args"].value("layer", -1));
      REQUIRE(s["args"]["bytes"] == rv["args"]["bytes"]);
      REQUIRE(s["args"]["peer"].get<int>() + 1 == rv["pid"].get<int>());
      REQUIRE(rv["args"]["peer"].get<int>() + 1 == s["pid"].get<int>());
    }
  }
}

TEST_CASE(
    "interleaved: V chunks per rank, 1f1b's weights bit for bit, Megatron's order, the "
    "activations the meta run predicts",
    "[pipeline]") {
  // 8 layers: P = 4 with V = 2 holds one layer per chunk; P = 2 takes V = 2 and 4.
  struct Case {
    int P, M, V;
  };
  for (Case k : {Case{2, 4, 2}, Case{2, 8, 2}, Case{4, 4, 2}, Case{4, 8, 2}, Case{2, 4, 4}}) {
    INFO("P " << k.P << ", M " << k.M << ", V " << k.V);
    RunConfig c = test::small_run("mlp:8x32", "interleaved", k.P, 32, 5, OptimizerKind::adamw, 6);
    c.micro_batches = k.M;
    c.virtual_stages = k.V;
    const RunResult r = run_training(c);
    RunConfig s = c;
    s.strategy = "single";
    s.world = 1;
    s.micro_batches = 1;
    s.virtual_stages = 0;
    REQUIRE(max_rel_diff(r.final_params, run_training(s).final_params) < kWeightsTol);
    // The same micro-batches, each parameter's gradient summed in the same
    // order (micro-batch 0, 1, …): only the order of the chunks differs.
    RunConfig f = c;
    f.strategy = "1f1b";
    f.virtual_stages = 0;
    const RunResult one = run_training(f);
    REQUIRE(r.final_params == one.final_params);
    // Each rank ran Megatron's order (the golden file's, test_schedule.cpp).
    for (int step = 0; step < c.steps; ++step)
      CHECK(format_schedule(recorded_schedule(r, step)) ==
            format_schedule(named_schedule("interleaved", k.P, k.M, k.V)));
    // Activations: the allocator's peak is what the meta run predicted before
    // the run, and what the rank's line keeps chunk by chunk.
    const MemoryEstimate e = estimate_memory(c);
    for (int rank = 0; rank < k.P; ++rank) {
      INFO("rank " << rank);
      REQUIRE(peak_activations(r, rank) ==
              e.ranks[rank].at_report.device.peak[static_cast<int>(MemCategory::activations)]);
      REQUIRE(peak_activations(r, rank) == predicted_peak_activation_bytes(c, rank));
    }
    // The price: every micro-batch crosses P·V − 1 boundaries instead of P − 1
    // (all of them 32 wide here), both ways.
    double sent = 0, sent_1f1b = 0;
    for (int rank = 0; rank < k.P; ++rank) {
      sent += r.ranks[rank].bytes_sent_per_step;
      sent_1f1b += one.ranks[rank].bytes_sent_per_step;
    }
    REQUIRE(sent / sent_1f1b == Approx(double(k.P * k.V - 1) / (k.P - 1)));
  }
}

TEST_CASE("interleaved: a message is named F or B by the layers its rank holds, across the wrap",
          "[pipeline]") {
  // P = 2, V = 2: rank 0 holds model stages 0 and 2, rank 1 stages 1 and 3.
  // Both neighbours are the same rank, so the peer cannot tell the way: rank
  // 1's stage 1 sends activations on to rank 0's stage 2.
  const int M = 4;
  RunConfig c = test::small_run("mlp:8x32", "interleaved", 2, 32, 5, OptimizerKind::adamw, 1);
  c.micro_batches = M;
  c.virtual_stages = 2;
  const RunResult r = run_training(c);
  // Per rank: {F sends, B sends, F recvs, B recvs} in the step.
  const std::array<std::array<int, 4>, 2> want = {{{2 * M, M, M, 2 * M}, {M, 2 * M, 2 * M, M}}};
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<int> chunk_of = chunk_of_layers(c, rank);
    const HoldsLayer holds = [&](int, int layer) { return chunk_of.at(layer) >= 0; };
    std::array<int, 4> got{};
    for (const Span& s : r.recorders[rank]->snapshot().spans) {
      if (s.step != 0 || (s.kind != SpanKind::send && s.kind != SpanKind::recv)) continue;
      const std::string tag = micro_batch_tag(s, holds);
      REQUIRE(tag == (tag[0] == 'F' ? "F" : "B") + std::to_string(s.micro_batch));
      ++got[(s.kind == SpanKind::recv ? 2 : 0) + (tag[0] == 'F' ? 0 : 1)];
    }
    INFO("rank " << rank);
    CHECK(got == want[rank]);
  }
}

TEST_CASE("bad interleaved settings: one clear ConfigError each", "[pipeline][config]") {
  auto refused = [](RunConfig c, const std::string& expect) {
    INFO(expect);
    REQUIRE_THROWS_WITH(validate(c), Catch::Contains(expect));
  };
  RunConfig c = test::small_run("mlp:8x32", "interleaved", 2, 32, 1);
  c.micro_batches = 4;
  REQUIRE_NOTHROW(validate(c));
  RunConfig one_stage = c;
  one_stage.world = 1;
  refused(one_stage, "--virtual-stages 2 on 1 stage: interleaving deals chunks to 2 or more");
  RunConfig too_many = c;
  too_many.virtual_stages = 5;
  refused(too_many,
          "--virtual-stages 5 on 2 stages cuts mlp:8x32 into 10 chunks, more than its "
          "8 layers (valid: --virtual-stages 2 to 4)");
  RunConfig odd_m = c;
  odd_m.micro_batches = 6;
  odd_m.batch = 48;
  odd_m.world = 4;
  refused(odd_m,
          "--micro-batches 6: interleaved sends micro-batches through the chunks in "
          "groups of the 4 stages (valid: a multiple of 4, or 4 or fewer)");
  RunConfig part = c;
  part.partition = {4, 4};
  refused(part, "--partition 4,4 has 2 entries for 2 stages x 2 chunks (valid: 4 layer counts");
  RunConfig bn = c;
  bn.model = "mlp:8x32+bn";
  refused(bn, "BatchNorm statistics would live apart");
  RunConfig not_read = test::small_run("mlp:8x32", "1f1b", 2, 32, 1);
  not_read.virtual_stages = 2;
  refused(not_read, "--virtual-stages");
}

TEST_CASE("bad pipeline settings: one clear ConfigError each", "[pipeline][config]") {
  auto bad = [](RunConfig c, const std::string& expect) {
    try {
      validate(c);
      FAIL("accepted: " << expect);
    } catch (const ConfigError& e) {
      INFO(e.what());
      REQUIRE(std::string(e.what()).find(expect) != std::string::npos);
      REQUIRE(std::string(e.what()).find("valid") != std::string::npos);
      REQUIRE(std::string(e.what()).find('\n') == std::string::npos);
    }
  };
  for (const char* strategy : {"naive-mp", "gpipe", "1f1b"}) {
    INFO(strategy);
    RunConfig c = small_config(strategy, 3, OptimizerKind::adamw);
    RunConfig x = c;
    x.world = 6;
    bad(x, "--world 6 (one stage per rank) is more stages than the 5 layers of mlp:5x32");
    x = c, x.world = 6, x.stages = 6;
    bad(x, "--stages 6 is more stages than the 5 layers");
    x = c, x.stages = 2;
    bad(x, "--stages 2 does not match --world 3 (valid: --stages 3");
    x = c, x.partition = {2, 2, 2};
    bad(x, "--partition 2,2,2 sums to 6 but mlp:5x32 has 5 layers");
    x = c, x.partition = {3, 0, 2};
    bad(x, "--partition 3,0,2 gives a stage 0 layers");
    x = c, x.partition = {4, -1, 2};
    bad(x, "--partition 4,-1,2 gives a stage -1 layers");
    x = c, x.partition = {3, 2};
    bad(x, "--partition 3,2 has 2 entries for 3 stages");
    if (std::string(strategy) == "naive-mp") continue;  // it has no micro-batches
    x = c, x.micro_batches = 0;
    bad(x, "--micro-batches 0 is invalid");
    x = c, x.micro_batches = 3;
    bad(x, "--batch 32 is not divisible by --micro-batches 3");
  }
  // Settings a strategy does not read (--precision bf16 for a pipeline,
  // --micro-batches for naive-mp) are refused alike: tests/test_validation.cpp.
}

TEST_CASE("bad pipeline settings on the command line: exit code 2, one line", "[pipeline][cli]") {
  const std::string base = "run --model mlp:4x16 --steps 2 --batch 8 --world 2 --strategy ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"gpipe --world 5", "is more stages than the 4 layers"},
      {"1f1b --stages 3", "--stages 3 does not match --world 2"},
      {"gpipe --partition 2,1", "--partition 2,1 sums to 3 but mlp:4x16 has 4 layers"},
      {"1f1b --partition 4,0", "--partition 4,0 gives a stage 0 layers"},
      {"gpipe --partition 1,1,2", "--partition 1,1,2 has 3 entries for 2 stages"},
      {"gpipe --micro-batches 0", "--micro-batches 0 is invalid"},
      {"1f1b --micro-batches 3", "--batch 8 is not divisible by --micro-batches 3"},
      {"naive-mp --micro-batches 2", "--micro-batches 2: naive-mp has no micro-batches"},
  };
  for (const auto& [args, message] : cases) {
    test::expect_refused(base + args, message);
  }
}

TEST_CASE("run prints the bubble and activations per stage, in text and --json",
          "[pipeline][cli]") {
  const std::string args =
      "run --model mlp:4x32 --steps 3 --batch 16 --world 2 --strategy 1f1b --micro-batches 4";
  const CliResult text = run_cli(args);
  INFO(text.out);
  REQUIRE(text.code == 0);
  REQUIRE(text.out.find("pipeline: 2 stages (layers 2,2), 4 micro-batches of 4 rows") !=
          std::string::npos);
  REQUIRE(text.out.find("bubble") != std::string::npos);

  const CliResult js = run_cli(args + " --json");
  REQUIRE(js.code == 0);
  const json j = json::parse(js.out);
  const json& p = j.at("pipeline");
  REQUIRE(p["stages"] == 2);
  REQUIRE(p["micro_batches"] == 4);
  REQUIRE(p["bubble_formula"].get<double>() == Approx(1.0 / 5));
  REQUIRE(p["per_stage"].size() == 2);
  for (int s = 0; s < 2; ++s) {
    const json& st = p["per_stage"][s];
    REQUIRE(st["in_flight_expected"] == 2 - s);
    REQUIRE(st["peak_activation_bytes"] == st["predicted_peak_activation_bytes"]);
    REQUIRE(st["peak_activation_bytes"] == j["ranks"][s]["peak_bytes_by_category"]["activations"]);
    REQUIRE(st["bubble_measured"].get<double>() >= 0);
    REQUIRE(st["bubble_measured"].get<double>() <= 1);
  }
  // Other families print no pipeline section.
  const CliResult ddp = run_cli("run --model mlp:4x32 --steps 2 --batch 16 --world 2 --json");
  REQUIRE(ddp.code == 0);
  REQUIRE_FALSE(json::parse(ddp.out).contains("pipeline"));
}

TEST_CASE("a stage that fails mid-run does not hang the pipeline", "[pipeline]") {
  for (const char* strategy : {"gpipe", "1f1b"}) {
    RunConfig c = small_config(strategy, 3, OptimizerKind::adamw);
    c.micro_batches = 4;
    c.timeout_ms = 1000;
    const test::FailedRun f = test::run_with_failing_rank(c, 1, 3, "stage 1 gave up at step 3");
    INFO(strategy << ": " << f.message);
    REQUIRE(f.message.find("stage 1 gave up at step 3") != std::string::npos);
    REQUIRE(f.seconds < 10);
  }
}
