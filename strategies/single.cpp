// `single`: the whole model and the whole batch on one device. Every other
// strategy is checked against this one: same seed, same data, same weights.
#include <cstring>

#include "core/layer_stack.h"
#include "core/strategy.h"
#include "kernels/cpu.h"

namespace shardlab {
namespace {

class Single final : public Strategy {
 public:
  void setup(RankEnv& env, const std::vector<float>& init) override {
    env_ = &env;
    const int L = env.layout.num_layers();
    model_ = std::make_unique<LayerStack>(env.layout, 0, L, env.alloc, env.rec, init);
    optimizer_ = std::make_unique<Optimizer>(env.cfg.optimizer, env.alloc, model_->ranges());
  }

  LossShare step(int step) override {
    const RunConfig& cfg = env_->cfg;
    const int B = cfg.batch, D = env_->layout.dim();
    Tensor x = env_->alloc.alloc("batch.x", MemCategory::activations, {B, D});
    Tensor y = env_->alloc.alloc("batch.y", MemCategory::activations, {B, D});
    env_->data.rows(step, 0, B, x.data<float>(), y.data<float>());

    // Forward, loss, backward, update: the loop every strategy distributes.
    model_->zero_grads();
    const float* pred = model_->forward(x.data<float>(), B);
    Tensor dpred = env_->alloc.alloc("loss.grad", MemCategory::temporary, {B, D});
    double loss;
    {
      ScopedSpan span(env_->rec, Lane::compute, SpanKind::loss);
      loss = kernels::mse_forward_backward(dpred.data<float>(), pred, y.data<float>(),
                                           static_cast<size_t>(B) * D, static_cast<size_t>(B) * D);
    }
    model_->backward(dpred.data<float>(), -1, false);
    {
      ScopedSpan span(env_->rec, Lane::compute, SpanKind::optimizer);
      optimizer_->step(model_->param_ptrs(), model_->grad_ptrs());
    }
    return {loss * B, B};
  }

  std::vector<float> export_params() override {
    std::vector<float> flat(env_->layout.total());
    model_->copy_params_to(flat);
    return flat;
  }

 private:
  RankEnv* env_ = nullptr;
  std::unique_ptr<LayerStack> model_;
  std::unique_ptr<Optimizer> optimizer_;
};

const bool registered = register_strategy({
    "single",
    "the reference: whole model and batch on one device",
    [] { return std::make_unique<Single>(); },
    [](const RunConfig& cfg) {
      require_fp32(cfg);
      if (cfg.world != 1)
        throw ConfigError(
            "--world " + std::to_string(cfg.world) +
            " is invalid for strategy single (valid: 1; it is the one-device reference)");
    },
});

}  // namespace
}  // namespace shardlab
