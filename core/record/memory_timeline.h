// Reading allocation events back: which named buffers were resident when, and
// bytes per category over time. The memory panel, cluster view and trace
// counters are all drawn from these, never from formulas.
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/record/recorder.h"

namespace shardlab {

// One buffer's life: allocated at t_alloc_ns, freed at t_free_ns (max when still alive).
struct Residency {
  uint64_t buffer_id = 0;
  std::string name;
  MemCategory category = MemCategory::temporary;
  Pool pool = Pool::device;
  int64_t bytes = 0;
  int64_t t_alloc_ns = 0;
  int64_t t_free_ns = std::numeric_limits<int64_t>::max();
  bool alive_at(int64_t t) const { return t_alloc_ns <= t && t < t_free_ns; }
};

// Pairs allocations with their frees, in allocation order.
std::vector<Residency> residency(const std::vector<AllocEvent>& events);

// Bytes in use per category (one pool) after each event: a step function.
struct CategorySample {
  int64_t t_ns = 0;
  std::array<int64_t, kNumMemCategories> bytes{};
};
std::vector<CategorySample> category_series(const std::vector<AllocEvent>& events, Pool pool);

}  // namespace shardlab
