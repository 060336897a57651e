// `single`: the whole model and the whole batch on one device. Every other
// strategy is checked against this one: same seed, same data, same weights.
// With --precision bf16|fp16 it is the mixed-precision reference: 2-byte
// params, activations and grads, fp32 masters and moments in the optimizer.
#include "core/model/layer_stack.h"
#include "core/model/precision.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/strategy.h"
#include "strategies/registry.h"

namespace shardlab {
namespace {

class Single final : public Strategy {
 public:
  void setup(RankEnv& env, const ParamSource& init) override {
    env_ = &env;
    const int L = env.layout.num_layers();
    mp_ = std::make_unique<MixedPrecision>(env.cfg.precision);
    const DType dt = mp_->dtype();
    model_ = std::make_unique<LayerStack>(env.layout, 0, L, env.alloc, env.rec, init, dt);
    optimizer_ = std::make_unique<Optimizer>(env.cfg.optimizer, env.alloc, model_->ranges(), dt);
    if (optimizer_->mixed())
      for (size_t i = 0; i < env.layout.params().size(); ++i)
        optimizer_->load_master(i, init, env.layout.params()[i].offset);
  }

  LossShare step(int step) override {
    const int B = env_->cfg.batch;
    Batch batch = load_batch(*env_, step, 0, B);  // the whole batch

    // Forward, loss, backward, update: the loop every strategy distributes.
    model_->zero_grads();
    model_->forward(batch.x.raw(), B);
    Loss loss = compute_loss(*env_, *mp_, model_->output(), batch);
    model_->backward(loss.grad.raw(), -1, false);
    model_->sum_tied_grads();  // gpt: lm_head's use of the embedding adds to its gradient
    {
      ScopedSpan span(env_->rec, Lane::compute, SpanKind::optimizer);
      mp_->step(*optimizer_, model_->param_raw(), model_->grad_raw(), nullptr);
    }
    return {loss.sum(), B};
  }

  RankState rank_state() override { return model_->rank_state(optimizer_.get(), mp_.get()); }
  std::vector<float> export_params() override {
    // + BatchNorm's buffers under +bn
    return model_->export_params(env_->layout.state_total(), *optimizer_);
  }

 private:
  RankEnv* env_ = nullptr;
  std::unique_ptr<LayerStack> model_;
  std::unique_ptr<MixedPrecision> mp_;
  std::unique_ptr<Optimizer> optimizer_;
};

}  // namespace

// This strategy's entry in the registry (strategies/registry.cpp).
StrategyInfo single_strategy() {
  return {
      .name = "single",
      .summary = "the reference: whole model and batch on one device",
      .family = StrategyFamily::single,
      .reads = {StrategyOption::precision},
      .make = [] { return std::make_unique<Single>(); },
      .validate =
          [](const RunConfig& cfg) {
            if (cfg.world != 1)
              throw ConfigError(
                  "--world " + std::to_string(cfg.world) +
                  " is invalid for strategy single (valid: 1; it is the one-device reference)");
          },
  };
}

}  // namespace shardlab
