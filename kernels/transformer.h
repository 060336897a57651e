// CPU kernels of the GPT-2 ops (nanoGPT's model.py, bias=True, dropout 0):
// token and position embedding, LayerNorm, the causal self-attention core,
// softmax cross-entropy and the residual add. Raw row-major pointers, outputs
// first, shapes in the comments. Templated on the storage type S (kernels/
// storage.h): double for the gradient tests, float, or bf16/fp16 with the math
// in fp32. GEMMs go to OpenBLAS. Linear layers (c_attn, c_proj, c_fc, the tied
// lm_head without bias) and GELU are kernels/cpu.h's.
//
// Shapes: B batch, T sequence, C channels, H heads of hs = C/H, V vocabulary,
// N rows = B·T. Token ids and targets are int32.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu.h"
#include "kernels/storage.h"
#include "kernels/transformer_math.h"

namespace shardlab::kernels {

// Row-major GEMM with explicit row strides (leading dimensions), so one head's
// q, k, v are read in place from qkv[B,T,3C] and y written into [B,T,C]:
// C[M,N] (row stride ldc) = alpha·op(A)·op(B) + beta·C, op(A) [M,K] (A stored
// [K,M] when trans_a), op(B) [K,N] (B stored [N,K] when trans_b).
void gemm_ld(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
             const float* B, int ldb, float beta, float* C, int ldc);
void gemm_ld(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
             int lda, const double* B, int ldb, double beta, double* C, int ldc);

namespace transformer_detail {

// Ids are checked before anything is written, so a bad batch changes nothing.
inline void check_ids(const char* op, const char* what, const int32_t* ids, size_t n, int limit,
                      bool allow_ignore) {
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if ((id >= 0 && id < limit) || (allow_ignore && id == kIgnoreTarget)) continue;
    throw std::out_of_range(std::string(op) + ": " + what + " " + std::to_string(id) + " at row " +
                            std::to_string(i) + " is outside the vocabulary [0, " +
                            std::to_string(limit) + ")" +
                            (allow_ignore ? " (and is not -1, the ignored target)" : ""));
  }
}

inline void check_heads(const char* op, int C, int H) {
  if (H <= 0 || C % H != 0)
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(C) +
                                " channels do not split into " + std::to_string(H) + " heads");
}

template <typename A>
inline void check_scratch(const char* op, const A* scratch) {
  if (!scratch)
    throw std::invalid_argument(std::string(op) +
                                ": needs the [B,H,T,T] scratch buffer, which is null");
}

inline void check_divisor(size_t divisor, int rows) {
  if (divisor == 0 && rows > 0)
    throw std::invalid_argument("cross-entropy: divisor 0 for " + std::to_string(rows) +
                                " rows (it counts the global batch's rows, at least 1)");
}

// A value as it reads back after being stored in S (the rounding a 2-byte
// buffer applies; the identity for float and double).
template <typename S>
inline compute_t<S> round_trip(compute_t<S> v) {
  S s;
  store(s, v);
  return load(s);
}

// Causal softmax of one row t of scores (s[0..t] live, s[t+1..T) masked):
// p[j] = exp(s[j] − max)/Σ for j ≤ t, 0 beyond. p may alias s.
template <typename A>
inline void causal_softmax_row(A* p, const A* s, int t, int T) {
  A m = s[0];
  for (int j = 1; j <= t; ++j) m = std::max(m, s[j]);
  A sum = 0;
  for (int j = 0; j <= t; ++j) {
    const A e = std::exp(s[j] - m);
    p[j] = e;
    sum += e;
  }
  const A inv = A(1) / sum;
  for (int j = 0; j <= t; ++j) p[j] *= inv;
  for (int j = t + 1; j < T; ++j) p[j] = A(0);
}

