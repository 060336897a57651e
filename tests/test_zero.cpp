// The data-parallel family against `single`: dp, zero1/2/3 and fsdp (every
// option) end with the same weights at world 1-4; measured model states and
// traffic follow the ZeRO paper's formulas; shards, gathers, copies and
// device 0's burden show in the allocator and the timeline.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include "core/parallel/model_state.h"
#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"
#include "core/run/runner.h"
#include "tests/run_util.h"

using namespace shardlab;
using shardlab::test::CliResult;
using shardlab::test::max_rel_diff;
using shardlab::test::run_cli;

namespace {

// mlp:4x25: a layer has 25·26 = 650 values, which world 3 and world 4 do not
// divide, so every shard plan there pads (and fsdp units of 2 layers, 1300 values, too).
RunConfig small_config(const std::string& strategy, int world, OptimizerKind opt) {
  // batch 48: divisible by 1, 2, 3 and 4
  return test::small_run("mlp:4x25", strategy, world, 48, 11, opt);
}

struct Variant {
  std::string label;
  std::function<void(RunConfig&)> apply;
};

std::vector<Variant> variants() {
  std::vector<Variant> v = {
      {"dp", [](RunConfig& c) { c.strategy = "dp"; }},
      {"zero1", [](RunConfig& c) { c.strategy = "zero1"; }},
      {"zero2", [](RunConfig& c) { c.strategy = "zero2"; }},
      {"zero3 prefetch", [](RunConfig& c) { c.strategy = "zero3"; }},
      {"zero3 no-prefetch",
       [](RunConfig& c) {
         c.strategy = "zero3";
         c.prefetch = false;
       }},
  };
  for (int unit : {1, 2})
    for (bool reshard : {true, false})
      for (bool offload : {false, true})
        v.push_back({"fsdp unit " + std::to_string(unit) + (reshard ? " reshard" : " no-reshard") +
                         (offload ? " offload" : ""),
                     [=](RunConfig& c) {
                       c.strategy = "fsdp";
                       c.fsdp_unit = unit;
                       c.reshard_after_forward = reshard;
                       c.offload = offload;
                       c.prefetch = unit == 1;  // both prefetch settings get covered
                     }});
  return v;
}

int cat(MemCategory c) {
  return static_cast<int>(c);
}

// Peak params + grads + optimizer state over both pools.
int64_t model_state_peak(const MemStats& m) {
  int64_t s = 0;
  for (const PoolStats* p : {&m.device, &m.host})
    s += p->peak[cat(MemCategory::params)] + p->peak[cat(MemCategory::grads)] +
         p->peak[cat(MemCategory::optimizer_state)];
  return s;
}

}  // namespace

TEST_CASE("dp, zero1/2/3 and fsdp match single at world 1-4 (AdamW and SGD)", "[zero]") {
  for (OptimizerKind opt : {OptimizerKind::adamw, OptimizerKind::sgd}) {
    const RunResult ref = run_training(small_config("single", 1, opt));
    for (const Variant& v : variants()) {
      for (int world = 1; world <= 4; ++world) {
        RunConfig c = small_config("", world, opt);
        v.apply(c);
        const RunResult r = run_training(c);
        INFO(v.label << ", " << to_string(opt) << ", world " << world);
        REQUIRE(max_rel_diff(r.final_params, ref.final_params) < 2e-5);
        REQUIRE(r.losses.back() == Approx(ref.losses.back()).epsilon(1e-4));
      }
    }
  }
}

