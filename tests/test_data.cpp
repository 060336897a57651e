// The synthetic regression data (core/data.h): counter-based draws that any
// slice of rows reproduces exactly, standard normal, the same on the guarded
// device (the GPU's code path, run here) as on the host, and --tf32 refused
// where there are no tensor cores.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/config.h"
#include "core/data.h"
#include "core/device.h"
#include "core/memory.h"
#include "test_util.h"

using namespace shardlab;
using shardlab::test::run_cli;

TEST_CASE("synthetic rows depend on (seed, step, row) alone, not on the slice asked for",
          "[data]") {
  const SyntheticData data(33, 5);  // odd: the last column takes one draw of its pair
  const int d = data.dim();
  std::vector<float> all(16 * d), all_y(16 * d), part(5 * d), part_y(5 * d);
  data.rows(2, 0, 16, all.data(), all_y.data());
  data.rows(2, 7, 5, part.data(), part_y.data());
  // x exactly; y = tanh(x·T) to the last bits, as BLAS blocks a 5-row GEMM
  // differently from a 16-row one (so do a data-parallel rank's and single's).
  for (size_t i = 0; i < part.size(); ++i) {
    REQUIRE(part[i] == all[7 * d + i]);
    REQUIRE(std::abs(part_y[i] - all_y[7 * d + i]) <= 1e-6f);
  }
  // Inputs only (a pipeline's first stage): the same x.
  std::vector<float> x_only(5 * d);
  data.rows(2, 7, 5, x_only.data(), nullptr);
  CHECK(x_only == part);
  // Another step, another seed: other numbers.
  std::vector<float> next(5 * d);
  data.rows(3, 7, 5, next.data(), nullptr);
  CHECK(next != part);
  const SyntheticData other(33, 6);
  other.rows(2, 7, 5, next.data(), nullptr);
  CHECK(next != part);
}

TEST_CASE("synthetic inputs are standard normal and targets lie in (-1, 1)", "[data]") {
  const SyntheticData data(64, 1);
  const int rows = 512;
  std::vector<float> x(rows * 64), y(rows * 64);
  data.rows(0, 0, rows, x.data(), y.data());
  double sum = 0, sq = 0;
  for (float v : x) {
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(x.size());
  const double mean = sum / n, var = sq / n - mean * mean;
  INFO("mean " << mean << ", variance " << var);
  CHECK(std::abs(mean) < 0.02);  // 4.5 standard errors of the mean at n = 32768
  CHECK(std::abs(var - 1.0) < 0.03);
  for (float v : y) REQUIRE(std::abs(v) < 1.0f);
}

TEST_CASE("the guarded device makes the batch itself, bit for bit the host's", "[data]") {
  // Device memory the host cannot read: load_rows takes the GPU's path (draws,
  // T uploaded once through constant(), one Linear, tanh) on the CPU kernels.
  auto dev = make_guarded_cpu_backend(make_memory_guard());
  const SyntheticData data(40, 9);
  const int rows = 12;
  const size_t n = static_cast<size_t>(rows) * data.dim();
  void* x = dev->raw_alloc(n * 4);
  void* y = dev->raw_alloc(n * 4);
  REQUIRE(dev->is_device_pointer(x));
  std::vector<float> hx(n), hy(n), gx(n), gy(n);
  for (int step : {0, 1}) {
    load_rows(*dev, data, step, 3, rows, static_cast<float*>(x), static_cast<float*>(y));
    dev->download(gx.data(), x, DType::f32, n);
    dev->download(gy.data(), y, DType::f32, n);
    data.rows(step, 3, rows, hx.data(), hy.data());
    CHECK(gx == hx);
    CHECK(gy == hy);
  }
  // T was uploaded once: the same device pointer for the same key.
  const auto& t = data.target_t();
  CHECK(dev->constant(data.target_key(), t.data(), t.size() * 4) ==
        dev->constant(data.target_key(), t.data(), t.size() * 4));
  dev->raw_free(x, n * 4);
  dev->raw_free(y, n * 4);
}

TEST_CASE("a --tf32 run is refused without a GPU, in one line naming what is valid",
          "[data][cli]") {
  const auto r = run_cli("run --tf32 --steps 1 --device cpu");
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.rfind("error: --tf32 needs a GPU", 0) == 0);
  CHECK(r.out.find("valid: --tf32 with --device cuda") != std::string::npos);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
}