// Softmax's backward over one causal row: ds[j] = p[j]·(dp[j] − Σ p·dp) for
// j ≤ t, 0 beyond. ds may alias dp.
template <typename A, typename P>
inline void causal_softmax_backward_row(A* ds, const P* p, const A* dp, int t, int T) {
  A dot = 0;
  for (int j = 0; j <= t; ++j) dot += load(p[j]) * dp[j];
  for (int j = 0; j <= t; ++j) ds[j] = softmax_grad<A>(load(p[j]), dp[j], dot);
  for (int j = t + 1; j < T; ++j) ds[j] = A(0);
}

// rows×cols block with row stride ld, between storage and a dense compute buffer.
template <typename S>
inline void gather(compute_t<S>* dst, const S* src, int rows, int cols, int ld) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      dst[static_cast<size_t>(r) * cols + c] = load(src[static_cast<size_t>(r) * ld + c]);
}
template <typename S>
inline void scatter(S* dst, const compute_t<S>* src, int rows, int cols, int ld) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      store(dst[static_cast<size_t>(r) * ld + c], src[static_cast<size_t>(r) * cols + c]);
}

}  // namespace transformer_detail

// ---- embedding

// out[B,T,C] = wte[tokens[b,t]] + wpe[t]  (nanoGPT: tok_emb + pos_emb)
// tokens[B,T] in [0,V) (else std::out_of_range, nothing written); wte[V,C]; wpe[≥T,C].
// A vocabulary slice (Megatron's vocabulary-parallel embedding): wte holds the
// rows of ids [v_begin, v_begin + v_count) only (v_count −1: all V); other
// ids add nothing here (another tensor-parallel rank holds them). wpe may be
// null: no position embedding (added once, by one of the ranks).
template <typename S>
void embedding_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int B, int T,
                       int C, int V, int v_begin = 0, int v_count = -1) {
  const size_t N = static_cast<size_t>(B) * T, Cs = static_cast<size_t>(C);
  transformer_detail::check_ids("embedding", "token id", tokens, N, V, false);
  if (v_count < 0) v_count = V;
  for (size_t n = 0; n < N; ++n) {
    const int local = tokens[n] - v_begin;
    const S* e = local >= 0 && local < v_count ? wte + static_cast<size_t>(local) * Cs : nullptr;
    const S* p = wpe ? wpe + (n % static_cast<size_t>(T)) * Cs : nullptr;
    S* o = out + n * Cs;
    for (size_t c = 0; c < Cs; ++c)
      store(o[c], (e ? load(e[c]) : compute_t<S>(0)) + (p ? load(p[c]) : compute_t<S>(0)));
  }
}

// dwte[v] += Σ_{tokens[b,t] = v} dout[b,t] ; dwpe[t] += Σ_b dout[b,t]
// (dout [B,T,C]; dwte [V,C], dwpe [≥T,C]; either may be null, then skipped).
// Every sum starts from the stored gradient, adds the rows in ascending
// position in compute_t<S> and is rounded to storage once: the order the CUDA
// kernel uses too, so both give the same bits. Bad ids throw as in forward.
// A vocabulary slice (v_begin, v_count as in forward): dwte holds its rows
// only; other ids' rows are another rank's.
template <typename S>
void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tokens, int B, int T, int C,
                        int V, int v_begin = 0, int v_count = -1) {
  using A = compute_t<S>;
  const size_t N = static_cast<size_t>(B) * T, Cs = static_cast<size_t>(C);
  transformer_detail::check_ids("embedding backward", "token id", tokens, N, V, false);
  if (v_count < 0) v_count = V;
  std::vector<A> acc(Cs);
  if (dwte) {
    // The positions of each token of the slice, ascending (a counting sort).
    const size_t Vs = static_cast<size_t>(v_count);
    auto held = [&](size_t n) { return tokens[n] >= v_begin && tokens[n] - v_begin < v_count; };
    auto row = [&](size_t n) { return static_cast<size_t>(tokens[n] - v_begin); };
    std::vector<size_t> start(Vs + 1, 0), order(N);
    for (size_t n = 0; n < N; ++n)
      if (held(n)) ++start[row(n) + 1];
    for (size_t v = 0; v < Vs; ++v) start[v + 1] += start[v];
    std::vector<size_t> next(start.begin(), start.end() - 1);
    for (size_t n = 0; n < N; ++n)
      if (held(n)) order[next[row(n)]++] = n;
    for (size_t v = 0; v < Vs; ++v) {
      if (start[v] == start[v + 1]) continue;
      S* g = dwte + v * Cs;
      for (size_t c = 0; c < Cs; ++c) acc[c] = load(g[c]);
      for (size_t k = start[v]; k < start[v + 1]; ++k) {
        const S* d = dout + order[k] * Cs;
        for (size_t c = 0; c < Cs; ++c) acc[c] += load(d[c]);
      }
      for (size_t c = 0; c < Cs; ++c) store(g[c], acc[c]);
    }
  }
  if (dwpe) {
    for (size_t t = 0; t < static_cast<size_t>(T); ++t) {
      S* g = dwpe + t * Cs;
      for (size_t c = 0; c < Cs; ++c) acc[c] = load(g[c]);
      for (size_t b = 0; b < static_cast<size_t>(B); ++b) {
        const S* d = dout + (b * static_cast<size_t>(T) + t) * Cs;
        for (size_t c = 0; c < Cs; ++c) acc[c] += load(d[c]);
      }
      for (size_t c = 0; c < Cs; ++c) store(g[c], acc[c]);
    }
  }
}

