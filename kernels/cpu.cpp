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

void synthetic_normals(float* x, uint64_t seed, int64_t step, int64_t row_begin, int rows,
                       int dim) {
  const size_t d = static_cast<size_t>(dim);
  for (int r = 0; r < rows; ++r) {
    const uint64_t key =
        mix_keys(seed, static_cast<uint64_t>(step), static_cast<uint64_t>(row_begin + r));
    float* xr = x + static_cast<size_t>(r) * d;
    for (size_t j = 0; j < d; j += 2) {
      float second = 0;
      normal_pair(key, j / 2, &xr[j], &second);
      if (j + 1 < d) xr[j + 1] = second;
    }
  }
}

void tanh_forward(float* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = math_detail::tanh(in[i]);
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
