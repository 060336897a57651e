// Fused causal attention on the CPU (FlashAttention-2, Dao 2023): the same
// y = softmax(mask(q·kᵀ/√hs))·v as kernels/transformer.h's attention_forward,
// computed tile by tile with an online softmax, so no [T,T] matrix is ever
// stored; backward recomputes each tile's probabilities from the per-row
// logsumexp forward saved. The CUDA kernel (kernels/cuda/flash_attention.cu)
// runs the same algorithm; this one is its reference and makes
// `--attention flash` (and the memory it saves) available on any machine.
//
// Shapes as in transformer.h: qkv[B,T,3C] (q | k | v, H heads of hs = C/H),
// y[B,T,C]; lse[B,H,T] and delta[B,H,T] in compute_t<S> (fp32 for the 2-byte
// formats). All math in compute_t<S>: 2-byte inputs are upcast once per head,
// the probabilities are never rounded to S, and every output is rounded once.
#pragma once
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/transformer.h"

namespace shardlab::kernels {

// Rows of q (and of k, v) per tile. 32 keeps a tile's scores (32×32) and a
// head's rows (32×hs) in L1/L2 for the small models here, and T = 64 already
// spans several tiles (the tests use smaller tiles to make more of them).
constexpr int kFlashTile = 32;

// y[B,T,C] = causal attention of qkv[B,T,3C], as attention_forward; writes
// lse[B,H,T] = m + ln ℓ per row (m the row's largest scaled score, ℓ = Σ
// exp(score − m) over the keys it sees), all backward needs besides qkv and y.
//
// Per (b, h) and query tile Qi (rows i0 … i0+rows−1), over key tiles Kj up to
// the tile's last row (causal: later tiles are all masked):
//   S   = Qi·Kjᵀ/√hs                      (rows × cols, keys beyond a row masked)
//   m'  = max(m, rowmax S);  P = exp(S − m')
//   ℓ   = ℓ·exp(m − m') + rowsum P;  acc = acc·exp(m − m') + P·Vj;  m = m'
// then y = acc/ℓ. `tile` is the tile height (tests pass small ones).
template <typename S>
void flash_attention_forward(S* y, compute_t<S>* lse, const S* qkv, int B, int T, int C, int H,
                             int tile = kFlashTile) {
  using A = compute_t<S>;
  namespace d = transformer_detail;
  d::check_heads("flash attention", C, H);
  if (tile < 1) tile = 1;
  const int hs = C / H, ld = 3 * C;
  const A scale = static_cast<A>(attention_scale(hs));
  const size_t rows_hs = static_cast<size_t>(T) * hs;
  std::vector<A> q(rows_hs), k(rows_hs), v(rows_hs);
  std::vector<A> s(static_cast<size_t>(tile) * tile), acc(static_cast<size_t>(tile) * hs);
  std::vector<A> m(tile), l(tile);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const S* qs = qkv + static_cast<size_t>(b) * T * ld + static_cast<size_t>(h) * hs;
      d::gather(q.data(), qs, T, hs, ld);
      d::gather(k.data(), qs + C, T, hs, ld);
      d::gather(v.data(), qs + 2 * C, T, hs, ld);
      S* yb = y + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * hs;
      A* lb = lse + (static_cast<size_t>(b) * H + h) * T;
      for (int i0 = 0; i0 < T; i0 += tile) {
        const int rows = std::min(tile, T - i0);
        std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
        std::fill(l.begin(), l.end(), A(0));
        std::fill(acc.begin(), acc.end(), A(0));
        for (int j0 = 0; j0 < i0 + rows; j0 += tile) {
          const int cols = std::min(tile, T - j0);
          gemm_ld(false, true, rows, cols, hs, scale, q.data() + static_cast<size_t>(i0) * hs, hs,
                  k.data() + static_cast<size_t>(j0) * hs, hs, A(0), s.data(), cols);
          for (int r = 0; r < rows; ++r) {
            A* sr = s.data() + static_cast<size_t>(r) * cols;
            // Keys j0 … j0+live−1 are at or before this row's position.
            const int live = std::min(cols, i0 + r - j0 + 1);
            if (live <= 0) {  // the whole tile lies in this row's future
              std::fill(sr, sr + cols, A(0));
              continue;
            }
            A mt = m[r];
            for (int c = 0; c < live; ++c) mt = std::max(mt, sr[c]);
            // m is −inf only before the first tile, whose key 0 every row sees.
            const A corr = std::exp(m[r] - mt);
            A sum = 0;
            for (int c = 0; c < live; ++c) {
              sr[c] = std::exp(sr[c] - mt);
              sum += sr[c];
            }
            for (int c = live; c < cols; ++c) sr[c] = A(0);
            l[r] = l[r] * corr + sum;
            m[r] = mt;
            A* ar = acc.data() + static_cast<size_t>(r) * hs;
            for (int e = 0; e < hs; ++e) ar[e] *= corr;
          }
          gemm_ld(false, false, rows, hs, cols, A(1), s.data(), cols,
                  v.data() + static_cast<size_t>(j0) * hs, hs, A(1), acc.data(), hs);
        }
        for (int r = 0; r < rows; ++r) {
          const A inv = A(1) / l[r];
          S* yr = yb + static_cast<size_t>(i0 + r) * C;
          const A* ar = acc.data() + static_cast<size_t>(r) * hs;
          for (int e = 0; e < hs; ++e) store(yr[e], ar[e] * inv);
          lb[i0 + r] = m[r] + std::log(l[r]);
        }
      }
    }
}