// ---- LayerNorm

// nn.LayerNorm(cols, eps) over each row of x[rows,cols]: the row's mean and
// biased variance (summed in double, two passes), rstd = 1/√(var + eps),
// xhat = (x − mean)·rstd, y = xhat·weight + bias. Writes mean[rows] and
// rstd[rows] for backward (xhat is recomputed there from x). y may alias x.
template <typename S>
void layernorm_forward(S* y, compute_t<S>* mean, compute_t<S>* rstd, const S* x, const S* weight,
                       const S* bias, int rows, int cols, double eps) {
  using A = compute_t<S>;
  const size_t C = static_cast<size_t>(cols);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const S* xr = x + r * C;
    double sum = 0;
    for (size_t c = 0; c < C; ++c) sum += static_cast<double>(load(xr[c]));
    const double m = sum / cols;
    double var = 0;
    for (size_t c = 0; c < C; ++c) {
      const double d = static_cast<double>(load(xr[c])) - m;
      var += d * d;
    }
    const A mr = static_cast<A>(m);
    const A rr = static_cast<A>(ln_rstd(var / cols, eps));
    mean[r] = mr;
    rstd[r] = rr;
    S* yr = y + r * C;
    for (size_t c = 0; c < C; ++c) {
      const A xh = (load(xr[c]) - mr) * rr;
      store(yr[c], xh * load(weight[c]) + load(bias[c]));
    }
  }
}

// LayerNorm's backward over the rows forward saw (kernels/transformer_math.h
// ln_grad_input): dweight[c] += Σ_rows dy·xhat, dbias[c] += Σ_rows dy, and
// dx = rstd·(g − mean(g) − xhat·mean(g·xhat)) with g = dy·weight, which
// overwrites dx, or is added to it when accumulate (the residual stream's
// gradient, which the block's input also receives). Sums in double; the
// parameter gradients are rounded to storage once. dx may alias dy.
template <typename S>
void layernorm_backward(S* dx, S* dweight, S* dbias, const S* dy, const S* x,
                        const compute_t<S>* mean, const compute_t<S>* rstd, const S* weight,
                        int rows, int cols, bool accumulate) {
  using A = compute_t<S>;
  const size_t C = static_cast<size_t>(cols);
  std::vector<double> sum_dy(C, 0.0), sum_dy_xhat(C, 0.0);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const S* xr = x + r * C;
    const S* dyr = dy + r * C;
    const A mr = mean[r], rr = rstd[r];
    double mean_g = 0, mean_g_xhat = 0;
    for (size_t c = 0; c < C; ++c) {
      const A xh = (load(xr[c]) - mr) * rr;
      const double d = static_cast<double>(load(dyr[c]));
      const double g = d * static_cast<double>(load(weight[c]));
      sum_dy[c] += d;
      sum_dy_xhat[c] += d * static_cast<double>(xh);
      mean_g += g;
      mean_g_xhat += g * static_cast<double>(xh);
    }
    mean_g /= cols;
    mean_g_xhat /= cols;
    S* dxr = dx + r * C;
    for (size_t c = 0; c < C; ++c) {
      const A xh = (load(xr[c]) - mr) * rr;
      const double g = static_cast<double>(load(dyr[c])) * static_cast<double>(load(weight[c]));
      const A v = static_cast<A>(
          ln_grad_input(g, static_cast<double>(xh), mean_g, mean_g_xhat, static_cast<double>(rr)));
      store(dxr[c], accumulate ? load(dxr[c]) + v : v);
    }
  }
  for (size_t c = 0; c < C; ++c) {
    store(dweight[c], load(dweight[c]) + static_cast<A>(sum_dy_xhat[c]));
    store(dbias[c], load(dbias[c]) + static_cast<A>(sum_dy[c]));
  }
}

