// CPU kernels: the math of every layer and optimizer, on raw row-major
// pointers. Templated on the scalar type so tests can check gradients in double;
// GEMM goes to OpenBLAS. Shapes are in the comments, outputs come first.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/math.h"
#include "kernels/params.h"

namespace shardlab::kernels {

// C[M,N] = alpha * op(A) * op(B) + beta * C, all row-major.
// op(A) is [M,K] (A stored [K,M] when trans_a), op(B) is [K,N] (B stored [N,K] when trans_b).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
          const float* B, float beta, float* C);
void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
          const double* B, double beta, double* C);

// Call once per rank thread: BLAS must not spawn its own threads under ours.
void set_single_threaded_blas();

// out[rows,out_dim] = in[rows,in_dim] · weight[out_dim,in_dim]ᵀ + bias[out_dim]  (nn.Linear)
// bias may be null: no bias (GPT's lm_head, logits = x · wteᵀ).
template <typename T>
void linear_forward(T* out, const T* in, const T* weight, const T* bias, int rows, int in_dim,
                    int out_dim) {
  if (!bias) return gemm(false, true, rows, out_dim, in_dim, T(1), in, weight, T(0), out);
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out_dim; ++o) out[static_cast<size_t>(r) * out_dim + o] = bias[o];
  gemm(false, true, rows, out_dim, in_dim, T(1), in, weight, T(1), out);
}

// dweight[out,in] += doutᵀ · in ; dbias[out] += Σ_rows dout ; din[rows,in] = dout · weight
// (parameter gradients accumulate; din is overwritten and may be null for the first layer;
// dbias is null for a layer without bias; dweight is null in a zero-bubble B, which
// leaves the weight gradient for a later W).
template <typename T>
void linear_backward(T* din, T* dweight, T* dbias, const T* dout, const T* in, const T* weight,
                     int rows, int in_dim, int out_dim) {
  if (dweight) gemm(true, false, out_dim, in_dim, rows, T(1), dout, in, T(1), dweight);
  if (dbias)
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < out_dim; ++o) dbias[o] += dout[static_cast<size_t>(r) * out_dim + o];
  if (din) gemm(false, false, rows, in_dim, out_dim, T(1), dout, weight, T(0), din);
}

// gelu_scalar and gelu_grad_scalar (exact-erf GELU) come from kernels/math.h.

// out[n] = gelu(in[n])
template <typename T>
void gelu_forward(T* out, const T* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gelu_scalar(in[i]);
}

// din[n] = dout[n] * gelu'(in[n]); din may alias dout.
template <typename T>
void gelu_backward(T* din, const T* dout, const T* in, size_t n) {
  for (size_t i = 0; i < n; ++i) din[i] = dout[i] * gelu_grad_scalar(in[i]);
}

// BatchNorm1d in training mode over x[rows,cols] (features are columns, rows ≥ 2):
// per feature the batch mean and biased variance, invstd = 1/√(var + eps),
// xhat = (x − mean)·invstd, y = weight·xhat + bias. Writes xhat[rows,cols] and
// invstd[cols], which backward reads; y may alias x. running_mean/var[cols]
// follow PyTorch's update (kernels/math.h) unless null: a recomputed forward
// must not count the same micro-batch twice.
template <typename T>
void batchnorm_forward(T* y, T* xhat, T* invstd, const T* x, const T* weight, const T* bias,
                       T* running_mean, T* running_var, int rows, int cols,
                       const BatchNormParams& p) {
  const size_t C = static_cast<size_t>(cols);
  std::vector<double> mean(C, 0.0), var(C, 0.0);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r)
    for (size_t c = 0; c < C; ++c) mean[c] += static_cast<double>(x[r * C + c]);
  for (double& m : mean) m /= rows;
  // Two passes (sum, then squared deviations): no cancellation for large means.
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r)
    for (size_t c = 0; c < C; ++c) {
      const double d = static_cast<double>(x[r * C + c]) - mean[c];
      var[c] += d * d;
    }
  for (size_t c = 0; c < C; ++c) {
    var[c] /= rows;
    const double is = bn_invstd(var[c], p.eps);
    invstd[c] = static_cast<T>(is);
    if (running_mean) running_mean[c] = bn_running_mean(running_mean[c], mean[c], p.momentum);
    if (running_var) running_var[c] = bn_running_var(running_var[c], var[c], rows, p.momentum);
    var[c] = is;  // from here on: the invstd the normalisation uses, in double
  }
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r)
    for (size_t c = 0; c < C; ++c) {
      const size_t i = r * C + c;
      const T xh = static_cast<T>((static_cast<double>(x[i]) - mean[c]) * var[c]);
      xhat[i] = xh;
      y[i] = weight[c] * xh + bias[c];
    }
}

