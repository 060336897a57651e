// `gpt:LxCxH` with context `--seq T`: GPT-2 exactly as nanoGPT's model.py
// with bias=True and dropout 0, trained on characters of a text (--data, or
// the default corpus assets/corpus.txt) with cross-entropy on the next one.
//
// The layer table is [embedding, block 0 … block L−1, head]:
//   layers.0      transformer.wte [V,C], transformer.wpe [T,C]; out = wte[x] + wpe[t]
//   layers.1+i    transformer.h.i: x + attn(ln_1(x)), then + mlp(ln_2(·)); the
//                 attention is causal over H heads (c_attn [3C,C] → softmax(q·kᵀ/√(C/H)) v
//                 → c_proj [C,C]), the MLP c_fc [4C,C] → GELU (exact erf) → c_proj [C,4C]
//   layers.L+1    transformer.ln_f, lm_head [V,C] (tied to wte): the logits [T,V]
// Every activation between layers is [rows, T, C]: a pipeline sends that.
//
// What to notice: a block holds 12C² + 13C parameters, and its activations
// grow with T² (the attention matrix, H·T² per sequence) as well as with T·C
// — the Korthikanti et al. accounting the memory panel shows beside it. With
// `--attention flash` (FlashAttention-2) the T² term goes: the block keeps one
// fp32 logsumexp per position and head instead, and backward recomputes the
// probabilities tile by tile.
//
// Tensor parallelism (a mesh with tp = T, Megatron-LM's split of a block):
// c_attn is column-parallel by heads — each tp rank holds the q, k and v rows
// of its H/T heads — so attention runs on its own heads with no
// communication; attn.c_proj is row-parallel (the C/T input channels of those
// heads), and an all-reduce of [rows, T, C] completes its output (g). The MLP
// likewise: c_fc column-parallel (4C/T features), GELU on the slice, c_proj
// row-parallel with one all-reduce. In backward the gradients of ln_1's and
// ln_2's outputs, which fed every head and feature, are all-reduced (f): two
// all-reduces of b·s·h per block forward and two backward. LayerNorms and the
// row layers' biases (added by tp rank 0) stay whole on every tp rank.
//
// The vocabulary is split too (Megatron's vocabulary parallelism): V is
// padded to a multiple of the tp ranks (the default corpus's 719 characters
// are prime) and each rank holds a contiguous slice of wte's rows, the same
// slice of the tied lm_head. The embedding looks up only the ids in its slice
// (the others add nothing), tp rank 0 adds wpe, and an all-reduce sums the
// slices (g; under sequence parallelism a reduce-scatter). lm_head is
// column-parallel: each rank computes the logits of its slice only, never
// the whole [rows, T, V]; the cross-entropy then all-gathers each row's max,
// sum of exponentials and target logit per slice (3 floats a token) and
// merges them, and ln_f's input gradient is all-reduced (f). The padding's
// rows stay zero: their logits are left out of the loss, their gradient is
// zero, and exports and checkpoints never see them.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <mutex>

#include "core/comm/comm.h"
#include "core/comm/placement.h"
#include "core/config.h"
#include "core/model/layer_ops.h"
#include "core/model/model_family.h"
#include "core/model/precision.h"
#include "core/model/text_data.h"
#include "core/rng.h"
#include "kernels/transformer.h"

namespace shardlab {
namespace {

constexpr int kDefaultSeq = 64;
constexpr double kLayerNormEps = 1e-5;  // nn.LayerNorm's default, as nanoGPT's LayerNorm

// A corpus read once per path and process: its tokenizer and its tokens.
struct Corpus {
  CharTokenizer tokenizer;
  std::vector<int32_t> tokens;
  int64_t bytes = 0;
};

std::shared_ptr<const Corpus> load_corpus(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Corpus>> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(path); it != cache.end()) return it->second;
  const std::string text = read_text_file(path);
  auto c = std::make_shared<Corpus>(Corpus{CharTokenizer::from_text(text, path), {}, 0});
  c->tokens = c->tokenizer.encode(text);
  c->bytes = static_cast<int64_t>(text.size() + c->tokens.size() * sizeof(int32_t));
  cache[path] = c;
  return c;
}

std::string corpus_path(const RunConfig& cfg) {
  return cfg.data.empty() ? default_corpus_path() : cfg.data;
}

// Windows of T+1 characters (core/model/text_data.h) behind the Dataset interface.
class TextDataset final : public Dataset {
 public:
  TextDataset(std::shared_ptr<const Corpus> corpus, int seq, uint64_t seed, std::string path)
      : corpus_(std::move(corpus)), data_(corpus_->tokens, seq, seed), path_(std::move(path)) {}
  bool load(DeviceBackend& dev, int step, int row_begin, int rows, void* x_dev,
            void* y_dev) const override {
    const size_t n = static_cast<size_t>(rows) * data_.seq();
    std::vector<int32_t> x(n), y(y_dev ? n : 0);
    data_.rows(step, row_begin, rows, x.data(), y_dev ? y.data() : nullptr);
    // Token ids travel as 4-byte values: a raw copy, never a conversion.
    dev.copy(x_dev, x.data(), n * sizeof(int32_t), CopyKind::host_to_device);
    if (y_dev) dev.copy(y_dev, y.data(), n * sizeof(int32_t), CopyKind::host_to_device);
    return false;
  }
  void rows(int step, int row_begin, int rows, void* x, void* y) const override {
    data_.rows(step, row_begin, rows, static_cast<int32_t*>(x), static_cast<int32_t*>(y));
  }
  bool tokens() const override { return true; }
  std::string describe() const override {
    return "shardlab text: windows of seq+1 characters of " + path_;
  }

