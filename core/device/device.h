// Where a buffer lives, how to move bytes there, and the math a training step
// runs on it. `cpu` calls kernels/cpu.h; `cuda` (core/cuda_backend.cpp) launches
// kernels/cuda/*.cu on the rank's compute stream. Strategies and layers only ever
// touch device memory through these calls, so they run unchanged on either.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "kernels/params.h"

namespace shardlab {

enum class DeviceKind { cpu, cuda };

// DType (f32, bf16, f16) is declared with the kernels, which take it too.
size_t dtype_size(DType dt);
const char* to_string(DType dt);

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  std::string str() const {
    return kind == DeviceKind::cpu ? "cpu" : "cuda:" + std::to_string(index);
  }
  bool operator==(const Device&) const = default;
};

enum class CopyKind { host_to_device, device_to_host, device_to_device, host_to_host };

// An ordered queue of work on a device. On the CPU work runs when issued, so a
// stream is always idle; on a GPU it maps to a cudaStream_t.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual void synchronize() = 0;
};

// A marker recorded on a stream: another stream (or the host) can wait for it,
// and two events give a device-side duration.
class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream& stream) = 0;
  virtual void wait(Stream& stream) = 0;  // make `stream` wait for this event
  virtual void synchronize() = 0;         // block the host until it has happened
  virtual double elapsed_ms_since(const Event& start) const = 0;
};