// ---- causal self-attention (the core between c_attn and c_proj)

// qkv[B,T,3C] is c_attn's output, q | k | v along the channels, each split
// into H heads of hs channels. Per batch b and head h:
//   att = softmax(mask(q·kᵀ/√hs))  [T,T], 0 above the diagonal (causal)
//   y   = att·v                    [T,hs], merged into y[B,T,C] at the head's channels
// att[B,H,T,T] keeps the probabilities for backward. scratch[B,H,T,T] holds
// the scores in compute_t<S> when S is a 2-byte format (then the
// probabilities are rounded to S before att·v, as the GPU's GEMM reads them
// from att); unused for float and double, may be null there.
template <typename S>
void attention_forward(S* y, S* att, const S* qkv, compute_t<S>* scratch, int B, int T, int C,
                       int H) {
  using A = compute_t<S>;
  namespace d = transformer_detail;
  d::check_heads("attention", C, H);
  const int hs = C / H, ld = 3 * C;
  const A scale = static_cast<A>(attention_scale(hs));
  const size_t TT = static_cast<size_t>(T) * T;
  constexpr bool direct = std::is_same_v<S, A>;
  std::vector<A> q, k, v, o;
  if constexpr (!direct) {
    d::check_scratch("attention", scratch);
    q.resize(static_cast<size_t>(T) * hs);
    k.resize(q.size());
    v.resize(q.size());
    o.resize(q.size());
  }
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const S* qs = qkv + static_cast<size_t>(b) * T * ld + static_cast<size_t>(h) * hs;
      const S* ks = qs + C;
      const S* vs = qs + 2 * C;
      S* ab = att + (static_cast<size_t>(b) * H + h) * TT;
      S* yb = y + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * hs;
      if constexpr (direct) {
        gemm_ld(false, true, T, T, hs, scale, qs, ld, ks, ld, A(0), ab, T);
        for (int t = 0; t < T; ++t) d::causal_softmax_row(ab + t * T, ab + t * T, t, T);
        gemm_ld(false, false, T, hs, T, A(1), ab, T, vs, ld, A(0), yb, C);
      } else {
        A* sb = scratch + (static_cast<size_t>(b) * H + h) * TT;
        d::gather(q.data(), qs, T, hs, ld);
        d::gather(k.data(), ks, T, hs, ld);
        d::gather(v.data(), vs, T, hs, ld);
        gemm_ld(false, true, T, T, hs, scale, q.data(), hs, k.data(), hs, A(0), sb, T);
        for (int t = 0; t < T; ++t) d::causal_softmax_row(sb + t * T, sb + t * T, t, T);
        for (size_t i = 0; i < TT; ++i) {
          store(ab[i], sb[i]);
          sb[i] = load(ab[i]);
        }
        gemm_ld(false, false, T, hs, T, A(1), sb, T, v.data(), hs, A(0), o.data(), hs);
        d::scatter(yb, o.data(), T, hs, C);
      }
    }
}

