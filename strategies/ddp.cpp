// `ddp`: DistributedDataParallel. Every rank holds the whole model and 1/W of
// the global batch; gradients are averaged with all-reduce (each rank's loss is
// divided by the global batch, so the all-reduce's sum is the average) and
// every rank takes the same optimizer step: the replicas never drift apart.
//
// What to notice in the timeline: gradients are grouped into buckets, and a
// bucket's all-reduce starts on the comm lane the moment its last gradient is
// written, while backward is still running on the compute lane. With
// --no-overlap the same all-reduces run only after backward, and the step
// grows by their length. In the memory panel: every rank carries the full
// params + grads + optimizer state (the redundancy ZeRO removes), plus the buckets.
//
// Mixed precision (--precision bf16|fp16): the replica computes with 2-byte
// params, and its 2-byte gradients travel in 2-byte buckets, so the
// all-reduce moves half the bytes; the optimizer keeps fp32 masters and
// moments (2 + 2 + 12 = 16 bytes a parameter, as fp32 AdamW). After the
// all-reduce every rank holds the same gradients, so fp16's overflow check
// needs no vote: every rank reaches the same skip decision on its own.
#include <algorithm>

#include "core/model/layer_stack.h"
#include "core/model/precision.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/sharding.h"
#include "core/parallel/strategy.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

struct Bucket {
  std::vector<int> params;  // indices into the model's parameter list
  size_t numel = 0;
  int lowest_layer = 0;  // the bucket is full once backward has passed this layer
  int pending = 0;       // parameters whose gradient is not written yet
  Tensor buffer;         // flat copy of the gradients, reduced in place
  Work work;
};

// Buckets fill in the order backward produces gradients: last layer first.
// As in torch DDP, the first bucket is capped at 1 MiB so that the first
// all-reduce starts early in backward instead of after most of it.
// The caps are in bytes, as torch's bucket_cap_mb: a 2-byte bucket holds twice the values.
std::vector<Bucket> make_buckets(const ModelLayout& layout, double bucket_mb, size_t bytes) {
  std::vector<Bucket> buckets;
  const size_t cap = static_cast<size_t>(bucket_mb * 1024 * 1024 / bytes);
  const size_t first_cap = std::min(cap, size_t{1024 * 1024} / bytes);
  for (int i = static_cast<int>(layout.params().size()) - 1; i >= 0; --i) {
    const ParamInfo& p = layout.params()[i];
    const size_t limit = buckets.size() <= 1 ? first_cap : cap;
    if (buckets.empty() || (buckets.back().numel > 0 && buckets.back().numel + p.numel > limit))
      buckets.emplace_back();
    Bucket& b = buckets.back();
    b.params.push_back(i);
    b.numel += p.numel;
    b.lowest_layer = p.layer;
  }
  return buckets;
}

class Ddp final : public Strategy {
 public:
  void setup(RankEnv& env, const ParamSource& init) override {
    env_ = &env;
    const ModelLayout& layout = env.layout;
    mp_ = std::make_unique<MixedPrecision>(env.cfg.precision);
    const DType dt = mp_->dtype();
    model_ = std::make_unique<LayerStack>(layout, 0, layout.num_layers(), env.alloc, env.rec, init,
                                          dt, env.tp);
    optimizer_ = std::make_unique<Optimizer>(env.cfg.optimizer, env.alloc, model_->ranges(), dt);
    if (optimizer_->mixed())
      for (size_t i = 0; i < layout.params().size(); ++i)
        optimizer_->load_master(i, init, layout.params()[i].offset);

    // Phase 0 — replicate: like torch DDP's constructor, broadcast rank 0's
    // parameters so every replica starts from exactly the same weights.
    std::vector<void*> params = model_->param_raw();
    for (size_t i = 0; i < params.size(); ++i)
      env.comm->broadcast(params[i], layout.params()[i].numel, dt, 0,
                          CommMeta{layout.params()[i].layer, -1});

    buckets_ = make_buckets(layout, env.cfg.bucket_mb, mp_->bytes());
    for (size_t k = 0; k < buckets_.size(); ++k)
      buckets_[k].buffer = env.alloc.alloc("ddp.bucket." + std::to_string(k),
                                           MemCategory::comm_buffers, buckets_[k].numel, dt);
  }

