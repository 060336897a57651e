// What the data-parallel strategies share (see data_parallel.h).
#include "core/parallel/data_parallel.h"

#include <algorithm>
#include <future>
#include <stdexcept>

#include "core/model/layer_ops.h"
#include "core/model/model_family.h"

namespace shardlab {

Batch load_batch(RankEnv& env, int step, int first_row, int rows) {
  const auto in = static_cast<int64_t>(env.layout.act_numel(0));
  const auto out = static_cast<int64_t>(env.layout.target_numel());
  Batch b;
  b.rows = rows;
  // Token ids are int32: 4 bytes, like the fp32 values of a regression batch.
  b.x = env.alloc.alloc("batch.x", MemCategory::activations, {rows, in});
  b.y = env.alloc.alloc("batch.y", MemCategory::activations, {rows, out});
  ScopedSpan span(env.rec, Lane::compute, SpanKind::data);
  span.set_made_ahead(env.data.load(env.device, step, first_row, rows, b.x.raw(), b.y.raw()));
  return b;
}

Batch load_rank_slice(RankEnv& env, int step) {
  const int b = env.cfg.batch / env.world;
  return load_batch(env, step, env.rank * b, b);
}

Loss compute_loss(RankEnv& env, const MixedPrecision& mp, const void* output, const Batch& batch) {
  Loss loss;
  loss.grad = env.alloc.alloc(
      "loss.grad", MemCategory::temporary,
      {batch.rows, static_cast<int64_t>(env.layout.act_numel(env.layout.num_layers()))},
      mp.dtype());
  ScopedSpan span(env.rec, Lane::compute, SpanKind::loss);
  loss.value = env.layout.family().loss(env.alloc, mp, env.layout, loss.grad.raw(), output,
                                        batch.y.raw(), batch.rows, env.cfg.batch, env.tp, -1);
  loss.global_rows = env.cfg.batch;
  return loss;
}

// A parameter shard on its way from the offload file for a gather: the
// tensor it lands in (a host copy first where that is a GPU's), and the read.
struct ShardedStates::ShardRead {
  int group = -1;
  Tensor shard, host;
  std::future<void> io;
  ShardRead() = default;
  ShardRead(const ShardRead&) = delete;
  ShardRead& operator=(const ShardRead&) = delete;
  // The read writes into `shard` or `host`: their memory must outlive it.
  ~ShardRead() {
    if (io.valid()) try {
        io.get();
      } catch (...) {
      }
  }
};

ShardedStates::ShardedStates(RankEnv& env, const ParamSource& init, const MixedPrecision& mp,
                             ShardedStatesSpec spec)
    : env_(env), spec_(spec), dtype_(mp.dtype()), alloc_(&env.alloc) {
  groups_ = make_flat_groups(env.layout, spec.layers_per_group, env.world);
  const DType dt = mp.dtype();
  if (spec.params_on_disk && (spec.nvme_dir.empty() || spec.params != Keep::shard))
    throw std::logic_error("ShardedStates: parameters on disk need nvme_dir and sharded params");
  Optimizer::OnDisk disk;
  if (!spec.nvme_dir.empty()) {
    // ZeRO-Infinity: the state lives in the rank's file from the start; a
    // meta run's store keeps no file but reserves, allocates and records alike.
    const std::string what = "--offload nvme:" + spec.nvme_dir;
    store_ = env.device.holds_values() ? std::make_unique<NvmeStore>(spec.nvme_dir, env.rank, what)
                                       : std::make_unique<NvmeStore>(NvmeStore::Counting{}, what);
    env.alloc.note_outside(static_cast<int64_t>(NvmeStore::kBounceBytes));  // its I/O buffer
    disk.store = store_.get();
    disk.rec = env.rec;
    for (const FlatGroup& g : groups_) disk.layer_of.push_back(g.first);
  }
  std::vector<Optimizer::Range> shards;
  for (const FlatGroup& g : groups_) {
    // Every rank was handed the same initial weights; a shard keeps only its slice.
    const bool whole = spec.params == Keep::whole;
    const size_t begin = whole ? 0 : g.plan.begin(env.rank);
    const size_t count = whole ? g.plan.padded() : g.plan.shard;
    Tensor p = env.alloc.alloc(whole ? g.name : g.shard_name(env.rank), MemCategory::params, count,
                               dt, spec.pool);
    write_group_values(env.device, p, g, init, begin, count);  // either pool
    if (spec.params_on_disk) {
      // --offload-params: the shard goes to its region and leaves memory.
      param_region_.push_back(store_->add(g.shard_name(env.rank), p.bytes()));
      // (A meta run allocates alike and moves nothing.)
      const bool values = env.device.holds_values();
      Tensor host;
      const void* src = p.raw();
      if (!host_addressable(env.device, spec.pool)) {
        host = env.alloc.alloc(g.shard_name(env.rank) + "[to disk]", MemCategory::params, count, dt,
                               Pool::host);
        if (values) env.device.copy(host.raw(), p.raw(), p.bytes(), CopyKind::device_to_host);
        src = host.raw();
      }
      if (values)
        store_->submit([&] { store_->write(param_region_.back(), src, p.bytes()); }).get();
      p.reset();
    }
    params_.push_back(std::move(p));
    if (spec.grads == Keep::whole)
      grads_.push_back(
          env.alloc.alloc(g.name + ".grad", MemCategory::grads, g.plan.padded(), dt, spec.pool));
    else
      grads_.push_back(env.alloc.alloc(g.shard_name(env.rank) + ".grad", MemCategory::grads,
                                       g.plan.shard, dt, spec.pool));
    shards.push_back({g.shard_name(env.rank), g.plan.shard});
  }
  disk.param_region = param_region_;
  // The optimizer state (and in mixed precision the fp32 master) exists for
  // this rank's shard of each group only: ZeRO's first saving, in every stage.
  optimizer_ =
      std::make_unique<Optimizer>(env.cfg.optimizer, env.alloc, shards, dt, spec.pool, disk);
  // The file's regions in the disk pool: the memory view shows where the state went.
  if (store_)
    for (int i = 0; i < store_->regions(); ++i)
      on_disk_.push_back(env.alloc.disk_alloc(store_->name(i), disk_category(i),
                                              static_cast<int64_t>(store_->size(i))));
  if (optimizer_->mixed())
    for (const FlatGroup& g : groups_) {
      if (!optimizer_->swapped()) {
        write_group_values(optimizer_->backend(), optimizer_->master_tensor(g.index), g, init,
                           g.plan.begin(env.rank), g.plan.shard);
        continue;
      }
      // On disk: each master passes through memory once, one group at a time.
      Tensor m = env.alloc.alloc(g.shard_name(env.rank) + ".master", MemCategory::optimizer_state,
                                 g.plan.shard, DType::f32, spec.pool);
      write_group_values(optimizer_->backend(), m, g, init, g.plan.begin(env.rank), g.plan.shard);
      optimizer_->store_master(g.index, m);
    }
}

ShardedStates::~ShardedStates() {
  ahead_.reset();  // a read in flight finishes before its memory goes
  for (size_t i = 0; i < on_disk_.size(); ++i)
    alloc_->disk_free(on_disk_[i], store_->name(static_cast<int>(i)),
                      disk_category(static_cast<int>(i)),
                      static_cast<int64_t>(store_->size(static_cast<int>(i))));
}

MemCategory ShardedStates::disk_category(int region) const {
  // The parameter regions come first (the constructor adds them before the optimizer's).
  return region < static_cast<int>(param_region_.size()) ? MemCategory::params
                                                         : MemCategory::optimizer_state;
}

std::unique_ptr<ShardedStates::ShardRead> ShardedStates::start_read(int g) {
  const FlatGroup& grp = groups_[g];
  auto r = std::make_unique<ShardRead>();
  r->group = g;
  const DType dt = dtype_;
  const std::string name = grp.shard_name(env_.rank);
  r->shard = env_.alloc.alloc(name, MemCategory::params, grp.plan.shard, dt, spec_.pool);
  if (!host_addressable(env_.device, spec_.pool))
    r->host =
        env_.alloc.alloc(name + "[from disk]", MemCategory::params, grp.plan.shard, dt, Pool::host);
  void* dst = r->host.empty() ? r->shard.raw() : r->host.raw();
  const size_t n = r->shard.bytes();
  r->io = store_->submit([this, dst, n, region = param_region_[g], layer = grp.first] {
    ScopedSpan span(env_.rec, Lane::disk, SpanKind::disk_read, layer, -1, static_cast<int64_t>(n));
    store_->read(region, dst, n);
  });
  return r;
}

void ShardedStates::plan_gathers(std::vector<int> order) {
  if (!spec_.params_on_disk) return;
  gathers_.assign(order.begin(), order.end());
  ahead_.reset();
  if (spec_.read_ahead && !gathers_.empty()) ahead_ = start_read(gathers_.front());
}

ShardedStates::GatherInput ShardedStates::shard_for_gather(int g) {
  if (!spec_.params_on_disk) return {Tensor{}, param_shard(g)};
  // In the planned order, the next group's read starts before this one's is
  // waited for: the I/O thread keeps one read ahead of the gathers.
  if (!gathers_.empty()) {
    if (gathers_.front() != g)
      throw std::logic_error("ShardedStates: a gather out of the planned order");
    gathers_.pop_front();
  }
  std::unique_ptr<ShardRead> cur = ahead_ && ahead_->group == g ? std::move(ahead_) : start_read(g);
  ahead_.reset();
  if (spec_.read_ahead && !gathers_.empty()) ahead_ = start_read(gathers_.front());
  cur->io.get();  // rethrows a DiskError
  if (!cur->host.empty()) {
    env_.device.copy(cur->shard.raw(), cur->host.raw(), cur->shard.bytes(),
                     CopyKind::host_to_device);
    cur->host.reset();
  }
  GatherInput in;
  in.data = cur->shard.raw();
  in.copy = std::move(cur->shard);
  return in;
}

bool ShardedStates::update_shards(MixedPrecision& mp) {
  std::vector<void*> params, grads;
  for (const FlatGroup& g : groups_) {
    // On disk the optimizer reads each shard in itself, beside its state.
    params.push_back(spec_.params_on_disk ? nullptr : param_shard(g.index));
    grads.push_back(grad_shard(g.index));
  }
  ScopedSpan span(env_.rec, Lane::compute, SpanKind::optimizer);
  return mp.step(*optimizer_, params, grads, env_.comm);
}

void ShardedStates::all_gather_params() {
  if (spec_.params != Keep::whole)
    throw std::logic_error("ShardedStates::all_gather_params: the parameters are kept as shards");
  std::vector<Work> gathers;
  for (const FlatGroup& g : groups_)
    gathers.push_back(env_.comm->all_gather_async(param_shard(g.index), params_[g.index].raw(),
                                                  g.plan.counts(), params_[g.index].dtype(),
                                                  CommMeta{g.first, -1}));
  for (Work& w : gathers) w.wait();
}

RankState ShardedStates::rank_state(MixedPrecision* precision) {
  RankState st;
  st.optimizer = optimizer_.get();
  st.precision = precision;
  for (const FlatGroup& g : groups_) {
    const size_t begin = g.plan.begin(env_.rank);
    st.offset.push_back(g.offset + std::min(begin, g.numel()));
    st.count.push_back(begin >= g.numel() ? 0 : std::min(g.plan.shard, g.numel() - begin));
    st.weight.push_back(spec_.params_on_disk ? nullptr : &params_[g.index]);  // null: on disk
    st.weight_at.push_back(spec_.params == Keep::whole ? begin : 0);
  }
  return st;
}

void* ShardedStates::param_shard(int g) {
  if (spec_.params_on_disk)
    throw std::logic_error("ShardedStates::param_shard: the shards are on disk (shard_for_gather)");
  return spec_.params == Keep::whole ? at(params_[g], groups_[g].plan.begin(env_.rank))
                                     : params_[g].raw();
}

void* ShardedStates::grad_shard(int g) {
  return spec_.grads == Keep::whole ? at(grads_[g], groups_[g].plan.begin(env_.rank))
                                    : grads_[g].raw();
}

std::vector<float> ShardedStates::export_params() {
  const bool on_host = spec_.pool == Pool::host;
  const size_t total = env_.layout.total();
  // Mixed precision: the model's weights are the fp32 masters, which the
  // optimizer keeps as this rank's shard of each group.
  if (optimizer_->mixed() || spec_.params == Keep::shard) {
    std::vector<const float*> shards;
    // Masters in the offload file are read into host memory for the gather.
    std::vector<Tensor> from_disk;
    const bool masters_on_disk = optimizer_->mixed() && optimizer_->swapped();
    const bool weights_on_disk = masters_on_disk || spec_.params_on_disk;
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (weights_on_disk) {
        const size_t n = optimizer_->ranges()[g].numel;
        const bool master = optimizer_->mixed();
        from_disk.push_back(env_.alloc.alloc(
            groups_[g].shard_name(env_.rank) + (master ? ".master[from disk]" : "[from disk]"),
            MemCategory::temporary, n, DType::f32, Pool::host));
        if (env_.device.holds_values()) {
          if (master)
            optimizer_->read_master(g, from_disk.back().data<float>());
          else
            optimizer_->read_param(g, from_disk.back().data<float>());
        }
        shards.push_back(from_disk.back().data<float>());
      } else {
        shards.push_back(optimizer_->mixed() ? optimizer_->master(groups_[g].index)
                                             : static_cast<const float*>(params_[g].raw()));
      }
    }
    return gather_model_params(*env_.comm, env_.alloc, total, groups_, shards,
                               on_host || weights_on_disk);
  }
  // Whole parameters: rank 0 already holds every value.
  if (env_.rank != 0) return {};
  ExportBuffer flat(env_.alloc, total);
  if (!flat.keeps()) return {};
  for (const FlatGroup& g : groups_)
    env_.device.download(flat.at(g.offset, g.numel()), params_[g.index].raw(), DType::f32,
                         g.numel());
  return flat.take();
}

