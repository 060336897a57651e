// The memory preflight (see memory_estimate.h): the allocator's bookkeeping
// replayed without memory, the shared pieces every strategy's plan is built
// from, the process's own share, the memory available, and the refusal.
#include "core/memory_estimate.h"

#include "core/model_family.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "core/gpu.h"
#include "core/recorder.h"
#include "core/strategy.h"

namespace shardlab {

// ---------------------------------------------------------------------------
// MemoryTally

MemBlock& MemBlock::operator=(MemBlock&& o) noexcept {
  if (this != &o) {
    reset();
    tally_ = o.tally_;
    bytes_ = o.bytes_;
    category_ = o.category_;
    pool_ = o.pool_;
    outside_ = o.outside_;
    o.tally_ = nullptr;
  }
  return *this;
}

void MemBlock::reset() {
  if (tally_) tally_->give_back(*this);
  tally_ = nullptr;
}

MemBlock MemoryTally::alloc(MemCategory c, size_t numel, DType dt, Pool pool) {
  const int64_t bytes = static_cast<int64_t>(numel * dtype_size(dt));
  const int64_t block = static_cast<int64_t>(block_bytes(static_cast<size_t>(bytes)));
  PoolStats& s = pool == Pool::device ? stats_.device : stats_.host;
  auto& cache = cache_[static_cast<int>(pool)];
  auto it = cache.find(block);
  const bool from_cache = it != cache.end() && it->second > 0;
  if (from_cache) --it->second;
  s.on_alloc(c, bytes, block, from_cache);
  ++events_;
  MemBlock b;
  b.tally_ = this;
  b.bytes_ = bytes;
  b.category_ = c;
  b.pool_ = pool;
  return b;
}

MemBlock MemoryTally::outside(size_t bytes) {
  outside_current_ += static_cast<int64_t>(bytes);
  outside_peak_ = std::max(outside_peak_, outside_current_);
  MemBlock b;
  b.tally_ = this;
  b.bytes_ = static_cast<int64_t>(bytes);
  b.outside_ = true;
  return b;
}

void MemoryTally::give_back(MemBlock& b) {
  if (b.outside_) {
    outside_current_ -= b.bytes_;
    return;
  }
  PoolStats& s = b.pool_ == Pool::device ? stats_.device : stats_.host;
  const int64_t block = static_cast<int64_t>(block_bytes(static_cast<size_t>(b.bytes_)));
  s.on_free(b.category_, b.bytes_, block);
  ++cache_[static_cast<int>(b.pool_)][block];
  ++events_;
}

void MemoryPlan::steps(const std::function<void(int step)>& step) {
  const int64_t events = tally.events(), spans = tally.spans();
  step(0);
  events_per_step = tally.events() - events;
  spans_per_step = tally.spans() - spans;
  if (cfg.steps > 1) step(1);
  at_report = tally.stats();
}

// ---------------------------------------------------------------------------
// Shared pieces

namespace {
size_t dim(const MemoryPlan& p) {
  return static_cast<size_t>(p.layout.dim());
}
}  // namespace

void plan_layer_forward(MemoryPlan& p, DType dt, size_t rows) {
  // fp32 computes on the buffers themselves, and so do a GPU's 2-byte GEMMs.
  if (dt == DType::f32 || native_2byte(p)) return;
  const size_t d = dim(p), n = rows * d;
  MemBlock x32 = p.alloc(MemCategory::temporary, n);
  MemBlock w32 = p.alloc(MemCategory::temporary, d * d);
  MemBlock b32 = p.alloc(MemCategory::temporary, d);
  MemBlock y = p.alloc(MemCategory::temporary, n);
}

void plan_layer_backward(MemoryPlan& p, DType dt, size_t rows, bool has_pre, bool has_din) {
  if (dt == DType::f32 || native_2byte(p)) return;
  const size_t d = dim(p), n = rows * d;
  MemBlock g32 = p.alloc(MemCategory::temporary, n);
  if (has_pre) MemBlock pre32 = p.alloc(MemCategory::temporary, n);
  MemBlock x32 = p.alloc(MemCategory::temporary, n);
  MemBlock w32 = p.alloc(MemCategory::temporary, d * d);
  MemBlock dw32 = p.alloc(MemCategory::temporary, d * d);
  MemBlock db32 = p.alloc(MemCategory::temporary, d);
  MemBlock dx;
  if (has_din) dx = p.alloc(MemCategory::temporary, n);
}

void plan_mse_loss(MemoryPlan& p, DType dt, size_t n) {
  p.tally.span();
  if (dt == DType::f32) return;
  MemBlock pred = p.alloc(MemCategory::temporary, n);
  MemBlock grad = p.alloc(MemCategory::temporary, n);
}

BatchMemory plan_batch(MemoryPlan& p, size_t rows) {
  BatchMemory b;
  b.x = p.alloc(MemCategory::activations, rows * p.layout.act_numel(0));
  b.y = p.alloc(MemCategory::activations, rows * p.layout.target_numel());
  return b;
}

MemBlock plan_loss(MemoryPlan& p, DType dt, size_t rows) {
  MemBlock grad =
      p.alloc(MemCategory::temporary, rows * p.layout.act_numel(p.layout.num_layers()), dt);
  p.layout.family().plan_loss(p, p.layout, dt, rows);
  return grad;
}

void TapeMemory::begin(size_t rows) {
  rows_ = rows;
  grad_.reset();
  if (dt_ != DType::f32 && !p_.layout.input_is_tokens())
    cast_input_ = p_.alloc(MemCategory::activations, rows * p_.layout.act_numel(0), dt_);
}

void TapeMemory::forward(int layer) {
  p_.tally.span();
  Saved s{layer, {}};
  int out = 0;
  p_.layout.family().plan_forward(p_, p_.layout, layer, rows_, dt_, s.keep, out);
  layers_.push_back(std::move(s));
}

void TapeMemory::begin_backward() {
  const int last = layers_.back().layer;
  grad_ = p_.alloc(MemCategory::temporary, rows_ * p_.layout.act_numel(last + 1), dt_);
}

void TapeMemory::backward(int layer) {
  p_.tally.span();
  const bool first = layers_.size() == 1;
  MemBlock din;
  if (!first) din = p_.alloc(MemCategory::temporary, rows_ * p_.layout.act_numel(layer), dt_);
  p_.layout.family().plan_backward(p_, p_.layout, layer, rows_, dt_, !first);
  for (MemBlock& b : layers_.back().keep) b.reset();
  layers_.pop_back();
  grad_ = std::move(din);
}

StackMemory::StackMemory(MemoryPlan& p, int first, int last, DType dt)
    : p_(p), first_(first), last_(last), dt_(dt) {
  const ModelLayout& layout = p.layout;
  for (int l = first; l < last; ++l) {
    for (int i = 0; i < layout.param_count(l); ++i) {
      const size_t n = layout.params()[layout.first_param(l) + i].numel;
      params_.push_back(p.alloc(MemCategory::params, n, dt));
      grads_.push_back(p.alloc(MemCategory::grads, n, dt));
    }
    if (layout.has_bn(l))
      for (int k = 0; k < 2; ++k) buffers_.push_back(p.alloc(MemCategory::params, dim(p)));
  }
}

int StackMemory::layer(int l, Saved& s, std::vector<MemBlock>& keep) {
  int out = 0;
  p_.layout.family().plan_forward(p_, p_.layout, l, s.rows, dt_, keep, out);
  return out;
}

namespace {
bool casts_input(const MemoryPlan& p, int first, DType dt) {
  return dt != DType::f32 && !(first == 0 && p.layout.input_is_tokens());
}
}  // namespace

void StackMemory::forward_saving(Saved& s) {
  if (casts_input(p_, first_, dt_) && s.cast_input.empty())
    s.cast_input = p_.alloc(MemCategory::activations, s.rows * p_.layout.act_numel(first_), dt_);
  for (int l = first_; l < last_; ++l) {
    p_.tally.span();
    std::vector<MemBlock> keep;
    layer(l, s, keep);
    s.keep.push_back(std::move(keep));
  }
}

void StackMemory::forward(size_t rows, int mb) {
  Saved& s = saved_[mb];
  s.rows = rows;
  forward_saving(s);
}

MemBlock StackMemory::forward_keep_input(size_t rows, int mb) {
  Saved& s = saved_[mb];
  s.rows = rows;
  MemBlock prev;
  if (casts_input(p_, first_, dt_) && s.cast_input.empty())
    s.cast_input = p_.alloc(MemCategory::activations, rows * p_.layout.act_numel(first_), dt_);
  for (int l = first_; l < last_; ++l) {
    p_.tally.span();
    std::vector<MemBlock> keep;
    const int out = layer(l, s, keep);
    prev = std::move(keep[static_cast<size_t>(out)]);
    for (size_t i = keep.size(); i-- > 0;) keep[i].reset();
  }
  return prev;
}

void StackMemory::recompute(int mb) {
  Saved& s = saved_[mb];
  s.keep.clear();
  forward_saving(s);
}

MemBlock StackMemory::backward(int mb, bool want_dinput) {
  Saved& s = saved_[mb];
  MemBlock g = p_.alloc(MemCategory::temporary, s.rows * p_.layout.act_numel(last_), dt_);
  for (int l = last_ - 1; l >= first_; --l) {
    p_.tally.span();
    const size_t i = static_cast<size_t>(l - first_);
    const bool tokens_in = l == 0 && p_.layout.input_is_tokens();
    MemBlock din;
    if ((l > first_ || want_dinput) && !tokens_in)
      din = p_.alloc(MemCategory::temporary, s.rows * p_.layout.act_numel(l), dt_);
    p_.layout.family().plan_backward(p_, p_.layout, l, s.rows, dt_, !din.empty());
    for (MemBlock& b : s.keep[i]) b.reset();
    g = std::move(din);
  }
  saved_.erase(mb);
  return g;
}

std::vector<size_t> StackMemory::ranges() const {
  std::vector<size_t> r;
  for (int l = first_; l < last_; ++l)
    for (int i = 0; i < p_.layout.param_count(l); ++i)
      r.push_back(p_.layout.params()[p_.layout.first_param(l) + i].numel);
  return r;
}

OptimizerMemory::OptimizerMemory(MemoryPlan& p, const std::vector<size_t>& ranges,
                                 DType param_dtype, Pool pool)
    : p_(p), ranges_(ranges), mixed_(param_dtype != DType::f32), pool_(pool) {
  const bool adamw = p.cfg.optimizer.kind == OptimizerKind::adamw;
  for (size_t n : ranges) {
    if (mixed_) state_.push_back(p.alloc(MemCategory::optimizer_state, n, DType::f32, pool));
    if (!adamw) continue;
    state_.push_back(p.alloc(MemCategory::optimizer_state, n, DType::f32, pool));
    state_.push_back(p.alloc(MemCategory::optimizer_state, n, DType::f32, pool));
  }
}

void OptimizerMemory::step() {
  p_.tally.span();
  if (!mixed_) return;
  for (size_t n : ranges_) MemBlock g = p_.alloc(MemCategory::temporary, n, DType::f32, pool_);
}

CommMemory::CommMemory(MemoryPlan& p) : p_(p) {}

bool CommMemory::staged() const {
  return p_.placement.comm == CommKind::gloo_staged;
}

MemBlock CommMemory::stage(size_t bytes) {
  if (!bytes) return {};
  p_.tally.span();  // the copy to the host (and the one back, counted with the collective)
  return p_.alloc(MemCategory::comm_buffers, (bytes + 1) / 2, DType::bf16, Pool::host);
}

std::vector<MemBlock> CommMemory::all_reduce(size_t numel, DType dt) {
  p_.tally.span();
  std::vector<MemBlock> held;
  if (staged()) held.push_back(stage(numel * dtype_size(dt)));
  return held;
}

std::vector<MemBlock> CommMemory::reduce_scatter(size_t total, size_t mine, DType dt) {
  p_.tally.span();
  std::vector<MemBlock> held;
  const size_t es = dtype_size(dt);
  if (staged()) {
    held.push_back(stage(total * es));
    held.push_back(stage(mine * es));
  }
  // Gloo's ring reduce-scatter keeps a scratch of one chunk, grown when a
  // larger one comes (the new block is made before the old one goes). On a
  // device the host cannot read, it lives in the host pool.
  if (p_.placement.comm != CommKind::nccl && p_.world > 1) {
    const int64_t bytes = static_cast<int64_t>((mine * es + 3) / 4 * 4);
    if (bytes > scratch_bytes_) {
      const Pool pool =
          p_.placement.kind == DeviceKind::cuda || p_.placement.guarded ? Pool::host : Pool::device;
      scratch_ =
          p_.alloc(MemCategory::comm_buffers, static_cast<size_t>(bytes / 4), DType::f32, pool);
      scratch_bytes_ = bytes;
    }
  }
  return held;
}

std::vector<MemBlock> CommMemory::all_gather(size_t total, size_t mine, DType dt, bool in_place) {
  p_.tally.span();
  std::vector<MemBlock> held;
  if (staged()) {
    held.push_back(stage(total * dtype_size(dt)));
    if (!in_place) held.push_back(stage(mine * dtype_size(dt)));
  }
  return held;
}

std::vector<MemBlock> CommMemory::send(size_t bytes) {
  p_.tally.span();
  std::vector<MemBlock> held;
  if (staged()) held.push_back(stage(bytes));
  return held;
}

std::vector<MemBlock> CommMemory::recv(size_t bytes) {
  p_.tally.span();
  std::vector<MemBlock> held;
  if (staged()) held.push_back(stage(bytes));
  return held;
}

StageMemory::StageMemory(MemoryPlan& p) : p_(p) {
  topo_ = stage_topology(p.rank, pipeline_partition(p.cfg, p.layout));
  micro_batches_ = p.cfg.micro_batches;
  rows_ = static_cast<size_t>(p.cfg.batch / micro_batches_);
  layers_ = std::make_unique<StackMemory>(p, topo_.first_layer, topo_.last_layer, DType::f32);
  optimizer_ = std::make_unique<OptimizerMemory>(p, layers_->ranges(), DType::f32);
  comm_ = std::make_unique<CommMemory>(p);
}

void StageMemory::begin_step() {
  next_input_recv_ = 0;
  next_grad_recv_ = 0;
}

MemBlock StageMemory::wait_recv(std::map<int, Posted>& posted, int mb) {
  MemBlock b = std::move(posted[mb].buffer);
  posted.erase(mb);  // the staging goes with the completed receive
  return b;
}

void StageMemory::post_recv_input(int mb) {
  if (topo_.is_first) return;
  for (; next_input_recv_ <= mb && next_input_recv_ < micro_batches_; ++next_input_recv_) {
    Posted& posted = input_recvs_[next_input_recv_];
    posted.buffer =
        p_.alloc(MemCategory::activations, rows_ * p_.layout.act_numel(topo_.first_layer));
    posted.staging = comm_->recv(static_cast<size_t>(posted.buffer.bytes()));
  }
}

void StageMemory::post_recv_grad(int mb) {
  if (topo_.is_last) return;
  for (; next_grad_recv_ <= mb && next_grad_recv_ < micro_batches_; ++next_grad_recv_) {
    Posted& posted = grad_recvs_[next_grad_recv_];
    posted.buffer = p_.alloc(MemCategory::temporary, rows_ * p_.layout.act_numel(topo_.last_layer));
    posted.staging = comm_->recv(static_cast<size_t>(posted.buffer.bytes()));
  }
}

void StageMemory::settle_sends() {
  sends_.clear();
}

void StageMemory::forward(int mb) {
  settle_sends();
  MemBlock input;
  if (topo_.is_first) {
    input = p_.alloc(MemCategory::activations, rows_ * p_.layout.act_numel(0));
    p_.tally.span();
  } else {
    post_recv_input(mb);
    input = wait_recv(input_recvs_, mb);
  }
  inputs_[mb] = std::move(input);
  const size_t bytes = rows_ * p_.layout.act_numel(topo_.last_layer) * sizeof(float);
  if (!p_.cfg.recompute) {
    layers_->forward(rows_, mb);
    if (topo_.is_last)
      compute_loss(mb);
    else
      sends_.push_back(comm_->send(bytes));
  } else {
    MemBlock out = layers_->forward_keep_input(rows_, mb);
    if (topo_.is_last) {
      compute_loss(mb);
    } else {
      std::vector<MemBlock> held = comm_->send(bytes);
      held.push_back(std::move(out));
      sends_.push_back(std::move(held));
    }
  }
}

void StageMemory::compute_loss(int mb) {
  MemBlock y = p_.alloc(MemCategory::temporary, rows_ * p_.layout.target_numel());
  {
    p_.tally.span();
    MemBlock unused_x = p_.alloc(MemCategory::temporary, rows_ * p_.layout.act_numel(0));
  }
  MemBlock dpred =
      p_.alloc(MemCategory::temporary, rows_ * p_.layout.act_numel(p_.layout.num_layers()));
  p_.layout.family().plan_loss(p_, p_.layout, DType::f32, rows_);  // the loss span
  loss_grads_[mb] = std::move(dpred);
}

void StageMemory::backward(int mb) {
  settle_sends();
  MemBlock dout;
  if (topo_.is_last) {
    dout = std::move(loss_grads_[mb]);
    loss_grads_.erase(mb);
  } else {
    post_recv_grad(mb);
    dout = wait_recv(grad_recvs_, mb);
  }
  if (p_.cfg.recompute) layers_->recompute(mb);
  MemBlock din = layers_->backward(mb, !topo_.is_first);
  dout.reset();
  inputs_.erase(mb);
  if (!topo_.is_first) {
    std::vector<MemBlock> held = comm_->send(static_cast<size_t>(din.bytes()));
    held.push_back(std::move(din));
    sends_.push_back(std::move(held));
  }
}

void StageMemory::finish_step() {
  settle_sends();
  sum_tied_grads();
  optimizer_->step();
}

// PipelineStage::sum_tied_grads: the tied copy's gradient swapped between two stages.
void StageMemory::sum_tied_grads() {
  const ModelLayout& m = p_.layout;
  if (!m.has_tied()) return;
  const std::vector<int> partition = pipeline_partition(p_.cfg, m);
  auto stage_of = [&](int layer) {
    int end = 0;
    for (size_t s = 0; s < partition.size(); ++s)
      if (layer < (end += partition[s])) return static_cast<int>(s);
    return -1;
  };
  for (const ParamInfo& p : m.params()) {
    if (p.tied_to < 0) continue;
    const int a = stage_of(m.params()[p.tied_to].layer), b = stage_of(p.layer);
    if (a == b || (topo_.rank != a && topo_.rank != b)) continue;
    MemBlock theirs = p_.alloc(MemCategory::comm_buffers, p.numel);
    std::vector<MemBlock> sent = comm_->send(p.numel * sizeof(float));
    std::vector<MemBlock> got = comm_->recv(p.numel * sizeof(float));
  }
}

void StageMemory::export_params() {
  const ModelLayout& layout = p_.layout;
  if (p_.rank != 0) {
    const size_t params =
        layout.layer_begin(topo_.last_layer) - layout.layer_begin(topo_.first_layer);
    const size_t buffers =
        layout.buffer_begin(topo_.last_layer) - layout.buffer_begin(topo_.first_layer);
    MemBlock a = p_.tally.outside(params * sizeof(float));
    MemBlock b = p_.tally.outside(buffers * sizeof(float));
    return;
  }
  MemBlock flat = p_.tally.outside(layout.state_total() * sizeof(float));
}

void plan_gather_model_params(MemoryPlan& p, const std::vector<size_t>& group_padded,
                              const std::vector<size_t>& group_shard, bool shards_on_host) {
  MemBlock flat;
  if (p.rank == 0) flat = p.tally.outside(p.layout.total() * sizeof(float));
  CommMemory comm(p);
  for (size_t g = 0; g < group_padded.size(); ++g) {
    MemBlock staged;
    if (shards_on_host) staged = p.alloc(MemCategory::comm_buffers, group_shard[g]);
    MemBlock full = p.alloc(MemCategory::comm_buffers, group_padded[g]);
    comm.all_gather(group_padded[g], group_shard[g], DType::f32, false);
  }
}

// ---------------------------------------------------------------------------
// The estimate

namespace {

// What one recorded event costs the recorder: the struct, and an AllocEvent's
// name on the heap (past the 15 characters a std::string keeps inline, names
// like "layers.3.flat[shard 1/4].exp_avg" are); vectors grow by doubling, so
// up to twice that is reserved.
constexpr int64_t kAllocEventBytes = static_cast<int64_t>(sizeof(AllocEvent)) + 48;
constexpr int64_t kSpanBytes = static_cast<int64_t>(sizeof(Span));
constexpr int64_t kGrowth = 2;
// Per step beside the records: the runner's loss shares (16 B per rank) and
// completion counter (4 B), the losses and step times (8 B each), every
// rank's own step times (8 B, reserved twice over), a viewer's loss copy.
constexpr int64_t kHistoryPerStep = 4 + 8 + 8 + 8;
constexpr int64_t kHistoryPerRankStep = 16 + 8 * kGrowth;
// --trace turns every record into an nlohmann::json object (a tree of maps,
// measured ~10x the record) and then its text; --record into ~4x.
constexpr int64_t kTraceFactor = 10;
constexpr int64_t kRecordingFactor = 4;
constexpr int64_t kJsonPerStep = 64;
// A rank thread's own: its stack as touched, Gloo's pairs and buffers
// (measured ~0.3 MiB per rank).
constexpr int64_t kRankOverhead = int64_t{1} << 20;
// A GPU rank's cuBLAS handle and workspace, streams and events.
constexpr int64_t kGpuRankOverhead = int64_t{64} << 20;
// What a rank process adds to its private memory after the preflight, beside what its rank
// allocates (its threads' stacks and malloc arenas, BLAS's packing buffer): measured 1-2 MiB
// (mlp:4x64 and mlp:8x256, 3 processes, OMP_NUM_THREADS=1: 0.9 MiB dirty at the preflight).
constexpr int64_t kProcessStartup = int64_t{2} << 20;
// The baseline is rounded up to this: the processes of a group measure a few pages apart,
// and must agree on their one-line refusal (the launcher shows a line once when alike).
constexpr int64_t kProcessBaselineStep = int64_t{4} << 20;
// Where /proc cannot be read: what the measurement gives here.
constexpr int64_t kProcessBaselineUnknown = int64_t{4} << 20;

// a + b and a * b, saturating: --steps 2147483647 with a large model must not wrap.
int64_t add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}
int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

}  // namespace

