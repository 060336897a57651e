// Where a lesson step puts the playhead: the start of a training step, the n-th
// span of a kind (optionally of one layer, micro-batch or rank), or the moment a
// rank's memory peaks. Resolved on the recorded spans and allocations, so it is
// exact for any strategy; a seek that finds nothing says so instead of guessing.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "app/gui/logic/run_data.h"

namespace shardlab::gui {

struct SeekSpec {
  enum class What { none, step, event, peak_memory } what = What::none;
  int step = -1;  // What::step: that step; What::event: only spans of that step (-1 = any)
  SpanKind kind = SpanKind::other;  // What::event
  int layer = -1;                   // -1 = any
  int micro_batch = -1;             // -1 = any
  int rank = -1;                    // What::event: -1 = any rank; What::peak_memory: the rank
  int nth = 1;                      // 1 = the first match in time
};

struct SeekResult {
  double t = 0;            // where the playhead goes (ns since the run's start)
  double span_begin = -1;  // the span found (What::event), else -1
  double span_end = -1;
  int rank = -1;      // the rank the seek is about, -1 = all
  std::string error;  // non-empty when nothing matched: the reason, for the learner
};

// For an event the playhead lands 35% into the span: inside it, so the cluster
// view shows pieces in flight and the timeline's playhead sits on the span.
SeekResult resolve_seek(const RunData& d, const SeekSpec& s);

// "first all_gather of layer 3 on rank 1" — the seek in words, for the panel.
std::string describe_seek(const SeekSpec& s);

}  // namespace shardlab::gui
