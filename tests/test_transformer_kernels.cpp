// The GPT-2 kernels (kernels/transformer.h) and their DeviceBackend ops:
// every backward against finite differences in double precision, forwards on
// cases with known answers, PyTorch's values (tests/data/transformer_ops.json,
// from gen_transformer_ops.py), and the cpu and guarded devices in fp32 (the
// templates' exact bits) and bf16 (the fp32 math rounded once).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/rng.h"
#include "kernels/cpu.h"
#include "kernels/storage.h"
#include "kernels/transformer.h"
#include "tests/test_util.h"
#include "tests/transformer_ops.h"

using namespace shardlab;
using shardlab::test::numeric_grad;
using shardlab::test::require_close;

namespace {

std::vector<double> randn(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = scale * rng.normal();
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}

// Reports a measured error when SHARDLAB_TEST_VERBOSE is set (numbers for the
// record, without cluttering normal runs).
void report(const std::string& what, double err) {
  if (std::getenv("SHARDLAB_TEST_VERBOSE")) std::printf("%-55s %.3g\n", what.c_str(), err);
}

// Checks an analytic gradient against central differences of `loss` over x,
// reporting the worst error relative to 1 + |numeric|.
void fd_check(const std::string& what, const std::vector<double>& analytic, std::vector<double>& x,
              const std::function<double()>& loss) {
  const auto numeric = numeric_grad(x, loss);
  double worst = 0;
  for (size_t i = 0; i < numeric.size(); ++i)
    worst = std::max(worst, std::abs(analytic[i] - numeric[i]) / (1 + std::abs(numeric[i])));
  report("finite differences: " + what, worst);
  require_close(analytic, numeric, 1e-7);
}

// ---- attention helpers in double

struct AttnShape {
  int B, T, C, H;
  size_t qkv() const { return static_cast<size_t>(B) * T * 3 * C; }
  size_t y() const { return static_cast<size_t>(B) * T * C; }
  size_t att() const { return static_cast<size_t>(B) * H * T * T; }
};

std::vector<double> attention_y(const std::vector<double>& qkv, const AttnShape& s,
                                std::vector<double>* att_out = nullptr) {
  std::vector<double> y(s.y()), att(s.att());
  kernels::attention_forward<double>(y.data(), att.data(), qkv.data(), nullptr, s.B, s.T, s.C, s.H);
  if (att_out) *att_out = att;
  return y;
}

}  // namespace

// ---------------------------------------------------------------------------
// Finite differences, double precision

TEST_CASE("embedding backward matches finite differences (double)", "[transformer]") {
  const int B = 2, T = 3, C = 4, V = 5;
  const std::vector<int32_t> tokens = {1, 4, 1, 1, 0, 4};  // repeats, and an unused id (2, 3)
  auto wte = randn(V * C, 1), wpe = randn((T + 1) * C, 2), r = randn(B * T * C, 3);
  auto loss = [&] {
    std::vector<double> out(B * T * C);
    kernels::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
    return dot(out, r);
  };
  // Gradients accumulate onto what was there.
  std::vector<double> dwte(wte.size(), 0.5), dwpe(wpe.size(), 0.25);
  kernels::embedding_backward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, T, C, V);
  for (double& v : dwte) v -= 0.5;
  for (double& v : dwpe) v -= 0.25;
  fd_check("embedding dwte", dwte, wte, loss);
  fd_check("embedding dwpe", dwpe, wpe, loss);
  // Rows of ids that never occur and positions past T get nothing.
  for (int c = 0; c < C; ++c) {
    CHECK(dwte[2 * C + c] == 0.0);
    CHECK(dwpe[T * C + c] == 0.0);
  }
}