int64_t MemoryEstimate::largest_rank() const {
  int64_t m = 0;
  for (const RankMemoryEstimate& r : ranks)
    m = std::max(m, add(r.device_bytes(), device == DeviceKind::cpu ? r.host_bytes() : 0));
  return m;
}

MemoryEstimate estimate_memory(const RunConfig& cfg, const RunOutputs& outputs) {
  validate(cfg);
  const StrategyInfo& info = strategy_info(cfg.strategy);
  const ModelLayout layout = make_layout(cfg);
  const Placement place = plan_placement(cfg);
  MemoryEstimate e;
  e.device = place.kind;
  if (!info.plan_memory) return e;  // a strategy that does not say what it holds: no preflight

  int64_t ranks_host = 0, records = 0;
  for (int r = 0; r < cfg.world; ++r) {
    MemoryTally tally;
    MemoryPlan plan{r, cfg.world, cfg, layout, place, tally, {}, 0, 0};
    info.plan_memory(plan);
    RankMemoryEstimate re;
    re.rank = r;
    re.at_report = plan.at_report;
    re.at_end = tally.stats();
    re.outside = tally.outside_peak();
    if (cfg.record)
      re.record_per_step =
          kGrowth * (plan.events_per_step * kAllocEventBytes + plan.spans_per_step * kSpanBytes);
    re.gpu = place.kind == DeviceKind::cuda ? place.gpu_of_rank[r] : -1;
    ranks_host = add(ranks_host, add(re.host_bytes(), kRankOverhead));
    if (place.kind == DeviceKind::cpu)
      ranks_host = add(ranks_host, re.device_bytes());
    else
      // Beside the allocator: the synthetic data's T, uploaded once per rank that
      // makes targets (counted for every rank: a pipeline's first stage does not).
      e.gpu_total[re.gpu] = add(e.gpu_total[re.gpu],
                                re.device_bytes() + kGpuRankOverhead +
                                    (layout.input_is_tokens() ? 0
                                                              : static_cast<int64_t>(layout.dim()) *
                                                                    layout.dim() * int64_t{4}));
    records = add(records, re.record_per_step);
    e.ranks.push_back(std::move(re));
  }

  const int64_t f32 = sizeof(float);
  const int64_t state = static_cast<int64_t>(layout.state_total()) * f32;
  // What the dataset holds in host memory (the generator's T, a corpus's tokens).
  const int64_t d = layout.input_is_tokens() ? 0 : layout.dim();
  e.shared = layout.family().data_bytes(layout, cfg);
  if (!outputs.caller_holds_init) e.shared += state;
  if (outputs.save_init) e.shared += state;
  if (outputs.save_final) e.shared += state;
  if (outputs.save_data)  // x and y of every step, and the generator that makes them
    e.shared =
        add(e.shared,
            add(mul(mul(static_cast<int64_t>(layout.act_numel(0) + layout.target_numel()) * f32,
                        cfg.batch),
                    cfg.steps),
                d * d * f32));
  int64_t output_factor = 1;
  if (outputs.trace) output_factor += kTraceFactor;
  if (outputs.recording) output_factor += kRecordingFactor;
  e.per_step = add(mul(records, output_factor), kHistoryPerStep + kHistoryPerRankStep * cfg.world +
                                                    (outputs.json ? kJsonPerStep : 0));
  e.steps_total = mul(e.per_step, cfg.steps);
  if (cfg.ranks_on_host > 0) {
    e.processes = cfg.ranks_on_host;
    e.process_baseline = process_baseline_bytes();
    e.per_process = add(add(e.process_baseline, e.shared), e.steps_total);
    e.processes_total = mul(e.per_process, e.processes);
    e.host_total = add(ranks_host, e.processes_total);
  } else {
    e.host_total = add(add(e.shared, ranks_host), e.steps_total);
  }
  return e;
}

