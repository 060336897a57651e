// The strided GEMM through OpenBLAS, and the float and 2-byte instances of the
// GPT-2 kernels (kernels/transformer.h), compiled with the kernels' flags.
#include "kernels/transformer.h"

#include <cblas.h>

namespace shardlab::kernels {

void gemm_ld(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
             const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_ld(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
             int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

SHARDLAB_TRANSFORMER_KERNELS(, float)
SHARDLAB_TRANSFORMER_KERNELS(, bf16)
SHARDLAB_TRANSFORMER_KERNELS(, fp16)

}  // namespace shardlab::kernels
