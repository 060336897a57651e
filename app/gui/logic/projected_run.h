// "As on N devices" in the views: the finished run projected onto one dedicated
// device per rank (core/predict/projection.h) as a RunData that the timeline,
// cluster and camping views draw, cached per run and link; and the map between
// the measured clock and the projected one, step by step, so a playhead keeps
// its step when it changes clock.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "app/gui/logic/i18n.h"
#include "app/gui/logic/replay_logic.h"
#include "app/gui/logic/run_data.h"
#include "core/run/runner.h"

namespace shardlab::gui {

// Why there is (or is no) projection to show.
enum class ProjectionStatus {
  none,     // nobody asked for one yet
  running,  // a run is going: only a finished run has a whole program to replay
  no_run,   // nothing finished on screen (no run yet, or it failed or was cancelled)
  failed,   // the projection refused the run (error says why: no marks, no spans ...)
  ok,
};

struct ProjectedRun {
  ProjectionStatus status = ProjectionStatus::none;
  std::string error;       // failed: the projection's one line (core's, in English)
  std::string link;        // the link asked for: a preset name or "BW,LAT"
  std::string link_label;  // as the projection names it ("nvlink-h100", "25 GB/s, 5 us")
  RunData data;            // ok: the projected run, allocations moved onto its clock
  double median_step_ms = 0;
  bool gpu = false;  // the run's ranks were on GPUs (compute costed from span wall time)
  // ok: where the two clocks meet (clock_marks of the measured and the projected run).
  std::vector<double> measured_marks, projected_marks;
  int projections = 0;  // how many times it projected (the cache is not free)
  // The cache's key: the run, its data's version and the link it was made for.
  const RunResult* of = nullptr;
  uint64_t of_version = 0;
  bool ok() const { return status == ProjectionStatus::ok; }
};

// Whether `p` was made for another run, data or link than these.
bool projection_stale(const ProjectedRun& p, const RunResult* finished, const RunData& measured,
                      bool running, const std::string& link);
// Brings `p` up to date: `finished` is the run on screen when it has finished
// (null otherwise), `measured` its data. Projects only when the run, its data
// or the link changed; returns true when it did.
bool update_projection(ProjectedRun& p, const RunResult* finished, const RunData& measured,
                       bool running, const std::string& link);

// The projected run as the views read it: its spans, and each rank's measured
// allocations moved onto that rank's projected clock through the spans both
// runs share (a buffer gathered for a layer's forward is gathered just before
// that forward on either clock).
void projected_run_data(RunData& out, const RunData& measured, const RunResult& projected);

// Where a run's clock meets another run of the same program: 0, the first
// span, the start of each step, the end of the last step, the end of the run.
std::vector<double> clock_marks(const RunData& d);
// A time on the clock of `from` marks, on the clock of `to` marks: linear
// between matching marks, so a time some way into step k lands as far into
// step k on the other clock; past the last mark, the same distance past it.
double map_clock(const std::vector<double>& from, const std::vector<double>& to, double t);

// Puts the playhead on the projected clock (when `projected` and there is a
// projection) or on the measured one, mapping its time across when it changes clock.
void keep_clock(Playhead& p, bool projected, const ProjectedRun& pr);
// Once per frame: projects when someone `wants` it (the timeline's rows, the
// replay clock) and it is stale, and keeps the playhead on the clock asked for
// (`clock_projected`); a playhead on the projected clock moves back to the
// measured one before the projection under it changes.
void refresh_projection(ProjectedRun& p, Playhead& playhead, const RunResult* finished,
                        const RunData& measured, bool running, const std::string& link, bool wanted,
                        bool clock_projected);

// The links a menu offers: the presets (loopback first), then `current` when
// it is none of them ("25,5" typed on the command line).
std::vector<std::string> link_choices(const std::string& current);
// The projected rows' shift on a time scale shared with the measured rows:
// projected time minus measured time at the start of `step`, so that step
// starts at the same x in both; the first step's when `step` is not in both.
double projected_offset(const RunData& measured, const RunData& projected, int step);

// One line: why the run on screen cannot be shown as on N devices.
std::string projection_reason(const ProjectedRun& p, const Tr& tr = Tr{});
// Above the measured rows: "measured here · 4 ranks on 2 cores · median step 9.81 ms"
// (`cores`: this machine's, core/comm/cores.h).
std::string measured_caption(const RunResult& r, int cores, const Tr& tr = Tr{});
// Above the projected rows: "as on 4 × CPU core, nvlink-h100 · median step 3.10 ms".
std::string projected_caption(const ProjectedRun& p, const Tr& tr = Tr{});

}  // namespace shardlab::gui