TEST_CASE("shard plans pad to equal shards, buffer names parse back", "[zero]") {
  const ShardPlan p(650, 3);
  REQUIRE(p.shard == 217);
  REQUIRE(p.padded() == 651);
  REQUIRE(p.padding() == 1);
  REQUIRE(p.real(0) == 217);
  REQUIRE(p.real(2) == 216);
  REQUIRE(ShardPlan(2, 4).real(3) == 0);  // more ranks than values: whole shards of padding

  const ModelLayout layout(ModelSpec::parse("mlp:5x25"));
  const auto units = make_flat_groups(layout, 2, 4);
  REQUIRE(units.size() == 3);  // layers 0-1, 2-3, 4
  REQUIRE(units[1].name == "layers.2-3.flat");
  REQUIRE(units[2].name == "layers.4.flat");
  REQUIRE(units[1].offset == layout.layer_begin(2));
  REQUIRE(units[1].layer_offset(layout, 3) == 650);  // layer 3 after layer 2's 625 + 25
  REQUIRE(units[1].shard_name(1) == "layers.2-3.flat[shard 1/4]");
  // The units of 1300 = 4·325 values pad nothing, the last of 650 pads 2:
  // each rank carries (652 − 650) / 4 values more than its exact share.
  REQUIRE(padding_per_rank(units) == Approx(0.5));

  auto n = parse_buffer_name("layers.2-3.flat[shard 1/4].exp_avg");
  REQUIRE(n);
  REQUIRE(n->first_layer == 2);
  REQUIRE(n->last_layer == 3);
  REQUIRE(n->form == BufferName::Form::shard);
  REQUIRE(n->shard == 1);
  REQUIRE(n->shards == 4);
  REQUIRE(n->role == "exp_avg");
  n = parse_buffer_name("layers.7.flat[gathered]");
  REQUIRE((n && n->form == BufferName::Form::gathered && n->first_layer == 7));
  n = parse_buffer_name("layers.0.weight[replica].grad");
  REQUIRE((n && n->form == BufferName::Form::replica && n->role == "grad"));
  REQUIRE(parse_buffer_name("layers.3.flat[unreduced].grad")->form == BufferName::Form::unreduced);
  REQUIRE_FALSE(parse_buffer_name("layers.3.output"));
  REQUIRE_FALSE(parse_buffer_name("comm.reduce_scatter.scratch"));
}

TEST_CASE("mlp:8x256 at world 4: model states and traffic follow the ZeRO formulas", "[zero]") {
  const ModelLayout layout(ModelSpec::parse("mlp:8x256"));
  const double psi = static_cast<double>(layout.total());
  std::map<std::string, double> sent;
  for (const std::string s : {"ddp", "zero1", "zero2", "zero3", "fsdp"}) {
    RunConfig c = small_config(s, 4, OptimizerKind::adamw);
    c.model = "mlp:8x256";
    c.batch = 32;
    c.steps = 3;
    const RunResult r = run_training(c);
    const ModelStateInput in = model_state_input(c, psi);
    // 65792 values per layer: world 4 divides it, so there is no padding here.
    for (int k = 0; k < 4; ++k) {
      INFO(s << " rank " << k);
      const double predicted = predict_model_state(in, k).total();
      const double measured = static_cast<double>(model_state_peak(r.ranks[k].memory));
      REQUIRE(measured == Approx(predicted).epsilon(0.05));
      REQUIRE(r.ranks[k].bytes_sent_per_step ==
              Approx(predict_comm(in, k).sent_bytes).epsilon(0.02));
    }
    sent[s] = r.ranks[0].bytes_sent_per_step;
  }
  // The paper: stages 1 and 2 cost what DDP costs, stage 3 one and a half times that.
  REQUIRE(sent["zero1"] / sent["ddp"] == Approx(1.0).epsilon(0.02));
  REQUIRE(sent["zero2"] / sent["ddp"] == Approx(1.0).epsilon(0.02));
  REQUIRE(sent["zero3"] / sent["ddp"] == Approx(1.5).epsilon(0.02));
  REQUIRE(sent["fsdp"] / sent["ddp"] == Approx(1.5).epsilon(0.02));
  // The exact values: 16Ψ, 8Ψ + 8Ψ/N, 4Ψ + 12Ψ/N, 16Ψ/N bytes for fp32 AdamW.
  ModelStateInput in{psi, 4, "zero2", "fp32", OptimizerKind::adamw};
  REQUIRE(predict_model_state(in, 0).total() == 4 * psi + 12 * psi / 4);
}

