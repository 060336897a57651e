// `shardlab project RUN`: a run this machine recorded, as it would run on N
// dedicated devices and a given link, beside what was measured here.
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "app/args.h"
#include "app/commands.h"
#include "core/comm/cores.h"
#include "core/model/checkpoint.h"
#include "core/predict/projection.h"
#include "core/record/trace.h"
#include "core/run/recording.h"

namespace shardlab::app {
namespace {

std::string help_text() {
  return "usage: shardlab project RUN [--devices N] [--link PRESET|BW,LAT] [--trace OUT.json] "
         "[--json]\n\n"
         "RUN is a recording ('run --record FILE') or a trace ('run --trace FILE') that this\n"
         "version of Shardlab wrote. The run is replayed on N dedicated devices, one rank each:\n"
         "every compute span costs the CPU time its thread really used (so ranks that took\n"
         "turns on a shared core cost what they would alone), and every transfer what the\n"
         "link's bandwidth and latency say. Collectives are costed as rings: all_reduce\n"
         "2(N-1)/N*bytes/BW + 2(N-1)*LAT, all_gather and reduce_scatter (N-1)/N*bytes/BW +\n"
         "(N-1)*LAT, broadcast and reduce bytes/BW + (N-1)*LAT; a send bytes/BW + LAT. What\n"
         "the strategy overlapped (issued, then waited for later) overlaps in the projection.\n\n"
         "  --devices N   devices, one per rank (default and only valid value: the run's world)\n"
         "  --link L      the link between devices (default nvlink-h100):\n" +
         link_presets_help() +
         "  --trace OUT   also write the projected run as a Chrome trace (opens in Perfetto\n"
         "                beside the measured one; 'gui --open OUT' shows it)\n"
         "  --with-data   keep making each batch on the step's path, as measured (default: a\n"
         "                data loader makes batches ahead, so 'data' spans cost no step time)\n"
         "  --raw-costs   each compute span costs its own CPU time (default: the median of the\n"
         "                same computation over the run's steps, pooled over the ranks that\n"
         "                run it and the layers of one shape: identical devices doing\n"
         "                identical work take the same time, while one thread here can run\n"
         "                25% slower than another for a whole run)\n"
         "  --json        print the result as JSON\n\n"
         "Printed: the measured and the projected median step, and per rank its compute,\n"
         "exposed communication (waiting while bytes move) and bubble (waiting for another\n"
         "rank to get there: a neighbour's activation or gradient, or a late peer at a\n"
         "collective), as time per step and share of the step; then bytes per link per step.\n";
}

std::string bytes_text(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, unit[u]);
  return buf;
}

}  // namespace

