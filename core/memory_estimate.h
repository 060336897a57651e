// The memory preflight. Each rank's peak memory is predicted before anything is
// allocated by replaying what its strategy allocates — sizes, categories,
// pools and lifetimes, in the order its setup() and step() allocate them —
// through the allocator's own bookkeeping (PoolStats), with no memory behind
// it; to that come what the process holds beside the allocator (the initial
// weights, the data generator, the history and records that grow with
// --steps). A run that cannot fit in the memory available is refused in one
// line before it starts, unless --force.
//
// Each strategy registers its replay (StrategyInfo::plan_memory) beside the
// code it mirrors; the classes below mirror the shared pieces (LayerTape,
// LayerStack, Optimizer, a communicator's staging, PipelineStage).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/memory.h"
#include "core/model.h"
#include "core/pipeline.h"
#include "core/placement.h"

namespace shardlab {

// ---------------------------------------------------------------------------
// The allocator without memory

class MemoryTally {
 public:
  // A Tensor's lifetime without its memory: move-only, given back when
  // destroyed or reset, to the same size-keyed cache the Allocator keeps.
  class Block {
   public:
    Block() = default;
    ~Block() { reset(); }
    Block(Block&& o) noexcept { *this = std::move(o); }
    Block& operator=(Block&& o) noexcept;
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    void reset();
    bool empty() const { return tally_ == nullptr; }
    int64_t bytes() const { return bytes_; }

   private:
    friend class MemoryTally;
    MemoryTally* tally_ = nullptr;
    int64_t bytes_ = 0;
    MemCategory category_ = MemCategory::temporary;
    Pool pool_ = Pool::device;
    bool outside_ = false;  // host memory beside the allocator
  };

  Block alloc(MemCategory c, size_t numel, DType dt = DType::f32, Pool pool = Pool::device);
  // Host memory a strategy holds outside the allocator (std::vector staging in
  // setup and export_params): not in the allocator's stats, but in the process's.
  Block outside(size_t bytes);
  void span(int n = 1) { spans_ += n; }  // spans a recorder would get

  const MemStats& stats() const { return stats_; }
  int64_t outside_peak() const { return outside_peak_; }
  int64_t events() const { return events_; }  // allocation events a recorder would get
  int64_t spans() const { return spans_; }

 private:
  void give_back(Block& b);
  MemStats stats_;
  std::map<int64_t, int> cache_[2];  // per pool: block bytes -> free blocks
  int64_t outside_current_ = 0, outside_peak_ = 0;
  int64_t events_ = 0, spans_ = 0;
};
using MemBlock = MemoryTally::Block;

// What a strategy's memory plan sees: its RankEnv, without memory.
struct MemoryPlan {
  int rank = 0;
  int world = 1;
  const RunConfig& cfg;
  const ModelLayout& layout;
  const Placement& placement;
  MemoryTally& tally;

  MemBlock alloc(MemCategory c, size_t numel, DType dt = DType::f32, Pool pool = Pool::device) {
    return tally.alloc(c, numel, dt, pool);
  }
  // Runs `step` as the runner runs the first steps (twice, or once for a
  // one-step run): the second finds the cache as every later step does. The
  // first step's allocation events and spans are the per-step record. Then
  // the allocator's stats are read, as the runner reads them for its report:
  // what the plan does after steps() is export_params.
  void steps(const std::function<void(int step)>& step);

  // Filled by steps().
  MemStats at_report;
  int64_t events_per_step = 0;
  int64_t spans_per_step = 0;
};

// True when the rank's device multiplies 2-byte operands itself
// (DeviceBackend::native_2byte_math: a GPU), so no fp32 upcasts are made.
inline bool native_2byte(const MemoryPlan& p) {
  return p.placement.kind == DeviceKind::cuda;
}

// One layer's fp32 temporaries under mixed precision (layer_ops.cpp's AsF32
// upcasts of the input, weight, bias and output in forward; of the output
// gradient, pre-GELU values, input, weight and the gradients in backward).
void plan_layer_forward(MemoryPlan& p, DType dt, size_t rows);
void plan_layer_backward(MemoryPlan& p, DType dt, size_t rows, bool has_pre, bool has_din);
// MixedPrecision::mse_loss: the prediction and the gradient upcast to fp32.
void plan_mse_loss(MemoryPlan& p, DType dt, size_t n);
// load_batch's inputs and targets for `rows` rows (data_parallel.h).
struct BatchMemory {
  MemBlock x, y;
};
BatchMemory plan_batch(MemoryPlan& p, size_t rows);
// compute_loss: the loss gradient (returned: the caller holds it through
// backward) and the loss's own temporaries.
MemBlock plan_loss(MemoryPlan& p, DType dt, size_t rows);

// Mirrors LayerTape (layer_ops.h): each layer's output and pre-GELU values
// until its backward, the gradient flowing back, mixed precision's cast input.
class TapeMemory {
 public:
  TapeMemory(MemoryPlan& p, DType dt) : p_(p), dt_(dt) {}
  void begin(size_t rows);
  void forward(int layer);
  void begin_backward();
  void backward(int layer);