TEST_CASE("LayerNorm backward matches finite differences (double)", "[transformer]") {
  const int rows = 4, C = 6;
  auto x = randn(rows * C, 4, 2.0), w = randn(C, 5), b = randn(C, 6), r = randn(rows * C, 7);
  for (double& v : x) v += 3.0;
  auto loss = [&] {
    std::vector<double> y(x.size()), mean(rows), rstd(rows);
    kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                               rows, C, 1e-5);
    return dot(y, r);
  };
  std::vector<double> y(x.size()), mean(rows), rstd(rows);
  kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows,
                             C, 1e-5);
  std::vector<double> dx(x.size(), 9.0), dw(C, 0.5), db(C, 0.25);
  kernels::layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), mean.data(),
                              rstd.data(), w.data(), rows, C, false);
  for (double& v : dw) v -= 0.5;
  for (double& v : db) v -= 0.25;
  fd_check("layernorm dx", dx, x, loss);
  fd_check("layernorm dweight", dw, w, loss);
  fd_check("layernorm dbias", db, b, loss);

  SECTION("accumulate adds the input gradient to what is there") {
    std::vector<double> acc(x.size(), 0.125), dw2(C, 0.0), db2(C, 0.0);
    kernels::layernorm_backward(acc.data(), dw2.data(), db2.data(), r.data(), x.data(), mean.data(),
                                rstd.data(), w.data(), rows, C, true);
    for (size_t i = 0; i < acc.size(); ++i) CHECK(acc[i] - 0.125 == Approx(dx[i]).margin(1e-15));
  }
  SECTION("dx may alias dy") {
    std::vector<double> g = r, dw2(C, 0.0), db2(C, 0.0);
    kernels::layernorm_backward(g.data(), dw2.data(), db2.data(), g.data(), x.data(), mean.data(),
                                rstd.data(), w.data(), rows, C, false);
    CHECK(g == dx);
    CHECK(max_abs_diff(dw2, dw) < 1e-15);
  }
}

TEST_CASE("causal attention backward matches finite differences (double)", "[transformer]") {
  const AttnShape s{2, 5, 8, 2};
  auto qkv = randn(s.qkv(), 8), r = randn(s.y(), 9);
  auto loss = [&] { return dot(attention_y(qkv, s), r); };
  std::vector<double> att;
  attention_y(qkv, s, &att);
  std::vector<double> dqkv(s.qkv(), 7.0), scratch(s.att(), -1.0);
  kernels::attention_backward<double>(dqkv.data(), att.data(), scratch.data(), r.data(), qkv.data(),
                                      s.B, s.T, s.C, s.H);
  fd_check("attention dqkv", dqkv, qkv, loss);
}

TEST_CASE("cross-entropy gradient matches finite differences (double)", "[transformer]") {
  const int rows = 5, V = 7;
  auto logits = randn(rows * V, 10, 3.0);
  for (int c = 0; c < V; ++c) logits[V + c] += 50.0;  // large logits: the max is subtracted
  const std::vector<int32_t> targets = {2, 0, kernels::kIgnoreTarget, 6, 2};
  const size_t divisor = 4;  // the rows that count
  auto loss = [&] {
    return kernels::crossentropy_forward_backward<double>(nullptr, logits.data(), targets.data(),
                                                          rows, V, divisor);
  };
  std::vector<double> d(logits.size(), 3.0);
  const double l = kernels::crossentropy_forward_backward(d.data(), logits.data(), targets.data(),
                                                          rows, V, divisor);
  CHECK(l == loss());
  fd_check("cross-entropy dlogits", d, logits, loss);
  for (int c = 0; c < V; ++c) CHECK(d[2 * V + c] == 0.0);  // the ignored row

  SECTION("dlogits may alias logits") {
    std::vector<double> x = logits;
    const double l2 = kernels::crossentropy_forward_backward(x.data(), x.data(), targets.data(),
                                                             rows, V, divisor);
    CHECK(l2 == l);
    CHECK(x == d);
  }
}

TEST_CASE("linear without bias (the tied lm_head) matches finite differences (double)",
          "[transformer]") {
  const int rows = 3, in = 4, V = 6;
  auto x = randn(rows * in, 11), wte = randn(V * in, 12), r = randn(rows * V, 13);
  auto loss = [&] {
    std::vector<double> logits(rows * V, 123.0);  // overwritten, never read
    kernels::linear_forward<double>(logits.data(), x.data(), wte.data(), nullptr, rows, in, V);
    return dot(logits, r);
  };
  std::vector<double> dx(x.size()), dw(wte.size(), 0.5);
  kernels::linear_backward<double>(dx.data(), dw.data(), nullptr, r.data(), x.data(), wte.data(),
                                   rows, in, V);
  for (double& v : dw) v -= 0.5;
  fd_check("linear (no bias) dx", dx, x, loss);
  fd_check("linear (no bias) dweight", dw, wte, loss);
}

