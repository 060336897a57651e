// The meta run (core/predict/meta_memory.h) against real runs: for every
// strategy, precision, model and world the runner accepts, the real code on meta
// devices must predict at least the peak each rank's allocator measures, per
// pool, and no more than that peak plus the buffers a communicator may free
// early (a real collective can finish before it is waited on; a meta one never does).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/device/meta_backend.h"
#include "core/model/layer_stack.h"
#include "core/parallel/strategy.h"
#include "core/predict/meta_memory.h"
#include "core/run/runner.h"

using namespace shardlab;

namespace {

struct ModelCase {
  const char* model;
  int seq;
};

RunConfig meta_config(const std::string& strategy, const std::string& precision, const ModelCase& m,
                      int world) {
  RunConfig c;
  c.model = m.model;
  c.seq = m.seq;
  c.strategy = strategy;
  c.precision = precision;
  c.world = world;
  c.batch = 12;  // splits over 1 to 4 ranks
  c.steps = 2;
  c.record = false;
  return c;
}

// The runner's own validation decides which combinations exist.
bool accepted(const RunConfig& cfg) {
  try {
    validate(cfg);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

// How far meta predictions sit above the measured peaks, per strategy.
struct Margins {
  int64_t max_over = INT64_MIN, min_over = INT64_MAX;
  int configs = 0;
};

// One configuration: a meta run and a real run side by side. The meta peak per
// rank and pool must be at least the measured one and at most that plus the
// rank's communication buffers at their peak (what a collective that completes
// before it is waited on lets a real run free early), and the meta
// communicator must count the bytes Gloo sent.
void compare(const RunConfig& cfg, const std::string& label, Margins& m) {
  INFO(label);
  const MetaMemory meta = predict_memory_meta(cfg);
  const RunResult real = run_training(cfg);
  REQUIRE(meta.ranks.size() == real.ranks.size());
  ++m.configs;
  for (size_t r = 0; r < real.ranks.size(); ++r) {
    for (Pool pool : {Pool::device, Pool::host}) {
      const int64_t predicted = meta.ranks[r].at_report.pool(pool).peak_total;
      const int64_t measured = real.ranks[r].memory.pool(pool).peak_total;
      const int64_t early =
          meta.ranks[r].at_report.pool(pool).peak[static_cast<int>(MemCategory::comm_buffers)];
      if (pool == Pool::host && predicted == 0 && measured == 0) continue;
      std::printf("%-34s %2zu %-6s %10lld %10lld %10lld%s\n", label.c_str(), r,
                  pool == Pool::device ? "device" : "host", static_cast<long long>(predicted),
                  static_cast<long long>(measured), static_cast<long long>(early),
                  predicted < measured ? "  META LOW" : "");
      m.max_over = std::max(m.max_over, predicted - measured);
      m.min_over = std::min(m.min_over, predicted - measured);
      INFO("rank " << r << (pool == Pool::device ? " device" : " host") << ": meta " << predicted
                   << ", measured " << measured << ", comm buffers " << early);
      CHECK(predicted >= measured);
      CHECK(predicted <= measured + early);
    }
    INFO("rank " << r << " bytes sent per step");
    CHECK(meta.ranks[r].bytes_sent_per_step == real.ranks[r].bytes_sent_per_step);
  }
}

void print_header() {
  std::printf("\n%-34s %2s %-6s %10s %10s %10s\n", "configuration", "r", "pool", "meta", "measured",
              "comm bufs");
}

void print_margins(const std::map<std::string, Margins>& margins, double seconds) {
  int configs = 0;
  for (const auto& [name, m] : margins) configs += m.configs;
  std::printf("\n%d configurations in %.1f s; meta - measured peak bytes:\n", configs, seconds);
  for (const auto& [name, m] : margins)
    std::printf("  %-22s %3d configs  min %+lld  max %+lld\n", name.c_str(), m.configs,
                static_cast<long long>(m.min_over), static_cast<long long>(m.max_over));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("meta devices hand out distinct fake blocks and read back zeros", "[meta]") {
  auto dev = make_meta_backend(Device{DeviceKind::cuda, 1});
  CHECK(dev->device() == (Device{DeviceKind::cuda, 1}));
  CHECK(dev->native_2byte_math());
  void* a = dev->raw_alloc(100);
  void* b = dev->raw_alloc(0);
  CHECK(a != b);
  CHECK(reinterpret_cast<uintptr_t>(a) % 256 == 0);
  CHECK(reinterpret_cast<uintptr_t>(b) % 256 == 0);
  CHECK(dev->is_device_pointer(a));
  CHECK(dev->constant("k", nullptr, 8) == dev->constant("k", nullptr, 8));
  std::vector<float> host(4, 7.0f);
  dev->download(host.data(), a, DType::f32, host.size());
  CHECK(host == std::vector<float>(4, 0.0f));
  CHECK(dev->all_finite(a, DType::f16, 4));
  CHECK_FALSE(make_meta_backend(Device{})->native_2byte_math());
}

TEST_CASE("a meta run predicts at least every rank's measured peak, per pool", "[meta]") {
  const std::vector<ModelCase> models = {{"mlp:4x64", 0}, {"mlp:4x64+bn", 0}, {"gpt:2x32x2", 16}};
  std::map<std::string, Margins> margins;
  const auto t0 = std::chrono::steady_clock::now();
  print_header();
  for (const StrategyInfo& s : all_strategies())
    for (const char* precision : {"fp32", "bf16", "fp16"})
      for (const ModelCase& m : models)
        for (int world : {1, 2, 3, 4}) {
          const RunConfig cfg = meta_config(s.name, precision, m, world);
          if (!accepted(cfg)) continue;
          compare(cfg, s.name + " " + precision + " " + m.model + " W" + std::to_string(world),
                  margins[s.name]);
        }
  print_margins(margins, seconds_since(t0));
  CHECK(margins.size() == all_strategies().size());
}

TEST_CASE("a meta run bounds the measured peak under each strategy's options", "[meta]") {
  struct Variant {
    std::string strategy, label;
    int world;
    void (*tweak)(RunConfig&);
  };
  const std::vector<Variant> variants = {
      {"fsdp", "--offload", 2, [](RunConfig& c) { c.offload = true; }},
      {"fsdp", "--offload bf16", 3,
       [](RunConfig& c) {
         c.offload = true;
         c.precision = "bf16";
       }},
      {"fsdp", "--no-reshard", 3, [](RunConfig& c) { c.reshard_after_forward = false; }},
      {"fsdp", "--fsdp-unit 2", 2, [](RunConfig& c) { c.fsdp_unit = 2; }},
      {"fsdp", "--no-prefetch", 2, [](RunConfig& c) { c.prefetch = false; }},
      {"zero3", "--no-prefetch", 3, [](RunConfig& c) { c.prefetch = false; }},
      {"ddp", "--no-overlap", 2, [](RunConfig& c) { c.overlap = false; }},
      {"ddp", "--bucket-mb 0.01", 3, [](RunConfig& c) { c.bucket_mb = 0.01; }},
      {"gpipe", "M=4", 2, [](RunConfig& c) { c.micro_batches = 4; }},
      {"gpipe", "M=4 --recompute", 3,
       [](RunConfig& c) {
         c.micro_batches = 4;
         c.recompute = true;
       }},
      {"1f1b", "M=4", 4, [](RunConfig& c) { c.micro_batches = 4; }},
      {"naive-mp", "--stages 2", 2, [](RunConfig& c) { c.stages = 2; }},
      // The guarded CPU: host staging around the meta comm, Gloo's scratch in the host pool.
      {"ddp", "cpu-guarded", 2, [](RunConfig& c) { c.device = "cpu-guarded"; }},
      {"zero2", "cpu-guarded", 3, [](RunConfig& c) { c.device = "cpu-guarded"; }},
      {"fsdp", "cpu-guarded", 2, [](RunConfig& c) { c.device = "cpu-guarded"; }},
      {"gpipe", "cpu-guarded M=2", 2,
       [](RunConfig& c) {
         c.device = "cpu-guarded";
         c.micro_batches = 2;
       }},
      {"dp", "cpu-guarded", 3, [](RunConfig& c) { c.device = "cpu-guarded"; }},
  };
  std::map<std::string, Margins> margins;
  const auto t0 = std::chrono::steady_clock::now();
  print_header();
  for (const Variant& v : variants)
    for (const ModelCase& m : {ModelCase{"mlp:4x64", 0}, ModelCase{"gpt:2x32x2", 16}}) {
      RunConfig cfg = meta_config(v.strategy, "fp32", m, v.world);
      v.tweak(cfg);
      const std::string label = v.strategy + " " + v.label + " " + m.model;
      INFO(label);
      REQUIRE(accepted(cfg));
      compare(cfg, label + " W" + std::to_string(v.world), margins[v.strategy + " " + v.label]);
    }
  print_margins(margins, seconds_since(t0));
}

TEST_CASE("meta weights are never made: a model larger than memory sets up at once", "[meta]") {
  // mlp:16x16384 holds 4.3 G parameters: 17 GB of initial weights, more than a
  // CI machine has and far more time than this test allows to make. Its layers
  // set up on a meta device from MetaParams, a state vector that exists
  // nowhere: every parameter is counted by the real allocator, none is made.
  RunConfig c;
  c.model = "mlp:16x16384";
  const ModelLayout layout = make_layout(c);
  const std::unique_ptr<DeviceBackend> dev = make_meta_backend(Device{DeviceKind::cpu, 0});
  Allocator alloc(*dev, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const MetaParams init(layout.state_total());
  LayerStack stack(layout, 0, layout.num_layers(), alloc, nullptr, init);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t psi = int64_t{16} * (int64_t{16384} * 16384 + 16384);
  INFO("set up in " << seconds << " s");
  CHECK(alloc.stats().device.current[static_cast<int>(MemCategory::params)] == 4 * psi);
  CHECK(alloc.stats().device.current[static_cast<int>(MemCategory::grads)] == 4 * psi);
  CHECK(seconds < 5);

  // The whole meta run too: setup, a step and the export (which on a meta
  // device gathers into nothing: ExportBuffer) under ZeRO-3 at world 2.
  RunConfig z = c;
  z.strategy = "zero3";
  z.world = 2;
  z.batch = 2;
  z.steps = 1;
  const auto t1 = std::chrono::steady_clock::now();
  const MetaMemory m = predict_memory_meta(z);
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  // Each rank keeps AdamW's two moments of its half of the parameters, 2 x 4 B
  // x psi / 2, and a little padding.
  const int64_t moments =
      m.ranks[0].at_report.device.peak[static_cast<int>(MemCategory::optimizer_state)];
  INFO("meta run in " << run_s << " s; rank 0's optimizer state " << moments << " B");
  CHECK(moments >= 4 * psi);
  CHECK(moments <= 4 * psi + (int64_t{1} << 20));
  CHECK(run_s < 30);

  // The real source refuses a range past its end instead of reading beyond it.
  const std::vector<float> few(3, 1.0f);
  const FlatParams flat(few);
  float out[4] = {};
  CHECK_THROWS_AS(flat.read(out, 1, 3), std::logic_error);
  flat.read(out, 1, 2);
  CHECK(out[1] == 1.0f);
}
