// Fused causal attention (kernels/flash_attention.h, `--attention flash`)
// against the materialised attention (kernels/transformer.h), its reference:
// the same outputs and gradients for every tile size (double: to rounding;
// fp32: within 1e-6 relative), backward against finite differences, nothing
// seen from the future inside a tile, and the cpu and guarded devices' ops
// (fp32: the templates' bits; bf16/fp16: the fp32 math rounded once, and
// within a stated tolerance of the naive 2-byte path).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/rng.h"
#include "kernels/flash_attention.h"
#include "kernels/transformer.h"
#include "tests/test_util.h"
#include "tests/transformer_ops.h"

using namespace shardlab;

namespace {

struct Shape {
  int B, T, C, H;
  size_t qkv() const { return static_cast<size_t>(B) * T * 3 * C; }
  size_t y() const { return static_cast<size_t>(B) * T * C; }
  size_t rows() const { return static_cast<size_t>(B) * H * T; }
  size_t att() const { return rows() * T; }
};

template <typename A>
std::vector<A> randn(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<A> v(n);
  for (A& x : v) x = static_cast<A>(scale * rng.normal());
  return v;
}

// max |a − b| / max |b|: an error relative to the tensor's scale, as the
// other kernel and training tests measure it.
template <typename A>
double rel(const std::vector<A>& a, const std::vector<A>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-300);
}

void report(const std::string& what, double err) {
  if (std::getenv("SHARDLAB_TEST_VERBOSE")) std::printf("%-55s %.3g\n", what.c_str(), err);
}

template <typename A>
struct Attention {
  std::vector<A> y, lse, dqkv;
};

// The materialised reference: y, and dqkv of the loss Σ dy·y.
template <typename A>
Attention<A> naive(const std::vector<A>& qkv, const std::vector<A>& dy, const Shape& s) {
  Attention<A> r{std::vector<A>(s.y()), {}, std::vector<A>(s.qkv())};
  std::vector<A> att(s.att()), scratch(s.att());
  kernels::attention_forward<A>(r.y.data(), att.data(), qkv.data(), nullptr, s.B, s.T, s.C, s.H);
  kernels::attention_backward<A>(r.dqkv.data(), att.data(), scratch.data(), dy.data(), qkv.data(),
                                 s.B, s.T, s.C, s.H);
  return r;
}

template <typename A>
Attention<A> flash(const std::vector<A>& qkv, const std::vector<A>& dy, const Shape& s, int tile) {
  Attention<A> r{std::vector<A>(s.y()), std::vector<A>(s.rows()), std::vector<A>(s.qkv(), A(7))};
  std::vector<A> delta(s.rows(), A(-1));
  kernels::flash_attention_forward<A>(r.y.data(), r.lse.data(), qkv.data(), s.B, s.T, s.C, s.H,
                                      tile);
  kernels::flash_attention_backward<A>(r.dqkv.data(), delta.data(), dy.data(), qkv.data(),
                                       r.y.data(), r.lse.data(), s.B, s.T, s.C, s.H, tile);
  return r;
}

// Each row's logsumexp of its scaled causal scores, straight from the definition.
std::vector<double> logsumexp_rows(const std::vector<double>& qkv, const Shape& s) {
  const int hs = s.C / s.H;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> out;
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int t = 0; t < s.T; ++t) {
        std::vector<double> sc;
        for (int j = 0; j <= t; ++j) {
          double d = 0;
          for (int e = 0; e < hs; ++e)
            d += qkv[(static_cast<size_t>(b) * s.T + t) * 3 * s.C + h * hs + e] *
                 qkv[(static_cast<size_t>(b) * s.T + j) * 3 * s.C + s.C + h * hs + e];
          sc.push_back(d * scale);
        }
        const double m = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (double v : sc) sum += std::exp(v - m);
        out.push_back(m + std::log(sum));
      }
  return out;
}

const Shape kShapes[] = {{2, 37, 24, 3}, {1, 64, 64, 4}, {3, 5, 8, 2}, {1, 1, 4, 1}};
const int kTiles[] = {1, 3, 8, kernels::kFlashTile, 64};

}  // namespace

