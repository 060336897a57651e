// Scalar math of the GPT-2 ops shared by the CPU templates (kernels/transformer.h)
// and the CUDA kernels, so both compute the same formulas.
#pragma once
#include <cstdint>

#include "kernels/math.h"

namespace shardlab::kernels {

// nanoGPT's 1.0 / math.sqrt(k.size(-1)), a Python float: the scores' scale.
SL_HD inline double attention_scale(int head_size) {
  return 1.0 / math_detail::sqrt(static_cast<double>(head_size));
}

// LayerNorm's 1/√(var + eps) from a row's biased variance (nn.LayerNorm).
SL_HD inline double ln_rstd(double var_biased, double eps) {
  return 1.0 / math_detail::sqrt(var_biased + eps);
}

// LayerNorm's input gradient of one element of a row of C: with
// xhat = (x − mean)·rstd, y = w·xhat + b and g = dy·w,
//   dx = rstd · (g − mean_C(g) − xhat·mean_C(g·xhat))
// (the row's mean and variance depend on every x of the row: the two means).
SL_HD inline double ln_grad_input(double g, double xhat, double mean_g, double mean_g_xhat,
                                  double rstd) {
  return rstd * (g - mean_g - xhat * mean_g_xhat);
}

// Softmax's backward for one element of a row: with p = softmax(s) and
// dot = Σ_j p_j·dp_j over the row, ds = p·(dp − dot).
template <typename T>
SL_HD inline T softmax_grad(T p, T dp, T dot) {
  return p * (dp - dot);
}

// Cross-entropy's gradient of one logit: (softmax − onehot) / divisor, with
// e = exp(x − max), sum = Σ e over the row and scale = 1/divisor.
template <typename T>
SL_HD inline T crossentropy_grad(T e, T sum, bool is_target, T scale) {
  return (e / sum - (is_target ? T(1) : T(0))) * scale;
}

// The target id that marks a row without loss (F.cross_entropy's ignore_index
// as nanoGPT passes it).
constexpr int32_t kIgnoreTarget = -1;

}  // namespace shardlab::kernels
