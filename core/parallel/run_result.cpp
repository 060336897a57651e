// The statistics every report of a run's step times shares (see run_result.h).
#include "core/parallel/run_result.h"

#include <algorithm>

namespace shardlab {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double steady_median(const std::vector<double>& step_ms) {
  if (step_ms.size() < 2) return median(step_ms);
  return median(std::vector<double>(step_ms.begin() + 1, step_ms.end()));
}

}  // namespace shardlab