 private:
  std::shared_ptr<const Corpus> corpus_;
  TextData data_;
  std::string path_;
};

float* f32(void* p) {
  return static_cast<float*>(p);
}

// The device multiplies 2-byte operands itself (tensor cores): no upcasts.
bool native(const LayerCall& c) {
  return c.dt != DType::f32 && c.alloc.backend().native_2byte_math();
}

// nn.Linear on storage of any dtype: out[rows,o] = x[rows,i] · Wᵀ + b (b may be
// null), in fp32 (2-byte storage is upcast into temporaries, or multiplied as it
// is on tensor cores; either way the sums are fp32 and the result rounded once).
void linear(const LayerCall& c, void* out, const void* x, const void* w, const void* b, int rows,
            int in, int o) {
  if (native(c)) return c.alloc.backend().linear_forward_2byte(c.dt, out, x, w, b, rows, in, o);
  const size_t r = static_cast<size_t>(rows);
  AsF32 x32(c.alloc, "upcast.input", x, c.dt, r * in);
  AsF32 w32(c.alloc, "upcast.weight", w, c.dt, static_cast<size_t>(in) * o);
  std::optional<AsF32> b32;
  if (b) b32.emplace(c.alloc, "upcast.bias", b, c.dt, static_cast<size_t>(o));
  AsF32 y = AsF32::scratch(c.alloc, "upcast.output", out, c.dt, r * o);
  c.alloc.backend().linear_forward(y.get(), x32.get(), w32.get(), b32 ? b32->get() : nullptr, rows,
                                   in, o);
  y.store(out);
}

// dW += doutᵀ · x; db += Σ_rows dout (db may be null); din = dout · W (din may be null).
// In a zero-bubble B (c.defer) dW and db are left for W, which reads x then:
// x must be a tensor the layer keeps, never a temporary. `what` names dout's copy.
void linear_backward(const LayerCall& c, int layer, const char* what, void* din, void* dw, void* db,
                     const void* dout, const void* x, const void* w, int rows, int in, int o) {
  if (defer_weight_grad(c, layer, what, dout, x, dw, db, rows, in, o)) {
    if (din)
      c.alloc.backend().linear_backward(static_cast<float*>(din), nullptr, nullptr,
                                        static_cast<const float*>(dout), nullptr,
                                        static_cast<const float*>(w), rows, in, o);
    return;
  }
  if (native(c))
    return c.alloc.backend().linear_backward_2byte(c.dt, din, dw, db, dout, x, w, rows, in, o);
  const size_t r = static_cast<size_t>(rows);
  AsF32 g32(c.alloc, "upcast.grad_output", dout, c.dt, r * o);
  AsF32 x32(c.alloc, "upcast.input", x, c.dt, r * in);
  AsF32 w32(c.alloc, "upcast.weight", w, c.dt, static_cast<size_t>(in) * o);
  // The parameter gradients accumulate in fp32 and are rounded once per call.
  AsF32 dw32(c.alloc, "upcast.weight_grad", dw, c.dt, static_cast<size_t>(in) * o);
  std::optional<AsF32> db32, dx;
  if (db) db32.emplace(c.alloc, "upcast.bias_grad", db, c.dt, static_cast<size_t>(o));
  if (din) dx.emplace(AsF32::scratch(c.alloc, "upcast.grad_input", din, c.dt, r * in));
  c.alloc.backend().linear_backward(dx ? dx->get() : nullptr, dw32.get(),
                                    db32 ? db32->get() : nullptr, g32.get(), x32.get(), w32.get(),
                                    rows, in, o);
  dw32.store(dw);
  if (db32) db32->store(db);
  if (dx) dx->store(din);
}

void gelu(const LayerCall& c, void* out, const void* in, size_t n) {
  if (native(c)) return c.alloc.backend().gelu_forward_2byte(c.dt, out, in, n);
  AsF32 x32(c.alloc, "upcast.pre_gelu", in, c.dt, n);
  AsF32 y = AsF32::scratch(c.alloc, "upcast.output", out, c.dt, n);
  c.alloc.backend().gelu_forward(y.get(), x32.get(), n);
  y.store(out);
}

// g = g * gelu'(in), in place.
void gelu_backward(const LayerCall& c, void* g, const void* in, size_t n) {
  if (native(c)) return c.alloc.backend().gelu_backward_2byte(c.dt, g, g, in, n);
  AsF32 g32(c.alloc, "upcast.grad_output", g, c.dt, n);
  AsF32 x32(c.alloc, "upcast.pre_gelu", in, c.dt, n);
  c.alloc.backend().gelu_backward(g32.get(), g32.get(), x32.get(), n);
  g32.store(g);
}

// A layer's tensor and sequence parallelism (see the top): its tp group, and
// Megatron's operators on [tokens, C] activations. Without a tp group every
// operator is the identity, and bias() gives every rank its bias. Under
// sequence parallelism this rank holds `tokens(R)` = R/tp of the R tokens
// outside the tensor-parallel regions: the slice [rank·R/tp, (rank+1)·R/tp).
class Tp {
 public:
  Tp(const LayerCall& c, const ModelLayout& m, int l)
      : c_(c),
        size_(m.slice().size),
        sp_(m.tensor_parallel() && m.spec().sequence_parallel),
        layer_(l) {}
  int size() const { return size_; }
  bool sp() const { return sp_; }
  int tokens(int R) const { return sp_ ? R / size_ : R; }
  // A row-parallel layer's bias is added once, by the first tp rank.
  const void* bias(const void* b) const { return !c_.tp || c_.tp->rank() == 0 ? b : nullptr; }