TEST_CASE("residual add: out = a + b, its gradient is the identity (double)", "[transformer]") {
  auto a = randn(10, 14), b = randn(10, 15), r = randn(10, 16);
  auto loss = [&] {
    std::vector<double> out(10);
    kernels::residual_forward(out.data(), a.data(), b.data(), 10);
    return dot(out, r);
  };
  fd_check("residual da", r, a, loss);
  fd_check("residual db", r, b, loss);
  std::vector<double> out = a;
  kernels::residual_forward(out.data(), out.data(), b.data(), 10);  // in place
  for (int i = 0; i < 10; ++i) CHECK(out[i] == a[i] + b[i]);
}

// ---------------------------------------------------------------------------
// Forwards with known answers

TEST_CASE("attention forward: causal rows of probabilities, nothing from the future",
          "[transformer]") {
  const AttnShape s{2, 6, 12, 3};
  auto qkv = randn(s.qkv(), 17, 2.0);
  std::vector<double> att;
  const auto y = attention_y(qkv, s, &att);
  for (int bh = 0; bh < s.B * s.H; ++bh)
    for (int t = 0; t < s.T; ++t) {
      const double* row = att.data() + (static_cast<size_t>(bh) * s.T + t) * s.T;
      double sum = 0;
      for (int j = 0; j <= t; ++j) {
        CHECK(row[j] > 0.0);
        sum += row[j];
      }
      CHECK(sum == Approx(1.0).epsilon(1e-14));
      for (int j = t + 1; j < s.T; ++j) CHECK(row[j] == 0.0);
    }
  // The first position attends only to itself: y[b,0] is its own v.
  for (int b = 0; b < s.B; ++b)
    for (int c = 0; c < s.C; ++c)
      CHECK(y[static_cast<size_t>(b) * s.T * s.C + c] ==
            Approx(qkv[static_cast<size_t>(b) * s.T * 3 * s.C + 2 * s.C + c]).epsilon(1e-14));
  // Changing q, k and v at position 3 leaves every output before it untouched, bit for bit.
  auto changed = qkv;
  for (int c = 0; c < 3 * s.C; ++c) changed[3 * 3 * s.C + c] += 1.0;  // b = 0, t = 3
  const auto y2 = attention_y(changed, s);
  for (int t = 0; t < s.T; ++t)
    for (int c = 0; c < s.C; ++c) {
      const size_t i = static_cast<size_t>(t) * s.C + c;
      if (t < 3)
        CHECK(y2[i] == y[i]);
      else if (c == 0)
        CHECK(y2[i] != y[i]);
    }
}

TEST_CASE("attention forward: equal keys average the values seen so far", "[transformer]") {
  // q = k = 0: every score is 0, so row t averages v[0..t].
  const AttnShape s{1, 4, 2, 1};
  std::vector<double> qkv(s.qkv(), 0.0);
  for (int t = 0; t < s.T; ++t)
    for (int c = 0; c < s.C; ++c) qkv[t * 3 * s.C + 2 * s.C + c] = (t + 1) * (c + 1);
  const auto y = attention_y(qkv, s);
  for (int t = 0; t < s.T; ++t)
    for (int c = 0; c < s.C; ++c) CHECK(y[t * s.C + c] == Approx((t + 2) / 2.0 * (c + 1)));
}

TEST_CASE("cross-entropy forward: uniform logits give ln V, and shifts do not matter",
          "[transformer]") {
  const int V = 13;
  std::vector<double> logits(2 * V, 0.25);
  for (int c = 0; c < V; ++c) logits[V + c] = 1000.0;  // exp would overflow unshifted
  const std::vector<int32_t> targets = {4, 12};
  std::vector<double> d(logits.size());
  const double l =
      kernels::crossentropy_forward_backward(d.data(), logits.data(), targets.data(), 2, V, 2);
  CHECK(l == Approx(std::log(13.0)).epsilon(1e-14));
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < V; ++c)
      CHECK(d[r * V + c] == Approx((1.0 / V - (c == targets[r] ? 1.0 : 0.0)) / 2).epsilon(1e-13));
  // fp32 too: the shifted row stays finite.
  std::vector<float> lf(logits.begin(), logits.end()), df(lf.size());
  const double lf_loss =
      kernels::crossentropy_forward_backward(df.data(), lf.data(), targets.data(), 2, V, 2);
  CHECK(lf_loss == Approx(std::log(13.0)).epsilon(1e-6));
  for (float v : df) CHECK(std::isfinite(v));
  // A confident right answer costs almost nothing.
  std::vector<double> sure(V, 0.0);
  sure[3] = 40.0;
  const int32_t t3 = 3;
  CHECK(kernels::crossentropy_forward_backward<double>(nullptr, sure.data(), &t3, 1, V, 1) < 1e-15);
}