TEST_CASE("padding is accounted: world 3 holds exactly the padded shards", "[zero]") {
  RunConfig c = small_config("zero3", 3, OptimizerKind::adamw);
  c.steps = 2;
  const RunResult r = run_training(c);
  const ModelLayout layout(ModelSpec::parse(c.model));
  const auto groups = make_flat_groups(layout, 1, 3);
  size_t shard_values = 0;
  for (const FlatGroup& g : groups) shard_values += g.plan.shard;  // 4 layers · 217
  REQUIRE(shard_values == 4 * 217);
  for (int k = 0; k < 3; ++k) {
    const PoolStats& m = r.ranks[k].memory.device;
    REQUIRE(m.peak[cat(MemCategory::params)] == int64_t(shard_values * 4));
    REQUIRE(m.peak[cat(MemCategory::grads)] == int64_t(shard_values * 4));
    REQUIRE(m.peak[cat(MemCategory::optimizer_state)] == int64_t(shard_values * 8));
  }
}

TEST_CASE("zero3 names shards and gathered layers, gathers are freed after use", "[zero]") {
  RunConfig c = small_config("zero3", 4, OptimizerKind::adamw);
  c.steps = 2;
  const RunResult r = run_training(c);
  const auto snap = r.recorders[1]->snapshot();
  std::map<std::string, int> allocs;
  int64_t gathered_live = 0, gathered_max = 0;
  for (const AllocEvent& e : snap.allocs) {
    if (e.delta_bytes > 0) ++allocs[e.name];
    if (e.name.find("[gathered]") != std::string::npos) {
      gathered_live += e.delta_bytes;
      gathered_max = std::max(gathered_max, gathered_live);
      REQUIRE(e.category == MemCategory::comm_buffers);
    }
  }
  REQUIRE(allocs["layers.3.flat[shard 1/4]"] == 1);
  REQUIRE(allocs["layers.3.flat[shard 1/4].grad"] == 1);
  REQUIRE(allocs["layers.3.flat[shard 1/4].exp_avg"] == 1);
  // Gathered before forward and again before backward, every step (+1 for the final export).
  REQUIRE(allocs["layers.3.flat[gathered]"] == 2 * 2 + 1);
  // Never more than two layers gathered at once (the one computing, the one prefetched).
  REQUIRE(gathered_max <= 2 * 652 * 4);
  REQUIRE(gathered_live == 0);
}

TEST_CASE("zero2 frees each layer's full gradient once it is reduce-scattered", "[zero]") {
  RunConfig c = small_config("zero2", 2, OptimizerKind::adamw);
  c.model = "mlp:8x64";
  c.steps = 2;
  const RunResult r = run_training(c);
  const int64_t layer_bytes = (64 * 64 + 64) * 4;
  const PoolStats& m = r.ranks[0].memory.device;
  REQUIRE(m.peak[cat(MemCategory::grads)] == 8 * layer_bytes / 2);  // only its shards
  // The unreduced gradients are comm buffers, at most a few layers at a time, not 8.
  int64_t live = 0, most = 0, count = 0;
  for (const AllocEvent& e : r.recorders[0]->snapshot().allocs)
    if (e.name.find("[unreduced].grad") != std::string::npos) {
      live += e.delta_bytes;
      most = std::max(most, live);
      count += e.delta_bytes > 0;
    }
  REQUIRE(count == 8 * 2);
  REQUIRE(most <= 3 * layer_bytes);
  REQUIRE(live == 0);
}

