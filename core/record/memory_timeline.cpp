// Residency intervals and per-category series from allocation events.
#include "core/record/memory_timeline.h"

#include <unordered_map>

namespace shardlab {

std::vector<Residency> residency(const std::vector<AllocEvent>& events) {
  std::vector<Residency> out;
  std::unordered_map<uint64_t, size_t> open;  // buffer id -> index in out
  for (const AllocEvent& e : events) {
    if (e.delta_bytes >= 0) {
      open[e.buffer_id] = out.size();
      out.push_back({e.buffer_id, e.name, e.category, e.pool, e.delta_bytes, e.t_ns});
    } else if (auto it = open.find(e.buffer_id); it != open.end()) {
      out[it->second].t_free_ns = e.t_ns;
      open.erase(it);
    }
  }
  return out;
}

std::vector<CategorySample> category_series(const std::vector<AllocEvent>& events, Pool pool) {
  std::vector<CategorySample> out;
  CategorySample cur;
  for (const AllocEvent& e : events) {
    if (e.pool != pool) continue;
    cur.t_ns = e.t_ns;
    cur.bytes[static_cast<int>(e.category)] += e.delta_bytes;
    // Events at one instant fold into one sample.
    if (!out.empty() && out.back().t_ns == e.t_ns)
      out.back() = cur;
    else
      out.push_back(cur);
  }
  return out;
}

}  // namespace shardlab