int64_t process_baseline_bytes() {
  // Private_Dirty: the pages only this process has written (its heap, its libraries' written
  // data). Private_Clean is left out: it is file pages no other process maps at this moment,
  // which the page cache shares as soon as a sibling maps them too.
  std::ifstream f("/proc/self/smaps_rollup");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("Private_Dirty:", 0) == 0) {
      std::istringstream in(line.substr(line.find(':') + 1));
      int64_t kib = 0;
      if (!(in >> kib)) break;
      const int64_t bytes = add(mul(kib, 1024), kProcessStartup);
      return mul((bytes + kProcessBaselineStep - 1) / kProcessBaselineStep, kProcessBaselineStep);
    }
  return kProcessBaselineUnknown;
}

// ---------------------------------------------------------------------------
// The memory available

int64_t parse_memory_size(const std::string& text) {
  if (text.empty()) return -1;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(v) || v < 0) return -1;
  std::string suffix(end);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.size() == 2 && (suffix[1] == 'i' || suffix[1] == 'I')) suffix.pop_back();
  double mult = 1;
  if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K':
        mult = 1024.0;
        break;
      case 'M':
        mult = 1024.0 * 1024;
        break;
      case 'G':
        mult = 1024.0 * 1024 * 1024;
        break;
      case 'T':
        mult = 1024.0 * 1024 * 1024 * 1024;
        break;
      default:
        return -1;
    }
  } else if (!suffix.empty()) {
    return -1;
  }
  const double bytes = v * mult;
  if (bytes >= 9.0e18) return -1;
  return static_cast<int64_t>(bytes);
}