TEST_CASE("zero3 prefetch starts the next all-gather while a layer computes", "[zero]") {
  // World 1: one compute thread and one comm thread fit this 2-core machine.
  RunConfig c = small_config("zero3", 1, OptimizerKind::adamw);
  c.model = "mlp:6x256";
  c.steps = 3;
  for (bool prefetch : {true, false}) {
    c.prefetch = prefetch;
    const RunResult r = run_training(c);
    std::map<int, Span> fwd, gather;
    for (const Span& s : r.recorders[0]->snapshot().spans) {
      if (s.step != 2) continue;
      if (s.kind == SpanKind::forward) fwd[s.layer] = s;
      // The first all-gather of each layer in the step is forward's.
      if (s.kind == SpanKind::all_gather && !gather.count(s.layer)) gather[s.layer] = s;
    }
    REQUIRE(fwd.size() == 6);
    int early = 0;  // layers whose gather was under way before the previous layer's forward ended
    for (int l = 1; l < 6; ++l) early += gather[l].t_begin_ns < fwd[l - 1].t_end_ns;
    INFO("prefetch " << prefetch);
    if (prefetch)
      REQUIRE(early > 0);
    else
      REQUIRE(early == 0);
  }
}

TEST_CASE("fsdp --no-reshard keeps units from forward to backward: 2Ψ instead of 3Ψ", "[zero]") {
  RunConfig c = small_config("fsdp", 2, OptimizerKind::adamw);
  c.model = "mlp:4x64";
  c.steps = 2;
  c.fsdp_unit = 2;
  const RunResult reshard = run_training(c);
  c.reshard_after_forward = false;
  const RunResult keep = run_training(c);
  REQUIRE(keep.ranks[0].bytes_sent_per_step / reshard.ranks[0].bytes_sent_per_step ==
          Approx(2.0 / 3.0).epsilon(0.01));
  // Gathered bytes alive when the loss is computed, between forward and backward:
  // none when resharded, both units when kept.
  auto gathered_at_loss = [](const RunResult& r) {
    const auto snap = r.recorders[0]->snapshot();
    int64_t t_loss = 0;
    for (const Span& s : snap.spans)
      if (s.kind == SpanKind::loss && s.step == 1) t_loss = s.t_begin_ns;
    int64_t live = 0;
    for (const AllocEvent& e : snap.allocs)
      if (e.t_ns <= t_loss && e.name.find("[gathered]") != std::string::npos) live += e.delta_bytes;
    return live;
  };
  const int64_t unit_bytes = 2 * (64 * 64 + 64) * 4;
  REQUIRE(gathered_at_loss(reshard) == 0);
  REQUIRE(gathered_at_loss(keep) == 2 * unit_bytes);
}

TEST_CASE("fsdp --offload keeps model states in host memory and records the copies", "[zero]") {
  RunConfig c = small_config("fsdp", 2, OptimizerKind::adamw);
  c.model = "mlp:4x64";
  c.steps = 2;
  c.offload = true;
  const RunResult r = run_training(c);
  const ModelLayout layout(ModelSpec::parse(c.model));
  const int64_t psi = static_cast<int64_t>(layout.total());
  const MemStats& m = r.ranks[1].memory;
  for (MemCategory k : {MemCategory::params, MemCategory::grads, MemCategory::optimizer_state})
    REQUIRE(m.device.peak[cat(k)] == 0);
  REQUIRE(m.host.peak[cat(MemCategory::params)] == psi * 4 / 2);
  REQUIRE(m.host.peak[cat(MemCategory::grads)] == psi * 4 / 2);
  REQUIRE(m.host.peak[cat(MemCategory::optimizer_state)] == psi * 8 / 2);
  int64_t h2d = 0, d2h = 0;
  for (const Span& s : r.recorders[1]->snapshot().spans) {
    if (s.step != 1) continue;
    if (s.kind == SpanKind::copy_h2d) h2d += s.bytes;
    if (s.kind == SpanKind::copy_d2h) d2h += s.bytes;
  }
  // Each shard goes up for forward and again for backward; each gradient shard comes down once.
  REQUIRE(h2d == 2 * psi * 4 / 2);
  REQUIRE(d2h == psi * 4 / 2);
}

