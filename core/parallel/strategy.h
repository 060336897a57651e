// The Strategy interface and the registry of strategies by name, each with
// what it is (family, ZeRO stage, options it reads). The same strategy object
// runs on every rank (SPMD), knowing only its RankEnv.
#pragma once
#include <array>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/config.h"
#include "core/device/memory.h"
#include "core/mesh.h"
#include "core/model/layer_call.h"
#include "core/model/model.h"
#include "core/model/param_source.h"
#include "core/parallel/schedule.h"
#include "core/rank_state.h"
#include "core/record/recorder.h"
#include "core/run_options.h"

namespace shardlab {

// Objects shared by the ranks of one in-process run, created on first use.
// Only a strategy that is not SPMD needs it: `dp`, whose controller thread
// hands work to the device threads through memory instead of a communicator.
class RunShared {
 public:
  template <typename T, typename... Args>
  std::shared_ptr<T> get_or_create(const std::string& key, Args&&... args) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = slots_[key];
    if (!slot) slot = std::make_shared<T>(std::forward<Args>(args)...);
    return std::static_pointer_cast<T>(slot);
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<void>> slots_;
};

// What one rank sees: its place in the group and its own device, allocator,
// recorder and communicator. A value per rank, never a global.
struct RankEnv {
  int rank = 0;
  int world = 1;
  const RunConfig& cfg;
  const ModelLayout& layout;
  const Dataset& data;  // the model family's (model_family.h)
  DeviceBackend& device;
  Allocator& alloc;
  Recorder* rec;  // may be null (recording off)
  Comm* comm;     // null for strategies that do not communicate
  RunShared& shared;
  // The run's device mesh (run_mesh), and this rank's communicator on each
  // axis whose groups are smaller than the world (by MeshAxis; null: none).
  const Mesh* mesh = nullptr;
  std::array<Comm*, std::size(kMeshAxes)> axis_comms{};
  // Tensor parallelism under a data-parallel strategy: the communicator of
  // this rank's tp group, which its layers' forward, backward and loss use
  // (`layout` is then its slice). Set only in the data-parallel view of a
  // mesh with tp (core/parallel/data_parallel_mesh.h); null: whole layers.
  Comm* tp = nullptr;