TEST_CASE("LayerNorm forward: each row normalised, then scaled and shifted", "[transformer]") {
  const int rows = 3, C = 16;
  auto x = randn(rows * C, 18, 5.0);
  for (double& v : x) v += 100.0;
  std::vector<double> ones(C, 1.0), zeros(C, 0.0), y(x.size()), mean(rows), rstd(rows);
  kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), ones.data(),
                             zeros.data(), rows, C, 1e-5);
  for (int r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += y[r * C + c] / C;
    for (int c = 0; c < C; ++c) v += (y[r * C + c] - m) * (y[r * C + c] - m) / C;
    CHECK(std::abs(m) < 1e-12);
    double xm = 0, xv = 0;
    for (int c = 0; c < C; ++c) xm += x[r * C + c] / C;
    for (int c = 0; c < C; ++c) xv += (x[r * C + c] - xm) * (x[r * C + c] - xm) / C;
    CHECK(mean[r] == Approx(xm).epsilon(1e-14));
    CHECK(rstd[r] == Approx(1 / std::sqrt(xv + 1e-5)).epsilon(1e-12));
    CHECK(v == Approx(xv / (xv + 1e-5)).epsilon(1e-12));
  }
  // Weight and bias act per channel: y' = 2y + 1 (y may alias x).
  std::vector<double> twos(C, 2.0), one(C, 1.0), y2 = x;
  kernels::layernorm_forward(y2.data(), mean.data(), rstd.data(), y2.data(), twos.data(),
                             one.data(), rows, C, 1e-5);
  for (size_t i = 0; i < y.size(); ++i) CHECK(y2[i] == Approx(2 * y[i] + 1).epsilon(1e-14));
}

TEST_CASE("GPT kernels refuse bad ids and shapes with one clear message", "[transformer]") {
  std::vector<float> wte(3 * 2, 1.0f), wpe(2 * 2, 1.0f), out(2 * 2, -7.0f);
  const std::vector<int32_t> bad = {0, 3};
  CHECK_THROWS_WITH(
      kernels::embedding_forward(out.data(), bad.data(), wte.data(), wpe.data(), 1, 2, 2, 3),
      Catch::Contains("token id 3 at row 1") && Catch::Contains("[0, 3)"));
  CHECK(out[0] == -7.0f);  // nothing written
  const std::vector<int32_t> neg = {-1, 0};
  CHECK_THROWS_WITH(kernels::embedding_backward<float>(wte.data(), wpe.data(), out.data(),
                                                       neg.data(), 1, 2, 2, 3),
                    Catch::Contains("token id -1 at row 0"));
  std::vector<float> logits(2 * 3, 0.0f);
  const std::vector<int32_t> bad_t = {1, -2};
  CHECK_THROWS_WITH(
      kernels::crossentropy_forward_backward<float>(nullptr, logits.data(), bad_t.data(), 2, 3, 2),
      Catch::Contains("target -2 at row 1") && Catch::Contains("not -1"));
  std::vector<float> qkv(3 * 6), y(6), att(9);
  CHECK_THROWS_WITH(
      kernels::attention_forward<float>(y.data(), att.data(), qkv.data(), nullptr, 1, 1, 6, 4),
      Catch::Contains("6 channels do not split into 4 heads"));
  // The scores of a 2-byte forward, and every backward, need the scratch buffer.
  std::vector<kernels::bf16> q16(3 * 4), y16(4), a16(1);
  CHECK_THROWS_WITH(kernels::attention_forward<kernels::bf16>(y16.data(), a16.data(), q16.data(),
                                                              nullptr, 1, 1, 4, 2),
                    Catch::Contains("scratch"));
  CHECK_THROWS_WITH(kernels::attention_backward<float>(qkv.data(), att.data(), nullptr, y.data(),
                                                       qkv.data(), 1, 1, 6, 3),
                    Catch::Contains("scratch"));
  const std::vector<int32_t> good_t = {1, 2};
  CHECK_THROWS_WITH(
      kernels::crossentropy_forward_backward<float>(nullptr, logits.data(), good_t.data(), 2, 3, 0),
      Catch::Contains("divisor 0 for 2 rows"));
}

