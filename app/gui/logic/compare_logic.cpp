// Compare rows from finished runs (see compare_logic.h).
#include "app/gui/logic/compare_logic.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

// The bubble-share column comes from core/pipeline_analysis.h, written by the
// pipeline work; until it lands the column says "n/a" and nothing else changes.
#if __has_include("core/pipeline_analysis.h")
#include "core/pipeline_analysis.h"
#define SHARDLAB_GUI_HAS_BUBBLE_SHARE 1
#else
#define SHARDLAB_GUI_HAS_BUBBLE_SHARE 0
#endif

namespace shardlab::gui {

bool bubble_share_available() {
  return SHARDLAB_GUI_HAS_BUBBLE_SHARE != 0;
}

std::string config_label(const RunConfig& c) {
  return c.strategy + " \xC3\x97" + std::to_string(c.world);  // "ddp ×2"
}

CompareRow compare_row(const RunResult& r) {
  CompareRow row;
  row.label = config_label(r.cfg);
  row.strategy = r.cfg.strategy;
  row.world = r.cfg.world;
  row.median_step_ms = r.median_step_ms;
  for (const RankReport& rr : r.ranks) {
    row.peak_bytes.push_back(rr.memory.device.peak_total);
    row.sent_bytes_per_step = std::max(row.sent_bytes_per_step, rr.bytes_sent_per_step);
  }
#if SHARDLAB_GUI_HAS_BUBBLE_SHARE
  row.bubble_share = bubble_share_per_rank(r);
  row.bubble_share_known = true;
#endif
  row.final_loss = r.losses.empty() ? 0.0 : r.losses.back();
  return row;
}

std::string compare_csv(const std::vector<CompareRow>& rows) {
  size_t max_ranks = 0;
  for (const CompareRow& r : rows) max_ranks = std::max(max_ranks, r.peak_bytes.size());
  std::ostringstream os;
  os << "strategy,world,median_step_ms";
  for (size_t i = 0; i < max_ranks; ++i) os << ",peak_mem_bytes_rank" << i;
  os << ",sent_bytes_per_step,bubble_share,final_loss\n";
  char buf[64];
  for (const CompareRow& r : rows) {
    os << r.strategy << ',' << r.world;
    std::snprintf(buf, sizeof buf, ",%.4f", r.median_step_ms);
    os << buf;
    for (size_t i = 0; i < max_ranks; ++i) {
      os << ',';
      if (i < r.peak_bytes.size()) os << r.peak_bytes[i];
    }
    std::snprintf(buf, sizeof buf, ",%.0f,", r.sent_bytes_per_step);
    os << buf;
    if (r.bubble_share_known && !r.bubble_share.empty()) {
      double sum = 0;
      for (double b : r.bubble_share) sum += b;
      std::snprintf(buf, sizeof buf, "%.4f", sum / r.bubble_share.size());
      os << buf;
    }
    std::snprintf(buf, sizeof buf, ",%.6g\n", r.final_loss);
    os << buf;
  }
  return os.str();
}

}  // namespace shardlab::gui
