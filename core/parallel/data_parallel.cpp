// What the data-parallel strategies share (see data_parallel.h).
#include "core/parallel/data_parallel.h"

#include <algorithm>
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

ShardedStates::ShardedStates(RankEnv& env, const ParamSource& init, const MixedPrecision& mp,
                             ShardedStatesSpec spec)
    : env_(env), spec_(spec), alloc_(&env.alloc) {
  groups_ = make_flat_groups(env.layout, spec.layers_per_group, env.world);
  const DType dt = mp.dtype();
  std::vector<Optimizer::Range> shards;
  for (const FlatGroup& g : groups_) {
    // Every rank was handed the same initial weights; a shard keeps only its slice.
    const bool whole = spec.params == Keep::whole;
    const size_t begin = whole ? 0 : g.plan.begin(env.rank);
    const size_t count = whole ? g.plan.padded() : g.plan.shard;
    Tensor p = env.alloc.alloc(whole ? g.name : g.shard_name(env.rank), MemCategory::params, count,
                               dt, spec.pool);
    write_group_values(env.device, p, g, init, begin, count);  // either pool
    params_.push_back(std::move(p));
    if (spec.grads == Keep::whole)
      grads_.push_back(
          env.alloc.alloc(g.name + ".grad", MemCategory::grads, g.plan.padded(), dt, spec.pool));
    else
      grads_.push_back(env.alloc.alloc(g.shard_name(env.rank) + ".grad", MemCategory::grads,
                                       g.plan.shard, dt, spec.pool));
    shards.push_back({g.shard_name(env.rank), g.plan.shard});
  }
  // The optimizer state (and in mixed precision the fp32 master) exists for
  // this rank's shard of each group only: ZeRO's first saving, in every stage.
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
  optimizer_ =
      std::make_unique<Optimizer>(env.cfg.optimizer, env.alloc, shards, dt, spec.pool, disk);
  // The file's regions in the disk pool: the memory view shows where the state went.
  if (store_)
    for (int i = 0; i < store_->regions(); ++i)
      on_disk_.push_back(env.alloc.disk_alloc(store_->name(i), MemCategory::optimizer_state,
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
  for (size_t i = 0; i < on_disk_.size(); ++i)
    alloc_->disk_free(on_disk_[i], store_->name(static_cast<int>(i)), MemCategory::optimizer_state,
                      static_cast<int64_t>(store_->size(static_cast<int>(i))));
}

bool ShardedStates::update_shards(MixedPrecision& mp) {
  std::vector<void*> params, grads;
  for (const FlatGroup& g : groups_) {
    params.push_back(param_shard(g.index));
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
    st.weight.push_back(&params_[g.index]);
    st.weight_at.push_back(spec_.params == Keep::whole ? begin : 0);
  }
  return st;
}

void* ShardedStates::param_shard(int g) {
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
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (masters_on_disk) {
        const size_t n = optimizer_->ranges()[g].numel;
        from_disk.push_back(
            env_.alloc.alloc(groups_[g].shard_name(env_.rank) + ".master[from disk]",
                             MemCategory::temporary, n, DType::f32, Pool::host));
        if (env_.device.holds_values()) optimizer_->read_master(g, from_disk.back().data<float>());
        shards.push_back(from_disk.back().data<float>());
      } else {
        shards.push_back(optimizer_->mixed() ? optimizer_->master(groups_[g].index)
                                             : static_cast<const float*>(params_[g].raw()));
      }
    }
    return gather_model_params(*env_.comm, env_.alloc, total, groups_, shards,
                               on_host || masters_on_disk);
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