// ---------------------------------------------------------------------------
// PyTorch's values (tests/data/gen_transformer_ops.py)

namespace {

nlohmann::json reference() {
  std::ifstream in(std::string(SHARDLAB_TEST_DATA) + "/transformer_ops.json");
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

std::vector<double> vec(const nlohmann::json& j) {
  return j.get<std::vector<double>>();
}
std::vector<float> fvec(const nlohmann::json& j) {
  const auto d = vec(j);
  return std::vector<float>(d.begin(), d.end());
}
std::vector<double> dvec(const std::vector<float>& f) {
  return std::vector<double>(f.begin(), f.end());
}

// Largest error against PyTorch relative to the reference's largest value.
double rel_err(const std::vector<double>& got, const std::vector<double>& ref) {
  return max_abs_diff(got, ref) / std::max(max_abs(ref), 1e-30);
}

}  // namespace

TEST_CASE("GPT kernels match PyTorch (double and fp32)", "[transformer]") {
  const auto ref = reference();
  const double tol64 = 1e-12, tol32 = 2e-6;

  SECTION("embedding") {
    const auto& e = ref["embedding"];
    const int B = e["B"], T = e["T"], C = e["C"], V = e["V"];
    const auto tokens = e["tokens"].get<std::vector<int32_t>>();
    auto wte = vec(e["wte"]), wpe = vec(e["wpe"]), dout = vec(e["dout"]);
    std::vector<double> out(B * T * C), dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
    kernels::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
    kernels::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, V);
    report("torch embedding out (double)", rel_err(out, vec(e["out"])));
    CHECK(rel_err(out, vec(e["out"])) < tol64);
    CHECK(rel_err(dwte, vec(e["dwte"])) < tol64);
    CHECK(rel_err(dwpe, vec(e["dwpe"])) < tol64);
    auto wtef = fvec(e["wte"]), wpef = fvec(e["wpe"]), doutf = fvec(e["dout"]);
    std::vector<float> outf(out.size()), dwtef(wte.size(), 0.0f), dwpef(wpe.size(), 0.0f);
    kernels::embedding_forward(outf.data(), tokens.data(), wtef.data(), wpef.data(), B, T, C, V);
    kernels::embedding_backward(dwtef.data(), dwpef.data(), doutf.data(), tokens.data(), B, T, C,
                                V);
    report("torch embedding dwte (fp32)", rel_err(dvec(dwtef), vec(e["dwte"])));
    CHECK(rel_err(dvec(outf), vec(e["out"])) < tol32);
    CHECK(rel_err(dvec(dwtef), vec(e["dwte"])) < tol32);
    CHECK(rel_err(dvec(dwpef), vec(e["dwpe"])) < tol32);
  }

