// The accounting allocator: named, categorised, timed allocations; current and
// peak per category; caching kept apart; residency read back from events.
#include <catch2/catch.hpp>

#include "core/device/memory.h"
#include "core/record/memory_timeline.h"

using namespace shardlab;

TEST_CASE("allocator counts current and peak bytes per category and pool", "[memory]") {
  auto backend = make_cpu_backend();
  Recorder rec(0);
  Allocator alloc(*backend, &rec);
  {
    Tensor w = alloc.alloc("layers.0.weight", MemCategory::params, {16, 16});
    Tensor g = alloc.alloc("layers.0.weight.grad", MemCategory::grads, {16, 16});
    Tensor h =
        alloc.alloc("offload.layers.0.weight", MemCategory::params, 256, DType::f32, Pool::host);
    REQUIRE(w.bytes() == 1024);
    REQUIRE(w.name() == "layers.0.weight");
    REQUIRE(w.data<float>()[17] == 0.0f);  // zero-initialised
    {
      Tensor a = alloc.alloc("layers.0.output", MemCategory::activations, {8, 16});
      const MemStats s = alloc.stats();
      REQUIRE(s.device.current[static_cast<int>(MemCategory::activations)] == 512);
      REQUIRE(s.device.current_total == 2560);
      REQUIRE(s.host.current_total == 1024);
    }
    const MemStats s = alloc.stats();
    REQUIRE(s.device.current[static_cast<int>(MemCategory::activations)] == 0);
    REQUIRE(s.device.peak[static_cast<int>(MemCategory::activations)] == 512);
    REQUIRE(s.device.peak_total == 2560);
    REQUIRE(s.device.cached == 512);  // freed but kept for reuse, reported apart
    // A block of the same size is reused.
    Tensor b = alloc.alloc("layers.1.output", MemCategory::activations, {8, 16});
    REQUIRE(alloc.stats().device.cached == 0);
  }
  REQUIRE(alloc.stats().device.current_total == 0);

  const auto snap = rec.snapshot();
  REQUIRE(snap.allocs.size() == 10);
  const auto life = residency(snap.allocs);
  REQUIRE(life.size() == 5);
  REQUIRE(life[0].name == "layers.0.weight");
  REQUIRE(life[0].category == MemCategory::params);
  REQUIRE(life[3].name == "layers.0.output");
  REQUIRE(life[3].t_free_ns >= life[3].t_alloc_ns);
  REQUIRE(life[3].t_free_ns <= life[4].t_alloc_ns);
  REQUIRE_FALSE(life[3].alive_at(life[4].t_alloc_ns));

  const auto series = category_series(snap.allocs, Pool::device);
  REQUIRE(!series.empty());
  int64_t peak_params = 0;
  for (const auto& s : series)
    peak_params = std::max(peak_params, s.bytes[static_cast<int>(MemCategory::params)]);
  REQUIRE(peak_params == 1024);
  REQUIRE(series.back().bytes == std::array<int64_t, kNumMemCategories>{});
}