// BatchNorm1d's backward over the rows the forward saw: dweight[c] += Σ dy·xhat,
// dbias[c] += Σ dy, dx = weight·invstd/N · (N·dy − Σdy − xhat·Σdy·xhat)
// (kernels/math.h bn_grad_input). dx may alias dy.
template <typename T>
void batchnorm_backward(T* dx, T* dweight, T* dbias, const T* dy, const T* xhat, const T* invstd,
                        const T* weight, int rows, int cols) {
  const size_t C = static_cast<size_t>(cols);
  std::vector<double> sum_dy(C, 0.0), sum_dy_xhat(C, 0.0);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r)
    for (size_t c = 0; c < C; ++c) {
      const double g = static_cast<double>(dy[r * C + c]);
      sum_dy[c] += g;
      sum_dy_xhat[c] += g * static_cast<double>(xhat[r * C + c]);
    }
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r)
    for (size_t c = 0; c < C; ++c) {
      const size_t i = r * C + c;
      dx[i] = static_cast<T>(bn_grad_input(
          static_cast<double>(dy[i]), static_cast<double>(xhat[i]), sum_dy[c], sum_dy_xhat[c],
          static_cast<double>(weight[c]), static_cast<double>(invstd[c]), rows));
    }
  for (size_t c = 0; c < C; ++c) {
    dweight[c] += static_cast<T>(sum_dy_xhat[c]);
    dbias[c] += static_cast<T>(sum_dy[c]);
  }
}

// MSELoss(reduction='mean') over a global batch of `divisor` elements, of which
// these n are one slice: returns Σ(pred−target)² / divisor and writes
// dpred = 2(pred−target)/divisor, so slices' losses and gradients add up to the whole.
template <typename T>
double mse_forward_backward(T* dpred, const T* pred, const T* target, size_t n, size_t divisor) {
  double sum = 0;
  const T scale = T(2) / static_cast<T>(divisor);
  for (size_t i = 0; i < n; ++i) {
    const T d = pred[i] - target[i];
    sum += static_cast<double>(d) * static_cast<double>(d);
    if (dpred) dpred[i] = scale * d;
  }
  return sum / static_cast<double>(divisor);
}

// torch.optim.AdamW (amsgrad=False, maximize=False), written the way torch's
// single-tensor path computes it, step t counted from 1.
void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                const AdamWParams& h, int64_t t);

// Plain SGD (no momentum, no weight decay).
void sgd_step(float* param, const float* grad, size_t n, float lr);

// x[n] *= s
void scale(float* x, size_t n, float s);

// x[rows, dim] = N(0,1) draws of rows row_begin.. of step `step` (kernels/math.h's
// normal_pair on the key mix_keys(seed, step, row)): core/device/data.h's synthetic inputs.
void synthetic_normals(float* x, uint64_t seed, int64_t step, int64_t row_begin, int rows, int dim);
// out[n] = tanh(in[n]); out may alias in.
void tanh_forward(float* out, const float* in, size_t n);

// The float instances are compiled once in cpu.cpp, with the kernels' own
// optimisation flags; the double ones (tests) are instantiated where used.
extern template void linear_forward<float>(float*, const float*, const float*, const float*, int,
                                           int, int);
extern template void linear_backward<float>(float*, float*, float*, const float*, const float*,
                                            const float*, int, int, int);
extern template void gelu_forward<float>(float*, const float*, size_t);
extern template void gelu_backward<float>(float*, const float*, const float*, size_t);
extern template double mse_forward_backward<float>(float*, const float*, const float*, size_t,
                                                   size_t);
extern template void batchnorm_forward<float>(float*, float*, float*, const float*, const float*,
                                              const float*, float*, float*, int, int,
                                              const BatchNormParams&);
extern template void batchnorm_backward<float>(float*, float*, float*, const float*, const float*,
                                               const float*, const float*, int, int);

}  // namespace shardlab::kernels
