// CUDA kernels (kernels/cuda/*.cu) as host-callable launchers on raw device
// pointers. Plain C++: includable without the CUDA headers, and alongside them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/math.h"
#include "kernels/params.h"

// Spelled exactly as in the CUDA and cuBLAS headers, so a file may include both.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
struct cublasContext;
typedef struct cublasContext* cublasHandle_t;

namespace shardlab::kernels::cuda {

// Every launcher queues its work on the given stream and returns at once; n == 0
// launches nothing. Launch failures throw std::runtime_error naming the kernel
// and the CUDA error; a DType outside the enum throws std::invalid_argument.

// Row-major like kernels::gemm: C[M,N] = alpha*op(A)*op(B) + beta*C; op(A) is
// [M,K] (A stored [K,M] when trans_a), op(B) is [K,N] (B stored [N,K] when
// trans_b). Runs on the handle's stream (the caller sets it). FP32 math (no
// TF32 unless tf32). Throws std::runtime_error with the cuBLAS status name on failure.
void gemm(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const float* A, const float* B, float beta, float* C, bool tf32 = false);
// The same on A, B and C stored in dt: 2-byte operands multiply on tensor cores
// and accumulate in fp32; C = round(alpha·op(A)·op(B) + beta·C) once.
void gemm(cublasHandle_t h, DType dt, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const void* A, const void* B, float beta, void* C, bool tf32 = false);

// out[r,c] = bias[c]
void bias_rows(float* out, const float* bias, int rows, int cols, cudaStream_t s);
// Chunks of rows that column sums (bias and LayerNorm parameter gradients) split
// `rows` into: their device scratch holds column_sum_chunks(rows) × cols partials.
int column_sum_chunks(int rows);
// dbias[c] += sum_r dout[r,c], in a fixed order; partial: fp32 scratch of
// column_sum_chunks(rows) × cols values.
void bias_grad_accumulate(float* dbias, const float* dout, int rows, int cols, float* partial,
                          cudaStream_t s);
// The same on storage dt (sums in fp32 from the stored value, rounded once).
void bias_rows(DType dt, void* out, const void* bias, int rows, int cols, cudaStream_t s);
void bias_grad_accumulate(DType dt, void* dbias, const void* dout, int rows, int cols,
                          float* partial, cudaStream_t s);

// out[n] = gelu(in[n]); out may alias in.
void gelu_forward(float* out, const float* in, size_t n, cudaStream_t s);
// din[n] = dout[n] * gelu'(in[n]); din may alias dout.
void gelu_backward(float* din, const float* dout, const float* in, size_t n, cudaStream_t s);
// The same on storage dt (math in fp32, each output rounded once).
void gelu_forward(DType dt, void* out, const void* in, size_t n, cudaStream_t s);
void gelu_backward(DType dt, void* din, const void* dout, const void* in, size_t n, cudaStream_t s);

// x[rows,dim] = kernels::synthetic_normals' draws (one thread per pair of elements);
// out[n] = tanhf(in[n]) (may alias).
void synthetic_normals(float* x, uint64_t seed, int64_t step, int64_t row_begin, int rows, int dim,
                       cudaStream_t s);
void tanh_forward(float* out, const float* in, size_t n, cudaStream_t s);

// BatchNorm1d in training mode, the CPU's kernels::batchnorm_forward/backward:
// per feature (column) the batch statistics over `rows` rows; y may alias x and
// dx may alias dy; running_mean/var are left alone when null. Deterministic:
// every column's sums are reduced in a fixed order, in double.
void batchnorm_forward(float* y, float* xhat, float* invstd, const float* x, const float* weight,
                       const float* bias, float* running_mean, float* running_var, int rows,
                       int cols, const BatchNormParams& p, cudaStream_t s);
void batchnorm_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* xhat,
                        const float* invstd, const float* weight, int rows, int cols,
                        cudaStream_t s);

// dpred[i] = 2*(pred-target)/divisor (dpred may be null); *sum_out (device, one
// double) = sum (pred-target)^2 accumulated in double (overwritten, not added).
void mse_forward_backward(float* dpred, const float* pred, const float* target, size_t n,
                          size_t divisor, double* sum_out, cudaStream_t s);

// torch.optim.AdamW, one adamw_update per element; sc from adamw_scalars(h, t).
void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                const AdamWScalars& sc, cudaStream_t s);
// param[n] -= lr * grad[n]
void sgd_step(float* param, const float* grad, size_t n, float lr, cudaStream_t s);
// x[n] *= factor
void scale(float* x, size_t n, float factor, cudaStream_t s);

// dst[n] (dst_dt) = src[n] (src_dt): f32->2 bytes rounds to nearest even (same
// function as the CPU), 2 bytes->f32 exact, bf16<->f16 via f32, same dtype = copy.
void cast(void* dst, DType dst_dt, const void* src, DType src_dt, size_t n, cudaStream_t s);
// acc[n] += src[n] in dt; 2-byte values summed in fp32 and rounded once.
void add(void* acc, const void* src, DType dt, size_t n, cudaStream_t s);
// Sets *flag (device int) to 1 if any value is inf/NaN; never clears it (the
// caller zeroes it first).
void flag_nonfinite(const void* src, DType dt, size_t n, int* flag, cudaStream_t s);

