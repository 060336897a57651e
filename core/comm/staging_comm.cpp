// Host staging around a host communicator (see staging_comm.h). What the
// learner should notice in the trace: each collective grows a copy to the host
// before it and a copy back after it, which NCCL on one GPU per rank avoids.
#include "core/comm/staging_comm.h"

#include <vector>

#include "core/comm/work_state.h"

namespace shardlab {

namespace {

// One host copy of a device buffer, accounted when there is an allocator.
class Staged {
 public:
  Staged(Allocator* alloc, const char* name, size_t bytes) : bytes_(bytes) {
    if (alloc && bytes) {
      // Accounted in 2-byte units (the allocator's smallest dtype).
      tensor_ =
          alloc->alloc(name, MemCategory::comm_buffers, (bytes + 1) / 2, DType::bf16, Pool::host);
      ptr_ = tensor_.raw();
    } else {
      plain_.resize(bytes ? bytes : 1);
      ptr_ = plain_.data();
    }
  }
  char* get() { return static_cast<char*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  Tensor tensor_;
  std::vector<char> plain_;
  void* ptr_ = nullptr;
};

class StagingComm final : public Comm {
 public:
  StagingComm(std::unique_ptr<Comm> inner, DeviceBackend& device, Allocator* alloc, Recorder* rec)
      : Comm(inner->group()), inner_(std::move(inner)), device_(device), alloc_(alloc), rec_(rec) {}

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  std::string backend_name() const override { return inner_->backend_name() + "+host-staging"; }
  void close_connections() override { inner_->close_connections(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  CommStats stats() const override { return inner_->stats(); }

  Work all_reduce_async(void* buf, size_t count, DType dt, CommMeta meta) override {
    if (!on_device(buf)) return inner_->all_reduce_async(buf, count, dt, meta);
    auto s = to_host("staging.all_reduce", buf, count * dtype_size(dt), meta);
    Work w = inner_->all_reduce_async(s->get(), count, dt, meta);
    return back(std::move(w), s, buf, meta);
  }

  Work reduce_scatter_async(void* in_full, void* out_chunk, std::vector<size_t> counts, DType dt,
                            CommMeta meta) override {
    if (!on_device(in_full) && !on_device(out_chunk))
      return inner_->reduce_scatter_async(in_full, out_chunk, std::move(counts), dt, meta);
    const size_t es = dtype_size(dt);
    size_t total = 0;
    for (size_t c : counts) total += c;
    const size_t mine = rank() < static_cast<int>(counts.size()) ? counts[rank()] : 0;
    auto in = to_host("staging.reduce_scatter.in", in_full, total * es, meta);
    auto out = std::make_shared<Staged>(alloc_, "staging.reduce_scatter.out", mine * es);
    Work w = inner_->reduce_scatter_async(in->get(), out->get(), std::move(counts), dt, meta);
    return back(std::move(w), out, out_chunk, meta, in);
  }

  Work all_gather_async(const void* in_chunk, void* out_full, std::vector<size_t> counts, DType dt,
                        CommMeta meta) override {
    if (!on_device(in_chunk) && !on_device(out_full))
      return inner_->all_gather_async(in_chunk, out_full, std::move(counts), dt, meta);
    const size_t es = dtype_size(dt);
    size_t total = 0;
    for (size_t c : counts) total += c;
    const size_t mine = rank() < static_cast<int>(counts.size()) ? counts[rank()] : 0;
    // ZeRO passes its own slot of out_full as in_chunk: then one staging buffer serves both.
    const char* in = static_cast<const char*>(in_chunk);
    const char* full = static_cast<const char*>(out_full);
    auto out = std::make_shared<Staged>(alloc_, "staging.all_gather", total * es);
    std::shared_ptr<Staged> in_copy;
    const char* host_in;
    if (in >= full && in + mine * es <= full + total * es && mine) {
      copy(out->get() + (in - full), in, mine * es, CopyKind::device_to_host, meta);
      host_in = out->get() + (in - full);
    } else {
      in_copy = to_host("staging.all_gather.in", in_chunk, mine * es, meta);
      host_in = in_copy->get();
    }
    Work w = inner_->all_gather_async(host_in, out->get(), std::move(counts), dt, meta);
    return back(std::move(w), out, out_full, meta, in_copy);
  }

  Work broadcast_async(void* buf, size_t count, DType dt, int root, CommMeta meta) override {
    if (!on_device(buf)) return inner_->broadcast_async(buf, count, dt, root, meta);
    auto s = to_host("staging.broadcast", buf, count * dtype_size(dt), meta);
    Work w = inner_->broadcast_async(s->get(), count, dt, root, meta);
    return back(std::move(w), s, buf, meta);
  }

  Work reduce_async(void* buf, size_t count, DType dt, int root, CommMeta meta) override {
    if (!on_device(buf)) return inner_->reduce_async(buf, count, dt, root, meta);
    auto s = to_host("staging.reduce", buf, count * dtype_size(dt), meta);
    Work w = inner_->reduce_async(s->get(), count, dt, root, meta);
    // Only the root's buffer changes; the others keep theirs, as documented.
    if (rank() != root) return keep_alive(std::move(w), s);
    return back(std::move(w), s, buf, meta);
  }

  Work send_async(const void* buf, size_t bytes, int dst, int tag, CommMeta meta) override {
    if (!on_device(buf)) return inner_->send_async(buf, bytes, dst, tag, meta);
    auto s = to_host("staging.send", buf, bytes, meta);
    return keep_alive(inner_->send_async(s->get(), bytes, dst, tag, meta), s);
  }

  Work recv_async(void* buf, size_t bytes, int src, int tag, CommMeta meta) override {
    if (!on_device(buf)) return inner_->recv_async(buf, bytes, src, tag, meta);
    auto s = std::make_shared<Staged>(alloc_, "staging.recv", bytes);
    return back(inner_->recv_async(s->get(), bytes, src, tag, meta), s, buf, meta);
  }

  Work barrier_async() override { return inner_->barrier_async(); }

 private:
  bool on_device(const void* p) const { return p && device_.is_device_pointer(p); }

  void copy(void* dst, const void* src, size_t bytes, CopyKind kind, CommMeta meta) {
    if (!bytes) return;
    ScopedSpan span(rec_, Lane::comm,
                    kind == CopyKind::device_to_host ? SpanKind::copy_d2h : SpanKind::copy_h2d,
                    meta.layer, meta.micro_batch, static_cast<int64_t>(bytes));
    device_.copy(dst, src, bytes, kind);
  }

  std::shared_ptr<Staged> to_host(const char* name, const void* dev, size_t bytes, CommMeta meta) {
    auto s = std::make_shared<Staged>(alloc_, name, bytes);
    copy(s->get(), dev, bytes, CopyKind::device_to_host, meta);
    return s;
  }

  // Completes in wait(): the host op, then the result copied back to the device.
  Work back(Work w, std::shared_ptr<Staged> s, void* dev, CommMeta meta,
            std::shared_ptr<Staged> also_keep = nullptr) {
    return deferred_work([this, w, s, dev, meta, also_keep]() mutable -> std::string {
      try {
        w.wait();
      } catch (const CommError& e) {
        return e.what();
      }
      try {
        copy(dev, s->get(), s->bytes(), CopyKind::host_to_device, meta);
      } catch (const std::exception& e) {
        return "rank " + std::to_string(rank()) + ": copying a staged result back: " + e.what();
      }
      return "";
    });
  }

  // The staging buffer must outlive the host op (a send reads it until done).
  Work keep_alive(Work w, std::shared_ptr<Staged> s) {
    return deferred_work([w, s]() mutable -> std::string {
      try {
        w.wait();
      } catch (const CommError& e) {
        return e.what();
      }
      return "";
    });
  }

  std::unique_ptr<Comm> inner_;
  DeviceBackend& device_;
  Allocator* alloc_;
  Recorder* rec_;
};

}  // namespace

std::unique_ptr<Comm> make_staging_comm(std::unique_ptr<Comm> host_comm, DeviceBackend& device,
                                        Allocator* alloc, Recorder* recorder) {
  return std::make_unique<StagingComm>(std::move(host_comm), device, alloc, recorder);
}

}  // namespace shardlab
