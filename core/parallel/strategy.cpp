// Strategy registry, the options each strategy reads, and full validation.
#include "core/parallel/strategy.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "core/comm/placement.h"
#include "core/run_options.h"

namespace shardlab {

namespace {

std::vector<StrategyInfo>& registry_storage() {
  static std::vector<StrategyInfo> r;
  return r;
}

// The registry for lookups: an empty one means start-up forgot
// register_builtin_strategies(), which would otherwise read as "unknown strategy".
const std::vector<StrategyInfo>& registry() {
  const std::vector<StrategyInfo>& r = registry_storage();
  if (r.empty())
    throw std::logic_error(
        "no strategies registered: call register_builtin_strategies() (strategies/registry.h) "
        "once at start-up");
  return r;
}

}  // namespace

const char* to_string(StrategyFamily f) {
  switch (f) {
    case StrategyFamily::single:
      return "single";
    case StrategyFamily::data_parallel:
      return "data-parallel";
    case StrategyFamily::pipeline:
      return "pipeline";
    case StrategyFamily::parameter_server:
      return "parameter-server";
  }
  return "";
}

const char* to_string(RankRole r) {
  switch (r) {
    case RankRole::peer:
      return "peer";
    case RankRole::stage:
      return "stage";
    case RankRole::controller:
      return "controller";
    case RankRole::replica:
      return "replica";
    case RankRole::server:
      return "server";
    case RankRole::worker:
      return "worker";
  }
  return "";
}

const char* to_string(ModelStatePart p) {
  switch (p) {
    case ModelStatePart::params:
      return "parameters";
    case ModelStatePart::grads:
      return "gradients";
    case ModelStatePart::optimizer_state:
      return "optimizer state";
  }
  return "";
}

const char* to_string(StateOp op) {
  switch (op) {
    case StateOp::all_reduce:
      return "all-reduce";
    case StateOp::reduce_scatter:
      return "reduce-scatter";
    case StateOp::all_gather:
      return "all-gather";
    case StateOp::copy:
      return "copy";
  }
  return "";
}

bool StrategyInfo::is_reference() const {
  return family == StrategyFamily::single;
}

int StrategyInfo::world_for(int requested) const {
  return is_reference() ? 1 : requested;
}

int StrategyInfo::data_parallel_degree(const RunConfig& cfg) const {
  if (servers) return std::max(1, cfg.world - server_ranks(cfg));  // the workers
  if (family == StrategyFamily::data_parallel && cfg.mesh.empty()) return cfg.world;
  // On a mesh: its dp axis (a --mesh that does not parse is validate()'s to
  // name; until then, the world for the data-parallel family, one pipeline).
  if ((has_stages() || is_data_parallel()) && !cfg.mesh.empty()) try {
      return run_mesh(cfg).size(MeshAxis::dp);
    } catch (const ConfigError&) {
      return is_data_parallel() ? cfg.world : 1;
    }
  return 1;
}

int StrategyInfo::micro_batches(const RunConfig& cfg) const {
  return reads_option(StrategyOption::micro_batches) ? std::max(1, cfg.micro_batches) : 1;
}

int StrategyInfo::rows_per_pass(const RunConfig& cfg, int rank) const {
  if (rank < server_ranks(cfg)) return 0;  // a server computes nothing
  return cfg.batch / std::max(1, data_parallel_degree(cfg)) / micro_batches(cfg);
}

bool StrategyInfo::has_stages() const {
  return family == StrategyFamily::pipeline;
}

bool StrategyInfo::is_data_parallel() const {
  return family == StrategyFamily::data_parallel;
}

RankRole StrategyInfo::role(int rank, int world) const {
  if (has_stages()) return RankRole::stage;
  if (controller && world > 1) return rank == 0 ? RankRole::controller : RankRole::replica;
  return RankRole::peer;
}

RankRole StrategyInfo::role(const RunConfig& cfg, int rank) const {
  if (servers) return rank < server_ranks(cfg) ? RankRole::server : RankRole::worker;
  return role(rank, cfg.world);
}

int StrategyInfo::server_ranks(const RunConfig& cfg) const {
  return servers ? servers(cfg) : 0;
}

bool StrategyInfo::equals_reference(const RunConfig& cfg) const {
  return !converges_only || !converges_only(cfg);
}

int StrategyInfo::typical_rank(const RunConfig& cfg) const {
  if (servers) return std::min(server_ranks(cfg), cfg.world - 1);  // the first worker
  return typical_rank(cfg.world);
}

int StrategyInfo::typical_rank(int world) const {
  for (int r = 0; r < world; ++r)
    if (role(r, world) != RankRole::controller) return r;
  return 0;
}

bool StrategyInfo::shards(ModelStatePart part) const {
  switch (part) {
    case ModelStatePart::optimizer_state:
      return zero_stage >= 1;
    case ModelStatePart::grads:
      return zero_stage >= 2;
    case ModelStatePart::params:
      return zero_stage >= 3;
  }
  return false;
}

bool StrategyInfo::reads_option(StrategyOption o) const {
  return std::find(reads.begin(), reads.end(), o) != reads.end();
}

void register_strategy(StrategyInfo info) {
  std::vector<StrategyInfo>& r = registry_storage();
  for (const StrategyInfo& s : r)
    if (s.name == info.name)
      throw std::logic_error("strategy '" + info.name + "' registered twice");
  r.push_back(std::move(info));
}

const std::vector<StrategyInfo>& all_strategies() {
  return registry();
}

const StrategyInfo* find_strategy(const std::string& name) {
  for (const StrategyInfo& s : registry())
    if (s.name == name) return &s;
  return nullptr;
}

const StrategyInfo& strategy_info(const std::string& name) {
  const StrategyInfo* info = find_strategy(name);
  if (!info) throw ConfigError("unknown strategy '" + name + "' (valid: " + strategy_names() + ")");
  return *info;
}

std::string strategy_names() {
  std::string s;
  for (const StrategyInfo& i : registry()) s += (s.empty() ? "" : ", ") + i.name;
  return s;
}

std::string strategy_names_where(const std::function<bool(const StrategyInfo&)>& pick) {
  std::string s;
  for (const StrategyInfo& i : registry())
    if (pick(i)) s += (s.empty() ? "" : ", ") + i.name;
  return s;
}

bool is_reference_strategy(const std::string& strategy) {
  const StrategyInfo* info = find_strategy(strategy);
  return info && info->is_reference();
}

bool is_pipeline_strategy(const std::string& strategy) {
  const StrategyInfo* info = find_strategy(strategy);
  return info && info->has_stages();
}

bool is_controller(const std::string& strategy) {
  const StrategyInfo* info = find_strategy(strategy);
  return info && info->role(0, 2) == RankRole::controller;
}

std::string strategies_reading(StrategyOption o) {
  std::string s;
  for (const StrategyInfo& i : registry())
    if (i.reads_option(o)) s += (s.empty() ? "" : ", ") + i.name;
  return s;
}

void require_batchnorm_support(const RunConfig& cfg) {
  const ModelSpec spec = ModelSpec::parse(cfg.model);
  if (!spec.batchnorm) return;
  // Strategies whose layers see whole (micro-)batches keep BatchNorm's buffers:
  // single, and the pipelines, where the statistics are per micro-batch. The
  // data-parallel family would need per-rank statistics and DDP's buffer
  // broadcast (or SyncBatchNorm) in each of its files: not yet.
  // The reference first, then the pipelines.
  const std::string supported =
      strategy_names_where([](const StrategyInfo& s) { return s.is_reference(); }) + ", " +
      strategy_names_where([](const StrategyInfo& s) { return s.has_stages(); });
  const std::string what = "--model " + cfg.model + ": ";
  // (A parameter server's workers are data-parallel in the same way.)
  if (const StrategyInfo& info = strategy_info(cfg.strategy);
      info.is_data_parallel() || info.servers)
    throw ConfigError(what + cfg.strategy +
                      " does not support BatchNorm yet (supported by: " + supported + ")");
  if (cfg.precision != "fp32")
    throw ConfigError(what + "--precision " + cfg.precision +
                      " does not support BatchNorm yet (valid: fp32)");
  if (cfg.batch < 2)
    throw ConfigError(what + "--batch " + std::to_string(cfg.batch) +
                      " gives BatchNorm1d one row (valid: 2 or more, as PyTorch's BatchNorm1d "
                      "needs in training)");
}

namespace {
// Numbers in messages as the user would type them: 0.001, not 0.001000.
std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

RunConfig resolve_defaults(const RunConfig& cfg) {
  RunConfig c = cfg;
  try {
    if (c.attention.empty() && resolve_model(cfg).family == "gpt")
      c.attention = effective_attention(cfg);
  } catch (const ConfigError&) {
    return cfg;
  }
  return c;
}

Mesh run_mesh(const RunConfig& cfg) {
  if (!cfg.mesh.empty()) {
    const Mesh mesh = parse_mesh(cfg.mesh, cfg.mesh_order);
    if (mesh.world() != cfg.world)
      throw ConfigError("--mesh " + cfg.mesh + " has " + std::to_string(mesh.world()) +
                        " ranks but --world is " + std::to_string(cfg.world) +
                        " (valid: axis sizes that multiply to --world " +
                        std::to_string(cfg.world) + ")");
    return mesh;
  }
  if (!cfg.mesh_order.empty())
    throw ConfigError("--mesh-order " + cfg.mesh_order +
                      " orders no mesh (valid: with --mesh, e.g. --mesh dp=2,pp=2)");
  const StrategyInfo* info = find_strategy(cfg.strategy);
  return one_axis_mesh(info && info->has_stages() ? MeshAxis::pp : MeshAxis::dp, cfg.world);
}

int tensor_parallel_degree(const RunConfig& cfg) {
  return cfg.mesh.empty() ? 1 : run_mesh(cfg).size(MeshAxis::tp);
}

void check_sequence_parallel(const RunConfig& cfg, const Mesh& mesh, const std::string& example) {
  if (!cfg.sequence_parallel || mesh.size(MeshAxis::tp) >= 2) return;
  throw ConfigError("--sequence-parallel splits the tokens of tensor-parallel layers, but " +
                    (cfg.mesh.empty() ? std::string("there is no --mesh")
                                      : "--mesh " + cfg.mesh + " has no tp axis") +
                    " (valid: with a mesh whose tp is 2 or more, e.g. --mesh " + example + ")");
}

void validate_common(const RunConfig& cfg, int max_world) {
  resolve_model(cfg);  // the model's name, and what the run adds to it (gpt: --seq, --data)
  validate_sizes(cfg, max_world);
  plan_placement(cfg);  // --device and --backend against this machine's GPUs
  if (cfg.precision != "fp32" && cfg.precision != "bf16" && cfg.precision != "fp16")
    throw ConfigError("--precision '" + cfg.precision + "' is invalid (valid: fp32, bf16, fp16)");
  if (cfg.timeout_ms < 1)
    throw ConfigError("--timeout-ms " + std::to_string(cfg.timeout_ms) +
                      " is invalid (valid: 1 or more)");
  // The cap becomes a byte count (size_t): 1 TiB is far beyond any model here
  // and keeps that conversion defined.
  if (!cfg.offload_to.empty()) {
    parse_offload_value(cfg.offload_to);  // a recording's or a test's value, checked as typed
    const std::string dir = nvme_offload_dir(cfg);
    std::error_code ec;
    const bool is_dir = !dir.empty() && std::filesystem::is_directory(dir, ec);
    if (!dir.empty() && (!is_dir || ::access(dir.c_str(), W_OK | X_OK) != 0))
      throw ConfigError(
          "--offload " + cfg.offload_to + ": '" + dir + "' is " +
          (is_dir ? "a directory this user cannot write in" : "not an existing directory") +
          " (valid: an existing writable directory, ideally on an NVMe disk)");
  }
  if (!(cfg.bucket_mb > 0) || !(cfg.bucket_mb <= 1048576))
    throw ConfigError("--bucket-mb " + number_text(cfg.bucket_mb) +
                      " is invalid (valid: a positive number of MiB up to 1048576, e.g. 25)");
}

bool option_in_effect(const RunConfig& cfg, StrategyOption o) {
  const StrategyInfo* info = find_strategy(cfg.strategy);
  return info && info->reads_option(o) && option_set(cfg, o);
}

std::vector<StrategyOption> unread_options(const RunConfig& cfg) {
  std::vector<StrategyOption> out;
  const StrategyInfo* info = find_strategy(cfg.strategy);
  if (!info) return out;
  for (StrategyOption o : kStrategyOptions)
    if (option_set(cfg, o) && !info->reads_option(o)) out.push_back(o);
  return out;
}

std::string unread_option_message(const RunConfig& cfg, StrategyOption o) {
  const std::string readers = strategies_reading(o);
  return option_text(cfg, o) + ": " + cfg.strategy + " has no " + option_row(o).missing +
         "; used by " + (readers.empty() ? "no strategy" : readers);
}

RunConfig for_strategy(RunConfig base, const std::string& strategy) {
  base.strategy = strategy;
  for (StrategyOption o : unread_options(base)) reset_option(base, o);
  return base;
}

void validate(const RunConfig& cfg, const std::vector<std::string>& given, int max_world) {
  const StrategyInfo& info = strategy_info(cfg.strategy);
  validate_common(cfg, max_world);
  std::vector<StrategyOption> unread = unread_options(cfg);
  // Typed at its default value it is still not read (`--micro-batches 1` with
  // ddp); only --precision fp32 is what every strategy runs.
  for (StrategyOption o : kStrategyOptions) {
    const std::string name = std::string(flag_name(o)).substr(2);  // without the leading "--"
    const bool typed = std::find(given.begin(), given.end(), name) != given.end();
    if (typed && !info.reads_option(o) && !option_set(cfg, o) &&
        !(o == StrategyOption::precision && cfg.precision == "fp32"))
      unread.push_back(o);
  }
  if (!unread.empty()) {
    // The first one the user typed: the one they will look for first.
    auto position = [&](StrategyOption o) {
      const std::string name = std::string(flag_name(o)).substr(2);  // without the leading "--"
      return std::find(given.begin(), given.end(), name) - given.begin();
    };
    std::stable_sort(unread.begin(), unread.end(),
                     [&](StrategyOption a, StrategyOption b) { return position(a) < position(b); });
    throw ConfigError(unread_option_message(cfg, unread.front()));
  }
  if (cfg.offload && nvme_offload_dir(cfg).empty() && !info.offload_to_host) {
    std::string to_host;  // the strategies that can keep every model state in host memory
    for (const StrategyInfo& s : all_strategies())
      if (s.offload_to_host) to_host += (to_host.empty() ? "" : ", ") + s.name;
    throw ConfigError("--offload: " + cfg.strategy +
                      " offloads its optimizer state to NVMe only (valid: --offload nvme:DIR; "
                      "every model state in host memory is --offload of " +
                      to_host + ")");
  }
  if (cfg.offload_params && nvme_offload_dir(cfg).empty())
    throw ConfigError(
        "--offload-params: the parameter shards go to the offload file, and there is none (valid: "
        "--offload nvme:DIR --offload-params)");
  require_batchnorm_support(cfg);
  if (info.validate) info.validate(cfg);
}

}  // namespace shardlab