namespace {

std::optional<int64_t> env_limit() {
  const char* env = std::getenv("SHARDLAB_MEMORY_LIMIT");
  if (!env || !*env) return std::nullopt;
  const int64_t bytes = parse_memory_size(env);
  if (bytes < 0)
    throw ConfigError(std::string("SHARDLAB_MEMORY_LIMIT '") + env +
                      "' is invalid (valid: a number of bytes, or with K, M, G or T, e.g. 8G)");
  return bytes;
}

// The first number after `key` at the start of a line of `path`, or −1.
int64_t read_keyed(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) {
      std::istringstream in(line.substr(key.size()));
      int64_t v = -1;
      if (in >> v) return v;
    }
  return -1;
}

// The one number in `path` ("max" and anything unreadable: −1).
int64_t read_number(const std::string& path) {
  std::ifstream f(path);
  int64_t v = -1;
  if (!(f >> v)) return -1;
  return v;
}

// What the process's cgroup still allows: its limit less what it uses, page
// cache that can be dropped (inactive files) aside, as `docker stats` counts.
// −1 without a limit. cgroup v2 first, then v1.
int64_t cgroup_available() {
  std::string dir = "/sys/fs/cgroup";
  {
    std::ifstream f("/proc/self/cgroup");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("0::", 0) == 0 && line.size() > 4) {
        const std::string own = dir + line.substr(3);
        if (std::ifstream(own + "/memory.max")) dir = own;
      }
  }
  int64_t limit = read_number(dir + "/memory.max");
  int64_t usage = read_number(dir + "/memory.current");
  int64_t inactive = read_keyed(dir + "/memory.stat", "inactive_file ");
  if (limit < 0) {
    const std::string v1 = "/sys/fs/cgroup/memory";
    limit = read_number(v1 + "/memory.limit_in_bytes");
    usage = read_number(v1 + "/memory.usage_in_bytes");
    inactive = read_keyed(v1 + "/memory.stat", "total_inactive_file ");
  }
  // v1 says "no limit" with a number near 2^63.
  if (limit < 0 || limit >= (int64_t{1} << 60) || usage < 0) return -1;
  return std::max<int64_t>(0, limit - (usage - std::max<int64_t>(0, inactive)));
}

}  // namespace

