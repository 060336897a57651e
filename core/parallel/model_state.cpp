// The ZeRO paper's per-rank model-state and communication accounting (see model_state.h).
#include "core/parallel/model_state.h"

#include <cmath>
#include <utility>

#include "core/parallel/data_parallel_mesh.h"
#include "core/parallel/strategy.h"
#include "core/run_options.h"

namespace shardlab {

namespace {

// "8Ψ + 8Ψ/N", dropping terms whose coefficient is zero.
std::string formula(int replicated, int sharded) {
  std::string s;
  if (replicated) s = std::to_string(replicated) + "Ψ";
  if (sharded) s += (s.empty() ? "" : " + ") + std::to_string(sharded) + "Ψ/N";
  return s.empty() ? "0" : s;
}

ModelStateBytes state(double params, double grads, double optimizer, std::string formula) {
  ModelStateBytes m;
  m.params = params;
  m.grads = grads;
  m.optimizer = optimizer;
  m.formula = std::move(formula);
  return m;
}

}  // namespace

BytesPerParam bytes_per_param(const std::string& precision, OptimizerKind optimizer) {
  const bool adamw = optimizer == OptimizerKind::adamw;
  if (precision == "fp32") return {4, 4, adamw ? 8 : 0, 4};
  if (precision == "bf16" || precision == "fp16") return {2, 2, adamw ? 12 : 4, 2};
  throw ConfigError("--precision '" + precision + "' is invalid (valid: fp32, bf16, fp16)");
}

bool has_model_state_prediction(const std::string& s) {
  const StrategyInfo* info = find_strategy(s);
  return info && (info->is_reference() || info->is_data_parallel());
}

std::string model_state_strategy_names() {
  std::string names;
  for (const StrategyInfo& i : all_strategies())
    if (has_model_state_prediction(i.name)) names += (names.empty() ? "" : ", ") + i.name;
  return names;
}

void check_model_state_input(const ModelStateInput& in) {
  if (!has_model_state_prediction(in.strategy))
    throw ConfigError("--strategy '" + in.strategy + "' has no model-state estimate (valid: " +
                      model_state_strategy_names() + ")");
  bytes_per_param(in.precision, in.optimizer);
  if (!(in.params > 0) || !std::isfinite(in.params))
    throw ConfigError("--params must be a positive number of parameters (e.g. 7.5e9)");
  if (in.world < 1) throw ConfigError("--world must be 1 or more");
  if (strategy_info(in.strategy).world_for(in.world) != in.world)
    throw ConfigError("--world " + std::to_string(in.world) +
                      " is invalid for strategy single (valid: 1)");
}

ModelStateInput model_state_input(const RunConfig& cfg, double params) {
  ModelStateInput in;
  in.params = params;
  in.world = cfg.world;
  in.strategy = cfg.strategy;
  in.precision = cfg.precision;
  in.optimizer = cfg.optimizer.kind;
  in.reshard_after_forward = !option_in_effect(cfg, StrategyOption::no_reshard);
  const StrategyInfo* s = find_strategy(cfg.strategy);
  in.offload = option_in_effect(cfg, StrategyOption::offload) && s && s->offload_to_host;
  in.optimizer_on_disk =
      option_in_effect(cfg, StrategyOption::offload) && !nvme_offload_dir(cfg).empty();
  in.params_on_disk = in.optimizer_on_disk && option_in_effect(cfg, StrategyOption::offload_params);
  // A data-parallel strategy on a dp × tp mesh: ZeRO's N is the dp axis, and
  // its Ψ the parameters of one tp slice (the split layers' 1/tp, the whole
  // LayerNorms and row biases), the same on every slice. (A --mesh that does
  // not parse is validate()'s to name.)
  const StrategyInfo* info = find_strategy(cfg.strategy);
  if (info && info->is_data_parallel() && !cfg.mesh.empty()) try {
      const Mesh mesh = run_mesh(cfg);
      in.world = mesh.size(MeshAxis::dp);
      if (const int tp = mesh.size(MeshAxis::tp); tp > 1)
        in.params =
            static_cast<double>(ModelLayout(make_layout(cfg).spec(), TensorSlice{tp, 0}).total());
    } catch (const ConfigError&) {
    }
  return in;
}

// The ZeRO stages' accounting, worked out here only: which model states one
// rank keeps whole and which as a 1/N shard, and so the bytes per parameter of
// each. Stage 1 shards the optimizer state, 2 also the gradients, 3 also the
// parameters; dp's replicas keep parameters and gradients but no optimizer.
ModelStateSplit model_state_split(const ModelStateInput& in, int rank) {
  check_model_state_input(in);
  const BytesPerParam b = bytes_per_param(in.precision, in.optimizer);
  const StrategyInfo& s = strategy_info(in.strategy);
  ModelStateSplit m;
  m.params = {b.params, s.shards(ModelStatePart::params)};
  m.grads = {b.grads, s.shards(ModelStatePart::grads)};
  m.optimizer = {s.role(rank, in.world) == RankRole::replica ? 0 : b.optimizer,
                 s.shards(ModelStatePart::optimizer_state)};
  for (const ModelStateSplit::Share& share : {m.params, m.grads, m.optimizer})
    (share.sharded ? m.sharded : m.whole) += share.bytes;
  m.on_host = s.shards(ModelStatePart::params) && in.offload;
  return m;
}

ModelStateBytes predict_model_state(const ModelStateInput& in, int rank) {
  const ModelStateSplit split = model_state_split(in, rank);
  const double psi = in.params, n = in.world;
  auto bytes = [&](const ModelStateSplit::Share& s) {
    return s.sharded ? s.bytes * psi / n : s.bytes * psi;
  };
  ModelStateBytes m = state(bytes(split.params), bytes(split.grads), bytes(split.optimizer),
                            formula(split.whole, split.sharded));
  m.on_host = split.on_host;
  // The offload file holds shards only (zero3, fsdp): a part of the sharded term.
  const int disk = (in.optimizer_on_disk ? split.optimizer.bytes : 0) +
                   (in.params_on_disk ? split.params.bytes : 0);
  if (disk > 0) {
    m.on_disk = disk * psi / n;
    m.disk_formula = formula(0, disk);
  }
  return m;
}

namespace {

// "2Ψ", "Ψ", "(N−1)Ψ": a volume of (a + b·N)·Ψ as the papers write it.
std::string psi_formula(int a, int b) {
  if (b == 0) return a == 0 ? "0" : a == 1 ? "Ψ" : std::to_string(a) + "Ψ";
  std::string n = b == 1 ? "N" : std::to_string(b) + "N";
  if (a == 0) return n + "Ψ";
  return "(" + n + (a < 0 ? "−" : "+") + std::to_string(a < 0 ? -a : a) + ")Ψ";
}

}  // namespace

CommPrediction predict_comm(const ModelStateInput& in, int rank) {
  check_model_state_input(in);
  const BytesPerParam b = bytes_per_param(in.precision, in.optimizer);
  const double psi = in.params, n = in.world;
  const StrategyInfo& s = strategy_info(in.strategy);
  CommPrediction c;
  c.bytes_per_element = b.comm;
  if (s.moves) c.moves = s.moves(MoveQuery{rank, in.world, in.reshard_after_forward});
  // Sum the strategy's operations. A ring collective over N ranks puts (N−1)/N
  // of its volume on each rank's wire; a copy sends all of it.
  int a = 0, per_rank = 0;
  for (const StateMove& m : c.moves) {
    const double units = m.psi + m.psi_per_rank * n;
    a += m.psi;
    per_rank += m.psi_per_rank;
    c.volume_elements += units * psi;
    c.sent_bytes += units * psi * b.comm * (m.op == StateOp::copy ? 1.0 : (n - 1) / n);
    if (!c.by_operation.empty()) c.by_operation += " + ";
    c.by_operation += std::string(to_string(m.op)) + " of the " + to_string(m.part) +
                      (m.when.empty() ? "" : " " + m.when) + " (" +
                      psi_formula(m.psi, m.psi_per_rank) + ")";
  }
  c.volume_bytes = c.volume_elements * b.comm;
  c.formula = psi_formula(a, per_rank);
  return c;
}

BlockActivations block_activations(int seq, int batch, int channels, int heads,
                                   const std::string& precision, bool flash, int tp,
                                   bool sequence_parallel) {
  const double s = seq, b = batch, h = channels, a = heads, t = tp;
  const int e = precision == "fp32" ? 4 : 2;  // bytes per stored value
  BlockActivations r;
  if (tp > 1) {
    const bool sp = sequence_parallel;
    const std::string f32 = e == 2 ? "" : "2 × ";
    const std::string note = e == 2 ? "" : " (fp32: 4 bytes a value)";
    const std::string T = std::to_string(tp);
    r.layernorm_stats = 16 * s * b / (sp ? t : 1);
    r.softmax_stats = flash ? 4 * a * s * b / t : 0;
    const double attention = flash ? 0 : 2 * a * s / h;
    if (sp) {
      r.with_dropout_16bit = s * b * h * (34 + (flash ? 0 : 5 * a * s / h)) / t;
      r.without_dropout = (e / 2.0) * s * b * h * (32 + attention) / t;
      r.formula = f32 + (flash ? "s·b·h·32/" + T : "s·b·h·(32 + 2·a·s/h)/" + T) + note;
    } else {
      r.with_dropout_16bit = s * b * h * (10 + 24 / t + (flash ? 0 : 5 * a * s / (h * t)));
      r.without_dropout = (e / 2.0) * s * b * h * (8 + 24 / t + attention / t);
      r.formula = f32 + "s·b·h·(8 + 24/" + T + (flash ? "" : " + 2·a·s/(h·" + T + ")") + ")" + note;
    }
    return r;
  }
  r.layernorm_stats = 16 * s * b;
  if (flash) {
    r.with_dropout_16bit = s * b * h * 34;
    r.without_dropout = (e / 2.0) * s * b * h * 32;
    r.softmax_stats = 4 * a * s * b;
    r.formula = e == 2 ? "s·b·h·32" : "2 × s·b·h·32 (fp32: 4 bytes a value)";
    return r;
  }
  r.with_dropout_16bit = s * b * h * (34 + 5 * a * s / h);
  r.without_dropout = (e / 2.0) * s * b * h * (32 + 2 * a * s / h);
  r.formula = e == 2 ? "s·b·h·(32 + 2·a·s/h)" : "2 × s·b·h·(32 + 2·a·s/h) (fp32: 4 bytes a value)";
  return r;
}

}  // namespace shardlab