  // Entering a tensor-parallel region with this rank's tokens `x`: every token
  // (SP: all-gathered into `full`, a temporary; else x itself).
  const void* gather(const void* x, Tensor& full, const char* what, int R, int C,
                     MemCategory category = MemCategory::temporary) const {
    if (!sp_) return x;
    full = c_.alloc.alloc(c_.name(layer_, what), category, {R, C}, c_.dt);
    c_.tp->all_gather(x, full.raw(), counts(R, C), c_.dt, meta());
    return full.raw();
  }
  // Where a row-parallel layer writes its partial sums of every token: `out`
  // itself, or (SP) a temporary the size of all tokens.
  void* partial(void* out, Tensor& full, const char* what, int R, int C) const {
    if (!sp_) return out;
    full = temp(what, R, C);
    return full.raw();
  }
  // g (forward): the partial sums summed over the group — in place, or (SP)
  // reduce-scattered, this rank's tokens into `out`.
  void g(void* y, void* out, int R, int C) const {
    if (!c_.tp) return;
    if (sp_)
      c_.tp->reduce_scatter(y, out, counts(R, C), c_.dt, meta());
    else
      c_.tp->all_reduce(y, static_cast<size_t>(R) * C, c_.dt, meta());
  }
  // f (backward): a column-parallel layer's input gradient dx [R, C] (this
  // rank's heads' or features' share) summed over the group: in place, or
  // (SP) reduce-scattered into `shard`. Returns where this rank's sum is.
  void* f_backward(void* dx, Tensor& shard, const char* what, int R, int C) const {
    if (!c_.tp) return dx;
    if (!sp_) {
      c_.tp->all_reduce(dx, static_cast<size_t>(R) * C, c_.dt, meta());
      return dx;
    }
    shard = temp(what, R / size_, C);
    c_.tp->reduce_scatter(dx, shard.raw(), counts(R, C), c_.dt, meta());
    return shard.raw();
  }
  // This rank's tokens of a tensor of every token (SP), else the tensor.
  const void* own(const void* all, int R, int C) const {
    if (!sp_) return all;
    const size_t at = static_cast<size_t>(c_.tp->rank()) * (R / size_) * C * dtype_size(c_.dt);
    return static_cast<const char*>(all) + at;
  }

  // A LayerNorm's weight and bias gradients (C each). Under SP the LayerNorm
  // saw only this rank's tokens: its backward writes into zeroed temporaries,
  // and finish() sums them over the group into the gradients. Else the
  // gradients themselves.
  class LnGrads {
   public:
    LnGrads(const Tp& tp, void* dw, void* db, int C) : tp_(tp), dw_(dw), db_(db), C_(C) {
      if (!tp.sp_) return;
      for (Tensor* t : {&w_, &b_}) {
        *t = tp.temp("ln.grad", 1, C);
        tp.c_.alloc.backend().fill_zero(t->raw(), t->bytes());
      }
    }
    void* dw() { return tp_.sp_ ? w_.raw() : dw_; }
    void* db() { return tp_.sp_ ? b_.raw() : db_; }
    void finish() {
      if (!tp_.sp_) return;
      for (auto [mine, grad] : {std::pair{&w_, dw_}, std::pair{&b_, db_}}) {
        tp_.c_.tp->all_reduce(mine->raw(), static_cast<size_t>(C_), tp_.c_.dt, tp_.meta());
        tp_.c_.alloc.backend().add(grad, mine->raw(), tp_.c_.dt, static_cast<size_t>(C_));
      }
    }

   private:
    const Tp& tp_;
    void* dw_;
    void* db_;
    int C_;
    Tensor w_, b_;
  };

 private:
  Tensor temp(const char* what, int R, int C) const {
    return c_.alloc.alloc(c_.name(layer_, what), MemCategory::temporary, {R, C}, c_.dt);
  }
  std::vector<size_t> counts(int R, int C) const {
    return std::vector<size_t>(static_cast<size_t>(size_), static_cast<size_t>(R / size_) * C);
  }
  CommMeta meta() const { return CommMeta{layer_, c_.mb}; }
  const LayerCall& c_;
  int size_;
  bool sp_;
  int layer_;
};

// The vocabulary ids this rank's rows of wte and lm_head stand for: `rows`
// rows from id `begin`, of which the first `count` are real (the rest is the
// padding of the last slices; count can be 0). The whole vocabulary without
// tensor parallelism.
struct VocabRows {
  int begin = 0, rows = 0, count = 0;
};
VocabRows vocab_rows(const ModelLayout& m) {
  VocabRows v;
  v.rows = static_cast<int>(m.params()[0].shape[0]);  // transformer.wte.weight
  v.begin = m.slice().rank * v.rows;
  v.count = std::clamp(m.spec().vocab - v.begin, 0, v.rows);
  return v;
}

// Indices into a block's parameters (table order, nanoGPT's state_dict order).
enum BlockParam {
  ln_1_w,
  ln_1_b,
  c_attn_w,
  c_attn_b,
  attn_proj_w,
  attn_proj_b,
  ln_2_w,
  ln_2_b,
  c_fc_w,
  c_fc_b,
  mlp_proj_w,
  mlp_proj_b
};
// What a block keeps for backward, in allocation order (the output last).
enum BlockKeep {
  k_ln1,
  k_mean1,
  k_rstd1,
  k_qkv,
  k_att,  // the probabilities [rows,H,T,T]; flash: the logsumexp [rows,H,T] (fp32)
  k_atty,
  k_x2,
  k_ln2,
  k_mean2,
  k_rstd2,
  k_h,
  k_hg,
  k_out
};
// The head's: ln_f's output and statistics, the logits.
// The head's: ln_f's output and statistics, the logits; under sequence
// parallelism then ln_f's output of every token (lm_head's input).
enum HeadKeep { k_lnf, k_meanf, k_rstdf, k_logits, k_lnf_all };

class Gpt final : public ModelFamily {
 public:
  std::string name() const override { return "gpt"; }
  std::string forms() const override {
    return "gpt:LxCxH, a GPT-2 of L blocks, C channels and H heads (C divisible by H), e.g. "
           "gpt:2x64x4, with --seq T";
  }