  SECTION("LayerNorm") {
    const auto& l = ref["layernorm"];
    const int rows = l["rows"], C = l["C"];
    const double eps = l["eps"];
    auto x = vec(l["x"]), w = vec(l["weight"]), b = vec(l["bias"]), dout = vec(l["dout"]);
    std::vector<double> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dw(C, 0.0), db(C, 0.0);
    kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                               rows, C, eps);
    kernels::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), mean.data(),
                                rstd.data(), w.data(), rows, C, false);
    report("torch layernorm out (double)", rel_err(y, vec(l["out"])));
    report("torch layernorm dx (double)", rel_err(dx, vec(l["dx"])));
    CHECK(rel_err(y, vec(l["out"])) < tol64);
    CHECK(rel_err(mean, vec(l["mean"])) < tol64);
    CHECK(rel_err(rstd, vec(l["rstd"])) < tol64);
    CHECK(rel_err(dx, vec(l["dx"])) < tol64);
    CHECK(rel_err(dw, vec(l["dweight"])) < tol64);
    CHECK(rel_err(db, vec(l["dbias"])) < tol64);
    auto xf = fvec(l["x"]), wf = fvec(l["weight"]), bf = fvec(l["bias"]), doutf = fvec(l["dout"]);
    std::vector<float> yf(x.size()), meanf(rows), rstdf(rows), dxf(x.size()), dwf(C, 0.0f),
        dbf(C, 0.0f);
    kernels::layernorm_forward(yf.data(), meanf.data(), rstdf.data(), xf.data(), wf.data(),
                               bf.data(), rows, C, eps);
    kernels::layernorm_backward(dxf.data(), dwf.data(), dbf.data(), doutf.data(), xf.data(),
                                meanf.data(), rstdf.data(), wf.data(), rows, C, false);
    report("torch layernorm out (fp32)", rel_err(dvec(yf), vec(l["out"])));
    report("torch layernorm dx (fp32)", rel_err(dvec(dxf), vec(l["dx"])));
    CHECK(rel_err(dvec(yf), vec(l["out"])) < tol32);
    CHECK(rel_err(dvec(dxf), vec(l["dx"])) < tol32);
    CHECK(rel_err(dvec(dwf), vec(l["dweight"])) < tol32);
    CHECK(rel_err(dvec(dbf), vec(l["dbias"])) < tol32);
  }

  SECTION("causal self-attention") {
    const auto& a = ref["attention"];
    const AttnShape s{a["B"].get<int>(), a["T"].get<int>(), a["C"].get<int>(), a["H"].get<int>()};
    auto qkv = vec(a["qkv"]), dout = vec(a["dout"]);
    std::vector<double> att;
    const auto y = attention_y(qkv, s, &att);
    std::vector<double> dqkv(s.qkv()), scratch(s.att());
    kernels::attention_backward<double>(dqkv.data(), att.data(), scratch.data(), dout.data(),
                                        qkv.data(), s.B, s.T, s.C, s.H);
    report("torch attention y (double)", rel_err(y, vec(a["out"])));
    report("torch attention dqkv (double)", rel_err(dqkv, vec(a["dqkv"])));
    CHECK(rel_err(y, vec(a["out"])) < tol64);
    CHECK(rel_err(att, vec(a["att"])) < tol64);
    CHECK(rel_err(dqkv, vec(a["dqkv"])) < tol64);
    auto qkvf = fvec(a["qkv"]), doutf = fvec(a["dout"]);
    std::vector<float> yf(s.y()), attf(s.att()), dqkvf(s.qkv()), scratchf(s.att());
    kernels::attention_forward<float>(yf.data(), attf.data(), qkvf.data(), nullptr, s.B, s.T, s.C,
                                      s.H);
    CHECK(rel_err(dvec(attf), vec(a["att"])) < tol32);
    kernels::attention_backward<float>(dqkvf.data(), attf.data(), scratchf.data(), doutf.data(),
                                       qkvf.data(), s.B, s.T, s.C, s.H);
    report("torch attention y (fp32)", rel_err(dvec(yf), vec(a["out"])));
    report("torch attention dqkv (fp32)", rel_err(dvec(dqkvf), vec(a["dqkv"])));
    CHECK(rel_err(dvec(yf), vec(a["out"])) < tol32);
    CHECK(rel_err(dvec(dqkvf), vec(a["dqkv"])) < tol32);
  }

  SECTION("cross-entropy") {
    const auto& c = ref["crossentropy"];
    const int rows = c["rows"], V = c["V"];
    const size_t divisor = c["divisor"];
    const auto targets = c["targets"].get<std::vector<int32_t>>();
    auto logits = vec(c["logits"]);
    std::vector<double> d(logits.size());
    const double loss = kernels::crossentropy_forward_backward(d.data(), logits.data(),
                                                               targets.data(), rows, V, divisor);
    const double ref_loss = c["loss"];
    report("torch cross-entropy loss (double)", std::abs(loss - ref_loss) / ref_loss);
    report("torch cross-entropy dlogits (double)", rel_err(d, vec(c["dlogits"])));
    CHECK(std::abs(loss - ref_loss) < tol64 * ref_loss);
    CHECK(rel_err(d, vec(c["dlogits"])) < tol64);
    auto lf = fvec(c["logits"]);
    std::vector<float> df(lf.size());
    const double lossf = kernels::crossentropy_forward_backward(df.data(), lf.data(),
                                                                targets.data(), rows, V, divisor);
    report("torch cross-entropy loss (fp32)", std::abs(lossf - ref_loss) / ref_loss);
    report("torch cross-entropy dlogits (fp32)", rel_err(dvec(df), vec(c["dlogits"])));
    CHECK(std::abs(lossf - ref_loss) < tol32 * ref_loss);
    CHECK(rel_err(dvec(df), vec(c["dlogits"])) < tol32);
  }
}

