// Optimizer state allocation, fp32 master weights, and dispatch to the kernels.
#include "core/model/optimizer.h"

#include <future>
#include <memory>
#include <stdexcept>

#include "core/io/nvme_store.h"
#include "core/model/precision.h"

namespace shardlab {

Optimizer::~Optimizer() = default;

Optimizer::Optimizer(const OptimizerConfig& cfg, Allocator& alloc, const std::vector<Range>& ranges,
                     DType param_dtype, Pool pool, OnDisk disk)
    : cfg_(cfg), alloc_(alloc), ranges_(ranges), param_dtype_(param_dtype), pool_(pool) {
  if (disk.store) {
    // Nothing in memory: a region per state tensor, its space reserved now
    // (a disk too small says so before the first step) and read back as
    // zeros, the moments' start. The owner stores the masters (store_master).
    store_ = disk.store;
    rec_ = disk.rec;
    layer_of_ = std::move(disk.layer_of);
    layer_of_.resize(ranges.size(), -1);
    param_region_ = std::move(disk.param_region);
    if (!param_region_.empty() && param_region_.size() != ranges.size())
      throw std::logic_error("Optimizer: a parameter region per range, or none");
    param_.resize(param_region_.size());
    if (mixed()) master_.resize(ranges.size());
    if (cfg.kind == OptimizerKind::adamw) {
      exp_avg_.resize(ranges.size());
      exp_avg_sq_.resize(ranges.size());
    }
    for (const Part& p : parts()) {
      region_.emplace_back();
      for (const Range& r : ranges)
        region_.back().push_back(store_->add(r.name + p.suffix, r.numel * sizeof(float)));
    }
    return;
  }
  for (const Range& r : ranges) {
    if (mixed())
      master_.push_back(
          alloc.alloc(r.name + ".master", MemCategory::optimizer_state, r.numel, DType::f32, pool));
    if (cfg.kind != OptimizerKind::adamw) continue;  // SGD keeps no other state
    exp_avg_.push_back(
        alloc.alloc(r.name + ".exp_avg", MemCategory::optimizer_state, r.numel, DType::f32, pool));
    exp_avg_sq_.push_back(alloc.alloc(r.name + ".exp_avg_sq", MemCategory::optimizer_state, r.numel,
                                      DType::f32, pool));
  }
}

DeviceBackend& Optimizer::backend() const {
  if (pool_ == Pool::host) {
    // Host-pool state is host memory even beside a GPU: step it with the
    // CPU kernels, as ZeRO-Offload's CPU Adam does, not with device kernels.
    static const std::unique_ptr<DeviceBackend> host = make_cpu_backend();
    return *host;
  }
  return alloc_.backend();
}

// Swapped (--offload nvme:DIR), these read and write the store: a checkpoint
// saves and restores the state where it lives. The master is part 0 when mixed.

void Optimizer::load_master(size_t i, const float* host_src) {
  if (store_) return disk_write(0, i, host_src, ranges_[i].numel);
  write_from_host(backend(), master_[i], 0, host_src, ranges_[i].numel);
}

void Optimizer::load_master(size_t i, const ParamSource& init, size_t from) {
  if (store_)
    throw std::logic_error("Optimizer::load_master: on disk, masters come by store_master");
  init.write_to(backend(), master_[i], 0, from, ranges_[i].numel);
}

void Optimizer::read_master(size_t i, float* host_dst) const {
  if (store_) return disk_read(0, i, host_dst, ranges_[i].numel);
  read_to_host(backend(), host_dst, master_[i], 0, ranges_[i].numel);
}

void Optimizer::read_moment(size_t i, bool second, float* host_dst, size_t n) const {
  if (store_) return disk_read((mixed() ? 1 : 0) + (second ? 1 : 0), i, host_dst, n);
  read_to_host(backend(), host_dst, second ? exp_avg_sq_[i] : exp_avg_[i], 0, n);
}

void Optimizer::load_moment(size_t i, bool second, const float* host_src, size_t n) {
  if (store_) return disk_write((mixed() ? 1 : 0) + (second ? 1 : 0), i, host_src, n);
  write_from_host(backend(), second ? exp_avg_sq_[i] : exp_avg_[i], 0, host_src, n);
}

std::vector<Optimizer::Part> Optimizer::parts() {
  std::vector<Part> out;
  if (mixed()) out.push_back({".master", &master_});
  if (cfg_.kind == OptimizerKind::adamw) {
    out.push_back({".exp_avg", &exp_avg_});
    out.push_back({".exp_avg_sq", &exp_avg_sq_});
  }
  return out;
}

void Optimizer::disk_read(size_t part, size_t i, float* host_dst, size_t n) const {
  const int region = region_.at(part).at(i);
  store_->submit([&] { store_->read(region, host_dst, n * sizeof(float)); }).get();
}

void Optimizer::disk_write(size_t part, size_t i, const float* host_src, size_t n) {
  const int region = region_.at(part).at(i);
  store_->submit([&] { store_->write(region, host_src, n * sizeof(float)); }).get();
}

void Optimizer::read_param(size_t i, float* host_dst) const {
  if (!params_swapped() || mixed())
    throw std::logic_error("Optimizer::read_param: fp32 parameters on disk only");
  const int region = param_region_.at(i);
  store_->submit([&] { store_->read(region, host_dst, ranges_[i].numel * sizeof(float)); }).get();
}

int64_t Optimizer::disk_bytes_read() const {
  return store_ ? store_->bytes_read() : 0;
}

int64_t Optimizer::disk_bytes_written() const {
  return store_ ? store_->bytes_written() : 0;
}

void Optimizer::store_master(size_t i, const Tensor& t) {
  if (!store_) throw std::logic_error("Optimizer::store_master: the state is not on disk");
  // A meta run's tensors hold no values: it allocates alike and moves nothing.
  const size_t n = ranges_[i].numel;
  if (host_addressable(alloc_.backend(), pool_)) {
    if (!store_->counting()) disk_write(0, i, t.data<float>(), n);
    return;
  }
  Tensor host = alloc_.alloc(ranges_[i].name + ".master[to disk]", MemCategory::temporary, n,
                             DType::f32, Pool::host);
  if (store_->counting()) return;
  read_to_host(backend(), host.data<float>(), t, 0, n);
  disk_write(0, i, host.data<float>(), n);
}

// One range's state on its way between the store and memory: its tensors, a
// host copy where the pool is not host memory (a GPU's), and the transfer.
struct Optimizer::Swap {
  std::vector<Tensor> held;  // what the transfer reads or writes: kept until it is done
  std::future<void> io;
  // Waits for the transfer; rethrows its error.
  void finish() {
    if (io.valid()) io.get();
  }
};

void Optimizer::each_range(const std::vector<void*>& params,
                           const std::function<void(size_t, void*)>& update_range) {
  if (!store_) {
    for (size_t i = 0; i < ranges_.size(); ++i) update_range(i, params[i]);
    return;
  }
  // What moves for each range: its state tensors (fp32, read and written)
  // and, with --offload-params, its parameters (read unless mixed precision
  // rounds them from the master; always written).
  struct Slot {
    std::string suffix;
    std::vector<Tensor>* tensors;
    const std::vector<int>* regions;
    DType dt;
    MemCategory category;
    bool read;
  };
  std::vector<Slot> slots;
  const std::vector<Part> ps = parts();
  for (size_t p = 0; p < ps.size(); ++p)
    slots.push_back(
        {ps[p].suffix, ps[p].tensors, &region_[p], DType::f32, MemCategory::optimizer_state, true});
  if (params_swapped())
    slots.push_back({"", &param_, &param_region_, param_dtype_, MemCategory::params, !mixed()});
  const bool direct = host_addressable(alloc_.backend(), pool_);
  DeviceBackend& dev = alloc_.backend();
  auto bytes = [&](const Slot& s, size_t i) { return ranges_[i].numel * dtype_size(s.dt); };
  // The transfers of range i as (region, host pointer, bytes), run on the I/O
  // thread as one disk span.
  struct Io {
    int region;
    void* host;
    size_t n;
  };
  auto submit = [&](size_t i, SpanKind kind, std::vector<Io> ios) {
    int64_t total = 0;
    for (const Io& io : ios) total += static_cast<int64_t>(io.n);
    return store_->submit([this, i, kind, total, ios = std::move(ios)] {
      ScopedSpan span(rec_, Lane::disk, kind, layer_of_[i], -1, total);
      for (const Io& io : ios)
        if (kind == SpanKind::disk_read)
          store_->read(io.region, io.host, io.n);
        else
          store_->write(io.region, io.host, io.n);
    });
  };
  // Range i's state, allocated now (its names as when resident) and read on
  // the I/O thread; on a GPU through host copies, uploaded by finish_in.
  auto swap_in = [&](size_t i) {
    Swap s;
    std::vector<Io> ios;
    for (const Slot& sl : slots) {
      Tensor& t = (*sl.tensors)[i];
      t = alloc_.alloc(ranges_[i].name + sl.suffix, sl.category, ranges_[i].numel, sl.dt, pool_);
      if (!direct)
        s.held.push_back(alloc_.alloc(ranges_[i].name + sl.suffix + "[from disk]", sl.category,
                                      ranges_[i].numel, sl.dt, Pool::host));
      if (sl.read)
        ios.push_back({(*sl.regions)[i], direct ? t.raw() : s.held.back().raw(), bytes(sl, i)});
    }
    s.io = submit(i, SpanKind::disk_read, std::move(ios));
    return s;
  };
  auto finish_in = [&](Swap& s, size_t i) {
    s.finish();
    if (!direct)
      for (size_t k = 0; k < slots.size(); ++k)
        if (slots[k].read)
          dev.copy((*slots[k].tensors)[i].raw(), s.held[k].raw(), bytes(slots[k], i),
                   CopyKind::host_to_device);
    s.held.clear();
  };
  // Range i's updated state back to the store; its memory is freed once written.
  auto swap_out = [&](size_t i) {
    Swap s;
    std::vector<Io> ios;
    for (const Slot& sl : slots) {
      Tensor& t = (*sl.tensors)[i];
      if (!direct) {
        Tensor h = alloc_.alloc(ranges_[i].name + sl.suffix + "[to disk]", sl.category,
                                ranges_[i].numel, sl.dt, Pool::host);
        dev.copy(h.raw(), t.raw(), bytes(sl, i), CopyKind::device_to_host);
        t.reset();
        s.held.push_back(std::move(h));
      } else {
        s.held.push_back(std::move(t));
      }
      ios.push_back({(*sl.regions)[i], s.held.back().raw(), bytes(sl, i)});
    }
    s.io = submit(i, SpanKind::disk_write, std::move(ios));
    return s;
  };
  // The pipeline: range i+1 is read while range i updates, and range i-1's
  // write finishes meanwhile. On an error, every transfer still in flight is
  // waited for before its memory goes.
  Swap in, next, out;
  struct Drain {
    Swap *a, *b, *c;
    ~Drain() {
      for (Swap* s : {a, b, c}) try {
          s->finish();
        } catch (...) {
        }
    }
  } drain{&in, &next, &out};
  in = swap_in(0);
  for (size_t i = 0; i < ranges_.size(); ++i) {
    finish_in(in, i);
    if (i + 1 < ranges_.size()) next = swap_in(i + 1);
    update_range(i, params_swapped() ? param_[i].raw() : params[i]);
    out.finish();
    out.held.clear();
    out = swap_out(i);
    in = std::move(next);
    next = Swap{};
  }
  out.finish();
  out.held.clear();
}

void Optimizer::update(size_t i, float* param, const float* grad) {
  const kernels::AdamWParams h{cfg_.lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay};
  DeviceBackend& dev = backend();
  if (cfg_.kind == OptimizerKind::sgd)
    dev.sgd_step(param, grad, ranges_[i].numel, cfg_.lr);
  else
    dev.adamw_step(param, grad, static_cast<float*>(exp_avg_[i].raw()),
                   static_cast<float*>(exp_avg_sq_[i].raw()), ranges_[i].numel, h, t_);
}

void Optimizer::step(const std::vector<float*>& params, const std::vector<const float*>& grads) {
  if (params.size() != ranges_.size() || grads.size() != ranges_.size())
    throw std::logic_error("Optimizer::step: range count mismatch");
  if (mixed()) throw std::logic_error("Optimizer::step: mixed precision needs step_mixed");
  ++t_;
  each_range(std::vector<void*>(params.begin(), params.end()),
             [&](size_t i, void* param) { update(i, static_cast<float*>(param), grads[i]); });
}

void Optimizer::step_mixed(const std::vector<void*>& params, const std::vector<const void*>& grads,
                           float grad_scale) {
  if (params.size() != ranges_.size() || grads.size() != ranges_.size())
    throw std::logic_error("Optimizer::step_mixed: range count mismatch");
  if (!mixed()) throw std::logic_error("Optimizer::step_mixed: fp32 parameters need step");
  ++t_;
  DeviceBackend& dev = backend();
  each_range(params, [&](size_t i, void* param) {
    const size_t n = ranges_[i].numel;
    Tensor g =
        alloc_.alloc(ranges_[i].name + ".grad[fp32]", MemCategory::temporary, n, DType::f32, pool_);
    float* g32 = static_cast<float*>(g.raw());
    dev.cast(g32, DType::f32, grads[i], param_dtype_, n);
    dev.scale(g32, n, grad_scale);
    update(i, master(i), g32);
    dev.cast(param, param_dtype_, master(i), DType::f32, n);
  });
}

}  // namespace shardlab
