// The meta device (see meta_backend.h): fake device addresses from one counter,
// no-op kernels, zeros wherever a value comes back to the host.
#include "core/device/meta_backend.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace shardlab {

namespace {

// Non-canonical on x86-64 and AArch64: a stray dereference faults at once
// instead of scribbling on real memory. One counter for the process, so every
// rank's blocks are distinct (dp copies between its devices' blocks).
constexpr uintptr_t kMetaBase = uintptr_t{0x4000} << 48;
constexpr uintptr_t kMetaSpan = uintptr_t{1} << 60;
std::atomic<uintptr_t> g_next{kMetaBase};

void* fake_block(size_t bytes, size_t align) {
  // Never reused, never overlapping: aliasing tests on pointers (staging's
  // "is in_chunk inside out_full") answer as on the real device.
  // Devices of both alignments share the counter: each block takes room to
  // round its own start up.
  const size_t len = ((bytes ? bytes : 1) + align - 1) / align * align;
  const uintptr_t p = (g_next.fetch_add(len + align) + align - 1) / align * align;
  if (p + len > kMetaBase + kMetaSpan) throw std::bad_alloc();
  return reinterpret_cast<void*>(p);
}

class MetaStream final : public Stream {
 public:
  void synchronize() override {}
};

// Nothing runs, so every duration is zero.
class MetaEvent final : public Event {
 public:
  void record(Stream&) override {}
  void wait(Stream&) override {}
  void synchronize() override {}
  double elapsed_ms_since(const Event&) const override { return 0; }
};

// Every kernel is a no-op. New DeviceBackend calls (flash attention, ...) get a
// no-op override here, beside their kin.
class MetaBackend final : public DeviceBackend {
 public:
  explicit MetaBackend(Device d) : device_(d) {}