// dqkv[B,T,3C] (overwritten) from dy[B,T,C] and forward's qkv, y and lse, with
// no [T,T] matrix: delta[B,H,T] (workspace, written) = rowsum(dy ⊙ y), which
// equals Σ_j P·dP of the row (y = P·v), so the softmax's backward needs no
// row of P at once. Per (b, h), per key tile Kj and every query tile Qi that
// sees it:
//   P  = exp(Qi·Kjᵀ/√hs − lse)  (masked)   dVj += Pᵀ·dYi
//   dP = dYi·Vjᵀ ;  dS = P ⊙ (dP − delta)
//   dQi += dS·Kj/√hs ;  dKj += dSᵀ·Qi/√hs
// q, k, v, dy and y are upcast per head; dq, dk, dv accumulate in
// compute_t<S> and are rounded once.
template <typename S>
void flash_attention_backward(S* dqkv, compute_t<S>* delta, const S* dy, const S* qkv, const S* y,
                              const compute_t<S>* lse, int B, int T, int C, int H,
                              int tile = kFlashTile) {
  using A = compute_t<S>;
  namespace d = transformer_detail;
  d::check_heads("flash attention backward", C, H);
  if (tile < 1) tile = 1;
  const int hs = C / H, ld = 3 * C;
  const A scale = static_cast<A>(attention_scale(hs));
  const size_t rows_hs = static_cast<size_t>(T) * hs;
  std::vector<A> q(rows_hs), k(rows_hs), v(rows_hs), g(rows_hs), o(rows_hs);
  std::vector<A> dq(rows_hs), dk(rows_hs), dv(rows_hs);
  const size_t tt = static_cast<size_t>(tile) * tile;
  std::vector<A> p(tt), ds(tt);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const size_t head = static_cast<size_t>(b) * T * ld + static_cast<size_t>(h) * hs;
      const size_t yhead = static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * hs;
      d::gather(q.data(), qkv + head, T, hs, ld);
      d::gather(k.data(), qkv + head + C, T, hs, ld);
      d::gather(v.data(), qkv + head + 2 * C, T, hs, ld);
      d::gather(g.data(), dy + yhead, T, hs, C);
      d::gather(o.data(), y + yhead, T, hs, C);
      const A* lb = lse + (static_cast<size_t>(b) * H + h) * T;
      A* db = delta + (static_cast<size_t>(b) * H + h) * T;
      for (int t = 0; t < T; ++t) {
        A sum = 0;
        for (int e = 0; e < hs; ++e)
          sum += g[static_cast<size_t>(t) * hs + e] * o[static_cast<size_t>(t) * hs + e];
        db[t] = sum;
      }
      std::fill(dq.begin(), dq.end(), A(0));
      std::fill(dk.begin(), dk.end(), A(0));
      std::fill(dv.begin(), dv.end(), A(0));
      for (int j0 = 0; j0 < T; j0 += tile) {
        const int cols = std::min(tile, T - j0);
        const A* kj = k.data() + static_cast<size_t>(j0) * hs;
        const A* vj = v.data() + static_cast<size_t>(j0) * hs;
        // Query tiles before this key tile see none of its keys.
        for (int i0 = j0; i0 < T; i0 += tile) {
          const int rows = std::min(tile, T - i0);
          const A* qi = q.data() + static_cast<size_t>(i0) * hs;
          const A* gi = g.data() + static_cast<size_t>(i0) * hs;
          gemm_ld(false, true, rows, cols, hs, scale, qi, hs, kj, hs, A(0), p.data(), cols);
          gemm_ld(false, true, rows, cols, hs, A(1), gi, hs, vj, hs, A(0), ds.data(), cols);
          for (int r = 0; r < rows; ++r) {
            const int live = std::max(0, std::min(cols, i0 + r - j0 + 1));
            A* pr = p.data() + static_cast<size_t>(r) * cols;
            A* dsr = ds.data() + static_cast<size_t>(r) * cols;
            const A lr = lb[i0 + r], dr = db[i0 + r];
            for (int c = 0; c < live; ++c) {
              pr[c] = std::exp(pr[c] - lr);
              dsr[c] = softmax_grad<A>(pr[c], dsr[c], dr);
            }
            for (int c = live; c < cols; ++c) pr[c] = dsr[c] = A(0);
          }
          gemm_ld(true, false, cols, hs, rows, A(1), p.data(), cols, gi, hs, A(1),
                  dv.data() + static_cast<size_t>(j0) * hs, hs);
          gemm_ld(false, false, rows, hs, cols, scale, ds.data(), cols, kj, hs, A(1),
                  dq.data() + static_cast<size_t>(i0) * hs, hs);
          gemm_ld(true, false, cols, hs, rows, scale, ds.data(), cols, qi, hs, A(1),
                  dk.data() + static_cast<size_t>(j0) * hs, hs);
        }
      }
      d::scatter(dqkv + head, dq.data(), T, hs, ld);
      d::scatter(dqkv + head + C, dk.data(), T, hs, ld);
      d::scatter(dqkv + head + 2 * C, dv.data(), T, hs, ld);
    }
}

// The float and 2-byte instances are compiled once in flash_attention.cpp with
// the kernels' optimisation flags; double ones (tests) are instantiated where used.
#define SHARDLAB_FLASH_ATTENTION_KERNELS(EXTERN, S)                                                \
  EXTERN template void flash_attention_forward<S>(S*, compute_t<S>*, const S*, int, int, int, int, \
                                                  int);                                            \
  EXTERN template void flash_attention_backward<S>(S*, compute_t<S>*, const S*, const S*,          \
                                                   const S*, const compute_t<S>*, int, int, int,   \
                                                   int, int);

SHARDLAB_FLASH_ATTENTION_KERNELS(extern, float)
SHARDLAB_FLASH_ATTENTION_KERNELS(extern, bf16)
SHARDLAB_FLASH_ATTENTION_KERNELS(extern, fp16)

}  // namespace shardlab::kernels
