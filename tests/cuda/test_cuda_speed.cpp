// What makes a GPU step fast, against the CPU: the synthetic batch made on the
// device (the host's draws), 2-byte GEMMs on tensor cores (the CPU's upcast math
// up to summation order), --tf32, and the memory preflight of a bf16 run whose
// GEMMs need no fp32 copies. Runs only on a GPU machine (gpu_main.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "../test_util.h"
#include "core/device/data.h"
#include "core/device/gpu.h"
#include "core/predict/memory_estimate.h"
#include "core/run/runner.h"

using namespace shardlab;
using shardlab::test::max_rel_diff;

namespace {

// Device memory from the backend, filled from / read into host fp32 vectors.
struct Buf {
  DeviceBackend& dev;
  DType dt;
  size_t n;
  void* p;
  Buf(DeviceBackend& d, DType t, size_t count) : dev(d), dt(t), n(count) {
    p = dev.raw_alloc(n * dtype_size(dt));
  }
  Buf(DeviceBackend& d, DType t, const std::vector<float>& v) : Buf(d, t, v.size()) {
    dev.upload(p, dt, v.data(), n);
  }
  ~Buf() { dev.raw_free(p, n * dtype_size(dt)); }
  std::vector<float> get() const {
    std::vector<float> v(n);
    dev.download(v.data(), p, dt, n);
    return v;
  }
};

std::vector<float> randn(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Rounds every value to dt and back (what an upload and a download do).
std::vector<float> rounded(DeviceBackend& cpu, DType dt, const std::vector<float>& v) {
  if (dt == DType::f32) return v;
  std::vector<uint16_t> tmp(v.size());
  std::vector<float> out(v.size());
  cpu.cast(tmp.data(), dt, v.data(), DType::f32, v.size());
  cpu.cast(out.data(), DType::f32, tmp.data(), dt, v.size());
  return out;
}

// max |got - want| / max |want|.
double rel(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

}  // namespace

TEST_CASE("cuda makes the synthetic batch on the device with the host's draws", "[cuda][data]") {
  auto gpu = make_cuda_backend(0, nullptr);
  for (int dim : {64, 301}) {  // odd: the last element of a row takes one draw of its pair
    INFO("dim " << dim);
    const SyntheticData data(dim, 7);
    const int rows = 96, step = 3, row_begin = 40;
    const size_t n = static_cast<size_t>(rows) * dim;
    std::vector<float> hx(n), hy(n);
    data.rows(step, row_begin, rows, hx.data(), hy.data());
    Buf x(*gpu, DType::f32, n), y(*gpu, DType::f32, n);
    load_rows(*gpu, data, step, row_begin, rows, static_cast<float*>(x.p),
              static_cast<float*>(y.p));
    const std::vector<float> gx = x.get(), gy = y.get();
    // The same draws; CUDA's double log/sin/cos may differ from glibc's in a last
    // bit, which moves a float only at a rounding boundary: at most 1 ulp, rarely.
    size_t same = 0;
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      same += gx[i] == hx[i];
      worst = std::max(worst, std::abs(static_cast<double>(gx[i]) - hx[i]) /
                                  std::max(std::abs(static_cast<double>(hx[i])), 1e-30));
    }
    INFO(same << " of " << n << " x values identical, worst relative " << worst);
    CHECK(same >= n - n / 1000);
    CHECK(worst <= 1.2e-7);
    // y = tanh(x·T): cuBLAS and OpenBLAS add in different orders, tanhf within 2 ulp.
    CHECK(rel(gy, hy) < 1e-5);
    // A second call reuses the uploaded T (the same pointer) and makes another step.
    load_rows(*gpu, data, step + 1, row_begin, rows, static_cast<float*>(x.p), nullptr);
    data.rows(step + 1, row_begin, rows, hx.data(), nullptr);
    CHECK(rel(x.get(), hx) <= 1.2e-7);
  }
}

TEST_CASE("cuda 2-byte linear and GELU on tensor cores match the CPU's upcast math",
          "[cuda][gemm]") {
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend(0, nullptr);
  REQUIRE(gpu->native_2byte_math());
  REQUIRE_FALSE(cpu->native_2byte_math());
  const int rows = 64, in = 96, out = 80;
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(to_string(dt));
    // Inputs already representable in dt, so both sides start from the same values.
    const auto x = rounded(*cpu, dt, randn(static_cast<size_t>(rows) * in, 1));
    const auto w = rounded(*cpu, dt, randn(static_cast<size_t>(out) * in, 2, 0.1f));
    const auto b = rounded(*cpu, dt, randn(out, 3));
    const auto dy = rounded(*cpu, dt, randn(static_cast<size_t>(rows) * out, 4));
    const auto dw0 = rounded(*cpu, dt, randn(static_cast<size_t>(out) * in, 5, 0.01f));
    const auto db0 = rounded(*cpu, dt, randn(out, 6, 0.01f));
    // The CPU: fp32 math on the upcast values, each output rounded once.
    std::vector<float> y(static_cast<size_t>(rows) * out), dx(static_cast<size_t>(rows) * in);
    std::vector<float> dw = dw0, db = db0;
    cpu->linear_forward(y.data(), x.data(), w.data(), b.data(), rows, in, out);
    cpu->linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), rows, in,
                         out);
    Buf gx(*gpu, dt, x), gw(*gpu, dt, w), gb(*gpu, dt, b), gdy(*gpu, dt, dy), gdw(*gpu, dt, dw0),
        gdb(*gpu, dt, db0), gyo(*gpu, dt, y.size()), gdx(*gpu, dt, dx.size());
    gpu->linear_forward_2byte(dt, gyo.p, gx.p, gw.p, gb.p, rows, in, out);
    gpu->linear_backward_2byte(dt, gdx.p, gdw.p, gdb.p, gdy.p, gx.p, gw.p, rows, in, out);
    // One rounding to dt on each side; a different order of fp32 sums can put an
    // output on the other side of it: one unit in the last place of dt.
    const double ulp = dt == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
    CHECK(rel(gyo.get(), rounded(*cpu, dt, y)) <= ulp);
    CHECK(rel(gdx.get(), rounded(*cpu, dt, dx)) <= ulp);
    CHECK(rel(gdw.get(), rounded(*cpu, dt, dw)) <= ulp);
    CHECK(rel(gdb.get(), rounded(*cpu, dt, db)) <= ulp);
    // GELU in dt: fp32 math on the stored values, rounded once.
    std::vector<float> gel(x.size()), gelg(x.size());
    cpu->gelu_forward(gel.data(), x.data(), x.size());
    const auto g = rounded(*cpu, dt, randn(x.size(), 8));
    cpu->gelu_backward(gelg.data(), g.data(), x.data(), x.size());
    Buf go(*gpu, dt, x.size()), gg(*gpu, dt, g);
    gpu->gelu_forward_2byte(dt, go.p, gx.p, x.size());
    gpu->gelu_backward_2byte(dt, gg.p, gg.p, gx.p, x.size());
    CHECK(rel(go.get(), rounded(*cpu, dt, gel)) <= ulp);
    CHECK(rel(gg.get(), rounded(*cpu, dt, gelg)) <= ulp);
  }
}

