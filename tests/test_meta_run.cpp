// The meta run (core/predict/meta_memory.h) against real runs: for every
// strategy, precision, model and world the runner accepts, the real code on meta
// devices must predict at least the peak each rank's allocator measures, per
// pool. The hand-kept preflight's figure is printed beside them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/memory_estimate.h"
#include "core/meta_backend.h"
#include "core/predict/meta_memory.h"
#include "core/runner.h"
#include "core/strategy.h"

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
  struct Worst {
    int64_t max_over = INT64_MIN, min_over = INT64_MAX;
    int configs = 0;
  };
  std::map<std::string, Worst> worst;
  int configs = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::printf("\n%-7s %-5s %-12s %2s %2s %-6s %10s %10s %10s\n", "strategy", "prec", "model", "W",
              "r", "pool", "meta", "measured", "old plan");
  for (const StrategyInfo& s : all_strategies())
    for (const char* precision : {"fp32", "bf16", "fp16"})
      for (const ModelCase& m : models)
        for (int world : {1, 2, 3, 4}) {
          const RunConfig cfg = meta_config(s.name, precision, m, world);
          if (!accepted(cfg)) continue;
          const std::string label =
              s.name + " " + precision + " " + m.model + " world " + std::to_string(world);
          INFO(label);
          const MetaMemory meta = predict_memory_meta(cfg);
          const RunResult real = run_training(cfg);
          const MemoryEstimate old = estimate_memory(cfg);
          REQUIRE(meta.ranks.size() == real.ranks.size());
          ++configs;
          ++worst[s.name].configs;
          for (size_t r = 0; r < real.ranks.size(); ++r)
            for (Pool pool : {Pool::device, Pool::host}) {
              const int64_t predicted = meta.ranks[r].at_report.pool(pool).peak_total;
              const int64_t measured = real.ranks[r].memory.pool(pool).peak_total;
              const int64_t planned = old.ranks[r].at_report.pool(pool).peak_total;
              if (pool == Pool::host && predicted == 0 && measured == 0) continue;
              std::printf("%-7s %-5s %-12s %2d %2zu %-6s %10lld %10lld %10lld%s\n", s.name.c_str(),
                          precision, m.model, world, r, pool == Pool::device ? "device" : "host",
                          static_cast<long long>(predicted), static_cast<long long>(measured),
                          static_cast<long long>(planned),
                          predicted < measured ? "  META LOW" : "");
              Worst& w = worst[s.name];
              w.max_over = std::max(w.max_over, predicted - measured);
              w.min_over = std::min(w.min_over, predicted - measured);
              INFO("rank " << r << (pool == Pool::device ? " device" : " host") << ": meta "
                           << predicted << ", measured " << measured << ", old plan " << planned);
              CHECK(predicted >= measured);
            }
        }
  std::printf("\n%d configurations in %.1f s; meta - measured peak bytes per strategy:\n", configs,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  for (const auto& [name, w] : worst)
    std::printf("  %-9s %3d configs  min %+lld  max %+lld\n", name.c_str(), w.configs,
                static_cast<long long>(w.min_over), static_cast<long long>(w.max_over));
  CHECK(configs > 0);
}
