// GEMM through OpenBLAS, the one CPU kernel we do not write ourselves.
#include "kernels/cpu.h"

#include <cblas.h>

namespace shardlab::kernels {

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
          const float* B, float beta, float* C) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, trans_a ? M : K, B,
              trans_b ? K : N, beta, C, N);
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
          const double* B, double beta, double* C) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, trans_a ? M : K, B,
              trans_b ? K : N, beta, C, N);
}

void set_single_threaded_blas() {
  openblas_set_num_threads(1);
}

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                const AdamWParams& h, int64_t t) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(t));
  const float step_size = static_cast<float>(h.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.0f - h.lr * h.weight_decay;
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    param[i] *= decay;
    exp_avg[i] += (g - exp_avg[i]) * (1.0f - h.beta1);  // torch's lerp_
    exp_avg_sq[i] = exp_avg_sq[i] * h.beta2 + (1.0f - h.beta2) * g * g;
    const float denom = std::sqrt(exp_avg_sq[i]) / bc2_sqrt + h.eps;
    param[i] -= step_size * exp_avg[i] / denom;
  }
}

void sgd_step(float* param, const float* grad, size_t n, float lr) {
  for (size_t i = 0; i < n; ++i) param[i] -= lr * grad[i];
}

void scale(float* x, size_t n, float s) {
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int, int,
                                    int);
template void linear_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int, int, int);
template void gelu_forward<float>(float*, const float*, size_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t);
template double mse_forward_backward<float>(float*, const float*, const float*, size_t, size_t);

}  // namespace shardlab::kernels
