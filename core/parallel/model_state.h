// Predicted model-state memory and communication per rank for the
// data-parallel family, from the ZeRO paper's accounting (Rajbhandari et al.,
// "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", 2020).
// Used by `shardlab estimate` and printed beside the measured values of a run.
#pragma once
#include <string>

#include "core/config.h"
#include "core/parallel/strategy.h"

namespace shardlab {

// Bytes one parameter costs in each model state (the paper's 2 + 2 + K):
//   fp32 AdamW   4 param + 4 grad + 8 optimizer (exp_avg, exp_avg_sq)         = 16
//   fp32 SGD     4 param + 4 grad + 0 (no momentum, no state)                  =  8
//   mixed AdamW  2 param + 2 grad + 12 (fp32 master, exp_avg, exp_avg_sq): K=12 = 16
//   mixed SGD    2 param + 2 grad + 4 (fp32 master copy): K=4                   =  8
// "mixed" is --precision bf16 or fp16: both are 2 bytes per value.
struct BytesPerParam {
  int params = 4;
  int grads = 4;
  int optimizer = 8;  // K
  int comm = 4;       // bytes per element of the gradients and parameters on the wire
};
BytesPerParam bytes_per_param(const std::string& precision, OptimizerKind optimizer);

struct ModelStateInput {
  double params = 0;  // Ψ
  int world = 1;      // N
  std::string strategy = "ddp";
  std::string precision = "fp32";
  OptimizerKind optimizer = OptimizerKind::adamw;
  bool reshard_after_forward = true;  // fsdp: false keeps gathered params until backward
  bool offload = false;               // fsdp: model states live in host memory
  // --offload nvme:DIR (zero3, fsdp): the optimizer state's home is the disk;
  // with --offload-params the parameter shards' too.
  bool optimizer_on_disk = false;
  bool params_on_disk = false;
};

// Strategies this accounting covers: single and the data-parallel family
// (single, ddp, dp, zero1, zero2, zero3, fsdp). Each one's registration says
// what it predicts: its ZeRO stage, controller flag and traffic (core/parallel/strategy.h).
bool has_model_state_prediction(const std::string& strategy);
std::string model_state_strategy_names();  // those, in registration order
// Throws ConfigError for an unknown strategy or precision, Ψ ≤ 0 or N < 1.
void check_model_state_input(const ModelStateInput& in);
// cfg's input with Ψ = `params` (the model's) and N = --world; a data-parallel
// strategy on a mesh takes N from its dp axis and, with tp, Ψ from one tp slice.
ModelStateInput model_state_input(const RunConfig& cfg, double params);

// Bytes per parameter one rank keeps of each model state, and whether it keeps
// the whole of it or a 1/N shard: the stages' accounting in one place. The
// sums give the formula: whole·Ψ + sharded·Ψ/N. Shard padding costs the same
// per padded value (whole buffers carry all of it, shards their share).
struct ModelStateSplit {
  struct Share {
    int bytes = 0;  // per parameter
    bool sharded = false;
  };
  Share params, grads, optimizer;
  int whole = 0;    // Σ bytes of the states kept whole
  int sharded = 0;  // Σ bytes of the states kept as a 1/N shard
  bool on_host = false;
};
ModelStateSplit model_state_split(const ModelStateInput& in, int rank);

// Model-state bytes one rank holds. Per rank, with P, G, K the bytes per parameter above:
//   single, ddp   (P + G + K)Ψ                   fp32 AdamW 16Ψ,        mixed 16Ψ
//   dp            device 0: (P + G + K)Ψ; every other device (P + G)Ψ: the replica it
//                 receives each step and its gradients; the update happens on device 0 only
//   zero1         (P + G)Ψ + KΨ/N                fp32 AdamW 8Ψ + 8Ψ/N,  mixed 4Ψ + 12Ψ/N
//   zero2         PΨ + (G + K)Ψ/N                fp32 AdamW 4Ψ + 12Ψ/N, mixed 2Ψ + 14Ψ/N
//   zero3, fsdp   (P + G + K)Ψ/N                 16Ψ/N
// Buffers that exist only around one layer's compute (gathered params, unreduced
// gradients, buckets), activations and padding are not model states.
struct ModelStateBytes {
  double params = 0;
  double grads = 0;
  double optimizer = 0;
  bool on_host = false;  // fsdp --offload: these bytes are in the host pool
  std::string formula;   // e.g. "4Ψ + 12Ψ/N"
  // Of the total, the bytes whose home is the offload file (--offload
  // nvme:DIR), and their formula ("8Ψ/N"); 0 and "" without one.
  double on_disk = 0;
  std::string disk_formula;
  double total() const { return params + grads + optimizer; }
};
ModelStateBytes predict_model_state(const ModelStateInput& in, int rank);

// Communication per rank per step. The paper's volume counts each collective
// over the whole buffer: all-reduce 2Ψ (reduce-scatter Ψ + all-gather Ψ), so
//   ddp, zero1, zero2   2Ψ   (zero1/2: reduce-scatter gradients, all-gather updated params)
//   zero3, fsdp         3Ψ   (all-gather in forward and again in backward, reduce-scatter)
//   fsdp --no-reshard   2Ψ   (the gathered params are kept from forward to backward)
//   dp                  device 0 sends Ψ to every other device ((N−1)Ψ, the weights); each
//                       other device sends Ψ back (its gradients); no collectives
//   single              0
// A ring collective over N ranks puts (N−1)/N of its volume on each rank's
// wire, which is what the communicator measures: sent_bytes.
struct CommPrediction {
  double volume_elements = 0;  // the paper's volume, in elements
  int bytes_per_element = 4;
  double volume_bytes = 0;
  double sent_bytes = 0;  // what this rank sends per step, as implemented here
  std::string formula;    // "2Ψ", "3Ψ", "(N−1)Ψ", ...
  // The strategy's operations that make it up (StrategyInfo::moves), and the
  // same in words: "reduce-scatter of the gradients in backward (Ψ) + ...".
  std::vector<StateMove> moves;
  std::string by_operation;
};
CommPrediction predict_comm(const ModelStateInput& in, int rank);

// What one transformer block keeps for its backward, per Korthikanti et al.
// 2022 ("Reducing Activation Recomputation in Large Transformer Models",
// §4.1), for s tokens of context, b sequences, h channels and a heads:
//   with dropout, 16-bit:  s·b·h·(34 + 5·a·s/h) bytes
//     attention 11sbh + 5as²b (QKV input 2sbh, Q and K 4sbh, softmax 2as²b,
//     its dropout mask as²b and output 2as²b, V 2sbh, projection input 2sbh,
//     dropout mask sbh); MLP 19sbh (input 2sbh, GELU input 8sbh and output
//     8sbh, dropout mask sbh); two LayerNorm inputs 4sbh.
//   without dropout (Shardlab has none; neither does nanoGPT at dropout 0):
//     the two sbh masks, the as²b mask and the 2as²b dropout output go, and
//     attention reads the softmax output itself: s·b·h·(32 + 2·a·s/h) bytes.
// That is 16 values per token and channel plus a·s² per sequence, each in the
// storage precision (2 bytes in bf16/fp16, 4 in fp32: the fp32 count is
// twice the 16-bit formula). Shardlab also keeps each LayerNorm's mean and
// 1/std per token in fp32 (the paper leaves these out): 2 × 2 × 4 = 16·s·b bytes.
// The block's output counts here as the next block's input.
//
// Tensor parallelism over t ranks (§4.2) splits what lives inside the
// tensor-parallel regions, but not the two LayerNorm inputs, the attention's
// and the MLP's inputs (8·s·b·h here, 10 with the dropout masks):
// s·b·h·(8 + 24/t + 2·a·s/(h·t)) without dropout. Sequence parallelism (§4.2.2)
// splits those too: s·b·h·(32 + 2·a·s/h)/t, and the LayerNorm statistics.
//
// Fused attention (FlashAttention, `--attention flash`) keeps none of the
// a·s² terms: the softmax is recomputed in backward from one logsumexp per
// position and head (fp32, 4·a·s·b bytes), and with dropout its mask is
// regenerated from the random state. The formulas lose their 5·a·s/h and
// 2·a·s/h terms: s·b·h·34 with dropout in 16-bit, s·b·h·32 without.
struct BlockActivations {
  double with_dropout_16bit = 0;  // the paper's formula
  double without_dropout = 0;     // adjusted, in the storage precision
  double layernorm_stats = 0;     // fp32 statistics
  double softmax_stats = 0;       // flash: the fp32 logsumexp per position and head
  std::string formula;            // how without_dropout was computed, as shown to a learner
  double total() const { return without_dropout + layernorm_stats + softmax_stats; }
};
BlockActivations block_activations(int seq, int batch, int channels, int heads,
                                   const std::string& precision, bool flash = false, int tp = 1,
                                   bool sequence_parallel = false);

}  // namespace shardlab
