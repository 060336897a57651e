// The CUDA device backend: cudaMalloc'ed memory behind the accounting
// allocator, one non-blocking compute stream per rank, cuBLAS for GEMM and
// kernels/cuda/ for the rest, and compute spans timed by CUDA events.
#include "core/device/cuda/cuda_backend.h"

#include <cublas_v2.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "core/clock.h"
#include "core/device/gpu.h"
#include "kernels/cuda.h"

namespace shardlab {

// ---------------------------------------------------------------------------
// GPU discovery

namespace {
struct GpuCensus {
  int count = 0;
  std::string status;
};
const GpuCensus& census() {
  // Asked once per process: the answer is a fact about this machine.
  static const GpuCensus c = [] {
    GpuCensus g;
    int n = 0;  // left unwritten when the call fails (seen: error 35, insufficient driver)
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      SHARDLAB_CUDA_IGNORE(e);  // cleared, so that later checks start clean
      g.status = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
      return g;
    }
    if (n <= 0) {
      g.status = "cudaGetDeviceCount found no GPU";
      return g;
    }
    g.count = n;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
      g.status = std::to_string(n) + " x " + prop.name;
    else
      g.status = std::to_string(n) + " GPU(s)";
    return g;
  }();
  return c;
}
}  // namespace

bool cuda_compiled() {
  return true;
}
int cuda_device_count() {
  return census().count;
}
std::string cuda_status() {
  return census().status;
}
bool cuda_memory_info(int index, int64_t* free_bytes, int64_t* total_bytes) {
  if (index < 0 || index >= cuda_device_count()) return false;
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  size_t free_now = 0, total = 0;
  cudaError_t e = cudaSetDevice(index);
  if (e == cudaSuccess) e = cudaMemGetInfo(&free_now, &total);
  cudaSetDevice(current);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it, so later checks start clean
    return false;
  }
  *free_bytes = static_cast<int64_t>(free_now);
  *total_bytes = static_cast<int64_t>(total);
  return true;
}

// ---------------------------------------------------------------------------
// GpuTimer

GpuTimer::GpuTimer(int device_index, Recorder* recorder)
    : device_index_(device_index), recorder_(recorder) {
  if (!recorder_) return;
  SHARDLAB_CUDA_CHECK(cudaEventCreate(&origin_));
  anchor();
}

GpuTimer::~GpuTimer() {
  for (Pending& p : pending_) {
    if (p.begin) SHARDLAB_CUDA_IGNORE(cudaEventDestroy(p.begin));
    if (p.end) SHARDLAB_CUDA_IGNORE(cudaEventDestroy(p.end));
  }
  for (cudaEvent_t e : free_events_) SHARDLAB_CUDA_IGNORE(cudaEventDestroy(e));
  if (origin_) SHARDLAB_CUDA_IGNORE(cudaEventDestroy(origin_));
}

void GpuTimer::anchor() {
  // The origin event is recorded on the legacy stream and waited for; the host
  // clock read right after is its time, to within the wake-up latency (µs).
  SHARDLAB_CUDA_CHECK(cudaEventRecord(origin_, nullptr));
  SHARDLAB_CUDA_CHECK(cudaEventSynchronize(origin_));
  origin_ns_ = now_ns();
}

cudaEvent_t GpuTimer::take_event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  SHARDLAB_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

int GpuTimer::begin(cudaStream_t stream) {
  if (!recorder_) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  Pending p;
  p.begin = take_event();
  SHARDLAB_CUDA_CHECK(cudaEventRecord(p.begin, stream));
  pending_.push_back(p);
  return static_cast<int>(base_ + pending_.size() - 1);
}