  // This rank's communicator on `axis`: its group's, the world's where the
  // axis spans the world, null where the axis has size 1 (a group of one has
  // no one to talk to). Without a mesh (a test's hand-made env), every axis is
  // the strategy's one axis: the world's.
  Comm* comm_on(MeshAxis axis) const {
    if (Comm* c = axis_comms[static_cast<size_t>(axis)]) return c;
    const int n = mesh ? mesh->size(axis) : world;
    return n == world && n > 1 ? comm : nullptr;
  }
  // This rank's coordinate on `axis` and the axis's size (no mesh: the world's).
  int coord(MeshAxis axis) const { return mesh ? mesh->coord(rank, axis) : rank; }
  int axis_size(MeshAxis axis) const { return mesh ? mesh->size(axis) : world; }
};

// A rank's share of the step's loss: the global loss is Σsum / Σcount over ranks
// (count = samples this rank computed the loss for; 0 on ranks without a loss).
struct LossShare {
  double sum = 0;
  int64_t count = 0;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // Allocate and fill this rank's state from the full initial state vector
  // (a meta run's holds no values and is never read: see param_source.h).
  virtual void setup(RankEnv& env, const ParamSource& init) = 0;
  virtual LossShare step(int step) = 0;
  // Collective: the full flat parameters on rank 0 (other ranks may return {}).
  virtual std::vector<float> export_params() = 0;
  // Bytes this rank has sent so far outside its communicator (dp's device
  // copies); the runner adds them to the communicator's count.
  virtual int64_t bytes_sent_outside_comm() const { return 0; }
  // For --checkpoint-every and --resume (core/run/train_checkpoint.h); empty when
  // the strategy cannot be checkpointed.
  virtual RankState rank_state() { return {}; }
};

// What a strategy is, for the reports and views that treat strategies alike.
enum class StrategyFamily {
  single,         // the whole model and batch on one device: the reference
  data_parallel,  // every rank runs every layer on its share of the batch (ddp, dp, ZeRO, fsdp)
  pipeline,       // every rank runs its own layers on the whole batch (naive-mp, gpipe, 1f1b)
  // Server ranks keep the parameters and the optimizer, worker ranks compute
  // on their share of the batch (ps): ranks of two kinds, not peers.
  parameter_server,
};
// "single", "data-parallel", "pipeline", "parameter-server"
const char* to_string(StrategyFamily f);

// The three model states of ZeRO's accounting.
enum class ModelStatePart { params, grads, optimizer_state };
const char* to_string(ModelStatePart p);  // "parameters", "gradients", "optimizer state"

// One operation by which a strategy moves a model state each step, its volume
// in the ZeRO paper's units of Ψ: (psi + psi_per_rank·N)·Ψ. A strategy lists
// its operations (StrategyInfo::moves); core/parallel/model_state.h sums them
// into bytes and the formula shown, so a new strategy adds rows, not a case.
enum class StateOp {
  all_reduce,      // every rank ends with the sum: 2Ψ (a reduce-scatter + an all-gather)
  reduce_scatter,  // every rank ends with the sum of its 1/N: Ψ
  all_gather,      // every rank ends with every rank's 1/N: Ψ
  copy,            // point to point: what this rank sends is what the wire carries
};
const char* to_string(StateOp op);  // "all-reduce", "reduce-scatter", ...
struct StateMove {
  StateOp op = StateOp::all_reduce;
  ModelStatePart part = ModelStatePart::grads;
  int psi = 1;           // Ψ of volume, plus
  int psi_per_rank = 0;  // this many Ψ for each of the N ranks
  std::string when{};    // "in backward", "after the update", ...
};
// What a strategy's moves depend on.
struct MoveQuery {
  int rank = 0;
  int world = 1;
  bool reshard_after_forward = true;  // fsdp's --no-reshard sets false
};

// What one rank does in a strategy whose ranks are not all alike.
enum class RankRole {
  peer,        // as every other rank (SPMD: the data-parallel family, single)
  stage,       // one stage of a pipeline, its own layers
  controller,  // dp's device 0: keeps the optimizer and the master weights
  replica,     // dp's other devices: a fresh replica each step, no optimizer state
  server,      // ps: a shard of the parameters and its optimizer state; computes nothing
  worker,      // ps: the whole model, its rows of the batch, no optimizer state
};
const char* to_string(RankRole r);

struct StrategyInfo {
  std::string name{};
  std::string summary{};  // one line for --help and the UI
  StrategyFamily family = StrategyFamily::data_parallel;
  std::vector<StrategyOption> reads{};  // the options above this strategy reads
  // The model-state prediction (core/parallel/model_state.h), as a ZeRO stage: what each
  // rank keeps only 1/N of. 0 nothing (full replicas), 1 optimizer state,
  // 2 + gradients, 3 + parameters.
  int zero_stage = 0;
  // Not SPMD: a controller on device 0 keeps the optimizer and updates, the
  // other devices get a fresh replica every step (dp). Its replicas hold
  // parameters and gradients but no optimizer state.
  bool controller = false;
  // The traffic prediction (core/parallel/model_state.h): how rank q.rank moves
  // model states each step, one row per operation. Empty: none (single), or
  // only activations, which ZeRO's accounting does not cover (the pipelines).
  std::function<std::vector<StateMove>(const MoveQuery& q)> moves{};
  // Data-parallel family: what its comm-buffers category holds, for the reports.
  std::string comm_buffers{};
  // Pipeline family: micro-batches whose activations a stage holds at once,
  // as a formula shown beside the measured value ("M"); the value is counted
  // from the schedule (expected_in_flight in core/predict/pipeline_analysis.h).
  std::string in_flight_formula{};
  // Pipeline family: the strategy's order as data (core/parallel/schedule.h),
  // one line of actions per stage, for `stages` stages, `micro_batches` and
  // `chunks` model chunks per rank (1 unless it reads --virtual-stages).
  std::function<Schedule(int stages, int micro_batches, int chunks)> schedule{};
  // Pipeline family: its bubble as a share of the step on equal stages, the
  // textbook formula, "(P−1)/(M+P−1)"; the value comes from the schedule
  // (schedule_bubble_formula in core/predict/pipeline_analysis.h).
  std::string bubble_formula{};
  // Parameter server: how many of the world's ranks (the first ones) are
  // servers under cfg; empty: none.
  std::function<int(const RunConfig& cfg)> servers{};
  // Whether a run under cfg only converges, without ending on the reference's
  // weights (asynchronous training: ps with --staleness above 0). Such a run
  // is held to a falling loss instead. Empty: never; every run equals it.
  std::function<bool(const RunConfig& cfg)> converges_only{};
  // Steps before a step holds everything every later one will (a server's
  // inboxes and updates in flight fill over the first K + 1 steps); a meta
  // run runs at least this many and one more. Empty: 1.
  std::function<int(const RunConfig& cfg)> filling_steps{};
  // Whether its rank_state() describes what a checkpoint must hold
  // (--checkpoint-every, --resume); refused before the run where not.
  bool checkpoints = true;
  // With --offload (reads offload): whether its parameters, gradients and
  // optimizer state then live in host memory (fsdp), or stay on the device
  // with only the optimizer state offloaded, to --offload nvme:DIR (zero3):
  // validate() then refuses a bare --offload (host memory) in one line.
  bool offload_to_host = false;
  std::function<std::unique_ptr<Strategy>()> make{};
  // Checks settings this strategy cannot run with; throws ConfigError.
  std::function<void(const RunConfig&)> validate{};