std::vector<int> gather_order(int n, bool again_for_backward) {
  std::vector<int> out;
  for (int g = 0; g < n; ++g) out.push_back(g);
  if (again_for_backward)
    for (int g = n - 1; g >= 0; --g) out.push_back(g);
  return out;
}

void ReduceScatterQueue::start(Comm& comm, const FlatGroup& g, Tensor unreduced, void* out,
                               DType dt, Tensor staged) {
  Pending p;
  p.group = g.index;
  p.staged = std::move(staged);
  p.work =
      comm.reduce_scatter_async(unreduced.raw(), out, g.plan.counts(), dt, CommMeta{g.first, -1});
  p.unreduced = std::move(unreduced);
  pending_.push_back(std::move(p));
}

void ReduceScatterQueue::retire(size_t keep_at_most, const std::function<void(Pending&)>& on_done) {
  while (!pending_.empty() && (pending_.size() > keep_at_most || pending_.front().work.done())) {
    Pending& p = pending_.front();
    p.work.wait();  // rethrows a failed collective
    if (on_done) on_done(p);
    pending_.pop_front();  // frees the full gradient (and the staged shard)
  }
}

TiedGradients::TiedGradients(const ModelLayout& m, const std::vector<FlatGroup>& groups) {
  auto group_of = [&](size_t offset) {
    for (const FlatGroup& g : groups)
      if (offset >= g.offset && offset < g.offset + g.numel()) return g.index;
    throw std::logic_error("TiedGradients: a parameter outside every group");
  };
  for (const ParamInfo& p : m.params()) {
    if (p.tied_to < 0) continue;
    const ParamInfo& home = m.params()[p.tied_to];
    const int cg = group_of(p.offset), hg = group_of(home.offset);
    pairs_.push_back(
        {cg, hg, p.offset - groups[cg].offset, home.offset - groups[hg].offset, p.numel});
  }
}