TEST_CASE("flash attention equals the materialised attention for every tile size",
          "[transformer][flash]") {
  for (const Shape& s : kShapes)
    for (int tile : kTiles) {
      INFO("B=" << s.B << " T=" << s.T << " C=" << s.C << " H=" << s.H << " tile " << tile);
      const auto qkv = randn<double>(s.qkv(), 40, 1.5), dy = randn<double>(s.y(), 41);
      const Attention<double> want = naive(qkv, dy, s), got = flash(qkv, dy, s, tile);
      CHECK(rel(got.y, want.y) < 1e-13);
      CHECK(rel(got.dqkv, want.dqkv) < 1e-13);
      CHECK(rel(got.lse, logsumexp_rows(qkv, s)) < 1e-14);
      // fp32: another order of sums (tiles, online rescaling) than the GEMMs over whole rows.
      const auto qkvf = randn<float>(s.qkv(), 40, 1.5), dyf = randn<float>(s.y(), 41);
      const Attention<float> wf = naive(qkvf, dyf, s), gf = flash(qkvf, dyf, s, tile);
      report("flash vs naive fp32 y, T=" + std::to_string(s.T) + " tile " + std::to_string(tile),
             rel(gf.y, wf.y));
      report("flash vs naive fp32 dqkv, T=" + std::to_string(s.T) + " tile " + std::to_string(tile),
             rel(gf.dqkv, wf.dqkv));
      CHECK(rel(gf.y, wf.y) < 1e-6);
      CHECK(rel(gf.dqkv, wf.dqkv) < 1e-6);
    }
}

TEST_CASE("flash attention backward matches finite differences (double)", "[transformer][flash]") {
  const Shape s{2, 5, 8, 2};
  auto qkv = randn<double>(s.qkv(), 8), r = randn<double>(s.y(), 9);
  const int tile = 2;  // rows 0-1, 2-3, 4: masked entries inside tiles and a ragged last one
  auto loss = [&] {
    std::vector<double> y(s.y()), lse(s.rows());
    kernels::flash_attention_forward<double>(y.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.H,
                                             tile);
    double sum = 0;
    for (size_t i = 0; i < y.size(); ++i) sum += y[i] * r[i];
    return sum;
  };
  const Attention<double> a = flash(qkv, r, s, tile);
  const auto numeric = test::numeric_grad(qkv, loss);
  double worst = 0;
  for (size_t i = 0; i < numeric.size(); ++i)
    worst = std::max(worst, std::abs(a.dqkv[i] - numeric[i]) / (1 + std::abs(numeric[i])));
  report("finite differences: flash attention dqkv", worst);
  test::require_close(a.dqkv, numeric, 1e-7);
}

TEST_CASE("flash attention: no position sees a later one, inside a tile or across tiles",
          "[transformer][flash]") {
  const Shape s{1, 7, 6, 2};
  const auto qkv = randn<double>(s.qkv(), 17, 2.0), dy = randn<double>(s.y(), 18);
  for (int tile : {1, 2, 4, 8}) {
    INFO("tile " << tile);
    const Attention<double> a = flash(qkv, dy, s, tile);
    auto changed = qkv;
    for (int c = 0; c < 3 * s.C; ++c) changed[3 * 3 * s.C + c] += 1.0;  // t = 3
    const Attention<double> b = flash(changed, dy, s, tile);
    for (int t = 0; t < s.T; ++t)
      for (int c = 0; c < s.C; ++c) {
        const size_t i = static_cast<size_t>(t) * s.C + c;
        if (t < 3) CHECK(b.y[i] == a.y[i]);  // bit for bit: the change never entered
      }
    for (int h = 0; h < s.H; ++h)
      for (int t = 0; t < 3; ++t) CHECK(b.lse[h * s.T + t] == a.lse[h * s.T + t]);
    // The first position attends to itself alone: its output is its own v.
    for (int c = 0; c < s.C; ++c) CHECK(a.y[c] == Approx(qkv[2 * s.C + c]).epsilon(1e-14));
  }
}

