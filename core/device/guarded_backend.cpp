// The guarded CPU device (see device.h): a test instrument for the GPU path
// that runs anywhere. Every device block is an mmap'ed region that is
// readable only while some backend call is running.
#include <sys/mman.h>

#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/device/device.h"

namespace shardlab {

class MemoryGuard {
 public:
  void* map(size_t bytes) {
    const size_t len = round(bytes);
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[p] = len;
    if (open_ == 0) mprotect(p, len, PROT_NONE);
    return p;
  }
  void unmap(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(p);
    if (it == blocks_.end()) return;
    munmap(p, it->second);
    blocks_.erase(it);
  }
  bool contains(const void* p) const {
    std::lock_guard<std::mutex> lock(mu_);
    return in_blocks(blocks_, p);
  }
  // Calls nest and overlap across rank threads: memory is open while any runs.
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    if (open_++ == 0) protect_all(PROT_READ | PROT_WRITE);
  }
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--open_ == 0) protect_all(PROT_NONE);
  }

 private:
  static size_t round(size_t bytes) {
    const size_t page = 4096;
    return bytes ? (bytes + page - 1) / page * page : page;
  }
  void protect_all(int prot) {
    for (auto& [p, len] : blocks_) mprotect(p, len, prot);
  }
  mutable std::mutex mu_;
  std::map<void*, size_t> blocks_;
  int open_ = 0;
};

std::shared_ptr<MemoryGuard> make_memory_guard() {
  return std::make_shared<MemoryGuard>();
}

namespace {

class GuardedBackend final : public DeviceBackend {
 public:
  explicit GuardedBackend(std::shared_ptr<MemoryGuard> guard)
      : guard_(std::move(guard)), cpu_(make_cpu_backend()) {}

  Device device() const override { return Device{DeviceKind::cpu, 0}; }
  void* raw_alloc(size_t bytes) override { return guard_->map(bytes); }
  void raw_free(void* ptr, size_t) override { guard_->unmap(ptr); }
  void* raw_alloc_host(size_t bytes) override { return cpu_->raw_alloc_host(bytes); }
  void raw_free_host(void* ptr, size_t bytes) override { cpu_->raw_free_host(ptr, bytes); }
  Stream& compute_stream() override { return cpu_->compute_stream(); }
  std::unique_ptr<Stream> create_stream() override { return cpu_->create_stream(); }
  std::unique_ptr<Event> create_event() override { return cpu_->create_event(); }
  void synchronize() override {}
  bool is_device_pointer(const void* p) const override { return guard_->contains(p); }