 private:
  struct Saved {
    int layer;
    std::vector<MemBlock> keep;
  };
  MemoryPlan& p_;
  DType dt_;
  size_t rows_ = 0;
  MemBlock cast_input_, grad_;
  std::vector<Saved> layers_;
};

// Mirrors LayerStack (layer_stack.h): layers [first, last) with their
// parameters, gradients and BatchNorm buffers, and per micro-batch activations.
class StackMemory {
 public:
  StackMemory(MemoryPlan& p, int first, int last, DType dt);
  void forward(size_t rows, int mb);
  MemBlock forward_keep_input(size_t rows, int mb);  // returns the output
  void recompute(int mb);
  MemBlock backward(int mb, bool want_dinput);  // returns the input gradient, or empty
  // Numel of each parameter, in model order (the optimizer's ranges).
  std::vector<size_t> ranges() const;

 private:
  struct Saved {
    size_t rows = 0;
    MemBlock cast_input;
    std::vector<std::vector<MemBlock>> keep;  // per layer, as LayerKeep
  };
  // One layer's forward; returns the output's index in keep.
  int layer(int l, Saved& s, std::vector<MemBlock>& keep);
  void forward_saving(Saved& s);
  MemoryPlan& p_;
  int first_, last_;
  DType dt_;
  std::vector<MemBlock> params_, grads_, buffers_;
  std::map<int, Saved> saved_;
};

// Mirrors Optimizer (optimizer.h): fp32 master (mixed precision), exp_avg and
// exp_avg_sq (AdamW) per range; step() the mixed update's fp32 gradient temporary.
class OptimizerMemory {
 public:
  OptimizerMemory(MemoryPlan& p, const std::vector<size_t>& ranges, DType param_dtype,
                  Pool pool = Pool::device);
  void step();

 private:
  MemoryPlan& p_;
  std::vector<size_t> ranges_;
  bool mixed_;
  Pool pool_;
  std::vector<MemBlock> state_;
};

// What the communicator holds for a collective on device buffers besides the
// buffers themselves: a host copy until the collective is waited for when
// ranks share GPUs (Gloo with host staging, staging_comm.cpp), and Gloo's
// reduce-scatter scratch (a shard, kept by the communicator).
class CommMemory {
 public:
  explicit CommMemory(MemoryPlan& p);
  // Each returns the staging held until the collective is waited for (empty
  // when nothing is staged); with several buffers, the largest's.
  std::vector<MemBlock> all_reduce(size_t numel, DType dt);
  std::vector<MemBlock> reduce_scatter(size_t total, size_t mine, DType dt);
  // `mine` values of this rank's input; in_place: the input is its slot of
  // the output (ZeRO-1/2), else a buffer of its own, staged too.
  std::vector<MemBlock> all_gather(size_t total, size_t mine, DType dt, bool in_place);
  std::vector<MemBlock> send(size_t bytes);
  std::vector<MemBlock> recv(size_t bytes);

 private:
  bool staged() const;
  MemBlock stage(size_t bytes);
  MemoryPlan& p_;
  MemBlock scratch_;
  int64_t scratch_bytes_ = 0;
};

// Mirrors PipelineStage (pipeline.h): the stage's layers and optimizer, each
// micro-batch's input and loss gradient until its backward, the receives
// posted early and the sends not yet waited for. The pipeline strategies run
// their schedule on it exactly as on the real stage.
class StageMemory {
 public:
  explicit StageMemory(MemoryPlan& p);
  const StageTopology& topology() const { return topo_; }
  int micro_batches() const { return micro_batches_; }
  void begin_step();
  void post_recv_input(int mb);
  void post_recv_grad(int mb);
  void forward(int mb);
  void backward(int mb);
  void finish_step();
  void export_params();