TEST_CASE("cuda --tf32 trains close to exact fp32, and exact fp32 stays the default",
          "[cuda][gemm]") {
  RunConfig c;
  c.model = "mlp:4x256";
  c.batch = 64;
  c.steps = 5;
  c.device = "cpu";
  const RunResult ref = run_training(c);
  c.device = "cuda";
  const RunResult exact = run_training(c);
  c.tf32 = true;
  const RunResult tf32 = run_training(c);
  const double d_exact = max_rel_diff(ref.final_params, exact.final_params);
  const double d_tf32 = max_rel_diff(ref.final_params, tf32.final_params);
  INFO("exact fp32 " << d_exact << ", tf32 " << d_tf32);
  CHECK(d_exact < 2e-4);
  CHECK(d_tf32 < 5e-2);
  c.precision = "bf16";
  CHECK_THROWS_AS(run_training(c), ConfigError);
}

TEST_CASE("cuda bf16 runs need no fp32 copies, and the preflight knows", "[cuda][preflight]") {
  for (const char* model : {"mlp:4x256", "gpt:2x64x4"}) {
    for (const char* strategy : {"single", "ddp", "zero3"}) {
      RunConfig c;
      c.model = model;
      c.strategy = strategy;
      c.world = std::string(strategy) == "single" ? 1 : 2;
      c.steps = 3;
      c.batch = 16;
      if (c.model.rfind("gpt", 0) == 0) c.seq = 32;
      c.precision = "bf16";
      c.device = "cuda";
      c.backend = "gloo";
      const MemoryEstimate e = estimate_memory(c);
      const RunResult r = run_training(c);
      REQUIRE(e.ranks.size() == r.ranks.size());
      for (size_t i = 0; i < r.ranks.size(); ++i) {
        const int64_t measured = r.ranks[i].memory.device.peak_total;
        const int64_t predicted = e.ranks[i].at_report.device.peak_total;
        INFO(model << " " << strategy << " rank " << i << ": estimated " << predicted
                   << ", measured " << measured);
        CHECK(std::abs(static_cast<double>(predicted - measured)) <= 0.10 * measured);
      }
      // No buffer named upcast.* was ever allocated.
      for (const auto& rec : r.recorders)
        for (const auto& ev : rec->snapshot().allocs) CHECK(ev.name.rfind("upcast.", 0) != 0);
    }
  }
}

TEST_CASE("cuda embedding backward lists each id's positions and adds them in the CPU's order",
          "[cuda][transformer]") {
  // More ids than one shared-memory tile (1024) and more vocabulary entries than one
  // block of the id passes (256), with unused entries and repeats: the same bits.
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend(0, nullptr);
  const int B = 8, T = 300, C = 70, V = 700;
  std::mt19937 g(11);
  std::vector<int32_t> ids(static_cast<size_t>(B) * T);
  for (int32_t& t : ids) t = static_cast<int32_t>(g() % 500);  // entries 500.. stay unused
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(to_string(dt));
    const auto dout = rounded(*cpu, dt, randn(ids.size() * C, 12));
    const auto dwte0 = rounded(*cpu, dt, randn(static_cast<size_t>(V) * C, 13, 0.01f));
    const auto dwpe0 = rounded(*cpu, dt, randn(static_cast<size_t>(T) * C, 14, 0.01f));
    // The CPU on its own memory, in dt.
    Buf cdo(*cpu, dt, dout), cdw(*cpu, dt, dwte0), cdp(*cpu, dt, dwpe0);
    cpu->embedding_backward(dt, cdw.p, cdp.p, cdo.p, ids.data(), B, T, C, V, 0, V);
    Buf gdo(*gpu, dt, dout), gdw(*gpu, dt, dwte0), gdp(*gpu, dt, dwpe0);
    void* gids = gpu->raw_alloc(ids.size() * 4);
    gpu->copy(gids, ids.data(), ids.size() * 4, CopyKind::host_to_device);
    gpu->embedding_backward(dt, gdw.p, gdp.p, gdo.p, static_cast<const int32_t*>(gids), B, T, C, V,
                            0, V);
    CHECK(gdw.get() == cdw.get());
    CHECK(gdp.get() == cdp.get());
    gpu->raw_free(gids, ids.size() * 4);
  }
}