  // Every call that reads or writes memory opens the guard around the CPU version.
  void copy(void* dst, const void* src, size_t bytes, CopyKind kind) override {
    Open o(*guard_);
    cpu_->copy(dst, src, bytes, kind);
  }
  void fill_zero(void* dst, size_t bytes) override {
    Open o(*guard_);
    cpu_->fill_zero(dst, bytes);
  }
  void upload(void* dst, DType dt, const float* src, size_t n) override {
    Open o(*guard_);
    cpu_->upload(dst, dt, src, n);
  }
  void download(float* dst, const void* src, DType dt, size_t n) override {
    Open o(*guard_);
    cpu_->download(dst, src, dt, n);
  }
  void linear_forward(float* out, const float* in, const float* w, const float* b, int rows,
                      int in_dim, int out_dim) override {
    Open o(*guard_);
    cpu_->linear_forward(out, in, w, b, rows, in_dim, out_dim);
  }
  void linear_backward(float* din, float* dw, float* db, const float* dout, const float* in,
                       const float* w, int rows, int in_dim, int out_dim) override {
    Open o(*guard_);
    cpu_->linear_backward(din, dw, db, dout, in, w, rows, in_dim, out_dim);
  }
  void gelu_forward(float* out, const float* in, size_t n) override {
    Open o(*guard_);
    cpu_->gelu_forward(out, in, n);
  }
  void gelu_backward(float* din, const float* dout, const float* in, size_t n) override {
    Open o(*guard_);
    cpu_->gelu_backward(din, dout, in, n);
  }
  void batchnorm_forward(float* out, float* xhat, float* invstd, const float* in,
                         const float* weight, const float* bias, float* running_mean,
                         float* running_var, int rows, int cols,
                         const kernels::BatchNormParams& p) override {
    Open o(*guard_);
    cpu_->batchnorm_forward(out, xhat, invstd, in, weight, bias, running_mean, running_var, rows,
                            cols, p);
  }
  void batchnorm_backward(float* din, float* dweight, float* dbias, const float* dout,
                          const float* xhat, const float* invstd, const float* weight, int rows,
                          int cols) override {
    Open o(*guard_);
    cpu_->batchnorm_backward(din, dweight, dbias, dout, xhat, invstd, weight, rows, cols);
  }
  double mse_forward_backward(float* dpred, const float* pred, const float* target, size_t n,
                              size_t divisor) override {
    Open o(*guard_);
    return cpu_->mse_forward_backward(dpred, pred, target, n, divisor);
  }
  void embedding_forward(DType dt, void* out, const int32_t* tokens, const void* wte,
                         const void* wpe, int B, int T, int C, int V, int v_begin,
                         int v_count) override {
    Open o(*guard_);
    cpu_->embedding_forward(dt, out, tokens, wte, wpe, B, T, C, V, v_begin, v_count);
  }
  void embedding_backward(DType dt, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                          int B, int T, int C, int V, int v_begin, int v_count) override {
    Open o(*guard_);
    cpu_->embedding_backward(dt, dwte, dwpe, dout, tokens, B, T, C, V, v_begin, v_count);
  }
  void layernorm_forward(DType dt, void* out, float* mean, float* rstd, const void* in,
                         const void* weight, const void* bias, int rows, int cols,
                         double eps) override {
    Open o(*guard_);
    cpu_->layernorm_forward(dt, out, mean, rstd, in, weight, bias, rows, cols, eps);
  }
  void layernorm_backward(DType dt, void* din, void* dweight, void* dbias, const void* dout,
                          const void* in, const float* mean, const float* rstd, const void* weight,
                          int rows, int cols, bool accumulate) override {
    Open o(*guard_);
    cpu_->layernorm_backward(dt, din, dweight, dbias, dout, in, mean, rstd, weight, rows, cols,
                             accumulate);
  }
  void attention_forward(DType dt, void* out, void* att, const void* qkv, float* scratch, int B,
                         int T, int C, int H) override {
    Open o(*guard_);
    cpu_->attention_forward(dt, out, att, qkv, scratch, B, T, C, H);
  }
  void attention_backward(DType dt, void* dqkv, void* att, float* scratch, const void* dout,
                          const void* qkv, int B, int T, int C, int H) override {
    Open o(*guard_);
    cpu_->attention_backward(dt, dqkv, att, scratch, dout, qkv, B, T, C, H);
  }
  void flash_attention_forward(DType dt, void* out, float* lse, const void* qkv, int B, int T,
                               int C, int H) override {
    Open o(*guard_);
    cpu_->flash_attention_forward(dt, out, lse, qkv, B, T, C, H);
  }
  void flash_attention_backward(DType dt, void* dqkv, float* delta, const void* dout,
                                const void* qkv, const void* out, const float* lse, int B, int T,
                                int C, int H) override {
    Open o(*guard_);
    cpu_->flash_attention_backward(dt, dqkv, delta, dout, qkv, out, lse, B, T, C, H);
  }
  double crossentropy_forward_backward(DType dt, void* dlogits, const void* logits,
                                       const int32_t* targets, int rows, int V,
                                       size_t divisor) override {
    Open o(*guard_);
    return cpu_->crossentropy_forward_backward(dt, dlogits, logits, targets, rows, V, divisor);
  }
  void crossentropy_slice_stats(float* stats, const float* logits, const int32_t* targets, int rows,
                                int cols, int valid, int v_begin) override {
    Open o(*guard_);
    cpu_->crossentropy_slice_stats(stats, logits, targets, rows, cols, valid, v_begin);
  }
  void crossentropy_slice_grad(float* dlogits, const float* logits, const float* ms,
                               const int32_t* targets, int rows, int cols, int valid, int v_begin,
                               size_t divisor) override {
    Open o(*guard_);
    cpu_->crossentropy_slice_grad(dlogits, logits, ms, targets, rows, cols, valid, v_begin,
                                  divisor);
  }
  void residual_forward(DType dt, void* out, const void* a, const void* b, size_t n) override {
    Open o(*guard_);
    cpu_->residual_forward(dt, out, a, b, n);
  }
  void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                  const kernels::AdamWParams& h, int64_t t) override {
    Open o(*guard_);
    cpu_->adamw_step(param, grad, exp_avg, exp_avg_sq, n, h, t);
  }
  void sgd_step(float* param, const float* grad, size_t n, float lr) override {
    Open o(*guard_);
    cpu_->sgd_step(param, grad, n, lr);
  }
  void scale(float* x, size_t n, float s) override {
    Open o(*guard_);
    cpu_->scale(x, n, s);
  }
  void cast(void* dst, DType dst_dt, const void* src, DType src_dt, size_t n) override {
    Open o(*guard_);
    cpu_->cast(dst, dst_dt, src, src_dt, n);
  }
  void add(void* acc, const void* src, DType dt, size_t n) override {
    Open o(*guard_);
    cpu_->add(acc, src, dt, n);
  }
  bool all_finite(const void* src, DType dt, size_t n) override {
    Open o(*guard_);
    return cpu_->all_finite(src, dt, n);
  }
  void synthetic_normals(float* x, uint64_t seed, int64_t step, int64_t row_begin, int rows,
                         int dim) override {
    Open o(*guard_);
    cpu_->synthetic_normals(x, seed, step, row_begin, rows, dim);
  }
  void synthetic_targets(float* y, const float* x, const float* t, int rows, int dim) override {
    Open o(*guard_);
    cpu_->synthetic_targets(y, x, t, rows, dim);
  }
  // Closed memory like every other buffer here, so host code cannot read it either.
  const void* constant(const std::string& key, const void* host, size_t bytes) override {
    std::lock_guard<std::mutex> lock(constants_mu_);
    auto it = constants_.find(key);
    if (it != constants_.end()) return it->second.first;
    void* p = guard_->map(bytes);
    {
      Open o(*guard_);
      std::memcpy(p, host, bytes);
    }
    constants_[key] = {p, bytes};
    return p;
  }
  ~GuardedBackend() override {
    for (auto& [key, block] : constants_) guard_->unmap(block.first);
  }

 private:
  std::mutex constants_mu_;
  std::map<std::string, std::pair<void*, size_t>> constants_;
  struct Open {
    explicit Open(MemoryGuard& g) : g_(g) { g_.open(); }
    ~Open() { g_.close(); }
    MemoryGuard& g_;
  };
  std::shared_ptr<MemoryGuard> guard_;
  std::unique_ptr<DeviceBackend> cpu_;
};

}  // namespace

std::unique_ptr<DeviceBackend> make_guarded_cpu_backend(std::shared_ptr<MemoryGuard> guard) {
  return std::make_unique<GuardedBackend>(std::move(guard));
}

}  // namespace shardlab