TEST_CASE("flash attention refuses heads that do not split the channels", "[transformer][flash]") {
  std::vector<float> qkv(3 * 10), y(10), lse(10), delta(10);
  CHECK_THROWS_WITH(
      kernels::flash_attention_forward<float>(y.data(), lse.data(), qkv.data(), 1, 1, 10, 3),
      Catch::Contains("10 channels do not split into 3 heads"));
  CHECK_THROWS_WITH(
      kernels::flash_attention_backward<float>(qkv.data(), delta.data(), y.data(), qkv.data(),
                                               y.data(), lse.data(), 1, 1, 10, 3),
      Catch::Contains("10 channels do not split into 3 heads"));
}

// ---------------------------------------------------------------------------
// The devices' ops

using namespace shardlab::test;

TEST_CASE(
    "backend flash attention: cpu and guarded fp32 give the templates' bits, within 1e-6 "
    "of naive",
    "[transformer][flash][device]") {
  const OpInputs in;
  const Shape s{in.B, in.T, in.C, in.H};
  std::vector<float> y(s.y()), lse(s.rows()), dqkv(s.qkv()), delta(s.rows());
  kernels::flash_attention_forward<float>(y.data(), lse.data(), in.qkv.data(), s.B, s.T, s.C, s.H);
  kernels::flash_attention_backward<float>(dqkv.data(), delta.data(), in.dyc.data(), in.qkv.data(),
                                           y.data(), lse.data(), s.B, s.T, s.C, s.H);
  const std::vector<std::vector<float>> want = {y, lse, dqkv, delta};
  auto cpu = make_cpu_backend();
  auto guard = make_memory_guard();
  auto guarded = make_guarded_cpu_backend(guard);
  const OpResults naive_ops = run_ops(*cpu, DType::f32, in);
  for (DeviceBackend* dev : {cpu.get(), guarded.get()}) {
    const OpResults got = run_flash_ops(*dev, DType::f32, in);
    REQUIRE(got.tensors.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO(kFlashTensorNames[i] << (dev == cpu.get() ? " (cpu)" : " (guarded)"));
      CHECK(got.tensors[i] == want[i]);
    }
    CHECK(rel(got.tensors[0], naive_ops.tensors[kAttentionFirst]) < 1e-6);      // y
    CHECK(rel(got.tensors[2], naive_ops.tensors[kAttentionFirst + 2]) < 1e-6);  // dqkv
  }
}

TEST_CASE("backend flash attention in bf16 and fp16: fp32 math rounded once, near naive's",
          "[transformer][flash][device]") {
  const OpInputs in;
  const Shape s{in.B, in.T, in.C, in.H};
  auto cpu = make_cpu_backend();
  auto guard = make_memory_guard();
  auto guarded = make_guarded_cpu_backend(guard);
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(to_string(dt));
    const OpResults got = run_flash_ops(*cpu, dt, in);
    CHECK(run_flash_ops(*guarded, dt, in).tensors == got.tensors);
    // The fp32 templates on the values dt holds: forward's y rounded once, lse
    // unrounded; backward reads y as stored (rounded), so it is given that too.
    const std::vector<float> qkv = rounded(in.qkv, dt), dy = rounded(in.dyc, dt);
    std::vector<float> y(s.y()), lse(s.rows()), dqkv(s.qkv()), delta(s.rows());
    kernels::flash_attention_forward<float>(y.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.H);
    CHECK(got.tensors[0] == rounded(y, dt));
    CHECK(got.tensors[1] == lse);
    y = rounded(y, dt);
    kernels::flash_attention_backward<float>(dqkv.data(), delta.data(), dy.data(), qkv.data(),
                                             y.data(), lse.data(), s.B, s.T, s.C, s.H);
    CHECK(got.tensors[2] == rounded(dqkv, dt));
    CHECK(got.tensors[3] == delta);
    // Against the naive 2-byte path, which also rounds the probabilities and dS
    // to dt inside: both are within dt's rounding of the exact values.
    const OpResults naive_ops = run_ops(*cpu, dt, in);
    const double ey = rel(got.tensors[0], naive_ops.tensors[kAttentionFirst]);
    const double eg = rel(got.tensors[2], naive_ops.tensors[kAttentionFirst + 2]);
    report(std::string("flash vs naive y ") + to_string(dt), ey);
    report(std::string("flash vs naive dqkv ") + to_string(dt), eg);
    const double tol = dt == DType::bf16 ? 2e-2 : 3e-3;
    CHECK(ey < tol);
    CHECK(eg < tol);
  }
}