// The attention core's backward: dqkv[B,T,3C] (overwritten) from dy[B,T,C]
// and forward's att and qkv. Per (b,h), with P = att:
//   dv = Pᵀ·dy ; dP = dy·vᵀ ; dS = P ⊙ (dP − rowsum(P ⊙ dP)) ;
//   dq = dS·k/√hs ; dk = dSᵀ·q/√hs
// scratch[B,H,T,T] (compute_t<S>) holds dP, then dS. For a 2-byte S, dS is
// rounded to S before the two GEMMs that read it (the GPU stores it over
// att). att is spent: a backend may overwrite it (the CUDA one does for 2-byte S).
template <typename S>
void attention_backward(S* dqkv, S* att, compute_t<S>* scratch, const S* dy, const S* qkv, int B,
                        int T, int C, int H) {
  using A = compute_t<S>;
  namespace d = transformer_detail;
  d::check_heads("attention backward", C, H);
  d::check_scratch("attention backward", scratch);
  const int hs = C / H, ld = 3 * C;
  const A scale = static_cast<A>(attention_scale(hs));
  const size_t TT = static_cast<size_t>(T) * T;
  constexpr bool direct = std::is_same_v<S, A>;
  std::vector<A> q, k, v, g, o, p;
  if constexpr (!direct) {
    q.resize(static_cast<size_t>(T) * hs);
    k.resize(q.size());
    v.resize(q.size());
    g.resize(q.size());
    o.resize(q.size());
    p.resize(TT);
  }
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const size_t head = static_cast<size_t>(b) * T * ld + static_cast<size_t>(h) * hs;
      const S* qs = qkv + head;
      const S* ks = qs + C;
      const S* vs = qs + 2 * C;
      S* dqs = dqkv + head;
      S* dks = dqs + C;
      S* dvs = dqs + 2 * C;
      const S* ab = att + (static_cast<size_t>(b) * H + h) * TT;
      const S* dyb = dy + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * hs;
      A* ds = scratch + (static_cast<size_t>(b) * H + h) * TT;
      if constexpr (direct) {
        gemm_ld(false, true, T, T, hs, A(1), dyb, C, vs, ld, A(0), ds, T);
        gemm_ld(true, false, T, hs, T, A(1), ab, T, dyb, C, A(0), dvs, ld);
        for (int t = 0; t < T; ++t)
          d::causal_softmax_backward_row(ds + t * T, ab + t * T, ds + t * T, t, T);
        gemm_ld(false, false, T, hs, T, scale, ds, T, ks, ld, A(0), dqs, ld);
        gemm_ld(true, false, T, hs, T, scale, ds, T, qs, ld, A(0), dks, ld);
      } else {
        d::gather(q.data(), qs, T, hs, ld);
        d::gather(k.data(), ks, T, hs, ld);
        d::gather(v.data(), vs, T, hs, ld);
        d::gather(g.data(), dyb, T, hs, C);
        for (size_t i = 0; i < TT; ++i) p[i] = load(ab[i]);
        gemm_ld(false, true, T, T, hs, A(1), g.data(), hs, v.data(), hs, A(0), ds, T);
        gemm_ld(true, false, T, hs, T, A(1), p.data(), T, g.data(), hs, A(0), o.data(), hs);
        d::scatter(dvs, o.data(), T, hs, ld);
        for (int t = 0; t < T; ++t)
          d::causal_softmax_backward_row(ds + t * T, p.data() + t * T, ds + t * T, t, T);
        for (size_t i = 0; i < TT; ++i) ds[i] = d::round_trip<S>(ds[i]);
        gemm_ld(false, false, T, hs, T, scale, ds, T, k.data(), hs, A(0), o.data(), hs);
        d::scatter(dqs, o.data(), T, hs, ld);
        gemm_ld(true, false, T, hs, T, scale, ds, T, q.data(), hs, A(0), o.data(), hs);
        d::scatter(dks, o.data(), T, hs, ld);
      }
    }
}

// ---- softmax cross-entropy

