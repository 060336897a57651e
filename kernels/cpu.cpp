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
  const AdamWScalars s = adamw_scalars(h, t);
  for (size_t i = 0; i < n; ++i) adamw_update(param[i], grad[i], exp_avg[i], exp_avg_sq[i], s);
}

void sgd_step(float* param, const float* grad, size_t n, float lr) {
  for (size_t i = 0; i < n; ++i) param[i] = sgd_update(param[i], grad[i], lr);
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
template void batchnorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, float*, float*, int, int,
                                       const BatchNormParams&);
template void batchnorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, int, int);

}  // namespace shardlab::kernels
