// RunConfig: everything that defines a run, as a value. Validated up front so
// every bad setting ends in one clear line naming the value and what is valid.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardlab {

// Bad input from the user: the CLI prints the message and exits with code 2.
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

enum class OptimizerKind { sgd, adamw };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;  // AdamW only
};
const char* to_string(OptimizerKind k);

// --attention's values (RunConfig::attention).
constexpr const char* kAttentionValues = "naive, flash";

struct RunConfig {
  std::string model = "mlp:8x256";
  // gpt: context length T (0: the default, 64) and the training text (empty:
  // the default corpus, assets/corpus.txt). An MLP refuses both.
  int seq = 0;
  std::string data;
  // gpt: the attention core. naive keeps the [B,H,T,T] probabilities for backward;
  // flash (FlashAttention-2) keeps one logsumexp per row and head and recomputes them.
  // Empty: the device's default, flash on cuda and naive on the CPU; a run records the
  // value it resolved to (resolve_defaults). An MLP refuses it.
  std::string attention;
  std::string strategy = "ddp";
  int world = 2;
  int batch = 64;  // global batch, split across data-parallel ranks in rank order
  int steps = 100;
  OptimizerConfig optimizer;
  uint64_t seed = 1;
  std::string device = "cpu";    // cpu | cuda | auto | cpu-guarded (see placement.h)
  std::string backend = "auto";  // auto | gloo | nccl
  int timeout_ms = 30000;        // every collective gives up after this
  bool record = true;            // spans and allocation events (memory stats are always kept)
  // --force: run even when the memory preflight (memory_estimate.h) says the
  // run cannot fit. Not part of what the run computes.
  bool force = false;
  // One process per rank: how many of the world's ranks run on this host (the
  // launcher's LOCAL_WORLD_SIZE), what GPUs are counted against; 0: every rank
  // is a thread of this process. Not part of what the run computes.
  int ranks_on_host = 0;

  // ddp
  double bucket_mb = 25.0;  // PyTorch DDP's default bucket_cap_mb
  bool overlap = true;      // all-reduce buckets during backward

  // Numeric precision of compute: fp32 | bf16 | fp16 (mixed precision keeps fp32 masters).
  std::string precision = "fp32";
  // --tf32 (cuda, fp32 only): the model's fp32 GEMMs on tensor cores with 10-bit
  // mantissas, as torch.backends.cuda.matmul.allow_tf32; off, they are exact fp32.
  bool tf32 = false;

  // zero3, fsdp
  bool prefetch = true;  // start the next unit's all-gather while this one computes
  // fsdp
  int fsdp_unit = 1;                  // layers per FSDP unit
  bool reshard_after_forward = true;  // free gathered params after forward
  bool offload = false;               // params, grads, optimizer state in host memory
  // zero3, fsdp: "nvme:DIR" (--offload nvme:DIR): the optimizer state in files
  // under DIR (ZeRO-Infinity); "" with offload: in host memory (CPU offload).
  std::string offload_to;
  // zero3, fsdp with --offload nvme:DIR (--offload-params): the parameter
  // shards live in the same file, read before each all-gather and the update.
  bool offload_params = false;

  // ps: server ranks (the first ones), and how many updates a worker's
  // parameters may lag behind its step (0: synchronous).
  int servers = 1;
  int staleness = 0;

  // naive-mp, gpipe, 1f1b
  int stages = 0;              // pipeline stages; 0 = one per rank (= world)
  int micro_batches = 1;       // micro-batches per global batch
  std::vector<int> partition;  // layers per stage; empty = balanced by parameter count
  // --schedule FILE: the stages run this file's order (core/parallel/schedule.h:
  // one line of F/B/W actions per rank) instead of their strategy's; empty: the strategy's.
  std::string schedule;
  // --virtual-stages V (interleaved): model chunks per rank, the model cut into
  // P·V stages dealt round-robin (chunk c of rank r is stage c·P + r); 0: 2.
  int virtual_stages = 0;
  bool recompute = false;  // gpipe: keep stage inputs only, recompute forward in backward

  // The device mesh (core/mesh.h): "dp=2,pp=2" — the pipelines' stages on the
  // pp axis, each pipeline a data-parallel replica on the dp axis. Empty: one
  // axis, the strategy's own, over the world. mesh_order lays the axes out,
  // outermost first (empty: Megatron's, pp,dp,tp).
  std::string mesh;
  std::string mesh_order;
  // Megatron's sequence parallelism on the mesh's tp axis (gpt): between the
  // tensor-parallel regions each tp rank holds 1/tp of the tokens, and the
  // all-reduces become reduce-scatters and all-gathers.
  bool sequence_parallel = false;
  // ZeRO-1 over the mesh's dp axis (pipelines side by side): each replica keeps
  // the optimizer state of its own share of the stage's parameters only.
  bool dp_zero1 = false;
};

// The most ranks a run starts (threads or processes on this machine, every
// pair of them connected), and the most a prediction (a meta run:
// core/predict/meta_memory.h) lays out, where nothing is started or held.
inline constexpr int kMaxRunWorld = 64;
inline constexpr int kMaxPredictWorld = 1000000;

// The part of validate_common that needs neither the model nor this machine:
// --world, --batch, --steps and --lr in range. What divides or counts by them
// before a full validate() (the GUI's compare slots) checks these first.
void validate_sizes(const RunConfig& cfg, int max_world = kMaxRunWorld);

}  // namespace shardlab