bool TiedGradients::holds_back(int g) const {
  for (const Pair& p : pairs_)
    if (p.copy_group == g && p.home_group != g) return true;
  return false;
}

void TiedGradients::sum(int g, const std::function<void*(int)>& full, DeviceBackend& dev,
                        DType dt) const {
  const size_t es = dtype_size(dt);
  for (const Pair& p : pairs_) {
    if (p.home_group != g) continue;
    char* home = static_cast<char*>(full(p.home_group)) + p.home_offset * es;
    char* copy = static_cast<char*>(full(p.copy_group)) + p.copy_offset * es;
    dev.add(home, copy, dt, p.numel);
    dev.copy(copy, home, p.numel * es, CopyKind::device_to_device);
  }
}

std::vector<int> TiedGradients::released_by(int g) const {
  std::vector<int> out;
  for (const Pair& p : pairs_)
    if (p.home_group == g && p.copy_group != g &&
        std::find(out.begin(), out.end(), p.copy_group) == out.end())
      out.push_back(p.copy_group);
  return out;
}

std::vector<StateMove> sharded_update_moves(const MoveQuery&) {
  return {{StateOp::reduce_scatter, ModelStatePart::grads, 1, 0, "in backward"},
          {StateOp::all_gather, ModelStatePart::params, 1, 0, "after the update"}};
}

std::vector<StateMove> sharded_params_moves(const MoveQuery& q) {
  std::vector<StateMove> m{{StateOp::all_gather, ModelStatePart::params, 1, 0, "for forward"}};
  if (q.reshard_after_forward)
    m.push_back({StateOp::all_gather, ModelStatePart::params, 1, 0, "again for backward"});
  m.push_back({StateOp::reduce_scatter, ModelStatePart::grads, 1, 0, "in backward"});
  return m;
}

}  // namespace shardlab
