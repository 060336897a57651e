// Layer math against finite differences in double precision, and the
// optimizers against their PyTorch formulas.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "core/model/layer_stack.h"
#include "core/rng.h"
#include "kernels/cpu.h"
#include "tests/test_util.h"

using namespace shardlab;
using shardlab::test::numeric_grad;
using shardlab::test::require_close;

namespace {

std::vector<double> randn(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = rng.normal();
  return v;
}

}  // namespace

TEST_CASE("linear backward matches finite differences (double)", "[kernels]") {
  const int rows = 3, in = 4, out = 5;
  auto x = randn(rows * in, 1), w = randn(out * in, 2), b = randn(out, 3), r = randn(rows * out, 4);
  // Loss = Σ r ⊙ linear(x), so dL/dout = r.
  auto loss = [&] {
    std::vector<double> y(rows * out);
    kernels::linear_forward(y.data(), x.data(), w.data(), b.data(), rows, in, out);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += r[i] * y[i];
    return s;
  };
  std::vector<double> dx(rows * in), dw(out * in, 0.5), db(out, 0.25);
  kernels::linear_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), rows, in,
                           out);
  // Parameter gradients accumulate onto what was there.
  for (double& v : dw) v -= 0.5;
  for (double& v : db) v -= 0.25;
  require_close(dx, numeric_grad(x, loss), 1e-7);
  require_close(dw, numeric_grad(w, loss), 1e-7);
  require_close(db, numeric_grad(b, loss), 1e-7);
}

TEST_CASE("GELU backward matches finite differences and exact-erf values", "[kernels]") {
  auto x = randn(50, 5), r = randn(50, 6);
  auto loss = [&] {
    std::vector<double> y(x.size());
    kernels::gelu_forward(y.data(), x.data(), x.size());
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += r[i] * y[i];
    return s;
  };
  std::vector<double> dx(x.size());
  kernels::gelu_backward(dx.data(), r.data(), x.data(), x.size());
  require_close(dx, numeric_grad(x, loss), 1e-7);
  // torch.nn.functional.gelu(torch.tensor([1.0, -0.5], dtype=float64))
  REQUIRE(kernels::gelu_scalar(1.0) == Approx(0.8413447460685429).epsilon(1e-14));
  REQUIRE(kernels::gelu_scalar(-0.5) == Approx(-0.15426876936299344).epsilon(1e-14));
}

TEST_CASE("MSE loss is the mean and its gradient matches finite differences", "[kernels]") {
  auto p = randn(12, 7), t = randn(12, 8);
  auto loss = [&] {
    return kernels::mse_forward_backward<double>(nullptr, p.data(), t.data(), 12, 12);
  };
  double expect = 0;
  for (int i = 0; i < 12; ++i) expect += (p[i] - t[i]) * (p[i] - t[i]) / 12;
  std::vector<double> dp(12);
  REQUIRE(kernels::mse_forward_backward(dp.data(), p.data(), t.data(), 12, 12) == Approx(expect));
  require_close(dp, numeric_grad(p, loss), 1e-7);
  // Two halves with the global divisor add up to the whole.
  std::vector<double> d1(6), d2(6);
  const double l1 = kernels::mse_forward_backward(d1.data(), p.data(), t.data(), 6, 12);
  const double l2 = kernels::mse_forward_backward(d2.data(), p.data() + 6, t.data() + 6, 6, 12);
  REQUIRE(l1 + l2 == Approx(expect));
}

TEST_CASE("a full MLP layer (linear + GELU) backward matches finite differences", "[kernels]") {
  const int rows = 2, d = 6;
  auto x = randn(rows * d, 9), w = randn(d * d, 10), b = randn(d, 11), t = randn(rows * d, 12);
  auto loss = [&] {
    std::vector<double> pre(rows * d), y(rows * d);
    kernels::linear_forward(pre.data(), x.data(), w.data(), b.data(), rows, d, d);
    kernels::gelu_forward(y.data(), pre.data(), y.size());
    return kernels::mse_forward_backward<double>(nullptr, y.data(), t.data(), y.size(), y.size());
  };
  std::vector<double> pre(rows * d), y(rows * d), g(rows * d), dx(rows * d), dw(d * d), db(d);
  kernels::linear_forward(pre.data(), x.data(), w.data(), b.data(), rows, d, d);
  kernels::gelu_forward(y.data(), pre.data(), y.size());
  kernels::mse_forward_backward(g.data(), y.data(), t.data(), y.size(), y.size());
  kernels::gelu_backward(g.data(), g.data(), pre.data(), g.size());
  kernels::linear_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), rows, d,
                           d);
  require_close(dx, numeric_grad(x, loss), 1e-7);
  require_close(dw, numeric_grad(w, loss), 1e-7);
  require_close(db, numeric_grad(b, loss), 1e-7);
}