// ---------------------------------------------------------------------------
// Backend ops: the cpu and guarded devices

using namespace shardlab::test;

TEST_CASE("backend GPT ops: cpu and guarded fp32 give the templates' exact bits",
          "[transformer][device]") {
  const OpInputs in;
  auto cpu = make_cpu_backend();
  auto guard = make_memory_guard();
  auto guarded = make_guarded_cpu_backend(guard);
  const OpResults want = run_templates_f32(in, DType::f32);
  for (DeviceBackend* dev : {cpu.get(), guarded.get()}) {
    const OpResults got = run_ops(*dev, DType::f32, in);
    REQUIRE(got.tensors.size() == want.tensors.size());
    for (size_t i = 0; i < want.tensors.size(); ++i) {
      INFO(kTensorNames[i] << (dev == cpu.get() ? " (cpu)" : " (guarded)"));
      CHECK(got.tensors[i] == want.tensors[i]);
    }
    CHECK(got.losses == want.losses);
  }
}

TEST_CASE("backend GPT ops in bf16 and fp16: fp32 math, each output rounded once",
          "[transformer][device]") {
  const OpInputs in;
  auto cpu = make_cpu_backend();
  auto guard = make_memory_guard();
  auto guarded = make_guarded_cpu_backend(guard);
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(to_string(dt));
    const OpResults got = run_ops(*cpu, dt, in);
    const OpResults want = run_templates_f32(in, dt);
    // The guarded device runs the same code on guarded memory.
    const OpResults g = run_ops(*guarded, dt, in);
    CHECK(g.tensors == got.tensors);
    CHECK(g.losses == got.losses);
    for (size_t i = 0; i < want.tensors.size(); ++i) {
      INFO(kTensorNames[i]);
      const bool stats = i == 4 || i == 5;  // mean and rstd stay fp32
      if (i >= kAttentionFirst && i <= kAttentionLast) {
        // Attention also rounds inside (the probabilities before att·v, dS
        // before its GEMMs), as the GPU's 2-byte GEMMs read them: close, not equal.
        const auto a = dvec(got.tensors[i]), b = dvec(want.tensors[i]);
        const double err = max_abs_diff(a, b) / max_abs(b);
        report(std::string("bf16/fp16 vs fp32 templates: ") + kTensorNames[i] + " " + to_string(dt),
               err);
        CHECK(err < (dt == DType::bf16 ? 2e-2 : 3e-3));
      } else {
        CHECK(got.tensors[i] == (stats ? want.tensors[i] : rounded(want.tensors[i], dt)));
      }
    }
    // The loss is summed from fp32 row losses of the rounded logits: the same value.
    CHECK(got.losses[0] == want.losses[0]);
    CHECK(got.losses[1] == want.losses[0]);
    CHECK(got.losses[2] == want.losses[0]);
  }
}

TEST_CASE("backend GPT ops: bad ids throw on the cpu and guarded devices, unknown dtypes too",
          "[transformer][device]") {
  auto cpu = make_cpu_backend();
  auto guard = make_memory_guard();
  auto guarded = make_guarded_cpu_backend(guard);
  for (DeviceBackend* dev : {cpu.get(), guarded.get()}) {
    DeviceBuffers d(*dev, DType::f32);
    void* wte = d.put(std::vector<float>(4 * 2, 1.0f));
    void* wpe = d.put(std::vector<float>(2 * 2, 1.0f));
    void* out = d.alloc(2 * 2 * 4);
    const int32_t* bad = d.put_ids({1, 4});
    CHECK_THROWS_WITH(dev->embedding_forward(DType::f32, out, bad, wte, wpe, 1, 2, 2, 4, 0, 4),
                      Catch::Contains("token id 4 at row 1"));
    CHECK_THROWS_AS(dev->residual_forward(static_cast<DType>(7), out, out, out, 4),
                    std::invalid_argument);
    // Still usable after the throw (the guard closed again).
    const int32_t* good = d.put_ids({1, 3});
    dev->embedding_forward(DType::f32, out, good, wte, wpe, 1, 2, 2, 4, 0, 4);
    CHECK(d.get(out, 4) == std::vector<float>(4, 2.0f));
  }
}

// ---------------------------------------------------------------------------
// Vocabulary parallelism (tensor-parallel ranks each holding a slice of the
// vocabulary, padded to a multiple of them)

