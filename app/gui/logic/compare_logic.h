// The compare table: one row per finished run (median step time, peak memory
// per rank, bytes sent per step, bubble share, final loss) and its CSV export.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/runner.h"

namespace shardlab::gui {

struct CompareRow {
  std::string label;  // "ddp ×2"
  std::string strategy;
  int world = 0;
  double median_step_ms = 0;
  std::vector<int64_t> peak_bytes;   // per rank, device pool, peak of the total
  double sent_bytes_per_step = 0;    // the busiest rank's
  std::vector<double> bubble_share;  // per rank in 0..1; empty = not known
  bool bubble_share_known = false;
  double final_loss = 0;
};

CompareRow compare_row(const RunResult& r);
std::string config_label(const RunConfig& c);
// Columns: strategy, world, median_step_ms, peak_mem_bytes_rank<i>..., sent_bytes_per_step,
// bubble_share (mean over ranks, empty when unknown), final_loss.
std::string compare_csv(const std::vector<CompareRow>& rows);
// True when core/pipeline_analysis.h was there at build time.
bool bubble_share_available();

}  // namespace shardlab::gui