TEST_CASE("LayerStack (float) gradients match the same network in double", "[kernels]") {
  const ModelLayout layout(ModelSpec::parse("mlp:3x8"));
  const auto init = init_params(layout, 3);
  auto backend = make_cpu_backend();
  Allocator alloc(*backend, nullptr);
  LayerStack stack(layout, 0, 3, alloc, nullptr, FlatParams(init));
  const int rows = 4, d = 8;
  auto xd = randn(rows * d, 20), td = randn(rows * d, 21);
  std::vector<float> x(xd.begin(), xd.end()), t(td.begin(), td.end()), dpred(rows * d);
  const auto* pred = static_cast<const float*>(stack.forward(x.data(), rows));
  kernels::mse_forward_backward(dpred.data(), pred, t.data(), dpred.size(), dpred.size());
  std::vector<int> order;
  stack.backward(dpred.data(), -1, false, [&](int l) { order.push_back(l); });
  REQUIRE(order == std::vector<int>{2, 1, 0});

  // Reference in double: numeric gradient of the double-precision loss.
  std::vector<double> p(init.begin(), init.end());
  auto loss = [&] {
    std::vector<double> a(xd), pre(rows * d), out(rows * d);
    for (int l = 0; l < 3; ++l) {
      const auto& wi = layout.weight(l);
      const auto& bi = layout.bias(l);
      kernels::linear_forward(pre.data(), a.data(), p.data() + wi.offset, p.data() + bi.offset,
                              rows, d, d);
      if (layout.has_gelu(l))
        kernels::gelu_forward(out.data(), pre.data(), out.size());
      else
        out = pre;
      a = out;
    }
    return kernels::mse_forward_backward<double>(nullptr, a.data(), td.data(), a.size(), a.size());
  };
  const auto numeric = numeric_grad(p, loss);
  for (int l = 0; l < 3; ++l) {
    const auto& wi = layout.weight(l);
    for (size_t i = 0; i < wi.numel; ++i)
      REQUIRE(stack.weight_grad(l)[i] == Approx(numeric[wi.offset + i]).margin(1e-5).epsilon(1e-3));
    const auto& bi = layout.bias(l);
    for (size_t i = 0; i < bi.numel; ++i)
      REQUIRE(stack.bias_grad(l)[i] == Approx(numeric[bi.offset + i]).margin(1e-5).epsilon(1e-3));
  }
  // Backward freed every activation it saved.
  REQUIRE(alloc.stats().device.current[static_cast<int>(MemCategory::activations)] == 0);
}

TEST_CASE("AdamW follows torch.optim.AdamW and SGD is p -= lr g", "[kernels]") {
  kernels::AdamWParams h;  // lr 1e-3, betas 0.9/0.999, eps 1e-8, wd 0.01
  float p = 0.5f, m = 0, v = 0;
  const float g = 0.2f;
  kernels::adamw_step(&p, &g, &m, &v, 1, h, 1);
  // Step 1: m̂ = g, v̂ = g², so the update is lr · g / (|g| + eps) after decay.
  const double expect1 = 0.5 * (1 - 1e-3 * 0.01) - 1e-3 * 0.2 / (0.2 + 1e-8);
  REQUIRE(p == Approx(expect1).epsilon(1e-6));
  const float g2 = -0.1f;
  kernels::adamw_step(&p, &g2, &m, &v, 1, h, 2);
  const double m2 = 0.9 * 0.1 * 0.2 + 0.1 * -0.1, v2 = 0.999 * 0.001 * 0.04 + 0.001 * 0.01;
  const double mh = m2 / (1 - 0.81), vh = v2 / (1 - 0.999 * 0.999);
  const double expect2 = expect1 * (1 - 1e-5) - 1e-3 * mh / (std::sqrt(vh) + 1e-8);
  REQUIRE(p == Approx(expect2).epsilon(1e-6));

  float q[2] = {1, 2}, gq[2] = {0.5f, -1};
  kernels::sgd_step(q, gq, 2, 0.1f);
  REQUIRE(q[0] == Approx(0.95f));
  REQUIRE(q[1] == Approx(2.1f));
}