TEST_CASE("vocabulary slices: embeddings add up to the whole, gradients land in each slice's rows",
          "[transformer][tp]") {
  const int B = 2, T = 3, C = 4, V = 7;
  const std::vector<int32_t> tokens = {6, 0, 3, 3, 5, 1};
  std::vector<float> wte(V * C), wpe(T * C), dout(B * T * C);
  Rng rng(5);
  for (auto* v : {&wte, &wpe, &dout})
    for (float& x : *v) x = static_cast<float>(rng.normal());
  std::vector<float> whole(B * T * C), dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  kernels::embedding_forward(whole.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
  kernels::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, V);
  for (const int P : {2, 3, 4, 8}) {
    INFO(P << " slices");
    const int rows = (V + P - 1) / P;  // the padded vocabulary's rows per slice
    std::vector<float> sum(whole.size(), 0.0f);
    for (int r = 0; r < P; ++r) {
      const int begin = r * rows, real = std::clamp(V - begin, 0, rows);
      // The slice's rows of wte, then zero padding.
      std::vector<float> mine(static_cast<size_t>(rows) * C, 0.0f), dmine(mine.size(), 0.0f);
      std::copy_n(wte.begin() + begin * C, real * C, mine.begin());
      std::vector<float> out(whole.size());
      kernels::embedding_forward(out.data(), tokens.data(), mine.data(),
                                 r == 0 ? wpe.data() : nullptr, B, T, C, V, begin, rows);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += out[i];
      kernels::embedding_backward(dmine.data(), static_cast<float*>(nullptr), dout.data(),
                                  tokens.data(), B, T, C, V, begin, rows);
      for (int i = 0; i < real * C; ++i) CHECK(dmine[i] == dwte[begin * C + i]);
      for (int i = real * C; i < rows * C; ++i) CHECK(dmine[i] == 0.0f);  // the padding
    }
    // One slice holds each id, the others add exact zeros: the same bits.
    CHECK(sum == whole);
  }
}

TEST_CASE("vocabulary-parallel cross-entropy equals the whole one, padding left out",
          "[transformer][tp]") {
  const int rows = 5, V = 7;
  const std::vector<int32_t> targets = {6, 0, -1, 3, 4};  // -1: ignored
  std::vector<float> logits(rows * V);
  Rng rng(9);
  for (float& x : logits) x = static_cast<float>(3 * rng.normal());
  const size_t divisor = 8;
  std::vector<float> dwhole(logits.size());
  const double whole = kernels::crossentropy_forward_backward(dwhole.data(), logits.data(),
                                                              targets.data(), rows, V, divisor);
  for (const int P : {1, 2, 3, 4, 8}) {
    INFO(P << " slices");
    const int cols = (V + P - 1) / P;
    // Each slice's logits (the padding filled with a large value the loss must ignore).
    std::vector<std::vector<float>> slice(P, std::vector<float>(rows * cols, 50.0f));
    std::vector<float> stats(static_cast<size_t>(P) * rows * 3);
    for (int r = 0; r < P; ++r) {
      const int begin = r * cols, valid = std::clamp(V - begin, 0, cols);
      for (int i = 0; i < rows; ++i)
        std::copy_n(logits.begin() + i * V + begin, valid, slice[r].begin() + i * cols);
      kernels::crossentropy_slice_stats(stats.data() + r * rows * 3, slice[r].data(),
                                        targets.data(), rows, cols, valid, begin);
    }
    std::vector<float> ms(rows * 2);
    const double loss =
        kernels::crossentropy_merge(ms.data(), stats.data(), targets.data(), rows, P, divisor);
    CHECK(loss == Approx(whole).epsilon(1e-6));
    for (int r = 0; r < P; ++r) {
      const int begin = r * cols, valid = std::clamp(V - begin, 0, cols);
      std::vector<float> d(rows * cols, -1.0f);
      kernels::crossentropy_slice_grad(d.data(), slice[r].data(), ms.data(), targets.data(), rows,
                                       cols, valid, begin, divisor);
      for (int i = 0; i < rows; ++i)
        for (int c = 0; c < cols; ++c) {
          INFO("slice " << r << " row " << i << " col " << c);
          const float want = c < valid ? dwhole[i * V + begin + c] : 0.0f;
          CHECK(d[i * cols + c] == Approx(want).margin(1e-7));
        }
    }
  }
}