// F.cross_entropy(logits, targets, ignore_index=-1) over a global batch of
// `divisor` rows, of which logits[rows,V] are one slice: returns
// Σ_rows (logsumexp(logits[r]) − logits[r, targets[r]]) / divisor and writes
// dlogits[rows,V] = (softmax(logits[r]) − onehot(targets[r])) / divisor, so
// slices' losses and gradients add up to the whole. Stable: the row's max is
// subtracted before exp. A target of −1 adds no loss and a zero gradient row
// (the caller leaves it out of divisor); others outside [0,V) throw
// std::out_of_range before anything is written. dlogits may be null, or alias
// logits. Row losses are summed in double.
template <typename S>
double crossentropy_forward_backward(S* dlogits, const S* logits, const int32_t* targets, int rows,
                                     int V, size_t divisor) {
  using A = compute_t<S>;
  const size_t Vs = static_cast<size_t>(V);
  transformer_detail::check_divisor(divisor, rows);
  transformer_detail::check_ids("cross-entropy", "target", targets, static_cast<size_t>(rows), V,
                                true);
  const A scale = A(1) / static_cast<A>(divisor);
  double total = 0;
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const S* x = logits + r * Vs;
    const int32_t t = targets[r];
    if (t == kIgnoreTarget) {
      if (dlogits)
        for (size_t c = 0; c < Vs; ++c) store(dlogits[r * Vs + c], A(0));
      continue;
    }
    A m = load(x[0]);
    for (size_t c = 1; c < Vs; ++c) m = std::max(m, load(x[c]));
    A sum = 0;
    for (size_t c = 0; c < Vs; ++c) sum += std::exp(load(x[c]) - m);
    total += static_cast<double>(std::log(sum) - (load(x[t]) - m));
    if (dlogits) {
      S* dx = dlogits + r * Vs;
      for (size_t c = 0; c < Vs; ++c)
        store(dx[c], crossentropy_grad<A>(std::exp(load(x[c]) - m), sum,
                                          c == static_cast<size_t>(t), scale));
    }
  }
  return total / static_cast<double>(divisor);
}

// Megatron's vocabulary-parallel cross-entropy, one tensor-parallel rank's
// share (fp32). logits [rows, cols] hold the logits of ids [v_begin, v_begin +
// valid) in their first `valid` columns; the rest is padding (the vocabulary
// padded to a multiple of the ranks), left out. Per row writes stats[3r..3r+2]
// = {this slice's max, Σ exp(logit − that max), the target's logit if this
// slice holds it, else 0}; a slice of padding only gives {−inf, 0, 0}. The
// ranks' stats merge into each row's max M and Σ exp(logit − M) over the whole
// vocabulary (crossentropy_merge).
inline void crossentropy_slice_stats(float* stats, const float* logits, const int32_t* targets,
                                     int rows, int cols, int valid, int v_begin) {
  const size_t Cs = static_cast<size_t>(cols);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const float* x = logits + r * Cs;
    float m = -std::numeric_limits<float>::infinity();
    for (int c = 0; c < valid; ++c) m = std::max(m, x[c]);
    float sum = 0;
    for (int c = 0; c < valid; ++c) sum += std::exp(x[c] - m);
    const int local = targets[r] - v_begin;
    stats[3 * r] = m;
    stats[3 * r + 1] = valid > 0 ? sum : 0.0f;
    stats[3 * r + 2] = targets[r] >= 0 && local >= 0 && local < valid ? x[local] : 0.0f;
  }
}

