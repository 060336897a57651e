// Megatron-LM's and Korthikanti et al.'s accounting of a GPT on a mesh, per
// pipeline stage: weights, model states, activations and the bytes each axis
// carries (see mesh_estimate.h). Written from the papers' terms, not from the
// implementation's code: the tests compare the two.
#include "core/predict/mesh_estimate.h"

#include <algorithm>

#include "core/model/model.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/strategy.h"
#include "core/predict/pipeline_analysis.h"

namespace shardlab {

namespace {

// A ring collective's share on each rank's wire: all-reduce 2(n−1)/n of the
// buffer, all-gather and reduce-scatter (n−1)/n of the whole.
double ring_all_reduce(double bytes, int n) {
  return 2.0 * (n - 1) / n * bytes;
}
double ring_half(double bytes, int n) {
  return static_cast<double>(n - 1) / n * bytes;
}

}  // namespace

MeshEstimate estimate_mesh(const RunConfig& cfg) {
  const ModelSpec spec = resolve_model(cfg);
  if (spec.family != "gpt")
    throw ConfigError("--model " + cfg.model +
                      ": the mesh accounting is a transformer's (valid: --model gpt:LxCxH)");
  const Mesh mesh = run_mesh(cfg);
  MeshEstimate e;
  e.mesh = mesh;
  e.tp = mesh.size(MeshAxis::tp);
  e.pp = pipeline_stages(cfg);
  e.dp = pipeline_replicas(cfg);
  e.micro_batches = micro_batches_run(cfg);
  e.rows_per_micro_batch = cfg.batch / e.dp / e.micro_batches;
  e.seq = spec.seq;
  e.dim = spec.dim;
  e.heads = spec.heads;
  e.vocab = spec.vocab;
  e.vocab_padded = (spec.vocab + e.tp - 1) / e.tp * e.tp;  // Megatron pads V to a multiple of t
  e.sequence_parallel = cfg.sequence_parallel && e.tp > 1;
  e.activation_bytes = cfg.precision == "fp32" ? 4 : 2;
  e.bubble = bubble_formula(e.pp, e.micro_batches);

  const double h = e.dim, s = e.seq, t = e.tp, V = e.vocab_padded, b = e.rows_per_micro_batch;
  const double a = e.heads, M = e.micro_batches, act = e.activation_bytes;
  const bool sp = e.sequence_parallel;
  const double tokens = b * s;                           // n: the tokens of one micro-batch
  const double x = tokens * h * act;                     // one activation [b, s, h] on the wire
  const double stage_x = tokens / (sp ? t : 1) * h * 4;  // between stages: fp32, SP: 1/t
  const BytesPerParam bpp = bytes_per_param(cfg.precision, cfg.optimizer.kind);
  const std::string T = std::to_string(e.tp);

  // Korthikanti et al. Table 2, per block, 16-bit values with dropout.
  auto k = [&](const std::string& what, const std::string& f, double v) {
    e.korthikanti.push_back({what, f, v});
  };
  k("no parallelism", "s·b·h·(34 + 5·a·s/h)", s * b * h * (34 + 5 * a * s / h));
  if (e.tp > 1) {
    k("tensor parallel", "s·b·h·(10 + 24/t + 5·a·s/(h·t))",
      s * b * h * (10 + 24 / t + 5 * a * s / (h * t)));
    k("tensor + sequence parallel", "s·b·h·(34/t + 5·a·s/(h·t))",
      s * b * h * (34 / t + 5 * a * s / (h * t)));
    k("tensor parallel + selective recomputation", "s·b·h·(10 + 24/t)", s * b * h * (10 + 24 / t));
    k("tensor + sequence parallel + selective recomputation", "s·b·h·34/t", s * b * h * 34 / t);
  }
  k("full recomputation (the block's input only)", "2·s·b·h", 2 * s * b * h);

  const BlockActivations block =
      block_activations(e.seq, e.rows_per_micro_batch, e.dim, e.heads, cfg.precision,
                        effective_attention(cfg) == "flash", e.tp, sp);
  const std::vector<int> partition = pipeline_partition(cfg, make_layout(cfg));
  const std::vector<int> first_ranks = first_pipeline_ranks(cfg);
  const int layers = static_cast<int>(make_layout(cfg).num_layers());  // blocks + 2
  int first = 0;
  for (int st = 0; st < e.pp; ++st) {
    MeshStageEstimate g;
    g.stage = st;
    g.first_layer = first;
    g.last_layer = first + partition[static_cast<size_t>(st)];
    first = g.last_layer;
    g.embedding = g.first_layer == 0;
    g.head = g.last_layer == layers;
    g.blocks = std::min(g.last_layer, layers - 1) - std::max(g.first_layer, 1);
    const bool first_stage = st == 0, last_stage = st == e.pp - 1;

    // Weights: a block's column-parallel c_attn and c_fc (weights and biases)
    // and row-parallel c_proj weights are cut in t; the row layers' biases and
    // the LayerNorms are whole on every tp rank: (12h² + 7h)/t + 6h, which at
    // t = 1 is Megatron's 12h² + 13h. wte's vocabulary rows are cut (V' = V
    // padded to a multiple of t), wpe is whole; the last stage keeps ln_f and
    // its own copy of the tied lm_head slice (summed with wte's gradient).
    const double per_block = (12 * h * h + 7 * h) / t + 6 * h;
    g.params = g.blocks * per_block;
    std::string f;
    auto term = [&](const std::string& x) { f += (f.empty() ? "" : " + ") + x; };
    if (g.blocks)
      term(std::to_string(g.blocks) + (e.tp > 1 ? "·((12h² + 7h)/t + 6h)" : "·(12h² + 13h)"));
    if (g.embedding) {
      g.params += V * h / t + s * h;
      term(e.tp > 1 ? "V'h/t + s·h" : "V·h + s·h");
    }
    if (g.head) {  // lm_head keeps its own copy of the tied weights, on wte's stage too
      g.params += 2 * h + V * h / t;
      term(e.tp > 1 ? "2h + V'h/t (lm_head)" : "2h + V·h (lm_head)");
    }
    g.params_formula = f;
    const double P = g.params;
    const bool zero1 = cfg.dp_zero1 && e.dp > 1;
    g.model_states.params = bpp.params * P;
    g.model_states.grads = bpp.grads * P;
    g.model_states.optimizer = bpp.optimizer * P / (zero1 ? e.dp : 1);
    g.model_states.formula = zero1 ? "(P + G)·Ψ_stage + K·Ψ_stage/dp" : "(P + G + K)·Ψ_stage";

    // Activations: one block's (Korthikanti's terms for this implementation:
    // fp32 values, no dropout) for every block and every micro-batch in flight.
    g.in_flight = expected_in_flight(cfg, first_ranks[static_cast<size_t>(st)]);
    g.block_activations = block.total();
    // --recompute: each micro-batch in flight keeps its stage input only, and
    // one micro-batch's blocks are whole again while its forward is recomputed.
    const double input = first_stage ? tokens * 4 : stage_x;  // the first's: int32 token ids
    g.activations = cfg.recompute ? g.in_flight * input + g.blocks * g.block_activations
                                  : g.blocks * g.in_flight * g.block_activations;

    // tp, per micro-batch. Without SP: f and g all-reduce [b, s, h] twice a
    // block each way; the vocabulary-parallel embedding sums its slices (g),
    // the head sums ln_f's input gradient (f) and all-gathers 3 fp32 loss
    // statistics a token. With SP every all-reduce becomes a reduce-scatter or
    // an all-gather of the same buffer (half the bytes each), the backward
    // gathers the two LayerNorm outputs again instead of keeping them (as
    // Megatron does), and each LayerNorm's weight and bias gradients are
    // all-reduced (h values each).
    if (e.tp > 1) {
      double per_mb = 0;
      std::string tf;
      const double ar = ring_all_reduce(x, e.tp), half = ring_half(x, e.tp);
      const double loss = ring_half(tokens * 3 * 4 * t, e.tp);
      const double ln = ring_all_reduce(h * act, e.tp);
      // --recompute runs the stage's forward again in the backward (the loss
      // excepted), and its tp collectives with it.
      const int again = cfg.recompute ? 1 : 0;
      if (!sp) {
        const int n = (4 + 2 * again) * g.blocks + (1 + again) * g.embedding + g.head;
        per_mb = n * ar + (g.head ? loss : 0);
        tf = std::to_string(n) + " all-reduces of b·s·h × 2(t−1)/t" +
             (g.head ? " + the loss's all-gather" : "");
      } else {
        const int n = (10 + 4 * again) * g.blocks + (2 + again) * (g.embedding + g.head);
        per_mb = n * half + g.blocks * 4 * ln + (g.head ? loss + 2 * ln : 0);
        tf = std::to_string(n) + " all-gathers and reduce-scatters of b·s·h × (t−1)/t" +
             (g.blocks || g.head ? " + LayerNorm gradients" : "") +
             (g.head ? " + the loss's all-gather" : "");
      }
      g.sent[static_cast<size_t>(MeshAxis::tp)] = M * per_mb;
      g.sent_formula[static_cast<size_t>(MeshAxis::tp)] = "M × (" + tf + ")";
    }
    // pp: an activation forward to the next stage and a gradient back to the
    // previous one per micro-batch, fp32 (under SP this rank's tokens only);
    // the first and last stages also swap the tied wte/lm_head gradients.
    if (e.pp > 1) {
      double sent = M * stage_x * ((last_stage ? 0 : 1) + (first_stage ? 0 : 1));
      std::string pf = "M × b·s·h" + std::string(sp ? "/t" : "") + " × 4 B " +
                       (first_stage || last_stage ? "one way" : "both ways");
      if (first_stage || last_stage) {
        sent += V * h / t * 4;
        pf += " + the tied embedding's gradient V'h/t × 4 B";
      }
      g.sent[static_cast<size_t>(MeshAxis::pp)] = sent;
      g.sent_formula[static_cast<size_t>(MeshAxis::pp)] = pf;
    }
    // dp: the stage's gradients all-reduced over its replicas (ZeRO-1: the
    // paper's reduce-scatter and all-gather move the same 2Ψ).
    if (e.dp > 1) {
      g.sent[static_cast<size_t>(MeshAxis::dp)] = ring_all_reduce(P * bpp.comm, e.dp);
      g.sent_formula[static_cast<size_t>(MeshAxis::dp)] =
          "2Ψ_stage × (dp−1)/dp × " + std::to_string(bpp.comm) + " B";
    }
    e.stages.push_back(std::move(g));
  }
  return e;
}

}  // namespace shardlab