// ---- GPT-2 ops: kernels/transformer.h's formulas, every void* stored in dt
// (f32, bf16, f16; math in fp32, each output rounded once). Deterministic: no
// atomics, every sum in a fixed order. A token id outside [0,V) (a target
// outside [0,V) and not -1) cannot throw here: it makes its row NaN instead.

// out[B,T,C] = wte[tokens[b,t]] + wpe[t]; a vocabulary slice: wte holds ids [v_begin, v_begin +
// v_count), other ids add nothing; wpe may be null.
void embedding_forward(DType dt, void* out, const int32_t* tokens, const void* wte, const void* wpe,
                       int B, int T, int C, int V, int v_begin, int v_count, cudaStream_t s);
// dwte[v] += Σ_{tokens = v} dout ; dwpe[t] += Σ_b dout[b,t] (either may be null). Each
// (v,c) and (t,c) is owned by one thread that adds in ascending position from the
// stored value and rounds once: the CPU's order, so the same bits. work: device
// scratch of embedding_work_ints(B·T, V) int32 (each id's positions, listed in order).
inline size_t embedding_work_ints(size_t rows, int V) {
  return rows + 2 * static_cast<size_t>(V) + 1;
}
void embedding_backward(DType dt, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                        int B, int T, int C, int V, int v_begin, int v_count, int32_t* work,
                        cudaStream_t s);

// nn.LayerNorm per row (one warp per row, statistics in double); mean, rstd [rows] fp32.
void layernorm_forward(DType dt, void* y, float* mean, float* rstd, const void* x,
                       const void* weight, const void* bias, int rows, int cols, double eps,
                       cudaStream_t s);
// dweight, dbias += (column sums in double); dx = or += the input gradient. dx may alias dy.
// partial: double scratch of 2 × column_sum_chunks(rows) × cols values.
void layernorm_backward(DType dt, void* dx, void* dweight, void* dbias, const void* dy,
                        const void* x, const float* mean, const float* rstd, const void* weight,
                        int rows, int cols, bool accumulate, double* partial, cudaStream_t s);

// The causal attention core on cuBLAS batched GEMMs (one call per GEMM over every
// batch row and head; heads read and written in place in qkv/y, no permutes) plus
// masked-softmax kernels, all on the handle's stream. fp32 GEMMs are plain FP32
// (PEDANTIC, no TF32); 2-byte ones multiply in the storage format and accumulate in fp32.
// scratch: fp32 [B,H,T,T]: the scores under a 2-byte dt (null allowed for f32).
// pointers: device room for 3·B·H pointers (the batched GEMMs' matrix addresses).
void attention_forward(cublasHandle_t h, DType dt, void* y, void* att, const void* qkv,
                       float* scratch, void** pointers, int B, int T, int C, int H);
// scratch (required) takes dP, then dS for f32; under a 2-byte dt dS is written over att.
void attention_backward(cublasHandle_t h, DType dt, void* dqkv, void* att, float* scratch,
                        void** pointers, const void* dy, const void* qkv, int B, int T, int C,
                        int H);

// Fused causal attention (FlashAttention-2, flash_attention.cu): y[B,T,C] from qkv[B,T,3C]
// without the [B,H,T,T] matrix, in shared-memory tiles with an online softmax; lse[B,H,T]
// (fp32) = each row's logsumexp of the scaled scores. fp32 math, outputs rounded to dt once.
void flash_attention_forward(DType dt, void* y, float* lse, const void* qkv, int B, int T, int C,
                             int H, cudaStream_t s);
// dqkv[B,T,3C] (overwritten) from dy[B,T,C] and forward's qkv, y and lse, each tile's
// probabilities recomputed; delta: fp32 [B,H,T] workspace (rowsum(dy ⊙ y)). No atomics:
// one kernel per key tile writes dk and dv, one per query tile dq.
void flash_attention_backward(DType dt, void* dqkv, float* delta, const void* dy, const void* qkv,
                              const void* y, const float* lse, int B, int T, int C, int H,
                              cudaStream_t s);

// Blocks of the cross-entropy kernel: the number of partial sums it needs.
constexpr int kCrossEntropyBlocks = 256;
// Softmax cross-entropy with ignore_index -1: dlogits = (softmax − onehot)/divisor (may be
// null, or alias logits); *sum_out (device double) = Σ row losses, overwritten, summed
// in double in a fixed order through partials[kCrossEntropyBlocks] (device scratch).
void crossentropy_forward_backward(DType dt, void* dlogits, const void* logits,
                                   const int32_t* targets, int rows, int V, size_t divisor,
                                   double* partials, double* sum_out, cudaStream_t s);

// Vocabulary-parallel cross-entropy (fp32; kernels/transformer.h's crossentropy_slice_stats
// and crossentropy_slice_grad): a block per row.
void crossentropy_slice_stats(float* stats, const float* logits, const int32_t* targets, int rows,
                              int cols, int valid, int v_begin, cudaStream_t s);
void crossentropy_slice_grad(float* dlogits, const float* logits, const float* ms,
                             const int32_t* targets, int rows, int cols, int valid, int v_begin,
                             size_t divisor, cudaStream_t s);

// out[n] = a[n] + b[n]; out may alias a or b.
void residual_forward(DType dt, void* out, const void* a, const void* b, size_t n, cudaStream_t s);

}  // namespace shardlab::kernels::cuda
