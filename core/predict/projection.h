// "As on N devices": a recorded run replayed on dedicated devices joined by a
// modelled link. Each rank's program (its compute, where it issued each
// communication op, where it waited for it, where each step began and ended)
// comes from the recording; compute costs its thread CPU time, so ranks that
// took turns on a shared core cost what they would on a core of their own; and
// every transfer costs what the link's bandwidth and latency say.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel/run_result.h"

namespace shardlab {

// A link between two devices: full duplex, one transfer at a time per
// direction of each device's port.
struct Link {
  std::string name;           // "nvlink-h100", "25 GB/s, 5 us", "loopback (measured here)"
  double bytes_per_s = 25e9;  // per direction
  double latency_s = 5e-6;    // per message (per ring step for collectives)
  // Bytes are moved by the endpoints' CPUs (TCP on loopback), not by a NIC or a
  // copy engine: a transfer takes its time from the rank's compute as well.
  bool host_cpu = false;
};

// The named presets and what each stands for, one line each, for --help.
std::string link_presets_help();
// The presets' names, "loopback" first (what a menu of links offers).
std::vector<std::string> link_preset_names();
// "loopback", "pcie4", "nvlink-h100", "eth100", "ib400", or "BW,LAT": BW in
// GB/s (decimal) unless it carries a unit (GB/s, MB/s, Gb/s), LAT in
// microseconds unless it carries one (ns, us, ms, s). "loopback" is measured on
// this machine (Gloo over TCP on 127.0.0.1, once per process). Throws
// ConfigError "--link X: ..." naming what is valid.
Link parse_link(const std::string& text);
// This machine's loopback, measured (two ranks as threads, Gloo over TCP):
// latency from small round trips, bandwidth from 8 MiB messages.
Link measure_loopback_link();

struct ProjectionOptions {
  int devices = 0;  // one rank per device: must equal the run's world
  Link link;
  // Making each batch (spans of kind data) stays on the step's critical path,
  // as it was measured. Off by default: a training loop's data loader makes
  // the next batches while the devices work, so the step does not wait for them.
  bool with_data = false;
  // Each compute span costs its own CPU time, instead of the median of the same
  // op over the run's steps (the steady-state cost, the default).
  bool raw_costs = false;
  // Other runs of the same work (same_work) whose op costs are pooled with this
  // run's: a controlled comparison, where two schedules are replayed with the
  // same costs and differ only by what the schedule does. Each needs spans.
  std::vector<const RunResult*> pool_costs_with;
};

// Whether two runs compute the same thing and differ only in when they
// communicate (overlap, bucket size, prefetch, resharding, backend) or in how
// long and from which seed they train: their ops can share one cost table.
bool same_work(const RunConfig& a, const RunConfig& b);

// Where the time of one rank went over the projected steps, per step.
struct ProjectedRank {
  double step_ms = 0;          // the rank's mean step
  double compute_ms = 0;       // computing (or host work between spans)
  double exposed_comm_ms = 0;  // waiting while bytes moved
  double bubble_ms = 0;        // waiting for another rank to get there (its
                               // activation, gradient, or its arrival at a collective)
  int64_t bytes_sent = 0;      // per step, on the wire
};

// Bytes one direction of one link carried per step.
struct LinkTraffic {
  int src = 0, dst = 0;
  int64_t bytes_per_step = 0;
};

struct Projection {
  int devices = 0;
  Link link;
  // What compute was costed from: "thread CPU time", or "span wall time" for a
  // recording without CPU clocks (device-timed GPU spans).
  std::string compute_source;
  bool with_data = false;  // as in the options
  bool raw_costs = false;
  int pooled_runs = 0;          // other runs whose op costs were pooled with this one's
  std::vector<double> step_ms;  // per step, the slowest rank's projected time
  double median_step_ms = 0;
  // When the last rank ended its program, from the start: unlike one step's
  // time, never longer on a faster link (a step can start sooner and then wait
  // longer for a peer that did not gain as much).
  double end_ms = 0;
  // Averages over the steps in the breakdown: all but the first (warm-up)
  // when there are at least two.
  int first_step_in_breakdown = 0;
  std::vector<ProjectedRank> ranks;
  std::vector<LinkTraffic> links;  // the busiest first
  // The projected run as spans on each rank (compute and comm lanes), with the
  // measured run's settings: what the timeline and a trace show. No allocations.
  RunResult run;

  // Bubble as a share of the rank's step (0..1).
  double bubble_share(int rank) const;
  double exposed_share(int rank) const;
};

// Throws ConfigError (one line) when the run cannot be projected: devices !=
// world, no recording (spans) or no program marks (a recording made before
// this version), or a run to pool costs with that is not of the same work.
Projection project(const RunResult& run, const ProjectionOptions& options);

}  // namespace shardlab
