// The rank body shared by the runner and the meta run (rank_body.h).
#include "core/parallel/rank_body.h"

#include "core/clock.h"

namespace shardlab {

std::array<Comm*, std::size(kMeshAxes)> RankResources::axis_comm_ptrs() const {
  std::array<Comm*, std::size(kMeshAxes)> out{};
  for (size_t a = 0; a < axis_comms.size(); ++a) out[a] = axis_comms[a].get();
  return out;
}

CommStats RankResources::comm_stats() const {
  CommStats s = comm ? comm->stats() : CommStats{};
  for (const auto& c : axis_comms)
    if (c) {
      const CommStats o = c->stats();
      s.bytes_sent += o.bytes_sent;
      s.ops += o.ops;
    }
  return s;
}

void RankResources::release() {
  for (auto& c : axis_comms) c.reset();
  comm.reset();
  if (device) {
    try {
      device->synchronize();
    } catch (const std::exception&) {
      // A failed device has nothing more to report; it is released all the same.
    }
  }
  alloc.reset();
  device.reset();
}

RankTotals run_rank_body(RankEnv& env, Strategy& strategy, const ParamSource& init,
                         const RankSteps& steps, std::string& phase) {
  Recorder* rec = env.rec;
  phase = "setup";
  strategy.setup(env, init);
  if (steps.after_setup) steps.after_setup();
  auto sent_so_far = [&] {
    int64_t sent = env.comm ? env.comm->stats().bytes_sent : 0;
    for (Comm* c : env.axis_comms)
      if (c) sent += c->stats().bytes_sent;
    return sent + strategy.bytes_sent_outside_comm();
  };
  // Each axis's bytes: its group's communicator, or the world's where the axis
  // spans it (a one-axis mesh, a strategy without --mesh).
  auto axis_sent = [&] {
    std::array<int64_t, std::size(kMeshAxes)> out{};
    if (env.mesh)  // (a test's hand-made env has none: every axis would be the world)
      for (MeshAxis axis : kMeshAxes)
        if (const Comm* c = env.comm_on(axis))
          out[static_cast<size_t>(axis)] = c->stats().bytes_sent;
    return out;
  };
  const int64_t sent_before = sent_so_far();
  const auto axis_before = axis_sent();
  for (int s = steps.first; s < steps.end; ++s) {
    phase = "step " + std::to_string(s);
    if (rec) rec->set_step(s);
    if (steps.before) steps.before(s);
    const int64_t t0 = now_ns();
    ScopedMark step_mark(rec, MarkKind::step, static_cast<uint64_t>(s));
    const LossShare share = strategy.step(s);
    // A GPU runs behind the host: the step ends when its work has run.
    env.device.synchronize();
    step_mark.done();
    const double ms = (now_ns() - t0) / 1e6;
    if (steps.after) steps.after(s, share, ms);
  }
  RankTotals out;
  if (steps.end > steps.first)
    out.bytes_sent_per_step =
        static_cast<double>(sent_so_far() - sent_before) / (steps.end - steps.first);
  if (steps.end > steps.first) {
    const auto axis_after = axis_sent();
    for (size_t a = 0; a < axis_after.size(); ++a)
      out.sent_by_axis_per_step[a] =
          static_cast<double>(axis_after[a] - axis_before[a]) / (steps.end - steps.first);
  }
  out.at_report = env.alloc.stats();
  if (rec) rec->set_step(-1);  // the export belongs to no step
  phase = "export of the final weights";
  out.params = strategy.export_params();
  return out;
}

}  // namespace shardlab