  LossShare step(int step) override {
    const RunConfig& cfg = env_->cfg;
    Batch batch = load_rank_slice(*env_, step);  // this rank's slice of the global batch

    // Phase 1 — forward and loss on the local slice. The loss is divided by the
    // global batch, not the slice (data_parallel.h): each rank's gradient is
    // its 1/W share, and summing the shares over ranks gives exactly the
    // gradient of the mean over the global batch (the average of the ranks'
    // slice means), with no division after the all-reduce.
    model_->zero_grads();
    for (Bucket& bk : buckets_) bk.pending = static_cast<int>(bk.params.size());
    model_->forward(batch.x.raw(), batch.rows);
    Loss loss = compute_loss(*env_, *mp_, model_->output(), batch);

    // Phase 2 — backward. With overlap, each layer's completion may fill a
    // bucket, whose all-reduce then starts at once on the comm thread.
    auto on_layer_done = [&](int layer) {
      if (!cfg.overlap) return;
      for (Bucket& bk : buckets_) {
        for (int i : bk.params)
          if (env_->layout.params()[i].layer == layer) --bk.pending;
        if (bk.pending == 0 && !bk.work.valid()) launch(bk);
      }
    };
    model_->backward(loss.grad.raw(), -1, false, on_layer_done);
    if (!cfg.overlap)
      for (Bucket& bk : buckets_) launch(bk);

    // Phase 3 — wait for every bucket and write the summed gradients back.
    for (Bucket& bk : buckets_) {
      bk.work.wait();
      bk.work = Work();
      unpack(bk);
    }
    // A tied weight (gpt's lm_head and token embedding) has a gradient from
    // each of its uses: summed, so both copies take the same update.
    model_->sum_tied_grads();

    // Phase 4 — every rank applies the same update to its own replica.
    {
      ScopedSpan span(env_->rec, Lane::compute, SpanKind::optimizer);
      mp_->step(*optimizer_, model_->param_raw(), model_->grad_raw(), nullptr);
    }
    return {loss.sum(), batch.rows};
  }

  RankState rank_state() override { return model_->rank_state(optimizer_.get(), mp_.get()); }
  std::vector<float> export_params() override {
    if (env_->rank != 0) return {};
    return model_->export_params(env_->layout.total(), *optimizer_);
  }

 private:
  void launch(Bucket& bk) {
    size_t at_value = 0;
    std::vector<void*> grads = model_->grad_raw();
    for (int i : bk.params) {
      const size_t n = env_->layout.params()[i].numel;
      env_->device.copy(at(bk.buffer, at_value), grads[i], n * mp_->bytes(),
                        CopyKind::device_to_device);
      at_value += n;
    }
    bk.work = env_->comm->all_reduce_async(bk.buffer.raw(), bk.numel, mp_->dtype(),
                                           CommMeta{bk.lowest_layer, -1});
  }

  // Writes the reduced bucket back into the gradients.
  void unpack(Bucket& bk) {
    size_t at_value = 0;
    std::vector<void*> grads = model_->grad_raw();
    for (int i : bk.params) {
      const size_t n = env_->layout.params()[i].numel;
      env_->device.copy(grads[i], at(bk.buffer, at_value), n * mp_->bytes(),
                        CopyKind::device_to_device);
      at_value += n;
    }
  }

  RankEnv* env_ = nullptr;
  std::unique_ptr<LayerStack> model_;
  std::unique_ptr<MixedPrecision> mp_;
  std::unique_ptr<Optimizer> optimizer_;  // holds the fp32 masters in mixed precision
  std::vector<Bucket> buckets_;
};

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo ddp_strategy() {
  return {
      .name = "ddp",
      .summary =
          "DistributedDataParallel: full replicas, bucketed gradient all-reduce overlapped "
          "with backward",
      .family = StrategyFamily::data_parallel,
      .reads = {StrategyOption::precision, StrategyOption::bucket_mb, StrategyOption::no_overlap,
                StrategyOption::mesh, StrategyOption::mesh_order,
                StrategyOption::sequence_parallel},
      .moves =
          [](const MoveQuery&) {
            return std::vector<StateMove>{{StateOp::all_reduce, ModelStatePart::grads, 2, 0,
                                           "in backward, a bucket at a time"}};
          },
      .comm_buffers = "gradient buckets",
      .make = [] { return std::make_unique<Ddp>(); },
      .validate = [](const RunConfig& cfg) { require_batch_divisible(cfg); },
  };
}

}  // namespace shardlab
