// The CPU device: memory from aligned_alloc, streams and events that are
// always idle (work runs when issued), and the math of kernels/cpu.h.
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/device/device.h"
#include "core/device/host_convert.h"
#include "kernels/cpu.h"
#include "kernels/flash_attention.h"
#include "kernels/precision.h"
#include "kernels/storage.h"
#include "kernels/transformer.h"

namespace shardlab {

namespace {

class CpuStream final : public Stream {
 public:
  void synchronize() override {}
};

// On the CPU every operation has finished when it returns, so an event is the
// host time at which it was recorded.
class CpuEvent final : public Event {
 public:
  void record(Stream&) override { t_ns_ = now_ns(); }
  void wait(Stream&) override {}
  void synchronize() override {}
  double elapsed_ms_since(const Event& start) const override {
    return (t_ns_ - static_cast<const CpuEvent&>(start).t_ns_) / 1e6;
  }

 private:
  int64_t t_ns_ = 0;
};

// A device buffer as the storage type a kernel template is instantiated on.
template <typename S>
S* as(void* p) {
  return static_cast<S*>(p);
}
template <typename S>
const S* as(const void* p) {
  return static_cast<const S*>(p);
}

class CpuBackend final : public DeviceBackend {
 public:
  Device device() const override { return Device{DeviceKind::cpu, 0}; }
  void* raw_alloc(size_t bytes) override { return checked(std::aligned_alloc(64, round(bytes))); }
  void raw_free(void* ptr, size_t) override { std::free(ptr); }
  void* raw_alloc_host(size_t bytes) override { return raw_alloc(bytes); }
  void raw_free_host(void* ptr, size_t bytes) override { raw_free(ptr, bytes); }
  void copy(void* dst, const void* src, size_t bytes, CopyKind) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  Stream& compute_stream() override { return stream_; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CpuStream>(); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }
  void synchronize() override {}

  void fill_zero(void* dst, size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
  }
  void upload(void* dst, DType dt, const float* host_src, size_t n) override {
    cast(dst, dt, host_src, DType::f32, n);
  }
  void download(float* host_dst, const void* src, DType dt, size_t n) override {
    cast(host_dst, DType::f32, src, dt, n);
  }

