// Data-parallel-family report: per rank, the measured peak model states
// (params, grads, optimizer state) beside the ZeRO paper's prediction, and
// measured bytes sent per step beside the predicted volume, with what makes them differ.
#include <cstdio>
#include <string>

#include "app/summary.h"
#include "core/model/model.h"
#include "core/parallel/data_parallel_mesh.h"
#include "core/parallel/model_state.h"
#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"
#include "core/run/metrics.h"
#include "core/run_options.h"

namespace shardlab::app {

namespace {

// Bytes of shard padding in one rank's model states: full flat buffers carry
// each group's padding, shards carry their share of it (see core/parallel/sharding.h).
// Strategies without a ZeRO stage keep unpadded per-parameter buffers.
double padding_bytes(const RunConfig& c, const ModelLayout& layout, const ModelStateInput& in) {
  const StrategyInfo& s = strategy_info(c.strategy);
  if (!s.shards(ModelStatePart::optimizer_state)) return 0;
  const int unit = s.reads_option(StrategyOption::fsdp_unit) ? c.fsdp_unit : 1;
  const auto groups = make_flat_groups(layout, unit, in.world);
  double full = 0;
  for (const FlatGroup& g : groups) full += static_cast<double>(g.plan.padding());
  const double shard = padding_per_rank(groups);
  const ModelStateSplit split = model_state_split(in, 0);
  return full * split.whole + shard * split.sharded;
}

// dp has no communicator: its copies are spans on the comm lane, recorded by
// the device that is not device 0. Broadcast and scatter were sent by device 0,
// gather and reduce by the recording device. Returns {model states, activations}
// sent per step by `rank`; {-1, -1} when the run was not recorded.
std::pair<double, double> dp_sent(const RunResult& r, int rank) {
  if (!r.cfg.record) return {-1, -1};
  double states = 0, acts = 0;
  for (size_t k = 0; k < r.recorders.size(); ++k) {
    for (const Span& s : r.recorders[k]->snapshot().spans) {
      if (s.lane != Lane::comm || s.peer < 0 || s.step < 0) continue;
      const bool from_device0 = s.kind == SpanKind::broadcast || s.kind == SpanKind::scatter;
      const int sender = from_device0 ? s.peer : static_cast<int>(k);
      if (sender != rank) continue;
      const bool model_state = s.kind == SpanKind::broadcast || s.kind == SpanKind::reduce;
      (model_state ? states : acts) += static_cast<double>(s.bytes);
    }
  }
  return {states / r.cfg.steps, acts / r.cfg.steps};
}

struct Row {
  ModelStateMeasured m;
  ModelStateBytes predicted;
  double padding = 0;
  double sent = 0;              // measured, per step
  double sent_activations = 0;  // dp: of which batch / output copies
  double sent_tp = 0;           // on a mesh: over the tp group (not in `sent`, the dp group's)
  double h2d = 0, d2h = 0;      // fsdp --offload: host↔device copies per step (-1: not recorded)
  double disk_read = 0, disk_written = 0;  // --offload nvme:DIR: per step (-1: not recorded)
  CommPrediction comm;
};

// --offload on a strategy that then keeps its model states in host memory
// (fsdp; zero3 offloads only its optimizer state, to a disk).
bool host_offload(const RunConfig& c) {
  return option_in_effect(c, StrategyOption::offload) && strategy_info(c.strategy).offload_to_host;
}

std::vector<Row> rows(const RunResult& r) {
  const RunConfig& c = r.cfg;
  // What one rank holds before ZeRO shards it: on a dp × tp mesh its tp slice.
  const ModelLayout layout = data_parallel_rank_layout(c);
  const ModelStateInput in = model_state_input(c, static_cast<double>(layout.total()));
  const double pad = padding_bytes(c, layout, in);
  // On a mesh ZeRO's traffic is the dp axis's; the tp groups' is the layers'.
  const bool meshed = !c.mesh.empty();
  const bool controller = is_controller(c.strategy);
  const bool offload = host_offload(c);
  std::vector<Row> out;
  for (int k = 0; k < static_cast<int>(r.ranks.size()); ++k) {
    Row row;
    row.m = measured_model_state(r.ranks[k]);
    row.predicted = predict_model_state(in, k);
    row.padding = pad;
    row.comm = predict_comm(in, k);
    if (controller) {
      // dp's device copies are counted like communication; the timeline
      // tells which of them were activations rather than model states.
      row.sent_activations = dp_sent(r, k).second;
    }
    row.sent = r.ranks[k].bytes_sent_per_step;
    if (meshed && row.sent >= 0) {
      row.sent = r.ranks[k].sent_by_axis_per_step[static_cast<size_t>(MeshAxis::dp)];
      row.sent_tp = r.ranks[k].sent_by_axis_per_step[static_cast<size_t>(MeshAxis::tp)];
    }
    if (!nvme_offload_dir(c).empty()) {
      row.disk_read = row.disk_written = -1;
      if (c.record) {
        const std::vector<Span> spans = r.recorders[k]->snapshot().spans;
        row.disk_read = bytes_per_step(spans, c.steps, SpanKind::disk_read);
        row.disk_written = bytes_per_step(spans, c.steps, SpanKind::disk_write);
      }
    }
    if (offload) {
      row.h2d = row.d2h = c.record ? 0 : -1;
      if (c.record)
        for (const Span& s : r.recorders[k]->snapshot().spans) {
          if (s.step < 0) continue;
          if (s.kind == SpanKind::copy_h2d) row.h2d += static_cast<double>(s.bytes) / c.steps;
          if (s.kind == SpanKind::copy_d2h) row.d2h += static_cast<double>(s.bytes) / c.steps;
        }
    }
    out.push_back(row);
  }
  return out;
}

std::string explanation(const RunResult& r, const std::vector<Row>& rs) {
  const RunConfig& c = r.cfg;
  const Row& r0 = rs.front();
  const bool offload = host_offload(c);
  const bool controller = is_controller(c.strategy);
  std::string s =
      "The formulas count model states only. Beside them each rank also held activations (" +
      human_bytes(r0.m.activations) + " peak on rank 0), comm buffers (" +
      human_bytes(r0.m.comm_buffers) + ": ";
  s += strategy_info(c.strategy).comm_buffers;
  if (offload) s += ", device copies of the host-resident shards";
  s += ") and temporaries (" + human_bytes(r0.m.temporary) + ").";
  if (r0.padding > 0)
    s += " Shards are padded to equal length: " + human_bytes(r0.padding) +
         " of each rank's model states is padding.";
  if (offload && r0.h2d >= 0)
    s += " With --offload each rank also copied " + human_bytes(r0.h2d) +
         " host→device (every shard, before each all-gather) and " + human_bytes(r0.d2h) +
         " device→host (its reduced gradient shards) per step: PCIe traffic on a GPU, not counted "
         "as bytes sent.";
  if (!nvme_offload_dir(c).empty() && r0.disk_read >= 0)
    s += " With --offload " + c.offload_to +
         " the optimizer state lives in one nameless file per "
         "rank under that directory: rank 0 read " +
         human_bytes(r0.disk_read) + " from it and wrote " + human_bytes(r0.disk_written) +
         " back per step (the state of every shard it owns, a layer or unit at a time), and "
         "held in memory only the state being stepped: its optimizer_state above is that peak, "
         "not the formula's." +
         (c.offload_params
              ? " With --offload-params the parameter shards live there too: each is read "
                "before every all-gather of its group and again for the update, which writes it "
                "back, so params above are only the shards in flight."
              : "");
  if (r0.sent_tp > 0)
    s += " On the mesh the measured bytes are the dp group's; each rank also sent " +
         human_bytes(r0.sent_tp) +
         " per step over its tp group (the split layers' all-reduces of activations and their "
         "gradients), which ZeRO's accounting does not cover, and Ψ is one tp slice's parameters.";
  if (controller)
    s += " dp's copies also move activations (the batch and output gradients from device 0, "
         "the outputs back to it), which the model-state traffic does not count.";
  else
    s += " Traffic is measured on the wire: a ring collective sends (N−1)/N of its volume per "
         "rank" +
         std::string(r0.padding > 0 ? ", padding included." : ".");
  return s;
}

}  // namespace

void print_model_state_report(const RunResult& r) {
  const RunConfig& c = r.cfg;
  if (!strategy_info(c.strategy).is_data_parallel() || r.ranks.empty()) return;
  const std::vector<Row> rs = rows(r);
  const bool host = host_offload(c);
  const bool controller = is_controller(c.strategy);
  const BytesPerParam b = bytes_per_param(c.precision, c.optimizer.kind);
  std::printf(
      "  model states per rank: measured peak vs predicted (ZeRO paper, %s %s: %d + %d + %d bytes "
      "per parameter%s):\n",
      c.precision.c_str(), to_string(c.optimizer.kind), b.params, b.grads, b.optimizer,
      !nvme_offload_dir(c).empty()
          ? (c.offload_params
                 ? (host ? ", in host memory; the parameters' and optimizer state's home is the "
                           "disk file"
                         : "; the parameters' and optimizer state's home is the disk file")
             : host ? ", in host memory; the optimizer state's home is the disk file"
                    : "; the optimizer state's home is the disk file")
      : host ? ", in host memory"
             : "");
  std::printf("    %-5s %11s %11s %11s %11s %11s %8s %11s  %s\n", "rank", "params", "grads",
              "optimizer", "measured", "predicted", "diff", "padding", "formula");
  for (size_t k = 0; k < rs.size(); ++k) {
    const Row& w = rs[k];
    const double pred = w.predicted.total();
    std::printf("    %-5zu %11s %11s %11s %11s %11s %+7.2f%% %11s  %s\n", k,
                human_bytes(w.m.params).c_str(), human_bytes(w.m.grads).c_str(),
                human_bytes(w.m.optimizer).c_str(), human_bytes(w.m.total()).c_str(),
                human_bytes(pred).c_str(), pred > 0 ? 100.0 * (w.m.total() - pred) / pred : 0.0,
                human_bytes(w.padding).c_str(), w.predicted.formula.c_str());
  }
  std::printf("  bytes sent per step: measured vs predicted (%d bytes per element%s):\n",
              rs.front().comm.bytes_per_element,
              controller       ? "; dp has no communicator: these are its device copies"
              : c.mesh.empty() ? ""
                               : "; over the dp axis's group");
  std::printf("    %-5s %13s %13s %8s  %s\n", "rank", "measured", "predicted", "diff", "volume");
  for (size_t k = 0; k < rs.size(); ++k) {
    const Row& w = rs[k];
    const double pred = w.comm.sent_bytes;
    std::printf("    %-5zu %13s %13s", k, w.sent < 0 ? "not recorded" : human_bytes(w.sent).c_str(),
                human_bytes(pred).c_str());
    if (pred > 0 && w.sent >= 0)
      std::printf(" %+7.2f%%", 100.0 * (w.sent - pred) / pred);
    else
      std::printf(" %8s", "");
    std::printf("  %s", w.comm.formula.c_str());
    if (controller && w.sent_activations > 0)
      std::printf(" (measured includes %s of activations)",
                  human_bytes(w.sent_activations).c_str());
    std::printf("\n");
  }
  std::printf("  why they differ: %s\n", explanation(r, rs).c_str());
}

void model_state_report_json(const RunResult& r, nlohmann::json& j) {
  const RunConfig& c = r.cfg;
  if (!strategy_info(c.strategy).is_data_parallel() || r.ranks.empty()) return;
  const std::vector<Row> rs = rows(r);
  const bool controller = is_controller(c.strategy);
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t k = 0; k < rs.size(); ++k) {
    const Row& w = rs[k];
    nlohmann::json sent = {{"predicted", w.comm.sent_bytes},
                           {"volume_formula", w.comm.formula},
                           {"by_operation", w.comm.by_operation},
                           {"volume_bytes", w.comm.volume_bytes}};
    if (w.sent >= 0) sent["measured"] = w.sent;
    if (controller && w.sent >= 0) sent["measured_activations"] = w.sent_activations;
    if (!c.mesh.empty() && w.sent >= 0) sent["measured_tp"] = w.sent_tp;
    if (w.h2d >= 0 && host_offload(c)) {
      sent["copy_h2d"] = w.h2d;
      sent["copy_d2h"] = w.d2h;
    }
    ranks.push_back({{"rank", k},
                     {"measured",
                      {{"params", w.m.params},
                       {"grads", w.m.grads},
                       {"optimizer_state", w.m.optimizer},
                       {"total", w.m.total()},
                       {"in_host_pool", w.m.host}}},
                     {"predicted",
                      {{"params", w.predicted.params},
                       {"grads", w.predicted.grads},
                       {"optimizer_state", w.predicted.optimizer},
                       {"total", w.predicted.total()},
                       {"formula", w.predicted.formula},
                       {"pool", w.predicted.on_host ? "host" : "device"}}},
                     {"padding_bytes", w.padding},
                     {"bytes_sent_per_step", sent}});
  }
  j["model_state"] = {{"ranks", ranks}, {"why_they_differ", explanation(r, rs)}};
}

}  // namespace shardlab::app
