// The ZeRO paper's per-rank model-state and communication accounting (see model_state.h).
#include "core/model_state.h"

#include <cmath>
#include <utility>

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
  return s == "single" || s == "ddp" || s == "dp" || s == "zero1" || s == "zero2" || s == "zero3" ||
         s == "fsdp";
}

void check_model_state_input(const ModelStateInput& in) {
  if (!has_model_state_prediction(in.strategy))
    throw ConfigError("--strategy '" + in.strategy +
                      "' has no model-state estimate (valid: single, ddp, dp, zero1, zero2, zero3, "
                      "fsdp)");
  bytes_per_param(in.precision, in.optimizer);
  if (!(in.params > 0) || !std::isfinite(in.params))
    throw ConfigError("--params must be a positive number of parameters (e.g. 7.5e9)");
  if (in.world < 1) throw ConfigError("--world must be 1 or more");
  if (in.strategy == "single" && in.world != 1)
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
  in.reshard_after_forward = cfg.reshard_after_forward;
  in.offload = cfg.strategy == "fsdp" && cfg.offload;
  return in;
}

ModelStateBytes predict_model_state(const ModelStateInput& in, int rank) {
  check_model_state_input(in);
  const BytesPerParam b = bytes_per_param(in.precision, in.optimizer);
  const double psi = in.params, n = in.world;
  const std::string& s = in.strategy;
  if (s == "zero1")
    return state(b.params * psi, b.grads * psi, b.optimizer * psi / n,
                 formula(b.params + b.grads, b.optimizer));
  if (s == "zero2")
    return state(b.params * psi, b.grads * psi / n, b.optimizer * psi / n,
                 formula(b.params, b.grads + b.optimizer));
  if (s == "zero3" || s == "fsdp") {
    ModelStateBytes m = state(b.params * psi / n, b.grads * psi / n, b.optimizer * psi / n,
                              formula(0, b.params + b.grads + b.optimizer));
    m.on_host = s == "fsdp" && in.offload;
    return m;
  }
  if (s == "dp" && rank != 0)  // a replica and its gradients; no optimizer
    return state(b.params * psi, b.grads * psi, 0, formula(b.params + b.grads, 0));
  // single, ddp, dp's device 0
  return state(b.params * psi, b.grads * psi, b.optimizer * psi,
               formula(b.params + b.grads + b.optimizer, 0));
}

CommPrediction predict_comm(const ModelStateInput& in, int rank) {
  check_model_state_input(in);
  const BytesPerParam b = bytes_per_param(in.precision, in.optimizer);
  const double psi = in.params, n = in.world;
  const std::string& s = in.strategy;
  CommPrediction c;
  c.bytes_per_element = b.comm;
  double times = 0;  // volume in units of Ψ
  if (s == "ddp" || s == "zero1" || s == "zero2" || (s == "fsdp" && !in.reshard_after_forward))
    times = 2;
  else if (s == "zero3" || s == "fsdp")
    times = 3;
  if (s == "dp") {
    // Point-to-point copies: what a device sends is what the wire carries.
    const double k = in.world == 1 ? 0 : (rank == 0 ? n - 1 : 1);
    c.volume_elements = k * psi;
    c.volume_bytes = c.volume_elements * b.comm;
    c.sent_bytes = c.volume_bytes;
    c.formula = in.world == 1 ? "0" : (rank == 0 ? "(N−1)Ψ" : "Ψ");
    return c;
  }
  c.volume_elements = times * psi;
  c.volume_bytes = c.volume_elements * b.comm;
  c.sent_bytes = c.volume_bytes * (n - 1) / n;
  c.formula = times == 0 ? "0" : std::to_string(static_cast<int>(times)) + "Ψ";
  return c;
}

}  // namespace shardlab