  void linear_forward(float* out, const float* in, const float* w, const float* b, int rows,
                      int in_dim, int out_dim) override {
    kernels::linear_forward(out, in, w, b, rows, in_dim, out_dim);
  }
  void linear_backward(float* din, float* dw, float* db, const float* dout, const float* in,
                       const float* w, int rows, int in_dim, int out_dim) override {
    kernels::linear_backward(din, dw, db, dout, in, w, rows, in_dim, out_dim);
  }
  void gelu_forward(float* out, const float* in, size_t n) override {
    kernels::gelu_forward(out, in, n);
  }
  void gelu_backward(float* din, const float* dout, const float* in, size_t n) override {
    kernels::gelu_backward(din, dout, in, n);
  }
  void batchnorm_forward(float* out, float* xhat, float* invstd, const float* in,
                         const float* weight, const float* bias, float* running_mean,
                         float* running_var, int rows, int cols,
                         const kernels::BatchNormParams& p) override {
    kernels::batchnorm_forward(out, xhat, invstd, in, weight, bias, running_mean, running_var, rows,
                               cols, p);
  }
  void batchnorm_backward(float* din, float* dweight, float* dbias, const float* dout,
                          const float* xhat, const float* invstd, const float* weight, int rows,
                          int cols) override {
    kernels::batchnorm_backward(din, dweight, dbias, dout, xhat, invstd, weight, rows, cols);
  }
  double mse_forward_backward(float* dpred, const float* pred, const float* target, size_t n,
                              size_t divisor) override {
    return kernels::mse_forward_backward(dpred, pred, target, n, divisor);
  }
  // The GPT-2 ops: one template per op, instantiated on dt's storage type.
  void embedding_forward(DType dt, void* out, const int32_t* tokens, const void* wte,
                         const void* wpe, int B, int T, int C, int V, int v_begin,
                         int v_count) override {
    kernels::with_storage(dt, [&](auto tag) {
      using S = decltype(tag);
      kernels::embedding_forward(as<S>(out), tokens, as<S>(wte), as<S>(wpe), B, T, C, V, v_begin,
                                 v_count);
    });
  }
  void embedding_backward(DType dt, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                          int B, int T, int C, int V, int v_begin, int v_count) override {
    kernels::with_storage(dt, [&](auto tag) {
      using S = decltype(tag);
      kernels::embedding_backward(as<S>(dwte), as<S>(dwpe), as<S>(dout), tokens, B, T, C, V,
                                  v_begin, v_count);
    });
  }
  void layernorm_forward(DType dt, void* out, float* mean, float* rstd, const void* in,
                         const void* weight, const void* bias, int rows, int cols,
                         double eps) override {
    kernels::with_storage(dt, [&](auto tag) {
      using S = decltype(tag);
      kernels::layernorm_forward(as<S>(out), mean, rstd, as<S>(in), as<S>(weight), as<S>(bias),
                                 rows, cols, eps);
    });
  }
  void layernorm_backward(DType dt, void* din, void* dweight, void* dbias, const void* dout,
                          const void* in, const float* mean, const float* rstd, const void* weight,
                          int rows, int cols, bool accumulate) override {
    kernels::with_storage(dt, [&](auto tag) {
      using S = decltype(tag);
      kernels::layernorm_backward(as<S>(din), as<S>(dweight), as<S>(dbias), as<S>(dout), as<S>(in),
                                  mean, rstd, as<S>(weight), rows, cols, accumulate);
    });
  }
  void attention_forward(DType dt, void* out, void* att, const void* qkv, float* scratch, int B,
                         int T, int C, int H) override {
    kernels::with_storage(dt, [&](auto tag) {
      using S = decltype(tag);
      kernels::attention_forward(as<S>(out), as<S>(att), as<S>(qkv), scratch, B, T, C, H);
    });
  }
  void attention_backward(DType dt, void* dqkv, void* att, float* scratch, const void* dout,
                          const void* qkv, int B, int T, int C, int H) override {
    kernels::with_storage(dt, [&](auto tag) {
      using S = decltype(tag);
      kernels::attention_backward(as<S>(dqkv), as<S>(att), scratch, as<S>(dout), as<S>(qkv), B, T,
                                  C, H);
    });
  }
  void flash_attention_forward(DType dt, void* out, float* lse, const void* qkv, int B, int T,
                               int C, int H) override {
    kernels::with_storage(dt, [&](auto tag) {
      using S = decltype(tag);
      kernels::flash_attention_forward(as<S>(out), lse, as<S>(qkv), B, T, C, H);
    });
  }
  void flash_attention_backward(DType dt, void* dqkv, float* delta, const void* dout,
                                const void* qkv, const void* out, const float* lse, int B, int T,
                                int C, int H) override {
    kernels::with_storage(dt, [&](auto tag) {
      using S = decltype(tag);
      kernels::flash_attention_backward(as<S>(dqkv), delta, as<S>(dout), as<S>(qkv), as<S>(out),
                                        lse, B, T, C, H);
    });
  }
  double crossentropy_forward_backward(DType dt, void* dlogits, const void* logits,
                                       const int32_t* targets, int rows, int V,
                                       size_t divisor) override {
    return kernels::with_storage(dt, [&](auto tag) {
      using S = decltype(tag);
      return kernels::crossentropy_forward_backward(as<S>(dlogits), as<S>(logits), targets, rows, V,
                                                    divisor);
    });
  }
  void crossentropy_slice_stats(float* stats, const float* logits, const int32_t* targets, int rows,
                                int cols, int valid, int v_begin) override {
    kernels::crossentropy_slice_stats(stats, logits, targets, rows, cols, valid, v_begin);
  }
  void crossentropy_slice_grad(float* dlogits, const float* logits, const float* ms,
                               const int32_t* targets, int rows, int cols, int valid, int v_begin,
                               size_t divisor) override {
    kernels::crossentropy_slice_grad(dlogits, logits, ms, targets, rows, cols, valid, v_begin,
                                     divisor);
  }
  void residual_forward(DType dt, void* out, const void* a, const void* b, size_t n) override {
    kernels::with_storage(dt, [&](auto tag) {
      using S = decltype(tag);
      kernels::residual_forward(as<S>(out), as<S>(a), as<S>(b), n);
    });
  }