// The whole vocabulary's max M and Σ exp(logit − M) of each row, from the
// stats of every slice (`slices` blocks of rows·3, rank order, as an
// all-gather lays them out), written to ms[2r], ms[2r+1]; returns Σ over the
// rows whose target is not −1 of (log Σ − (target logit − M)) / divisor, the
// loss crossentropy_forward_backward returns. Every rank merges the same
// stats in the same order, so all hold the same bits.
inline double crossentropy_merge(float* ms, const float* stats, const int32_t* targets, int rows,
                                 int slices, size_t divisor) {
  transformer_detail::check_divisor(divisor, rows);
  const size_t block = static_cast<size_t>(rows) * 3;
  double total = 0;
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    float M = -std::numeric_limits<float>::infinity(), target = 0;
    for (int k = 0; k < slices; ++k) M = std::max(M, stats[k * block + 3 * r]);
    float sum = 0;
    for (int k = 0; k < slices; ++k) {
      const float* s = stats + k * block + 3 * r;
      if (s[1] > 0) sum += s[1] * std::exp(s[0] - M);
      target += s[2];  // one slice holds it, the others add 0
    }
    ms[2 * r] = M;
    ms[2 * r + 1] = sum;
    if (targets[r] != kIgnoreTarget) total += static_cast<double>(std::log(sum) - (target - M));
  }
  return total / static_cast<double>(divisor);
}

// dlogits [rows, cols] = (softmax − onehot(target)) / divisor in the slice's
// valid columns, from each row's merged M and Σ (ms); 0 in the padding and in
// rows whose target is −1. May alias logits.
inline void crossentropy_slice_grad(float* dlogits, const float* logits, const float* ms,
                                    const int32_t* targets, int rows, int cols, int valid,
                                    int v_begin, size_t divisor) {
  transformer_detail::check_divisor(divisor, rows);
  const size_t Cs = static_cast<size_t>(cols);
  const float scale = 1.0f / static_cast<float>(divisor);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const float* x = logits + r * Cs;
    float* d = dlogits + r * Cs;
    const bool ignored = targets[r] == kIgnoreTarget;
    const int local = targets[r] - v_begin;
    for (int c = 0; c < cols; ++c)
      d[c] = ignored || c >= valid ? 0.0f
                                   : crossentropy_grad<float>(std::exp(x[c] - ms[2 * r]),
                                                              ms[2 * r + 1], c == local, scale);
  }
}

// ---- residual

// out[n] = a[n] + b[n] (x + attn(ln_1(x)), x + mlp(ln_2(x))); out may alias a
// or b. Its backward is the identity into both branches: the gradient of out
// is added to the branch's input gradient (DeviceBackend::add, or
// layernorm_backward with accumulate).
template <typename S>
void residual_forward(S* out, const S* a, const S* b, size_t n) {
  for (size_t i = 0; i < n; ++i) store(out[i], load(a[i]) + load(b[i]));
}

// The float and 2-byte instances are compiled once in transformer.cpp with the
// kernels' optimisation flags; double ones (tests) are instantiated where used.
#define SHARDLAB_TRANSFORMER_KERNELS(EXTERN, S)                                                    \
  EXTERN template void embedding_forward<S>(S*, const int32_t*, const S*, const S*, int, int, int, \
                                            int, int, int);                                        \
  EXTERN template void embedding_backward<S>(S*, S*, const S*, const int32_t*, int, int, int, int, \
                                             int, int);                                            \
  EXTERN template void layernorm_forward<S>(S*, compute_t<S>*, compute_t<S>*, const S*, const S*,  \
                                            const S*, int, int, double);                           \
  EXTERN template void layernorm_backward<S>(S*, S*, S*, const S*, const S*, const compute_t<S>*,  \
                                             const compute_t<S>*, const S*, int, int, bool);       \
  EXTERN template void attention_forward<S>(S*, S*, const S*, compute_t<S>*, int, int, int, int);  \
  EXTERN template void attention_backward<S>(S*, S*, compute_t<S>*, const S*, const S*, int, int,  \
                                             int, int);                                            \
  EXTERN template double crossentropy_forward_backward<S>(S*, const S*, const int32_t*, int, int,  \
                                                          size_t);                                 \
  EXTERN template void residual_forward<S>(S*, const S*, const S*, size_t);

SHARDLAB_TRANSFORMER_KERNELS(extern, float)
SHARDLAB_TRANSFORMER_KERNELS(extern, bf16)
SHARDLAB_TRANSFORMER_KERNELS(extern, fp16)

}  // namespace shardlab::kernels