int cmd_project(int argc, char** argv) {
  const Args a(argc, argv, "project", {"devices", "link", "trace"},
               {"json", "with-data", "raw-costs"}, Args::Positionals::allowed);
  if (a.help()) {
    std::printf("%s", help_text().c_str());
    return 0;
  }
  if (a.positional().size() != 1)
    throw ConfigError(
        a.positional().empty()
            ? "'shardlab project' needs the run to project (a recording or trace file)"
            : "'shardlab project' takes one run, got " + std::to_string(a.positional().size()) +
                  " (valid: one recording or trace file)");
  const std::string file = a.positional()[0];
  const std::optional<std::string> trace_out = a.get("trace");
  if (trace_out) {
    if (*trace_out == file)
      throw ConfigError("--trace '" + *trace_out + "' is the run itself (valid: a new file)");
    check_writable(*trace_out, "--trace");
  }
  const Link link = parse_link(a.str("link", "nvlink-h100"));
  const Recording rec = load_run_file(file);
  const RunResult& run = rec.run;
  ProjectionOptions o;
  o.devices =
      a.integer("devices", run.cfg.world, "the run's world, " + std::to_string(run.cfg.world));
  o.link = link;
  o.with_data = a.has("with-data");
  o.raw_costs = a.has("raw-costs");
  const Projection p = project(run, o);

  const int world = run.cfg.world;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (a.has("json")) {
    nlohmann::json ranks = nlohmann::json::array();
    for (int r = 0; r < world; ++r) {
      const ProjectedRank& pr = p.ranks[r];
      ranks.push_back({{"rank", r},
                       {"step_ms", pr.step_ms},
                       {"compute_ms", pr.compute_ms},
                       {"exposed_comm_ms", pr.exposed_comm_ms},
                       {"bubble_ms", pr.bubble_ms},
                       {"bubble_share", p.bubble_share(r)},
                       {"exposed_share", p.exposed_share(r)},
                       {"bytes_sent_per_step", pr.bytes_sent}});
    }
    nlohmann::json links = nlohmann::json::array();
    for (const LinkTraffic& l : p.links)
      links.push_back({{"src", l.src}, {"dst", l.dst}, {"bytes_per_step", l.bytes_per_step}});
    const nlohmann::json out = {
        {"run", file},
        {"model", run.cfg.model},
        {"strategy", run.cfg.strategy},
        {"world", world},
        {"measured", {{"median_step_ms", run.median_step_ms}, {"origin", rec.origin.device}}},
        {"projected",
         {{"devices", p.devices},
          {"link", p.link.name},
          {"link_bytes_per_s", p.link.bytes_per_s},
          {"link_latency_s", p.link.latency_s},
          {"compute_from", p.compute_source},
          {"costs", p.raw_costs ? "each span's own" : "steady state (median of each op)"},
          {"data", p.with_data ? "on the step's path" : "made ahead by a data loader"},
          {"median_step_ms", p.median_step_ms},
          {"step_ms", p.step_ms},
          {"breakdown_from_step", p.first_step_in_breakdown},
          {"ranks", ranks},
          {"links", links}}}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%s, %s, world %d, %d steps (%s)\n", run.cfg.model.c_str(),
                run.cfg.strategy.c_str(), world, run.cfg.steps, file.c_str());
    std::printf("measured here:      median step %8.2f ms  (%s; %d rank%s on %d core%s%s)\n",
                run.median_step_ms, rec.origin.device.c_str(), world, world == 1 ? "" : "s", cores,
                cores == 1 ? "" : "s",
                world > cores ? ": ranks took turns, timings stretched" : "");
    std::printf("as on %d devices:   median step %8.2f ms  (link %s; compute from %s; %s)\n", world,
                p.median_step_ms, p.link.name.c_str(), p.compute_source.c_str(),
                p.with_data ? "batches made in the step" : "batches made ahead");
    std::printf("\nper rank, mean of steps %d..%d:\n", p.first_step_in_breakdown,
                run.cfg.steps - 1);
    std::printf("  rank    step ms   compute        exposed comm     bubble           sent/step\n");
    for (int r = 0; r < world; ++r) {
      const ProjectedRank& pr = p.ranks[r];
      std::printf("  %4d %10.3f %9.3f %4.0f%% %10.3f %4.0f%% %10.3f %4.0f%%   %s\n", r, pr.step_ms,
                  pr.compute_ms, pr.step_ms > 0 ? 100 * pr.compute_ms / pr.step_ms : 0.0,
                  pr.exposed_comm_ms, 100 * p.exposed_share(r), pr.bubble_ms,
                  100 * p.bubble_share(r), bytes_text(static_cast<double>(pr.bytes_sent)).c_str());
    }
    if (!p.links.empty()) {
      std::printf("\nbytes per link per step (busiest first):\n");
      const size_t shown = std::min<size_t>(p.links.size(), 16);
      for (size_t i = 0; i < shown; ++i)
        std::printf("  r%d -> r%d  %s\n", p.links[i].src, p.links[i].dst,
                    bytes_text(static_cast<double>(p.links[i].bytes_per_step)).c_str());
      if (p.links.size() > shown) std::printf("  ... %zu more\n", p.links.size() - shown);
    }
  }
  if (trace_out) {
    std::vector<Recorder::Snapshot> snaps;
    for (const auto& r : p.run.recorders) snaps.push_back(r->snapshot());
    // Whoever opens it reads where its times come from.
    RecordingOrigin origin = rec.origin;
    origin.device =
        std::to_string(p.devices) + " devices (projected: " + p.link.name + ", from " + file + ")";
    nlohmann::json meta = trace_metadata(p.run, origin);
    meta["projection"] = {{"devices", p.devices},
                          {"link", p.link.name},
                          {"compute_from", p.compute_source},
                          {"projected_from", file}};
    write_trace(*trace_out, snaps, 0, meta);
    if (!a.has("json")) std::printf("\nprojected trace: %s\n", trace_out->c_str());
  }
  return 0;
}

}  // namespace shardlab::app
