// What a GPT on a device mesh (dp × pp × tp) holds and sends per rank, from
// the formulas a learner meets in the papers: Megatron-LM's accounting of the
// weights a tensor-parallel slice keeps (Narayanan et al. 2021: 12h² + 13h a
// block), Korthikanti et al.'s activations per block (2022), the pipeline's
// micro-batches in flight and its bubble, and the bytes each axis's group
// carries: tp's all-reduces (or sequence parallelism's all-gathers and
// reduce-scatters), pp's activations and gradients between neighbours, dp's
// gradient all-reduce. `shardlab estimate --mesh` prints them beside the meta
// run's figures (the implementation's own), and tests hold them equal.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/mesh.h"
#include "core/parallel/model_state.h"

namespace shardlab {

// One pipeline stage, as any of its ranks (every tp rank of a stage holds and
// sends the same amounts; so does every dp replica of it).
struct MeshStageEstimate {
  int stage = 0;
  int first_layer = 0, last_layer = 0;  // model layers [first, last): 0 the embedding
  int blocks = 0;                       // transformer blocks on the stage
  bool embedding = false;               // wte (its vocabulary slice) and wpe
  bool head = false;                    // ln_f and lm_head (tied to wte)
  double params = 0;                    // parameters a rank holds
  std::string params_formula;           // e.g. "1·((12h² + 7h)/t + 6h) + V'h/t + s·h"
  ModelStateBytes model_states;         // (P + G)·params + K·params (÷ dp with --dp-zero1)
  int in_flight = 0;                    // micro-batches whose activations the stage keeps
  double block_activations = 0;         // one block, one micro-batch (this implementation's
                                        // form of Korthikanti's: fp32, no dropout)
  double activations = 0;               // blocks × in_flight × block_activations
  SentByAxis sent{};                    // bytes a rank sends per step on each axis
  std::array<std::string, std::size(kMeshAxes)> sent_formula;  // how, per axis
};

struct MeshEstimate {
  Mesh mesh;
  int tp = 1, pp = 1, dp = 1;
  int micro_batches = 1;
  int rows_per_micro_batch = 0;  // b: sequences in one micro-batch of one pipeline
  int seq = 0, dim = 0, heads = 0, vocab = 0, vocab_padded = 0;
  int activation_bytes = 4;  // bytes of a value on the tp and pp wires (the compute dtype)
  bool sequence_parallel = false;
  double bubble = 0;  // (P−1)/(M+P−1)
  std::vector<MeshStageEstimate> stages;
  // Korthikanti et al. Table 2, one block, 16-bit, with dropout (bytes): the
  // paper's own rows for this s, b, h, a and t.
  struct KorthikantiRow {
    std::string what, formula;
    double bytes = 0;
  };
  std::vector<KorthikantiRow> korthikanti;
};

// For a gpt on a pipeline strategy (gpipe, 1f1b, naive-mp) with or without
// --mesh. Assumes validate(cfg) passed; throws ConfigError for another model
// family (the formulas are a transformer's).
MeshEstimate estimate_mesh(const RunConfig& cfg);

}  // namespace shardlab