  std::optional<ModelSpec> parse(const std::string& text) const override {
    if (text.rfind("gpt:", 0) != 0) return std::nullopt;
    // gpt:LxCxH, three numbers of 1 to 6 digits.
    std::vector<int> n;
    size_t i = 4;
    while (n.size() < 3) {
      size_t j = i;
      while (j < text.size() && j - i < 7 && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
      const bool last = n.size() == 2;
      if (j == i || j - i > 6 || (last ? j != text.size() : j >= text.size() || text[j] != 'x'))
        throw ConfigError("unknown model '" + text + "' (valid: " + forms() + ")");
      n.push_back(std::stoi(text.substr(i, j - i)));
      i = j + 1;
    }
    ModelSpec s;
    s.family = "gpt";
    s.layers = n[0];
    s.dim = n[1];
    s.heads = n[2];
    if (s.layers < 1 || s.layers > 256)
      throw ConfigError("model '" + text + "' has " + std::to_string(s.layers) +
                        " blocks (valid: 1 to 256)");
    // Channels past what any machine here could hold are the memory check's
    // to refuse (a run), and a prediction's to lay out (GPT-3: 12288).
    if (s.dim < 1 || s.dim > 65536)
      throw ConfigError("model '" + text + "' has " + std::to_string(s.dim) +
                        " channels (valid: 1 to 65536)");
    if (s.heads < 1 || s.dim % s.heads != 0)
      throw ConfigError("model '" + text + "' has " + std::to_string(s.heads) +
                        " heads (valid: a divisor of its " + std::to_string(s.dim) +
                        " channels, e.g. gpt:" + std::to_string(s.layers) + "x" +
                        std::to_string(s.dim) + "x1)");
    return s;
  }

  ModelSpec resolve(ModelSpec spec, const RunConfig& cfg) const override {
    spec.seq = cfg.seq == 0 ? kDefaultSeq : cfg.seq;
    if (spec.seq < 1 || spec.seq > 4096)
      throw ConfigError("--seq " + std::to_string(cfg.seq) + " is invalid (valid: 1 to 4096)");
    spec.flash_attention = effective_attention(cfg) == "flash";
    spec.sequence_parallel = cfg.sequence_parallel;
    const std::shared_ptr<const Corpus> corpus = load_corpus(corpus_path(cfg));
    spec.vocab = corpus->tokenizer.vocab_size();
    spec.vocabulary = corpus->tokenizer.vocabulary();
    if (corpus->tokens.size() < static_cast<size_t>(spec.seq) + 1)
      throw ConfigError("--data '" + corpus_path(cfg) + "' holds " +
                        std::to_string(corpus->tokens.size()) + " characters, fewer than --seq " +
                        std::to_string(spec.seq) +
                        " + 1 (valid: a longer text or a shorter --seq)");
    return spec;
  }

  void check_tensor_parallel(const ModelSpec& spec, int tp,
                             const std::string& given) const override {
    if (tp > 1 && spec.heads % tp != 0)
      throw ConfigError(given + ": tp=" + std::to_string(tp) + " does not divide the " +
                        std::to_string(spec.heads) + " heads of " + spec.str() +
                        " (valid: a tp that divides " + std::to_string(spec.heads) +
                        ": each tp rank computes heads/tp whole heads)");
    if (tp > 1 && spec.sequence_parallel && spec.seq % tp != 0)
      throw ConfigError("--sequence-parallel: tp=" + std::to_string(tp) +
                        " does not divide --seq " + std::to_string(spec.seq) +
                        " (valid: a --seq that tp divides: each tp rank holds seq/tp tokens of "
                        "every sequence between the tensor-parallel regions)");
  }

  void build(ModelLayout& m) const override {
    const ModelSpec& s = m.spec();
    if (s.seq < 1 || s.vocab < 1)
      throw std::logic_error("gpt layout needs seq and vocab (resolve_model)");
    const int64_t C = s.dim, T = s.seq, V = s.vocab;
    m.begin_layer("transformer.wte+wpe", "embedding");
    // Under tensor parallelism each rank holds a slice of the vocabulary, padded
    // to a multiple of the ranks (see the top).
    m.add_param("transformer.wte.weight", {V, C}, -1, 0, 1, /*pad=*/true);
    m.add_param("transformer.wpe.weight", {T, C});
    for (int i = 0; i < s.layers; ++i) {
      const std::string h = "transformer.h." + std::to_string(i);
      m.begin_layer(h, "block");
      m.add_param(h + ".ln_1.weight", {C});
      m.add_param(h + ".ln_1.bias", {C});
      // Under tensor parallelism (see the top): q, k and v are each cut by
      // heads (dimension 0 in 3 parts), the projections on their inputs.
      m.add_param(h + ".attn.c_attn.weight", {3 * C, C}, -1, 0, 3);
      m.add_param(h + ".attn.c_attn.bias", {3 * C}, -1, 0, 3);
      m.add_param(h + ".attn.c_proj.weight", {C, C}, -1, 1);
      m.add_param(h + ".attn.c_proj.bias", {C});
      m.add_param(h + ".ln_2.weight", {C});
      m.add_param(h + ".ln_2.bias", {C});
      m.add_param(h + ".mlp.c_fc.weight", {4 * C, C}, -1, 0);
      m.add_param(h + ".mlp.c_fc.bias", {4 * C}, -1, 0);
      m.add_param(h + ".mlp.c_proj.weight", {C, 4 * C}, -1, 1);
      m.add_param(h + ".mlp.c_proj.bias", {C});
    }
    m.begin_layer("lm_head", "head");
    m.add_param("transformer.ln_f.weight", {C});
    m.add_param("transformer.ln_f.bias", {C});
    m.add_param("lm_head.weight", {V, C}, /*tied_to=*/0, 0, 1, /*pad=*/true);  // transformer.wte
    m.end_params();
    m.end_buffers();
    // Between layers [T, C] per sequence; under sequence parallelism each tp
    // rank holds T/tp of the tokens there.
    const int64_t Tl = m.tensor_parallel() && s.sequence_parallel ? T / m.slice().size : T;
    std::vector<std::vector<int64_t>> acts{{T}};
    for (int i = 0; i <= s.layers; ++i) acts.push_back({Tl, C});
    acts.push_back({T, vocab_rows(m).rows});  // the logits of this rank's slice of the vocabulary
    m.set_activations(std::move(acts), true, static_cast<size_t>(T));
  }

  // nanoGPT's _init_weights: every Linear and Embedding weight normal(0, 0.02),
  // the residual projections (attn.c_proj, mlp.c_proj) normal(0, 0.02/√(2L)),
  // biases 0, LayerNorm weight 1 and bias 0; drawn in table order from our
  // generator (not torch's), lm_head a copy of wte.
  std::vector<float> init(const ModelLayout& m, uint64_t seed) const override {
    if (m.tensor_parallel())
      throw std::logic_error("gpt init: initialise the whole model, then slice it (SlicedParams)");
    std::vector<float> flat(m.state_total(), 0.0f);
    Rng rng(mix_seed(seed, 0x6e7));
    const double proj_std = 0.02 / std::sqrt(2.0 * m.spec().layers);
    auto ends_with = [](const std::string& s, const std::string& tail) {
      return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
    };
    for (const ParamInfo& p : m.params()) {
      float* v = flat.data() + p.offset;
      if (p.tied_to >= 0) {
        std::copy_n(flat.data() + m.params()[p.tied_to].offset, p.numel, v);
      } else if (p.name.find(".ln_") != std::string::npos ||
                 p.name.find("ln_f") != std::string::npos) {
        if (ends_with(p.name, ".weight")) std::fill_n(v, p.numel, 1.0f);
      } else if (ends_with(p.name, ".weight")) {
        const double sd = ends_with(p.name, "c_proj.weight") ? proj_std : 0.02;
        for (size_t i = 0; i < p.numel; ++i) v[i] = static_cast<float>(rng.normal() * sd);
      }
    }
    return flat;
  }

  void forward(const LayerCall& c, const ModelLayout& m, int l,
               const std::vector<const void*>& params, const void* x, LayerKeep& keep,
               const LayerNorms*) const override {
    const ModelSpec& s = m.spec();
    const int T = s.seq, C = s.dim, V = s.vocab, R = c.rows * T;
    DeviceBackend& dev = c.alloc.backend();
    const Tp tp(c, m, l);
    // Tokens this rank holds outside the tensor-parallel regions (R, or R/tp
    // under sequence parallelism), and per sequence.
    const int Rl = tp.tokens(R), Tl = tp.sp() ? T / tp.size() : T;
    keep.t.clear();
    keep.t.reserve(k_out + 1);  // the references act() returns must stay valid
    auto act = [&](const char* what, std::vector<int64_t> shape, DType dt) -> Tensor& {
      keep.t.push_back(
          c.alloc.alloc(c.name(l, what), MemCategory::activations, std::move(shape), dt));
      return keep.t.back();
    };
    if (l == 0) {  // token and position embeddings
      Tensor& out = act("output", {c.rows, Tl, C}, c.dt);
      // Under tensor parallelism each rank adds the rows of its vocabulary
      // slice, tp rank 0 the positions, and g sums them (under sequence
      // parallelism into each rank's own tokens).
      const VocabRows v = vocab_rows(m);
      Tensor all;
      void* y = tp.partial(out.raw(), all, "embedding.partial", R, C);
      dev.embedding_forward(c.dt, y, static_cast<const int32_t*>(x), params[0], tp.bias(params[1]),
                            c.rows, T, C, V, v.begin, v.rows);
      tp.g(y, out.raw(), R, C);
      keep.out = 0;
      return;
    }
    if (l == m.num_layers() - 1) {  // ln_f and the tied lm_head
      Tensor& ln = act("ln_f", {c.rows, Tl, C}, c.dt);
      Tensor& mean = act("ln_f.mean", {Rl}, DType::f32);
      Tensor& rstd = act("ln_f.rstd", {Rl}, DType::f32);
      dev.layernorm_forward(c.dt, ln.raw(), f32(mean.raw()), f32(rstd.raw()), x, params[0],
                            params[1], Rl, C, kLayerNormEps);
      // Sequence parallelism: lm_head reads every token (kept for its backward).
      Tensor all;
      const void* ln_in = tp.gather(ln.raw(), all, "ln_f.all", R, C, MemCategory::activations);
      // Column-parallel over the vocabulary: the logits of this rank's slice.
      const int Vl = vocab_rows(m).rows;
      Tensor& logits = act("logits", {c.rows, T, Vl}, c.dt);
      linear(c, logits.raw(), ln_in, params[2], nullptr, R, C, Vl);
      keep.out = k_logits;
      if (tp.sp()) keep.t.push_back(std::move(all));  // k_lnf_all
      return;
    }
    // A block: x + attn(ln_1(x)) → x2; x2 + mlp(ln_2(x2)) → out. Under tensor
    // parallelism this rank computes H/tp heads and 4C/tp MLP features, from
    // every token (the top).
    const int H = s.heads / tp.size(), Ch = C / tp.size();  // this rank's heads and their channels
    Tensor& ln1 = act("ln_1", {c.rows, Tl, C}, c.dt);
    Tensor& mean1 = act("ln_1.mean", {Rl}, DType::f32);
    Tensor& rstd1 = act("ln_1.rstd", {Rl}, DType::f32);
    dev.layernorm_forward(c.dt, ln1.raw(), f32(mean1.raw()), f32(rstd1.raw()), x, params[ln_1_w],
                          params[ln_1_b], Rl, C, kLayerNormEps);
    Tensor& qkv = act("attn.qkv", {c.rows, T, 3 * Ch}, c.dt);
    {
      Tensor all;
      linear(c, qkv.raw(), tp.gather(ln1.raw(), all, "ln_1.all", R, C), params[c_attn_w],
             params[c_attn_b], R, C, 3 * Ch);
    }
    void* atty = nullptr;  // the attention's output, [rows,T,Ch]
    if (s.flash_attention) {
      Tensor& lse = act("attn.lse", {c.rows, H, T}, DType::f32);
      atty = act("attn.y", {c.rows, T, Ch}, c.dt).raw();
      dev.flash_attention_forward(c.dt, atty, f32(lse.raw()), qkv.raw(), c.rows, T, Ch, H);
    } else {
      Tensor& att = act("attn.att", {c.rows, H, T, T}, c.dt);
      atty = act("attn.y", {c.rows, T, Ch}, c.dt).raw();
      // 2-byte storage: the scores are made in fp32 first.
      Tensor scratch;
      if (c.dt != DType::f32)
        scratch =
            c.alloc.alloc(c.name(l, "attn.scores"), MemCategory::temporary, {c.rows, H, T, T});
      dev.attention_forward(c.dt, atty, att.raw(), qkv.raw(),
                            scratch.empty() ? nullptr : f32(scratch.raw()), c.rows, T, Ch, H);
    }
    Tensor& x2 = act("residual", {c.rows, Tl, C}, c.dt);
    {
      Tensor all;
      void* y = tp.partial(x2.raw(), all, "attn.c_proj.partial", R, C);
      linear(c, y, atty, params[attn_proj_w], tp.bias(params[attn_proj_b]), R, Ch, C);
      tp.g(y, x2.raw(), R, C);
    }
    dev.residual_forward(c.dt, x2.raw(), x2.raw(), x, static_cast<size_t>(Rl) * C);
    Tensor& ln2 = act("ln_2", {c.rows, Tl, C}, c.dt);
    Tensor& mean2 = act("ln_2.mean", {Rl}, DType::f32);
    Tensor& rstd2 = act("ln_2.rstd", {Rl}, DType::f32);
    dev.layernorm_forward(c.dt, ln2.raw(), f32(mean2.raw()), f32(rstd2.raw()), x2.raw(),
                          params[ln_2_w], params[ln_2_b], Rl, C, kLayerNormEps);
    const int F = 4 * Ch;  // this rank's MLP features
    Tensor& h = act("mlp.pre_gelu", {c.rows, T, F}, c.dt);
    {
      Tensor all;
      linear(c, h.raw(), tp.gather(ln2.raw(), all, "ln_2.all", R, C), params[c_fc_w],
             params[c_fc_b], R, C, F);
    }
    Tensor& hg = act("mlp.gelu", {c.rows, T, F}, c.dt);
    gelu(c, hg.raw(), h.raw(), static_cast<size_t>(R) * F);
    Tensor& out = act("output", {c.rows, Tl, C}, c.dt);
    {
      Tensor all;
      void* y = tp.partial(out.raw(), all, "mlp.c_proj.partial", R, C);
      linear(c, y, hg.raw(), params[mlp_proj_w], tp.bias(params[mlp_proj_b]), R, F, C);
      tp.g(y, out.raw(), R, C);
    }
    dev.residual_forward(c.dt, out.raw(), out.raw(), x2.raw(), static_cast<size_t>(Rl) * C);
    keep.out = k_out;
  }

  void backward(const LayerCall& c, const ModelLayout& m, int l,
                const std::vector<const void*>& params, const std::vector<void*>& grads,
                const void* x, LayerKeep& keep, void* g, void* din) const override {
    const ModelSpec& s = m.spec();
    const int T = s.seq, C = s.dim, V = s.vocab, R = c.rows * T;
    DeviceBackend& dev = c.alloc.backend();
    const Tp tp(c, m, l);
    const int Rl = tp.tokens(R);
    auto temp = [&](const char* what, std::vector<int64_t> shape, DType dt) {
      return c.alloc.alloc(c.name(l, what), MemCategory::temporary, std::move(shape), dt);
    };
    auto kept = [&](int i) { return keep.t[static_cast<size_t>(i)].raw(); };
    // A deferred W reads its linear's input later: under sequence parallelism
    // that input is gathered into a temporary, gone by then.
    if (c.defer && tp.sp())
      throw std::logic_error("gpt: the B/W split does not combine with sequence parallelism");
    if (l == 0) {
      // g's backward is the identity: every tp rank has the gradient of every
      // token (sequence parallelism: each rank's own, gathered), adds it into
      // its slice's rows of wte and into the whole wpe (the same on every rank).
      const VocabRows v = vocab_rows(m);
      Tensor all;
      dev.embedding_backward(c.dt, grads[0], grads[1], tp.gather(g, all, "output.grad.all", R, C),
                             static_cast<const int32_t*>(x), c.rows, T, C, V, v.begin, v.rows);
      return;
    }
    if (l == m.num_layers() - 1) {
      const int Vl = vocab_rows(m).rows;
      Tensor dln = temp("ln_f.grad", {c.rows, T, C}, c.dt);
      linear_backward(c, l, "lm_head.grad_output", dln.raw(), grads[2], nullptr, g,
                      tp.sp() ? kept(k_lnf_all) : kept(k_lnf), params[2], R, C, Vl);
      // Each rank's vocabulary slice gave its share of ln_f's output gradient:
      // f sums them (under sequence parallelism into each rank's own tokens).
      Tensor shard;
      void* dl = tp.f_backward(dln.raw(), shard, "ln_f.grad.own", R, C);
      Tensor scratch;
      if (!din) scratch = temp("ln_f.grad_input", {Rl, C}, c.dt);
      Tp::LnGrads ln(tp, grads[0], grads[1], C);
      dev.layernorm_backward(c.dt, din ? din : scratch.raw(), ln.dw(), ln.db(), dl, x,
                             f32(kept(k_meanf)), f32(kept(k_rstdf)), params[0], Rl, C, false);
      ln.finish();
      return;
    }
    const int H = s.heads / tp.size(), Ch = C / tp.size(), F = 4 * Ch;
    // The MLP branch: out = x2 + c_proj(gelu(c_fc(ln_2(x2)))). Under tensor
    // parallelism g is the same on every tp rank (under SP, once gathered),
    // and so is c_proj's bias gradient: each rank keeps the whole bias.
    {
      Tensor g_all;
      const void* gin = tp.gather(g, g_all, "output.grad.all", R, C);
      Tensor dh = temp("mlp.grad", {c.rows, T, F}, c.dt);
      linear_backward(c, l, "mlp.c_proj.grad_output", dh.raw(), grads[mlp_proj_w],
                      grads[mlp_proj_b], gin, kept(k_hg), params[mlp_proj_w], R, F, C);
      g_all.reset();
      gelu_backward(c, dh.raw(), kept(k_h), static_cast<size_t>(R) * F);
      Tensor dln2 = temp("ln_2.grad", {c.rows, T, C}, c.dt);
      {
        Tensor all;  // sequence parallelism: ln_2's output gathered again, as Megatron does
        linear_backward(c, l, "mlp.c_fc.grad_output", dln2.raw(), grads[c_fc_w], grads[c_fc_b],
                        dh.raw(), tp.gather(kept(k_ln2), all, "ln_2.all", R, C), params[c_fc_w], R,
                        C, F);
      }
      dh.reset();
      Tensor shard;
      void* dl = tp.f_backward(dln2.raw(), shard, "ln_2.grad.own", R, C);
      // g becomes the gradient of x2: the residual's own path plus ln_2's.
      Tp::LnGrads ln(tp, grads[ln_2_w], grads[ln_2_b], C);
      dev.layernorm_backward(c.dt, g, ln.dw(), ln.db(), dl, kept(k_x2), f32(kept(k_mean2)),
                             f32(kept(k_rstd2)), params[ln_2_w], Rl, C, true);
      ln.finish();
    }
    // The attention branch: x2 = x + c_proj(attention(c_attn(ln_1(x)))).
    Tensor datty = temp("attn.grad", {c.rows, T, Ch}, c.dt);
    {
      Tensor g_all;
      linear_backward(c, l, "attn.c_proj.grad_output", datty.raw(), grads[attn_proj_w],
                      grads[attn_proj_b], tp.gather(g, g_all, "residual.grad.all", R, C),
                      kept(k_atty), params[attn_proj_w], R, Ch, C);
    }
    Tensor dqkv = temp("attn.qkv.grad", {c.rows, T, 3 * Ch}, c.dt);
    if (s.flash_attention) {
      Tensor delta = temp("attn.delta", {c.rows, H, T}, DType::f32);
      dev.flash_attention_backward(c.dt, dqkv.raw(), f32(delta.raw()), datty.raw(), kept(k_qkv),
                                   kept(k_atty), f32(kept(k_att)), c.rows, T, Ch, H);
    } else {
      Tensor scratch = temp("attn.scores.grad", {c.rows, H, T, T}, DType::f32);
      dev.attention_backward(c.dt, dqkv.raw(), kept(k_att), f32(scratch.raw()), datty.raw(),
                             kept(k_qkv), c.rows, T, Ch, H);
    }
    datty.reset();
    Tensor dln1 = temp("ln_1.grad", {c.rows, T, C}, c.dt);
    {
      Tensor all;
      linear_backward(c, l, "attn.c_attn.grad_output", dln1.raw(), grads[c_attn_w], grads[c_attn_b],
                      dqkv.raw(), tp.gather(kept(k_ln1), all, "ln_1.all", R, C), params[c_attn_w],
                      R, C, 3 * Ch);
    }
    dqkv.reset();
    Tensor shard;
    void* dl = tp.f_backward(dln1.raw(), shard, "ln_1.grad.own", R, C);
    // din = dx2 (the residual) + ln_1's gradient.
    void* dx = g;
    if (din) {
      dev.copy(din, g, static_cast<size_t>(Rl) * C * dtype_size(c.dt), CopyKind::device_to_device);
      dx = din;
    }
    Tp::LnGrads ln(tp, grads[ln_1_w], grads[ln_1_b], C);
    dev.layernorm_backward(c.dt, dx, ln.dw(), ln.db(), dl, x, f32(kept(k_mean1)),
                           f32(kept(k_rstd1)), params[ln_1_w], Rl, C, true);
    ln.finish();
  }

  std::unique_ptr<Dataset> dataset(const ModelLayout& m, uint64_t seed,
                                   const RunConfig& cfg) const override {
    const std::string path = corpus_path(cfg);
    return std::make_unique<TextDataset>(load_corpus(path), m.spec().seq, seed, path);
  }

  // F.cross_entropy over every position: Σ (logsumexp − logit[target]) / (divisor_rows · T).
  double loss(Allocator& alloc, const MixedPrecision& mp, const ModelLayout& m, void* dout,
              const void* output, const void* targets, int rows, int divisor_rows, Comm* tp,
              int mb) const override {
    const int T = m.spec().seq, N = rows * T;
    const VocabRows v = vocab_rows(m);
    const size_t n = static_cast<size_t>(N) * v.rows;
    AsF32 logits(alloc, "loss.logits[fp32]", output, mp.dtype(), n);
    AsF32 d = AsF32::scratch(alloc, "loss.grad[fp32]", dout, mp.dtype(), n);
    DeviceBackend& dev = alloc.backend();
    const auto* ids = static_cast<const int32_t*>(targets);
    const size_t divisor = static_cast<size_t>(divisor_rows) * T;
    const double value =
        tp && m.tensor_parallel()
            ? vocab_parallel_loss(alloc, *tp, m, d.get(), logits.get(), ids, N, divisor, mb)
            : dev.crossentropy_forward_backward(DType::f32, d.get(), logits.get(), ids, N, v.rows,
                                                divisor);
    // fp16: the gradient is scaled before it is rounded to 2 bytes (precision.h).
    if (mp.scaler().scale() != 1.0f) dev.scale(d.get(), n, mp.scaler().scale());
    d.store(dout);
    return value;
  }
  // Megatron's vocabulary-parallel cross-entropy: each rank's slice of every
  // row gives its max, its sum of exp(logit − max) and the target's logit if
  // it holds the target (kernels/transformer.h); one all-gather of those 3
  // floats a token gives every rank every slice's, and each merges them, in
  // rank order, into the row's max and sum over the whole vocabulary: the loss
  // (the same on every rank) and the softmax of its own slice, its gradient.
  static double vocab_parallel_loss(Allocator& alloc, Comm& tp, const ModelLayout& m, float* d,
                                    const float* logits, const int32_t* targets, int N,
                                    size_t divisor, int mb) {
    DeviceBackend& dev = alloc.backend();
    const VocabRows v = vocab_rows(m);
    const int P = tp.world();
    const CommMeta meta{m.num_layers() - 1, mb};
    Tensor stats = alloc.alloc("loss.slice_stats", MemCategory::temporary, {N, 3});
    Tensor all = alloc.alloc("loss.slice_stats.all", MemCategory::temporary, {P, N, 3});
    dev.crossentropy_slice_stats(f32(stats.raw()), logits, targets, N, v.rows, v.count, v.begin);
    tp.all_gather(stats.raw(), all.raw(),
                  std::vector<size_t>(static_cast<size_t>(P), static_cast<size_t>(N) * 3),
                  DType::f32, meta);
    stats.reset();
    // The merge runs on the host (a few floats a token), its buffers noted
    // with the allocator so the memory panel counts them.
    const size_t host_bytes = all.bytes() + static_cast<size_t>(N) * (2 * 4 + 4);
    alloc.note_outside(static_cast<int64_t>(host_bytes));
    std::vector<float> host(static_cast<size_t>(P) * N * 3), ms(static_cast<size_t>(N) * 2);
    std::vector<int32_t> ids(static_cast<size_t>(N));
    double value = 0;
    if (dev.holds_values()) {
      dev.copy(host.data(), all.raw(), all.bytes(), CopyKind::device_to_host);
      dev.copy(ids.data(), targets, ids.size() * sizeof(int32_t), CopyKind::device_to_host);
      value = kernels::crossentropy_merge(ms.data(), host.data(), ids.data(), N, P, divisor);
    }
    all.reset();
    Tensor merged = alloc.alloc("loss.max_sum", MemCategory::temporary, {N, 2});
    if (dev.holds_values())
      dev.copy(merged.raw(), ms.data(), merged.bytes(), CopyKind::host_to_device);
    alloc.note_outside(-static_cast<int64_t>(host_bytes));
    dev.crossentropy_slice_grad(d, logits, f32(merged.raw()), targets, N, v.rows, v.count, v.begin,
                                divisor);
    return value;
  }

  int64_t data_bytes(const ModelLayout&, const RunConfig& cfg) const override {
    return load_corpus(corpus_path(cfg))->bytes;
  }
};

}  // namespace

const ModelFamily& gpt_family() {
  static const Gpt family;
  return family;
}

}  // namespace shardlab