  Device device() const override { return device_; }
  void* raw_alloc(size_t bytes) override { return fake_block(bytes, align()); }
  void raw_free(void*, size_t) override {}
  void* raw_alloc_host(size_t bytes) override {
    void* p = std::aligned_alloc(64, ((bytes ? bytes : 1) + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void raw_free_host(void* ptr, size_t) override { std::free(ptr); }
  // Host destinations get what a real copy would be read as: zeros from the
  // device, the bytes themselves from the host.
  void copy(void* dst, const void* src, size_t bytes, CopyKind) override {
    if (!bytes || is_meta_pointer(dst) || dst == src) return;
    if (is_meta_pointer(src))
      std::memset(dst, 0, bytes);
    else
      std::memmove(dst, src, bytes);
  }
  Stream& compute_stream() override { return stream_; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<MetaStream>(); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<MetaEvent>(); }
  void synchronize() override {}
  // True even when standing for the CPU: host code that would write straight
  // into CPU memory (load_rows) must go through the backend here, as on the
  // guarded CPU.
  bool is_device_pointer(const void* p) const override { return is_meta_pointer(p); }
  bool holds_values() const override { return false; }

  void fill_zero(void* dst, size_t bytes) override {
    if (bytes && !is_meta_pointer(dst)) std::memset(dst, 0, bytes);
  }
  void upload(void*, DType, const float*, size_t) override {}
  void download(float* host_dst, const void*, DType, size_t n) override {
    if (n) std::memset(host_dst, 0, n * sizeof(float));
  }

  void linear_forward(float*, const float*, const float*, const float*, int rows, int in,
                      int out) override {
    gemm(rows, in, out, 1);
  }
  void linear_backward(float* din, float* dw, float*, const float*, const float*, const float*,
                       int rows, int in, int out) override {
    gemm(rows, in, out, (din ? 1 : 0) + (dw ? 1 : 0));
  }
  void gelu_forward(float*, const float*, size_t) override {}
  void gelu_backward(float*, const float*, const float*, size_t) override {}
  void batchnorm_forward(float*, float*, float*, const float*, const float*, const float*, float*,
                         float*, int, int, const kernels::BatchNormParams&) override {}
  void batchnorm_backward(float*, float*, float*, const float*, const float*, const float*,
                          const float*, int, int) override {}
  double mse_forward_backward(float*, const float*, const float*, size_t, size_t) override {
    return 0;
  }
  void embedding_forward(DType, void*, const int32_t*, const void*, const void*, int, int, int, int,
                         int, int) override {}
  void embedding_backward(DType, void*, void*, const void*, const int32_t*, int, int, int, int, int,
                          int) override {}
  void layernorm_forward(DType, void*, float*, float*, const void*, const void*, const void*, int,
                         int, double) override {}
  void layernorm_backward(DType, void*, void*, void*, const void*, const void*, const float*,
                          const float*, const void*, int, int, bool) override {}
  void attention_forward(DType, void*, void*, const void*, float*, int B, int T, int C,
                         int) override {
    attention(B, T, C, 4);
  }
  void attention_backward(DType, void*, void*, float*, const void*, const void*, int B, int T,
                          int C, int) override {
    attention(B, T, C, 8);
  }
  void flash_attention_forward(DType, void*, float*, const void*, int B, int T, int C,
                               int) override {
    attention(B, T, C, 4);
  }
  void flash_attention_backward(DType, void*, float*, const void*, const void*, const void*,
                                const float*, int B, int T, int C, int) override {
    attention(B, T, C, 10);
  }
  double crossentropy_forward_backward(DType, void*, const void*, const int32_t*, int, int,
                                       size_t) override {
    return 0;
  }
  void crossentropy_slice_stats(float*, const float*, const int32_t*, int, int, int, int) override {
  }
  void crossentropy_slice_grad(float*, const float*, const float*, const int32_t*, int, int, int,
                               int, size_t) override {}
  void residual_forward(DType, void*, const void*, const void*, size_t) override {}
  void adamw_step(float*, const float*, float*, float*, size_t, const kernels::AdamWParams&,
                  int64_t) override {}
  void sgd_step(float*, const float*, size_t, float) override {}
  void scale(float*, size_t, float) override {}
  void synthetic_normals(float*, uint64_t, int64_t, int64_t, int, int) override {}
  void synthetic_targets(float*, const float*, const float*, int, int) override {}
  // Outside the Allocator on every device: a fake block per key, never counted.
  const void* constant(const std::string& key, const void*, size_t bytes) override {
    std::lock_guard<std::mutex> lock(constants_mu_);
    auto it = constants_.find(key);
    if (it != constants_.end()) return it->second;
    return constants_[key] = fake_block(bytes, align());
  }

  // A GPU runs 2-byte math natively, and its callers then skip the fp32
  // upcasts (and their buffers): the meta device says what its device says.
  bool native_2byte_math() const override { return device_.kind == DeviceKind::cuda; }
  void linear_forward_2byte(DType, void*, const void*, const void*, const void*, int rows, int in,
                            int out) override {
    gemm(rows, in, out, 1);
  }
  void linear_backward_2byte(DType, void* din, void* dw, void*, const void*, const void*,
                             const void*, int rows, int in, int out) override {
    gemm(rows, in, out, (din ? 1 : 0) + (dw ? 1 : 0));
  }
  void gelu_forward_2byte(DType, void*, const void*, size_t) override {}
  void gelu_backward_2byte(DType, void*, const void*, const void*, size_t) override {}

  void cast(void*, DType, const void*, DType, size_t) override {}
  void add(void*, const void*, DType, size_t) override {}
  bool all_finite(const void*, DType, size_t) override { return true; }

  int64_t flops() const { return flops_.load(std::memory_order_relaxed); }

 private:
  void gemm(int rows, int in, int out, int products) {
    flops_.fetch_add(int64_t{2} * products * rows * in * out, std::memory_order_relaxed);
  }
  void attention(int B, int T, int C, int factor) {
    flops_.fetch_add(int64_t{factor} * B * T * T * C, std::memory_order_relaxed);
  }
  std::atomic<int64_t> flops_{0};
  // cudaMalloc returns 256-byte aligned blocks; the CPU backend 64.
  size_t align() const { return device_.kind == DeviceKind::cuda ? 256 : 64; }

  Device device_;
  MetaStream stream_;
  std::mutex constants_mu_;
  std::map<std::string, void*> constants_;
};

// Stamps compute spans with the FLOPs counted inside them (see meta_backend.h).
class MetaFlopClock final : public DeviceClock {
 public:
  MetaFlopClock(const MetaBackend& meta, Recorder& rec, OpLog& log)
      : meta_(meta), rec_(rec), log_(log) {}
  int begin() override {
    std::lock_guard<std::mutex> lock(mu_);
    started_.push_back(meta_.flops());
    return static_cast<int>(started_.size() - 1);
  }
  void end(int token, Span span) override {
    int64_t flops = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      flops = meta_.flops() - started_[static_cast<size_t>(token)];
    }
    MetaOp op;
    op.kind = span.kind;
    op.step = span.step;
    op.layer = span.layer;
    op.micro_batch = span.micro_batch;
    op.flops = flops;
    log_.add(op);
    rec_.add_span(span);
  }

 private:
  const MetaBackend& meta_;
  Recorder& rec_;
  OpLog& log_;
  std::mutex mu_;
  std::vector<int64_t> started_;
};

}  // namespace

int64_t meta_flops(const DeviceBackend& meta) {
  return dynamic_cast<const MetaBackend&>(meta).flops();
}

std::unique_ptr<DeviceClock> make_meta_flop_clock(const DeviceBackend& meta, Recorder& rec,
                                                  OpLog& log) {
  return std::make_unique<MetaFlopClock>(dynamic_cast<const MetaBackend&>(meta), rec, log);
}

bool is_meta_pointer(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a >= kMetaBase && a < g_next.load(std::memory_order_relaxed);
}

std::unique_ptr<DeviceBackend> make_meta_backend(Device stands_for) {
  return std::make_unique<MetaBackend>(stands_for);
}

}  // namespace shardlab