  bool reads_option(StrategyOption o) const;

  // ---- What the rest of the program asks of a strategy. The answers come
  // from the fields above, here and nowhere else: no caller switches on a
  // family, a controller flag or a ZeRO stage, so a strategy whose ranks
  // differ (a parameter server) or that composes axes adds no new switch.

  // The single-device reference every other strategy is checked against.
  bool is_reference() const;
  // The ranks a run of it has when `requested` are asked for (the reference: 1).
  int world_for(int requested) const;
  // Ranks that each train on their own rows of the batch (1: every rank sees
  // every row, or the model is split instead).
  int data_parallel_degree(const RunConfig& cfg) const;
  // Rows of the batch that one forward call on rank `rank` computes.
  int rows_per_pass(const RunConfig& cfg, int rank) const;
  // Micro-batches a step cuts the batch into (1 for a strategy without them).
  int micro_batches(const RunConfig& cfg) const;
  // Cuts the model into one stage per rank, run by a schedule of micro-batches.
  bool has_stages() const;
  // Every rank holds the whole model (or its share of every layer: ZeRO) and
  // trains on its own rows: ZeRO's model-state accounting applies.
  bool is_data_parallel() const;
  // What rank `rank` of `world` does (of a run of cfg: a parameter server's
  // roles depend on its --servers).
  RankRole role(int rank, int world) const;
  RankRole role(const RunConfig& cfg, int rank) const;
  // Server ranks of a run of cfg (the first ones; 0 without servers).
  int server_ranks(const RunConfig& cfg) const;
  // Whether a run of cfg ends on the reference's weights (see converges_only).
  bool equals_reference(const RunConfig& cfg) const;
  // The rank whose figures stand for its peers in a report: the first one
  // whose role is `peer`, `replica` or `worker` (dp: rank 1, beside its controller).
  int typical_rank(int world) const;
  int typical_rank(const RunConfig& cfg) const;
  // ZeRO's accounting: whether each rank keeps 1/N of this model state.
  bool shards(ModelStatePart part) const;
};

// Adds a strategy to the registry. The built-in ones are registered by
// register_builtin_strategies() (strategies/registry.h), which every program
// calls once at start-up; the lookups below refuse to run before that.
void register_strategy(StrategyInfo info);
const std::vector<StrategyInfo>& all_strategies();
const StrategyInfo* find_strategy(const std::string& name);
// The registration of a known strategy; throws ConfigError naming the valid ones.
const StrategyInfo& strategy_info(const std::string& name);
std::string strategy_names();  // "single, ddp, ..."
// The registered strategies whose descriptor says yes, in registration order:
// "gpipe, naive-mp, 1f1b" for has_stages.
std::string strategy_names_where(const std::function<bool(const StrategyInfo&)>& pick);
// The descriptor's answers by name, false for unknown names.
bool is_reference_strategy(const std::string& strategy);
bool is_pipeline_strategy(const std::string& strategy);  // has_stages
bool is_controller(const std::string& strategy);         // rank 0 is a controller (dp)
// Names of the strategies that read o, registration order: "gpipe, 1f1b".
std::string strategies_reading(StrategyOption o);

// Whether o changes this run: its strategy reads it and cfg sets it.
bool option_in_effect(const RunConfig& cfg, StrategyOption o);
// The options cfg sets that its strategy does not read (kStrategyOptions order).
std::vector<StrategyOption> unread_options(const RunConfig& cfg);
// "--micro-batches 8: zero3 has no micro-batches; used by gpipe, 1f1b".
std::string unread_option_message(const RunConfig& cfg, StrategyOption o);
// base with its strategy set to `strategy` and every option that strategy does
// not read back at its default: one configuration of a comparison.
RunConfig for_strategy(RunConfig base, const std::string& strategy);

// The run's device mesh: --mesh laid out by --mesh-order, or the strategy's one
// axis over the world (pp for a pipeline, dp for the rest). Throws ConfigError
// for a --mesh that does not parse or whose ranks are not --world.
Mesh run_mesh(const RunConfig& cfg);
// The tp axis of the run's mesh: 1 without a mesh. Throws as run_mesh.
int tensor_parallel_degree(const RunConfig& cfg);
// Throws ConfigError when --sequence-parallel is on and `mesh` (the run's) has
// no tp axis to split tokens over; `example` is a mesh that would do.
void check_sequence_parallel(const RunConfig& cfg, const Mesh& mesh, const std::string& example);

// Throws ConfigError for settings that are invalid for any strategy; the
// strategy's own validate() checks the rest. `max_world`: kMaxRunWorld, or
// kMaxPredictWorld for a prediction.
void validate_common(const RunConfig& cfg, int max_world = kMaxRunWorld);
// cfg with what "not given" resolves to on this machine filled in (a gpt's
// --attention), so that what a run records and checkpoints is what it ran. A
// config that does not validate comes back unchanged (validate() names its error).
RunConfig resolve_defaults(const RunConfig& cfg);

// For `mlp:LxD+bn`: throws ConfigError unless the strategy keeps BatchNorm
// statistics (single and the pipelines), --precision is fp32 and the batch has
// 2 or more rows. Nothing to check without +bn.
void require_batchnorm_support(const RunConfig& cfg);

// validate_common, then options the strategy does not read, then the
// strategy's own checks; throws ConfigError. `given` lists option names as
// typed ("micro-batches"), in command-line order: of several unread options
// the message names the first given (without it, kStrategyOptions order). A
// given option the strategy does not read is refused even at its default
// value (`--micro-batches 1` with ddp), except --precision fp32. `max_world`:
// see validate_common.
void validate(const RunConfig& cfg, const std::vector<std::string>& given = {},
              int max_world = kMaxRunWorld);

}  // namespace shardlab