TEST_CASE("dp: device 0 carries more, and every copy is a span with bytes", "[zero]") {
  RunConfig c = small_config("dp", 4, OptimizerKind::adamw);
  c.model = "mlp:4x64";
  c.steps = 2;
  const RunResult r = run_training(c);
  const ModelLayout layout(ModelSpec::parse(c.model));
  const int64_t psi_bytes = static_cast<int64_t>(layout.total()) * 4;
  for (int k = 1; k < 4; ++k) {
    INFO("device " << k);
    REQUIRE(r.ranks[0].memory.device.peak_total > 2 * r.ranks[k].memory.device.peak_total);
    // A replica: parameters and gradients, no optimizer state.
    REQUIRE(r.ranks[k].memory.device.peak[cat(MemCategory::params)] == psi_bytes);
    REQUIRE(r.ranks[k].memory.device.peak[cat(MemCategory::optimizer_state)] == 0);
    std::map<SpanKind, int64_t> bytes;
    for (const Span& s : r.recorders[k]->snapshot().spans)
      if (s.step == 1 && s.lane == Lane::comm) {
        REQUIRE(s.peer == 0);
        bytes[s.kind] += s.bytes;
      }
    const int64_t slice = 12 * 64 * 4;  // 48 / 4 rows
    REQUIRE(bytes[SpanKind::broadcast] == psi_bytes);
    REQUIRE(bytes[SpanKind::reduce] == psi_bytes);
    REQUIRE(bytes[SpanKind::scatter] == 2 * slice);  // the batch rows and the output gradients
    REQUIRE(bytes[SpanKind::gather] == slice);
  }
  REQUIRE(r.ranks[0].memory.device.peak[cat(MemCategory::optimizer_state)] == 2 * psi_bytes);
}

TEST_CASE("dp: a device that fails or stalls does not hang the others", "[zero]") {
  RunConfig c = small_config("dp", 3, OptimizerKind::adamw);
  c.timeout_ms = 1000;
  struct Case {
    int rank;
    bool stall;
  };
  // Device 2 fails, device 2 stalls, and the controller (device 0) itself fails.
  for (Case k : {Case{2, false}, Case{2, true}, Case{0, false}}) {
    const test::FailedRun f =
        test::run_with_failing_rank(c, k.rank, 3, "gave up at step 3", k.stall ? 2500 : 0);
    INFO("rank " << k.rank << " stall " << k.stall << ": " << f.message);
    if (k.stall)
      REQUIRE(f.message.find("timed out after 1000 ms waiting for device(s) 2") !=
              std::string::npos);
    else
      REQUIRE(f.message.find("rank " + std::to_string(k.rank) + " failed: gave up at step 3") !=
              std::string::npos);
    REQUIRE(f.seconds < 10);
  }
}

TEST_CASE("data-parallel family validation", "[zero]") {
  auto bad = [](RunConfig c, const std::string& expect) {
    try {
      validate(c);
      FAIL("accepted: " << expect);
    } catch (const ConfigError& e) {
      INFO(e.what());
      REQUIRE(std::string(e.what()).find(expect) != std::string::npos);
    }
  };
  for (const char* s : {"dp", "zero1", "zero2", "zero3", "fsdp"}) {
    RunConfig c = small_config(s, 4, OptimizerKind::adamw);
    c.batch = 50;
    bad(c, "--batch 50 is not divisible by --world 4");
  }
  RunConfig c = small_config("fsdp", 2, OptimizerKind::adamw);
  c.fsdp_unit = 5;
  bad(c, "--fsdp-unit 5 is invalid for model mlp:4x25 (valid: 1 to 4");
  c = small_config("zero3", 2, OptimizerKind::adamw);
  c.offload = true;
  bad(c, "--offload: zero3 offloads its optimizer state to NVMe only (valid: --offload nvme:DIR");
}