void GpuTimer::end(int token, cudaStream_t stream, Span span) noexcept {
  // Called from ScopedSpan's destructor: it must not throw, even after a sticky
  // CUDA error (the rank's real error is on its way up and must reach the board).
  if (!recorder_ || token < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  const size_t i = static_cast<size_t>(token) - base_;
  if (i >= pending_.size()) return;
  Pending& p = pending_[i];
  p.span = span;
  p.ended = true;
  cudaEvent_t e = nullptr;
  if (!free_events_.empty()) {
    e = free_events_.back();
    free_events_.pop_back();
  } else if (const cudaError_t c = cudaEventCreate(&e); c != cudaSuccess) {
    SHARDLAB_CUDA_IGNORE(c);
    e = nullptr;
  }
  if (e) {
    if (const cudaError_t r = cudaEventRecord(e, stream); r != cudaSuccess) {
      SHARDLAB_CUDA_IGNORE(r);
      free_events_.push_back(e);
      e = nullptr;
    }
  }
  p.end = e;  // null: the span is dropped when resolved
}

void GpuTimer::resolve(bool wait) {
  if (!recorder_) return;
  // One resolver at a time; mu_ is released while waiting on an event, so an
  // NCCL issuer thread can begin and end its spans meanwhile.
  std::lock_guard<std::mutex> one(resolve_mu_);
  while (true) {
    cudaEvent_t end = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.empty() || !pending_.front().ended) break;  // open: later spans wait
      end = pending_.front().end;
    }
    if (end) {
      if (wait) {
        SHARDLAB_CUDA_CHECK(cudaEventSynchronize(end));
      } else {
        const cudaError_t q = cudaEventQuery(end);
        if (q == cudaErrorNotReady) break;
        if (q != cudaSuccess)
          throw std::runtime_error(SHARDLAB_CUDA_FAILED(q, "cudaEventQuery(end)"));
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    Pending& p = pending_.front();
    if (p.end) {
      float b_ms = 0, e_ms = 0;
      SHARDLAB_CUDA_CHECK(cudaEventElapsedTime(&b_ms, origin_, p.begin));
      SHARDLAB_CUDA_CHECK(cudaEventElapsedTime(&e_ms, origin_, p.end));
      p.span.t_begin_ns = origin_ns_ + static_cast<int64_t>(static_cast<double>(b_ms) * 1e6);
      p.span.t_end_ns = origin_ns_ + static_cast<int64_t>(static_cast<double>(e_ms) * 1e6);
      recorder_->add_span(p.span);
      free_events_.push_back(p.end);
    }
    free_events_.push_back(p.begin);
    pending_.pop_front();
    ++base_;
  }
  // Elapsed times are floats in ms: re-anchor whenever nothing is pending, so
  // they stay short and keep µs resolution over long runs.
  std::lock_guard<std::mutex> lock(mu_);
  if (wait && pending_.empty()) anchor();
}

// ---------------------------------------------------------------------------
// Streams and events

namespace {

class CudaStream final : public Stream {
 public:
  CudaStream(cudaStream_t s, bool owned) : s_(s), owned_(owned) {}
  ~CudaStream() override {
    if (owned_) SHARDLAB_CUDA_IGNORE(cudaStreamDestroy(s_));
  }
  void synchronize() override { SHARDLAB_CUDA_CHECK(cudaStreamSynchronize(s_)); }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_;
  bool owned_;
};

cudaStream_t native(Stream& s) {
  return static_cast<CudaStream&>(s).get();
}

class CudaEvent final : public Event {
 public:
  CudaEvent() { SHARDLAB_CUDA_CHECK(cudaEventCreate(&e_)); }
  ~CudaEvent() override { SHARDLAB_CUDA_IGNORE(cudaEventDestroy(e_)); }
  void record(Stream& stream) override { SHARDLAB_CUDA_CHECK(cudaEventRecord(e_, native(stream))); }
  void wait(Stream& stream) override {
    SHARDLAB_CUDA_CHECK(cudaStreamWaitEvent(native(stream), e_, 0));
  }
  void synchronize() override { SHARDLAB_CUDA_CHECK(cudaEventSynchronize(e_)); }
  double elapsed_ms_since(const Event& start) const override {
    float ms = 0;
    SHARDLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<const CudaEvent&>(start).e_, e_));
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

// ---------------------------------------------------------------------------
// The backend

class CudaBackendImpl final : public CudaBackend, private DeviceClock {
 public:
  CudaBackendImpl(int index, Recorder* recorder, bool tf32)
      : index_(index), tf32_(tf32), host_(make_cpu_backend()) {
    if (index < 0 || index >= cuda_device_count())
      throw std::runtime_error("GPU " + std::to_string(index) + " does not exist (" +
                               cuda_status() + ")");
    SHARDLAB_CUDA_CHECK(cudaSetDevice(index));
    cudaStream_t s = nullptr;
    // Non-blocking: the rank's stream must not serialise with other ranks' work
    // on the legacy default stream when ranks share a GPU.
    SHARDLAB_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_ = std::make_unique<CudaStream>(s, true);
    SHARDLAB_CUBLAS_CHECK(cublasCreate(&blas_));
    SHARDLAB_CUBLAS_CHECK(cublasSetStream(blas_, s));
    SHARDLAB_CUDA_CHECK(cudaMalloc(&scratch_, 64));
    SHARDLAB_CUDA_CHECK(
        cudaMalloc(&partials_, kernels::cuda::kCrossEntropyBlocks * sizeof(double)));
    SHARDLAB_CUDA_CHECK(cudaMallocHost(&pinned_, 64));
    if (recorder && recorder->enabled()) {
      timer_ = std::make_unique<GpuTimer>(index, recorder);
      recorder_ = recorder;
      recorder_->set_device_clock(this);
    }
  }

  ~CudaBackendImpl() override {
    SHARDLAB_CUDA_IGNORE(cudaStreamSynchronize(stream()));
    if (timer_) {
      try {
        timer_->resolve(true);
      } catch (const std::exception&) {
      }
      recorder_->set_device_clock(nullptr);
    }
    timer_.reset();
    for (auto& [key, p] : constants_) SHARDLAB_CUDA_IGNORE(cudaFree(p));
    if (blas_) (void)cublasDestroy(blas_);
    SHARDLAB_CUDA_IGNORE(cudaFree(scratch_));
    SHARDLAB_CUDA_IGNORE(cudaFree(partials_));
    if (head_pointers_) SHARDLAB_CUDA_IGNORE(cudaFree(head_pointers_));
    if (workspace_) SHARDLAB_CUDA_IGNORE(cudaFree(workspace_));
    SHARDLAB_CUDA_IGNORE(cudaFreeHost(pinned_));
    stream_.reset();
  }

  // CudaBackend
  int index() const override { return index_; }
  cudaStream_t stream() const override { return stream_->get(); }
  GpuTimer& timer() override {
    if (!timer_) throw std::logic_error("GPU timer used with recording off");
    return *timer_;
  }

  // DeviceClock: compute spans are timed on the compute stream.
  int begin() override { return timer_ ? timer_->begin(stream()) : -1; }
  void end(int token, Span span) override {
    if (timer_) timer_->end(token, stream(), span);
  }

  Device device() const override { return Device{DeviceKind::cuda, index_}; }

  void* raw_alloc(size_t bytes) override {
    ScopedDevice on(index_);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
      throw std::runtime_error(SHARDLAB_CUDA_FAILED(e, "cudaMalloc of " + std::to_string(bytes) +
                                                           " bytes on GPU " +
                                                           std::to_string(index_) + " failed"));
    }
    std::lock_guard<std::mutex> lock(mu_);
    owned_[p] = bytes ? bytes : 1;
    return p;
  }
  void raw_free(void* ptr, size_t) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      owned_.erase(ptr);
    }
    ScopedDevice on(index_);
    // cudaFree synchronises the device: the allocator caches blocks so this is rare.
    SHARDLAB_CUDA_IGNORE(cudaFree(ptr));
  }
  void* raw_alloc_host(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e =
        cudaMallocHost(&p, bytes ? bytes : 1);  // pinned: async copies, full speed
    if (e != cudaSuccess) {
      throw std::runtime_error(
          SHARDLAB_CUDA_FAILED(e, "cudaMallocHost of " + std::to_string(bytes) + " bytes failed"));
    }
    return p;
  }
  void raw_free_host(void* ptr, size_t) override { SHARDLAB_CUDA_IGNORE(cudaFreeHost(ptr)); }

  void copy(void* dst, const void* src, size_t bytes, CopyKind kind) override {
    if (!bytes || dst == src) return;
    if (kind == CopyKind::device_to_device && (!owns(dst) || !owns(src))) {
      // Another rank's memory (dp hands buffers between devices through the
      // host): its producer ran on that rank's stream, which only its device
      // can wait for. Wait for both sides, then copy on this rank's stream (a
      // peer copy under UVA) and wait for it: the other rank reads it next.
      stream_->synchronize();
      for (const void* p : {static_cast<const void*>(dst), src}) {
        cudaPointerAttributes a{};
        if (owns(p)) continue;
        if (const cudaError_t e = cudaPointerGetAttributes(&a, p); e != cudaSuccess) {
          SHARDLAB_CUDA_IGNORE(e);
          continue;
        }
        if (a.device >= 0) {
          ScopedDevice peer(a.device);
          SHARDLAB_CUDA_CHECK(cudaDeviceSynchronize());
        }
      }
      SHARDLAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()));
      stream_->synchronize();
      return;
    }
    SHARDLAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()));
    // The host may read (or reuse) its side as soon as this returns.
    if (kind != CopyKind::device_to_device) stream_->synchronize();
  }
  Stream& compute_stream() override { return *stream_; }
  std::unique_ptr<Stream> create_stream() override {
    cudaStream_t s = nullptr;
    SHARDLAB_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return std::make_unique<CudaStream>(s, true);
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CudaEvent>(); }
  void synchronize() override {
    stream_->synchronize();
    if (timer_) timer_->resolve(true);
  }
  bool is_device_pointer(const void* p) const override {
    if (owns(p)) return true;
    cudaPointerAttributes a{};
    if (const cudaError_t e = cudaPointerGetAttributes(&a, p); e != cudaSuccess) {
      SHARDLAB_CUDA_IGNORE(e);
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }

  void fill_zero(void* dst, size_t bytes) override {
    if (!bytes) return;
    ScopedDevice on(index_);
    SHARDLAB_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream()));
  }
  void upload(void* dst, DType dt, const float* src, size_t n) override {
    if (!n) return;
    if (dt == DType::f32) return copy(dst, src, n * 4, CopyKind::host_to_device);
    // Rounded on the host with the same function the CPU uses, then copied.
    std::vector<uint16_t> tmp(n);
    host_->cast(tmp.data(), dt, src, DType::f32, n);
    copy(dst, tmp.data(), n * 2, CopyKind::host_to_device);
  }
  void download(float* dst, const void* src, DType dt, size_t n) override {
    if (!n) return;
    if (dt == DType::f32) return copy(dst, src, n * 4, CopyKind::device_to_host);
    std::vector<uint16_t> tmp(n);
    copy(tmp.data(), src, n * 2, CopyKind::device_to_host);
    host_->cast(dst, DType::f32, tmp.data(), dt, n);
  }

  void linear_forward(float* out, const float* in, const float* w, const float* b, int rows,
                      int in_dim, int out_dim) override {
    linear_forward_2byte(DType::f32, out, in, w, b, rows, in_dim, out_dim);
  }
  void linear_backward(float* din, float* dw, float* db, const float* dout, const float* in,
                       const float* w, int rows, int in_dim, int out_dim) override {
    linear_backward_2byte(DType::f32, din, dw, db, dout, in, w, rows, in_dim, out_dim);
  }
  // One body for fp32 and the 2-byte types: the GEMM's storage type is dt.
  bool native_2byte_math() const override { return true; }
  void linear_forward_2byte(DType dt, void* out, const void* in, const void* w, const void* b,
                            int rows, int in_dim, int out_dim) override {
    if (b) kernels::cuda::bias_rows(dt, out, b, rows, out_dim, stream());
    kernels::cuda::gemm(blas_, dt, false, true, rows, out_dim, in_dim, 1.0f, in, w, b ? 1.0f : 0.0f,
                        out, tf32_);
  }
  void linear_backward_2byte(DType dt, void* din, void* dw, void* db, const void* dout,
                             const void* in, const void* w, int rows, int in_dim,
                             int out_dim) override {
    if (dw)
      kernels::cuda::gemm(blas_, dt, true, false, out_dim, in_dim, rows, 1.0f, dout, in, 1.0f, dw,
                          tf32_);
    if (db)
      kernels::cuda::bias_grad_accumulate(
          dt, db, dout, rows, out_dim,
          static_cast<float*>(workspace(column_sums_bytes(rows, out_dim, sizeof(float)))),
          stream());
    if (din)
      kernels::cuda::gemm(blas_, dt, false, false, rows, in_dim, out_dim, 1.0f, dout, w, 0.0f, din,
                          tf32_);
  }
  void gelu_forward_2byte(DType dt, void* out, const void* in, size_t n) override {
    kernels::cuda::gelu_forward(dt, out, in, n, stream());
  }
  void gelu_backward_2byte(DType dt, void* din, const void* dout, const void* in,
                           size_t n) override {
    kernels::cuda::gelu_backward(dt, din, dout, in, n, stream());
  }
  void synthetic_normals(float* x, uint64_t seed, int64_t step, int64_t row_begin, int rows,
                         int dim) override {
    kernels::cuda::synthetic_normals(x, seed, step, row_begin, rows, dim, stream());
  }
  void synthetic_targets(float* y, const float* x, const float* t, int rows, int dim) override {
    // Exact fp32 whatever --tf32 says: the data must not depend on the model's math.
    kernels::cuda::gemm(blas_, false, true, rows, dim, dim, 1.0f, x, t, 0.0f, y, false);
    kernels::cuda::tanh_forward(y, y, static_cast<size_t>(rows) * dim, stream());
  }
  const void* constant(const std::string& key, const void* host, size_t bytes) override {
    std::lock_guard<std::mutex> lock(constants_mu_);
    auto it = constants_.find(key);
    if (it != constants_.end()) return it->second;
    ScopedDevice on(index_);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess)
      throw std::runtime_error(SHARDLAB_CUDA_FAILED(
          e, "cudaMalloc of " + std::to_string(bytes) + " bytes for " + key + " failed"));
    SHARDLAB_CUDA_CHECK(cudaMemcpyAsync(p, host, bytes, cudaMemcpyHostToDevice, stream()));
    stream_->synchronize();
    constants_[key] = p;
    return p;
  }
  void gelu_forward(float* out, const float* in, size_t n) override {
    kernels::cuda::gelu_forward(out, in, n, stream());
  }
  void gelu_backward(float* din, const float* dout, const float* in, size_t n) override {
    kernels::cuda::gelu_backward(din, dout, in, n, stream());
  }
  void batchnorm_forward(float* out, float* xhat, float* invstd, const float* in,
                         const float* weight, const float* bias, float* running_mean,
                         float* running_var, int rows, int cols,
                         const kernels::BatchNormParams& p) override {
    kernels::cuda::batchnorm_forward(out, xhat, invstd, in, weight, bias, running_mean, running_var,
                                     rows, cols, p, stream());
  }
  void batchnorm_backward(float* din, float* dweight, float* dbias, const float* dout,
                          const float* xhat, const float* invstd, const float* weight, int rows,
                          int cols) override {
    kernels::cuda::batchnorm_backward(din, dweight, dbias, dout, xhat, invstd, weight, rows, cols,
                                      stream());
  }
  double mse_forward_backward(float* dpred, const float* pred, const float* target, size_t n,
                              size_t divisor) override {
    auto* sum = static_cast<double*>(scratch_);
    kernels::cuda::mse_forward_backward(dpred, pred, target, n, divisor, sum, stream());
    SHARDLAB_CUDA_CHECK(
        cudaMemcpyAsync(pinned_, sum, sizeof(double), cudaMemcpyDeviceToHost, stream()));
    stream_->synchronize();
    return *static_cast<double*>(pinned_) / static_cast<double>(divisor);
  }
  void embedding_forward(DType dt, void* out, const int32_t* tokens, const void* wte,
                         const void* wpe, int B, int T, int C, int V, int v_begin,
                         int v_count) override {
    kernels::cuda::embedding_forward(dt, out, tokens, wte, wpe, B, T, C, V, v_begin, v_count,
                                     stream());
  }
  void embedding_backward(DType dt, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                          int B, int T, int C, int V, int v_begin, int v_count) override {
    kernels::cuda::embedding_backward(
        dt, dwte, dwpe, dout, tokens, B, T, C, V, v_begin, v_count,
        static_cast<int32_t*>(workspace(
            kernels::cuda::embedding_work_ints(static_cast<size_t>(B) * T, V) * sizeof(int32_t))),
        stream());
  }
  void layernorm_forward(DType dt, void* out, float* mean, float* rstd, const void* in,
                         const void* weight, const void* bias, int rows, int cols,
                         double eps) override {
    kernels::cuda::layernorm_forward(dt, out, mean, rstd, in, weight, bias, rows, cols, eps,
                                     stream());
  }
  void layernorm_backward(DType dt, void* din, void* dweight, void* dbias, const void* dout,
                          const void* in, const float* mean, const float* rstd, const void* weight,
                          int rows, int cols, bool accumulate) override {
    auto* partial =
        static_cast<double*>(workspace(2 * column_sums_bytes(rows, cols, sizeof(double))));
    kernels::cuda::layernorm_backward(dt, din, dweight, dbias, dout, in, mean, rstd, weight, rows,
                                      cols, accumulate, partial, stream());
  }
  void attention_forward(DType dt, void* out, void* att, const void* qkv, float* scratch, int B,
                         int T, int C, int H) override {
    kernels::cuda::attention_forward(blas_, dt, out, att, qkv, scratch, head_pointers(B * H), B, T,
                                     C, H);
  }
  void attention_backward(DType dt, void* dqkv, void* att, float* scratch, const void* dout,
                          const void* qkv, int B, int T, int C, int H) override {
    kernels::cuda::attention_backward(blas_, dt, dqkv, att, scratch, head_pointers(B * H), dout,
                                      qkv, B, T, C, H);
  }
  void flash_attention_forward(DType dt, void* out, float* lse, const void* qkv, int B, int T,
                               int C, int H) override {
    kernels::cuda::flash_attention_forward(dt, out, lse, qkv, B, T, C, H, stream());
  }
  void flash_attention_backward(DType dt, void* dqkv, float* delta, const void* dout,
                                const void* qkv, const void* out, const float* lse, int B, int T,
                                int C, int H) override {
    kernels::cuda::flash_attention_backward(dt, dqkv, delta, dout, qkv, out, lse, B, T, C, H,
                                            stream());
  }
  double crossentropy_forward_backward(DType dt, void* dlogits, const void* logits,
                                       const int32_t* targets, int rows, int V,
                                       size_t divisor) override {
    auto* sum = static_cast<double*>(scratch_);
    kernels::cuda::crossentropy_forward_backward(dt, dlogits, logits, targets, rows, V, divisor,
                                                 partials_, sum, stream());
    SHARDLAB_CUDA_CHECK(
        cudaMemcpyAsync(pinned_, sum, sizeof(double), cudaMemcpyDeviceToHost, stream()));
    stream_->synchronize();
    return *static_cast<double*>(pinned_) / static_cast<double>(divisor);
  }
  void crossentropy_slice_stats(float* stats, const float* logits, const int32_t* targets, int rows,
                                int cols, int valid, int v_begin) override {
    kernels::cuda::crossentropy_slice_stats(stats, logits, targets, rows, cols, valid, v_begin,
                                            stream());
  }
  void crossentropy_slice_grad(float* dlogits, const float* logits, const float* ms,
                               const int32_t* targets, int rows, int cols, int valid, int v_begin,
                               size_t divisor) override {
    kernels::cuda::crossentropy_slice_grad(dlogits, logits, ms, targets, rows, cols, valid, v_begin,
                                           divisor, stream());
  }
  void residual_forward(DType dt, void* out, const void* a, const void* b, size_t n) override {
    kernels::cuda::residual_forward(dt, out, a, b, n, stream());
  }
  void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                  const kernels::AdamWParams& h, int64_t t) override {
    kernels::cuda::adamw_step(param, grad, exp_avg, exp_avg_sq, n, kernels::adamw_scalars(h, t),
                              stream());
  }
  void sgd_step(float* param, const float* grad, size_t n, float lr) override {
    kernels::cuda::sgd_step(param, grad, n, lr, stream());
  }
  void scale(float* x, size_t n, float s) override { kernels::cuda::scale(x, n, s, stream()); }
  void cast(void* dst, DType dst_dt, const void* src, DType src_dt, size_t n) override {
    kernels::cuda::cast(dst, dst_dt, src, src_dt, n, stream());
  }
  void add(void* acc, const void* src, DType dt, size_t n) override {
    kernels::cuda::add(acc, src, dt, n, stream());
  }
  bool all_finite(const void* src, DType dt, size_t n) override {
    auto* flag = static_cast<int*>(scratch_) + 2;  // after the loss's double
    SHARDLAB_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream()));
    kernels::cuda::flag_nonfinite(src, dt, n, flag, stream());
    SHARDLAB_CUDA_CHECK(
        cudaMemcpyAsync(pinned_, flag, sizeof(int), cudaMemcpyDeviceToHost, stream()));
    stream_->synchronize();
    return *static_cast<int*>(pinned_) == 0;
  }

 private:
  static size_t column_sums_bytes(int rows, int cols, size_t value) {
    return static_cast<size_t>(kernels::cuda::column_sum_chunks(rows)) *
           static_cast<size_t>(cols > 0 ? cols : 1) * value;
  }
  // Device scratch for the column sums' partials: grown on demand, kept, outside the
  // Allocator (a few hundred KiB, as cuBLAS's own workspace is). Calls on this rank's
  // stream run in order, so one buffer serves them all.
  void* workspace(size_t bytes) {
    if (bytes > workspace_bytes_) {
      if (workspace_) {
        stream_->synchronize();  // a queued kernel may still read the old one
        SHARDLAB_CUDA_IGNORE(cudaFree(workspace_));
        workspace_ = nullptr;
      }
      ScopedDevice on(index_);
      SHARDLAB_CUDA_CHECK(cudaMalloc(&workspace_, bytes));
      workspace_bytes_ = bytes;
    }
    return workspace_;
  }
  // Device room for attention's 3·n GEMM pointers: grown on demand, kept, outside
  // the Allocator (a few KiB, as cuBLAS's own workspace is).
  void** head_pointers(int n) {
    const size_t want = 3 * static_cast<size_t>(n > 0 ? n : 1);
    if (want > head_pointers_n_) {
      if (head_pointers_) {
        stream_->synchronize();  // the old array may still be read by a queued GEMM
        SHARDLAB_CUDA_IGNORE(cudaFree(head_pointers_));
        head_pointers_ = nullptr;
      }
      ScopedDevice on(index_);
      SHARDLAB_CUDA_CHECK(
          cudaMalloc(reinterpret_cast<void**>(&head_pointers_), want * sizeof(void*)));
      head_pointers_n_ = want;
    }
    return head_pointers_;
  }
  bool owns(const void* p) const {
    std::lock_guard<std::mutex> lock(mu_);
    return in_blocks(owned_, p);
  }

  int index_;
  bool tf32_;                            // --tf32: fp32 GEMMs of the model on tensor cores
  std::unique_ptr<DeviceBackend> host_;  // host-side rounding for upload/download
  std::unique_ptr<CudaStream> stream_;
  cublasHandle_t blas_ = nullptr;
  void* scratch_ = nullptr;     // 64 device bytes: the loss sum, the overflow flag
  void* pinned_ = nullptr;      // 64 pinned host bytes to read them back
  double* partials_ = nullptr;  // the cross-entropy's per-block loss sums
  void** head_pointers_ = nullptr;
  size_t head_pointers_n_ = 0;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::unique_ptr<GpuTimer> timer_;
  Recorder* recorder_ = nullptr;
  mutable std::mutex mu_;
  std::map<void*, size_t> owned_;
  std::mutex constants_mu_;
  std::map<std::string, void*> constants_;  // constant(): outside the Allocator
};

}  // namespace

std::unique_ptr<DeviceBackend> make_cuda_backend(int index, Recorder* recorder, bool tf32) {
  return std::make_unique<CudaBackendImpl>(index, recorder, tf32);
}

}  // namespace shardlab
