// Seek resolution for lesson steps (see seek_logic.h).
#include "app/gui/logic/seek_logic.h"

#include <algorithm>
#include <vector>

#include "app/gui/logic/memory_logic.h"

namespace shardlab::gui {

namespace {

std::string ordinal(int n) {
  switch (n) {
    case 1:
      return "first";
    case 2:
      return "second";
    case 3:
      return "third";
    default:
      return std::to_string(n) + "th";
  }
}

bool matches(const Span& sp, const SeekSpec& s) {
  return sp.kind == s.kind && (s.layer < 0 || sp.layer == s.layer) &&
         (s.micro_batch < 0 || sp.micro_batch == s.micro_batch) &&
         (s.step < 0 || sp.step == s.step);
}

}  // namespace

SeekResult resolve_seek(const RunData& d, const SeekSpec& s) {
  SeekResult out;
  out.t = d.steps_begin();
  switch (s.what) {
    case SeekSpec::What::none:
      return out;
    case SeekSpec::What::step: {
      if (s.step < 0 || s.step >= static_cast<int>(d.step_begin.size()) ||
          d.step_begin[s.step] < 0) {
        out.error = "step " + std::to_string(s.step) + " is not in this run (it has " +
                    std::to_string(d.step_begin.size()) + " steps)";
        return out;
      }
      out.t = static_cast<double>(d.step_begin[s.step]);
      return out;
    }
    case SeekSpec::What::event: {
      // Every matching span of the ranks asked for, in time order: "the first"
      // means the first anyone can see on the timeline.
      std::vector<const Span*> found;
      for (int r = 0; r < static_cast<int>(d.ranks.size()); ++r) {
        if (s.rank >= 0 && r != s.rank) continue;
        for (const LaneData& lane : d.ranks[r].lanes)
          for (const Span& sp : lane.spans)
            if (matches(sp, s)) found.push_back(&sp);
      }
      std::sort(found.begin(), found.end(), [](const Span* a, const Span* b) {
        return a->t_begin_ns != b->t_begin_ns ? a->t_begin_ns < b->t_begin_ns : a->rank < b->rank;
      });
      if (s.nth < 1 || static_cast<size_t>(s.nth) > found.size()) {
        out.error =
            "no " + describe_seek(s) + " in this run (found " + std::to_string(found.size()) + ")";
        return out;
      }
      const Span& sp = *found[s.nth - 1];
      out.span_begin = static_cast<double>(sp.t_begin_ns);
      out.span_end = static_cast<double>(sp.t_end_ns);
      out.t = out.span_begin + 0.35 * (out.span_end - out.span_begin);
      out.rank = sp.rank;
      return out;
    }
    case SeekSpec::What::peak_memory: {
      if (s.rank < 0 || s.rank >= static_cast<int>(d.ranks.size())) {
        out.error = "rank " + std::to_string(s.rank) + " is not in this run (world " +
                    std::to_string(d.ranks.size()) + ")";
        return out;
      }
      const auto& series = d.ranks[s.rank].device_series;
      if (series.empty()) {
        out.error = "rank " + std::to_string(s.rank) + " recorded no memory";
        return out;
      }
      out.t = static_cast<double>(peak_of(series).t);
      out.rank = s.rank;
      return out;
    }
  }
  return out;
}

std::string describe_seek(const SeekSpec& s) {
  switch (s.what) {
    case SeekSpec::What::none:
      return "the start of training";
    case SeekSpec::What::step:
      return "the start of step " + std::to_string(s.step);
    case SeekSpec::What::peak_memory:
      return "the peak memory of rank " + std::to_string(s.rank);
    case SeekSpec::What::event: {
      std::string kind = to_string(s.kind);
      std::replace(kind.begin(), kind.end(), '_', '-');  // "all-gather", as people write it
      std::string t = ordinal(s.nth) + " " + kind;
      if (s.layer >= 0) t += " of layer " + std::to_string(s.layer);
      if (s.micro_batch >= 0) t += " of micro-batch " + std::to_string(s.micro_batch);
      if (s.step >= 0) t += " in step " + std::to_string(s.step);
      if (s.rank >= 0) t += " on rank " + std::to_string(s.rank);
      return t;
    }
  }
  return "";
}

}  // namespace shardlab::gui
