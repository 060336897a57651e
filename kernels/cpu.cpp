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

}  // namespace shardlab::kernels