// Raw memory, copies and kernels on one device. Accounting lives above it, in
// Allocator. Pointers are this device's memory unless a name says host; every
// call is ordered on the compute stream, and only the calls that return a value
// to the host (mse_forward_backward, crossentropy_forward_backward, all_finite,
// download) wait for it.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual Device device() const = 0;
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr, size_t bytes) = 0;
  // Host memory for offload pools (pinned on a GPU, plain on the CPU).
  virtual void* raw_alloc_host(size_t bytes) = 0;
  virtual void raw_free_host(void* ptr, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind) = 0;
  virtual Stream& compute_stream() = 0;
  virtual std::unique_ptr<Stream> create_stream() = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  virtual void synchronize() = 0;
  // True for memory the host cannot read directly (a GPU's, or the guarded
  // CPU device's): communicators that work on host memory stage it.
  virtual bool is_device_pointer(const void* /*p*/) const { return false; }
  // Whether its memory holds values: false on meta devices (meta_backend.h),
  // where nothing is read back, so a rank's exported weights are not made.
  virtual bool holds_values() const { return true; }

  // ---- bytes
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // dst[n] (dt, device) = src[n] (fp32, host), rounded to nearest even.
  virtual void upload(void* dst, DType dt, const float* host_src, size_t n) = 0;
  // host_dst[n] (fp32, host) = src[n] (dt, device); waits for the device.
  virtual void download(float* host_dst, const void* src, DType dt, size_t n) = 0;

  // ---- math in fp32 (the same formulas as kernels/cpu.h)
  // out[rows,out] = in[rows,in] . w[out,in]^T + b[out]   (nn.Linear; b may be null: no bias)
  virtual void linear_forward(float* out, const float* in, const float* w, const float* b, int rows,
                              int in_dim, int out_dim) = 0;
  // dw += dout^T . in ; db += sum_rows dout ; din = dout . w (din, dw and db may be null:
  // a zero-bubble B computes din alone, its W dw and db alone)
  virtual void linear_backward(float* din, float* dw, float* db, const float* dout, const float* in,
                               const float* w, int rows, int in_dim, int out_dim) = 0;
  virtual void gelu_forward(float* out, const float* in, size_t n) = 0;
  // din = dout * gelu'(in); din may alias dout.
  virtual void gelu_backward(float* din, const float* dout, const float* in, size_t n) = 0;
  // BatchNorm1d in training mode over in[rows, cols] (features are columns,
  // rows >= 2): batch mean and biased variance per feature, xhat = (in-mean)/sqrt(var+eps),
  // out = weight*xhat + bias; writes xhat[rows,cols] and invstd[cols] for backward.
  // running_mean/var[cols] take PyTorch's momentum update with the unbiased
  // variance, unless null (a recomputed forward). out may alias in.
  virtual void batchnorm_forward(float* out, float* xhat, float* invstd, const float* in,
                                 const float* weight, const float* bias, float* running_mean,
                                 float* running_var, int rows, int cols,
                                 const kernels::BatchNormParams& p) = 0;
  // dweight += sum_rows dout*xhat ; dbias += sum_rows dout ;
  // din = weight*invstd/rows * (rows*dout - sum dout - xhat * sum dout*xhat); din may alias dout.
  virtual void batchnorm_backward(float* din, float* dweight, float* dbias, const float* dout,
                                  const float* xhat, const float* invstd, const float* weight,
                                  int rows, int cols) = 0;
  // Returns sum (pred-target)^2 / divisor; writes dpred = 2 (pred-target) / divisor
  // (dpred may be null). `target` is device memory too.
  virtual double mse_forward_backward(float* dpred, const float* pred, const float* target,
                                      size_t n, size_t divisor) = 0;
  // ---- GPT-2 ops (kernels/transformer.h has the exact formulas). Tensors are
  // stored in `dt` (f32, bf16, f16; every void* below), the math is fp32 and
  // each output is rounded to dt once. B batch, T sequence, C channels, H heads
  // (C % H == 0), V vocabulary, rows = B*T. tokens and targets: int32 device
  // arrays; a token id outside [0,V) (a target outside [0,V) and not -1) throws
  // std::out_of_range on the CPU and makes that row NaN on a GPU, which cannot
  // throw (the loss turns NaN, which all_finite and the loss checks see).
  //
  // out[B,T,C] = wte[tokens[b,t]] + wpe[t]   (wte [V,C], wpe [>=T,C])
  // A vocabulary slice (tensor parallelism): wte holds the rows of ids [v_begin, v_begin +
  // v_count) only, and other ids add nothing; the whole vocabulary is (0, V). wpe may be null
  // (no position embedding).
  virtual void embedding_forward(DType dt, void* out, const int32_t* tokens, const void* wte,
                                 const void* wpe, int B, int T, int C, int V, int v_begin,
                                 int v_count) = 0;
  // dwte[v] += sum over positions holding v of dout[b,t]; dwpe[t] += sum_b dout[b,t]. Each sum
  // starts from the stored value, adds in ascending position in fp32, rounds once (the same
  // bits on every backend). Either gradient may be null (skipped). A vocabulary slice as in
  // forward: dwte holds its rows only.
  virtual void embedding_backward(DType dt, void* dwte, void* dwpe, const void* dout,
                                  const int32_t* tokens, int B, int T, int C, int V, int v_begin,
                                  int v_count) = 0;
  // nn.LayerNorm(cols, eps) per row of in[rows,cols]: writes out (may alias in) and the row
  // statistics mean[rows], rstd[rows] (fp32 whatever dt) that backward reads.
  virtual void layernorm_forward(DType dt, void* out, float* mean, float* rstd, const void* in,
                                 const void* weight, const void* bias, int rows, int cols,
                                 double eps) = 0;
  // dweight += sum_rows dout*xhat ; dbias += sum_rows dout ;
  // din = rstd*(g - mean(g) - xhat*mean(g*xhat)), g = dout*weight, written (accumulate false)
  // or added to din (accumulate true: the residual stream's gradient). din may alias dout.
  virtual void layernorm_backward(DType dt, void* din, void* dweight, void* dbias, const void* dout,
                                  const void* in, const float* mean, const float* rstd,
                                  const void* weight, int rows, int cols, bool accumulate) = 0;
  // Causal self-attention between c_attn and c_proj: qkv[B,T,3C] (q|k|v) -> out[B,T,C], heads
  // merged; att[B,H,T,T] keeps softmax(mask(q.k^T/sqrt(C/H))) for backward. scratch: fp32
  // [B,H,T,T] workspace (the fp32 scores under a 2-byte dt; may be null when dt is f32).
  virtual void attention_forward(DType dt, void* out, void* att, const void* qkv, float* scratch,
                                 int B, int T, int C, int H) = 0;
  // dqkv[B,T,3C] (overwritten) from dout[B,T,C], att and qkv; scratch: fp32 [B,H,T,T]
  // workspace (required). att is spent: it may be overwritten.
  virtual void attention_backward(DType dt, void* dqkv, void* att, float* scratch, const void* dout,
                                  const void* qkv, int B, int T, int C, int H) = 0;
  // The same attention fused (FlashAttention-2, kernels/flash_attention.h; `--attention
  // flash`): out[B,T,C] from qkv tile by tile with an online softmax, no [B,H,T,T] matrix;
  // lse[B,H,T] (fp32 whatever dt) keeps each row's logsumexp of the scaled scores, which
  // is all backward needs besides qkv and out.
  virtual void flash_attention_forward(DType dt, void* out, float* lse, const void* qkv, int B,
                                       int T, int C, int H) = 0;
  // dqkv[B,T,3C] (overwritten) from dout[B,T,C] and forward's qkv, out and lse, each tile's
  // probabilities recomputed; delta: fp32 [B,H,T] workspace (rowsum(dout ⊙ out)).
  virtual void flash_attention_backward(DType dt, void* dqkv, float* delta, const void* dout,
                                        const void* qkv, const void* out, const float* lse, int B,
                                        int T, int C, int H) = 0;
  // F.cross_entropy(logits, targets, ignore_index=-1) of one slice of a global batch of
  // `divisor` rows: returns sum_rows (logsumexp - logit[target]) / divisor; writes
  // dlogits = (softmax - onehot) / divisor (may be null, or alias logits). Target -1: no loss,
  // zero gradient. Waits for the device.
  virtual double crossentropy_forward_backward(DType dt, void* dlogits, const void* logits,
                                               const int32_t* targets, int rows, int V,
                                               size_t divisor) = 0;
  // Vocabulary-parallel cross-entropy (fp32; kernels/transformer.h): one rank's slice of the
  // logits [rows, cols], ids [v_begin, v_begin + valid) in its first `valid` columns, the rest
  // padding. stats [rows, 3]: the slice's max, its sum of exp(logit - max), the target's logit
  // where the slice holds it (else 0). Then, from each row's merged max and sum ms [rows, 2]
  // (kernels::crossentropy_merge over every rank's stats): dlogits = (softmax - onehot) /
  // divisor, 0 in the padding and for target -1 (may alias logits).
  virtual void crossentropy_slice_stats(float* stats, const float* logits, const int32_t* targets,
                                        int rows, int cols, int valid, int v_begin) = 0;
  virtual void crossentropy_slice_grad(float* dlogits, const float* logits, const float* ms,
                                       const int32_t* targets, int rows, int cols, int valid,
                                       int v_begin, size_t divisor) = 0;
  // out[n] = a[n] + b[n] (may alias a or b). Its backward is the identity into both inputs
  // (add() or layernorm_backward's accumulate adds the gradients).
  virtual void residual_forward(DType dt, void* out, const void* a, const void* b, size_t n) = 0;

  virtual void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                          size_t n, const kernels::AdamWParams& h, int64_t t) = 0;
  virtual void sgd_step(float* param, const float* grad, size_t n, float lr) = 0;
  virtual void scale(float* x, size_t n, float s) = 0;

  // ---- synthetic data (core/device/data.h), made on the device that uses it
  // x[rows, dim] = the N(0,1) draws of rows row_begin.. of `step` (kernels::synthetic_normals).
  virtual void synthetic_normals(float* x, uint64_t seed, int64_t step, int64_t row_begin, int rows,
                                 int dim) = 0;
  // y[rows, dim] = tanh(x . t^T) in plain fp32 (never TF32: the data stays the same
  // whatever math the model runs in); t [dim, dim] is from constant().
  virtual void synthetic_targets(float* y, const float* x, const float* t, int rows, int dim) = 0;
  // Memory of this device holding `bytes` copied from `host`: uploaded on the first call
  // with `key`, then the same pointer for the backend's lifetime. For constants a data
  // loader reads every step (the synthetic target matrix); outside the Allocator, as a
  // data loader's own tables are. The CPU returns `host` itself.
  virtual const void* constant(const std::string& key, const void* host, size_t bytes) = 0;

  // ---- 2-byte operands with fp32 accumulation (tensor cores on a GPU)
  // True when the *_2byte calls below run here; callers then skip the fp32 upcasts
  // (AsF32) they otherwise make. Their results are the upcast path's math (products
  // of 2-byte values are exact in fp32, sums in fp32, each output rounded to dt once)
  // up to the order of the sums. Elsewhere they throw std::logic_error.
  virtual bool native_2byte_math() const { return false; }
  // out[rows,out] = round(in . w^T + b) (b may be null), every pointer in dt.
  virtual void linear_forward_2byte(DType dt, void* out, const void* in, const void* w,
                                    const void* b, int rows, int in_dim, int out_dim);
  // dw = round(dw + dout^T . in); db = round(db + sum_rows dout); din = round(dout . w)
  // (din and db may be null), every pointer in dt.
  virtual void linear_backward_2byte(DType dt, void* din, void* dw, void* db, const void* dout,
                                     const void* in, const void* w, int rows, int in_dim,
                                     int out_dim);
  // out = round(gelu(in)); din = round(dout * gelu'(in)) (may alias dout), in dt.
  virtual void gelu_forward_2byte(DType dt, void* out, const void* in, size_t n);
  virtual void gelu_backward_2byte(DType dt, void* din, const void* dout, const void* in, size_t n);

  // ---- storage formats
  // dst[n] (dst_dt) = src[n] (src_dt); f32 -> 2 bytes rounds to nearest even,
  // 2 bytes -> f32 is exact, same dtype is a copy.
  virtual void cast(void* dst, DType dst_dt, const void* src, DType src_dt, size_t n) = 0;
  // acc[n] += src[n], both in dt; 2-byte values are summed in fp32 and rounded once.
  virtual void add(void* acc, const void* src, DType dt, size_t n) = 0;
  // False when any value is inf or NaN; waits for the device.
  virtual bool all_finite(const void* src, DType dt, size_t n) = 0;
};

std::unique_ptr<DeviceBackend> make_cpu_backend();

// True when p lies inside one of `blocks` (start -> length): how a backend tells
// its own allocations from other memory.
inline bool in_blocks(const std::map<void*, size_t>& blocks, const void* p) {
  auto it = blocks.upper_bound(const_cast<void*>(p));
  if (it == blocks.begin()) return false;
  --it;
  const char* base = static_cast<const char*>(it->first);
  return static_cast<const char*>(p) >= base && static_cast<const char*>(p) < base + it->second;
}

// The guarded CPU device (`--device cpu-guarded`): the CPU backend, but device
// memory is mapped PROT_NONE except while one of the backend's calls runs, so
// host code that touches device memory directly (which would fail on a GPU)
// crashes at once instead. All backends of one run share one MemoryGuard, so
// device-to-device copies between ranks work as on GPUs with peer access.
class MemoryGuard;
std::shared_ptr<MemoryGuard> make_memory_guard();
std::unique_ptr<DeviceBackend> make_guarded_cpu_backend(std::shared_ptr<MemoryGuard> guard);

}  // namespace shardlab