MemoryLimit host_memory_limit() {
  if (auto env = env_limit()) return {*env, "SHARDLAB_MEMORY_LIMIT"};
  MemoryLimit m;
  const int64_t kib = read_keyed("/proc/meminfo", "MemAvailable:");
  if (kib >= 0) m = {kib * 1024, "MemAvailable"};
  const int64_t cg = cgroup_available();
  if (cg >= 0 && (m.bytes < 0 || cg < m.bytes)) m = {cg, "cgroup memory limit"};
  return m;
}

MemoryLimit gpu_memory_limit(int gpu) {
  if (auto env = env_limit()) return {*env, "SHARDLAB_MEMORY_LIMIT"};
  int64_t free_bytes = 0, total_bytes = 0;
  if (!cuda_memory_info(gpu, &free_bytes, &total_bytes)) return {};
  return {free_bytes, "cudaMemGetInfo"};
}

// ---------------------------------------------------------------------------
// The refusal

namespace {

std::string what_runs(const RunConfig& cfg, bool with_steps) {
  std::string s = cfg.model + ", " + cfg.strategy + ", world " + std::to_string(cfg.world);
  if (with_steps) s += ", " + std::to_string(cfg.steps) + " steps";
  return s;
}

}  // namespace

void check_memory(const RunConfig& cfg, const RunOutputs& outputs) {
  if (cfg.force) return;
  const MemoryEstimate e = estimate_memory(cfg, outputs);
  if (e.ranks.empty()) return;
  const std::string force = ", or --force to try anyway";
  // Every process keeps its own history: the steps' part of the total is per process.
  const int64_t steps_all = mul(e.steps_total, std::max(1, e.processes));
  const bool steps_heavy = steps_all > e.host_total / 2;
  const std::string advice =
      steps_heavy ? std::string("use fewer --steps") + (cfg.record ? " or --no-record" : "")
      : outputs.save_data && e.shared > e.host_total / 2
          ? std::string("use fewer --steps or a smaller --batch with --save-data")
      : cfg.world == 1 ? std::string("use a smaller model or batch")
                       : std::string("use a smaller model, batch or world");

  const MemoryLimit host = host_memory_limit();
  if (host.bytes >= 0 && e.host_total > host.bytes) {
    const auto text = [](int64_t b) { return bytes_string(static_cast<double>(b)); };
    // One process per rank: what the processes hold, each for itself, beside their ranks.
    const std::string processes =
        e.processes == 0
            ? ""
            : "of it " + text(e.processes_total) + " for the " + std::to_string(e.processes) +
                  " processes (" + text(e.process_baseline) +
                  " each at start-up, and each one's own weights, data and history)";
    std::string need = "needs about " + text(e.host_total);
    if (steps_heavy)
      need += " (" + text(steps_all) + " of it records and history, " + text(e.per_step) +
              " a step" +
              (e.processes ? " in each of the " + std::to_string(e.processes) + " processes" : "") +
              ")";
    else if (e.device == DeviceKind::cpu && cfg.world > 1)
      need = "needs about " + text(e.largest_rank()) + " per rank (" + text(e.host_total) +
             " in all" + (e.processes ? ", " + processes : "") + ")";
    else if (e.device == DeviceKind::cuda)
      need += " of host memory" + (e.processes ? " (" + processes + ")" : "");
    else if (e.processes)
      need += " (" + processes + ")";
    throw MemoryRefused(what_runs(cfg, steps_heavy) + " " + need + " but " +
                        bytes_string(static_cast<double>(host.bytes)) + " is available (" +
                        host.source + "); " + advice + force);
  }
  for (const auto& [gpu, bytes] : e.gpu_total) {
    const MemoryLimit limit = gpu_memory_limit(gpu);
    if (limit.bytes < 0 || bytes <= limit.bytes) continue;
    std::string ranks;
    for (const RankMemoryEstimate& r : e.ranks)
      if (r.gpu == gpu) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r.rank);
    throw MemoryRefused(what_runs(cfg, false) + " needs about " +
                        bytes_string(static_cast<double>(bytes)) +
                        " on cuda:" + std::to_string(gpu) + " (rank" +
                        (ranks.find(',') != std::string::npos ? "s " : " ") + ranks + ") but " +
                        bytes_string(static_cast<double>(limit.bytes)) + " is free there (" +
                        limit.source + "); " + advice + force);
  }
}

}  // namespace shardlab