  void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                  const kernels::AdamWParams& h, int64_t t) override {
    kernels::adamw_step(param, grad, exp_avg, exp_avg_sq, n, h, t);
  }
  void sgd_step(float* param, const float* grad, size_t n, float lr) override {
    kernels::sgd_step(param, grad, n, lr);
  }
  void scale(float* x, size_t n, float s) override { kernels::scale(x, n, s); }
  void synthetic_normals(float* x, uint64_t seed, int64_t step, int64_t row_begin, int rows,
                         int dim) override {
    kernels::synthetic_normals(x, seed, step, row_begin, rows, dim);
  }
  void synthetic_targets(float* y, const float* x, const float* t, int rows, int dim) override {
    kernels::linear_forward<float>(y, x, t, nullptr, rows, dim, dim);
    kernels::tanh_forward(y, y, static_cast<size_t>(rows) * dim);
  }
  const void* constant(const std::string&, const void* host, size_t) override { return host; }

  void cast(void* dst, DType dst_dt, const void* src, DType src_dt, size_t n) override {
    if (dst_dt == src_dt) return copy(dst, src, n * dtype_size(dst_dt), CopyKind::host_to_host);
    if (src_dt == DType::f32) return store_from_f32(dst, dst_dt, static_cast<const float*>(src), n);
    if (dst_dt == DType::f32) return load_to_f32(static_cast<float*>(dst), src, src_dt, n);
    // bf16 <-> fp16 goes through fp32.
    std::vector<float> tmp(n);
    load_to_f32(tmp.data(), src, src_dt, n);
    store_from_f32(dst, dst_dt, tmp.data(), n);
  }
  void add(void* acc, const void* src, DType dt, size_t n) override {
    if (dt == DType::f32) {
      auto* a = static_cast<float*>(acc);
      const auto* s = static_cast<const float*>(src);
      for (size_t i = 0; i < n; ++i) a[i] += s[i];
    } else if (dt == DType::bf16) {
      kernels::sum_bf16(static_cast<uint16_t*>(acc), static_cast<const uint16_t*>(acc),
                        static_cast<const uint16_t*>(src), n);
    } else {
      kernels::sum_fp16(static_cast<uint16_t*>(acc), static_cast<const uint16_t*>(acc),
                        static_cast<const uint16_t*>(src), n);
    }
  }
  bool all_finite(const void* src, DType dt, size_t n) override {
    return shardlab::all_finite(src, dt, n);
  }

 private:
  static size_t round(size_t bytes) { return ((bytes + 63) / 64) * 64; }
  static void* checked(void* p) {
    if (!p) throw std::bad_alloc();
    return p;
  }
  CpuStream stream_;
};

}  // namespace

std::unique_ptr<DeviceBackend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

// The 2-byte calls exist only where native_2byte_math() says so (a GPU's tensor cores).
namespace {
[[noreturn]] void no_native_2byte(const char* call) {
  throw std::logic_error(std::string("DeviceBackend::") + call +
                         ": this device has no 2-byte math (native_2byte_math() is false); "
                         "upcast to fp32 instead");
}
}  // namespace
void DeviceBackend::linear_forward_2byte(DType, void*, const void*, const void*, const void*, int,
                                         int, int) {
  no_native_2byte("linear_forward_2byte");
}
void DeviceBackend::linear_backward_2byte(DType, void*, void*, void*, const void*, const void*,
                                          const void*, int, int, int) {
  no_native_2byte("linear_backward_2byte");
}
void DeviceBackend::gelu_forward_2byte(DType, void*, const void*, size_t) {
  no_native_2byte("gelu_forward_2byte");
}
void DeviceBackend::gelu_backward_2byte(DType, void*, const void*, const void*, size_t) {
  no_native_2byte("gelu_backward_2byte");
}

}  // namespace shardlab