 private:
  void sum_tied_grads();
  void settle_sends();
  void compute_loss(int mb);
  MemoryPlan& p_;
  StageTopology topo_;
  int micro_batches_ = 1;
  size_t rows_ = 0;
  int next_input_recv_ = 0, next_grad_recv_ = 0;
  std::unique_ptr<StackMemory> layers_;
  std::unique_ptr<OptimizerMemory> optimizer_;
  std::unique_ptr<CommMemory> comm_;
  struct Posted {  // a receive: its buffer, and its staging until it is waited for
    MemBlock buffer;
    std::vector<MemBlock> staging;
  };
  MemBlock wait_recv(std::map<int, Posted>& posted, int mb);
  std::map<int, MemBlock> inputs_, loss_grads_;
  std::map<int, Posted> input_recvs_, grad_recvs_;
  std::vector<std::vector<MemBlock>> sends_;
};

// gather_model_params (sharding.h) at export: per group, the staged shard
// (offloaded shards) and the gathered group; rank 0's flat host vector.
void plan_gather_model_params(MemoryPlan& p, const std::vector<size_t>& group_padded,
                              const std::vector<size_t>& group_shard, bool shards_on_host);

// ---------------------------------------------------------------------------
// The estimate

// What a command does with a run besides training it that also takes host memory.
struct RunOutputs {
  bool caller_holds_init = false;  // the initial weights are already allocated (run_training's
                                   // `initial`): MemAvailable has counted them
  bool save_init = false;          // --save-init: a copy of the weights while writing
  bool save_final = false;         // --save-final
  bool save_data = false;          // --save-data: every batch's x and y, [steps, batch, D] each
  bool trace = false;              // --trace: every record as JSON in memory, then its text
  bool recording = false;          // --record
  bool json = false;               // --json: the losses and step times as JSON
};

struct RankMemoryEstimate {
  int rank = 0;
  MemStats at_report;           // the allocator's stats as RankReport::memory will hold them
  MemStats at_end;              // after export_params too: peak_reserved is what the rank takes
  int64_t outside = 0;          // host memory beside the allocator, peak
  int64_t record_per_step = 0;  // bytes its recorder grows by a step (0 with --no-record)
  int gpu = -1;                 // cuda: the GPU it runs on
  // What the rank takes from its device's memory (the CPU's is the host's).
  int64_t device_bytes() const { return at_end.device.peak_reserved; }
  // Of host memory: the host pool and what is beside the allocator (on a CPU
  // device, the device pool is host memory too: see MemoryEstimate::host_total).
  int64_t host_bytes() const { return at_end.host.peak_reserved + outside; }
};

struct MemoryEstimate {
  std::vector<RankMemoryEstimate> ranks;
  DeviceKind device = DeviceKind::cpu;
  // Host memory the run needs: every rank's, the shared part, and steps × per_step, once
  // when the ranks are threads of this process.
  int64_t shared = 0;       // initial weights, data generator, outputs
  int64_t per_step = 0;     // every rank's records, and the loss and step-time history
  int64_t steps_total = 0;  // steps × per_step
  // One process per rank (cfg.ranks_on_host > 0): each of this host's processes holds its
  // own baseline (the binary's private memory after start-up, measured, and what its threads
  // add), its own shared part (it makes its own weights and data) and its own history (the
  // loss shares are world-sized in every process, and every process gathers every rank's
  // records at the end). 0 when the ranks are threads.
  int processes = 0;
  int64_t process_baseline = 0;  // per process
  int64_t per_process = 0;       // process_baseline + shared + steps_total
  int64_t processes_total = 0;   // processes × per_process: in host_total instead of
                                 // shared + steps_total
  int64_t host_total = 0;
  std::map<int, int64_t> gpu_total;  // cuda: device memory each GPU needs (its ranks' sum)
  int64_t largest_rank() const;      // the most one rank takes of its device
};

// Throws ConfigError for a configuration validate() refuses.
MemoryEstimate estimate_memory(const RunConfig& cfg, const RunOutputs& outputs = {});

// What one rank process holds before its rank allocates anything: this process's private
// memory now (/proc/self/smaps_rollup's Private_Dirty; a fresh `shardlab run` at its
// preflight holds just that), plus what start-up adds after the preflight (the rank,
// watchdog and Gloo threads' stacks and malloc arenas, BLAS's packing buffer), rounded up to
// 4 MiB so that every process of a group finds the same.
int64_t process_baseline_bytes();

// How much memory there is: bytes (−1 when unknown) and where that came from
// ("MemAvailable", "cgroup memory.max", "SHARDLAB_MEMORY_LIMIT", "cudaMemGetInfo").
struct MemoryLimit {
  int64_t bytes = -1;
  std::string source;
};
// SHARDLAB_MEMORY_LIMIT (bytes, or with K, M, G, T: "8G") when set — tests and
// anyone who wants to leave room — else MemAvailable, lowered to what the
// process's cgroup limit leaves. Throws ConfigError for a bad variable.
MemoryLimit host_memory_limit();
// Free memory on GPU `gpu` (SHARDLAB_MEMORY_LIMIT when set); bytes −1 without CUDA.
MemoryLimit gpu_memory_limit(int gpu);
// Parses SHARDLAB_MEMORY_LIMIT's format: "1073741824", "512M", "1.5G"; −1 when invalid.
int64_t parse_memory_size(const std::string& text);

// A run the preflight refused: bad input for this machine (exit 2, as ConfigError).
class MemoryRefused : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// The preflight: nothing happens unless the estimate is over the limit and
// cfg.force is not set; then throws MemoryRefused, one line: "mlp:16x16384,
// ddp, world 2 needs about 33.10 GiB per rank (66.20 GiB in all) but 21.30 GiB
// is available (MemAvailable); use a smaller model, batch or world, or --force
// to try anyway".
void check_memory(const RunConfig& cfg, const RunOutputs& outputs = {});

}  // namespace shardlab
