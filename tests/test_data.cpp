// The synthetic regression data (core/device/data.h): counter-based draws that any
// slice of rows reproduces exactly, standard normal, the same on the guarded
// device (the GPU's code path, run here) as on the host, and --tf32 refused
// where there are no tensor cores.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/comm/cores.h"
#include "core/config.h"
#include "core/device/data.h"
#include "core/device/device.h"
#include "core/device/memory.h"
#include "core/model/data_loader.h"
#include "core/model/model.h"
#include "core/model/model_family.h"
#include "core/record/trace.h"
#include "core/run/recording.h"
#include "core/run/runner.h"
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

TEST_CASE("the data loader's batches made ahead are the in-step ones, bit for bit", "[data]") {
  // Regression rows (x and y, or x alone as a pipeline's first stage asks) and
  // gpt's token windows, in the order a pipeline asks for micro-batches.
  for (const char* model : {"mlp:2x24", "gpt:1x16x2"}) {
    RunConfig cfg;
    cfg.model = model;
    if (std::string(model).rfind("gpt", 0) == 0) cfg.seq = 8;
    const ModelLayout m = make_layout(cfg);
    const std::unique_ptr<Dataset> data = m.family().dataset(m, 3, cfg);
    const size_t xn = m.act_numel(0), yn = m.target_numel();
    auto dev = make_cpu_backend();
    const int steps = 4, rows = 5;
    DataLoader loader(*data, xn, yn, steps);
    for (int step = 0; step < steps; ++step)
      for (int mb = 0; mb < 3; ++mb)
        for (bool with_y : {true, false}) {
          std::vector<uint32_t> x(rows * xn), y(rows * yn), want_x(x.size()), want_y(y.size());
          const bool ahead =
              loader.load(*dev, step, mb * rows, rows, x.data(), with_y ? y.data() : nullptr);
          data->load(*dev, step, mb * rows, rows, want_x.data(), with_y ? want_y.data() : nullptr);
          INFO(model << " step " << step << " micro-batch " << mb << (with_y ? " x, y" : " x"));
          CHECK(ahead == (step > 0));  // step 0 is asked for before anything was made
          CHECK(x == want_x);
          if (with_y) CHECK(y == want_y);
        }
    CHECK(loader.requests() == steps * 6);
    CHECK(loader.served_ahead() == (steps - 1) * 6);
  }
}

TEST_CASE(
    "a run's data spans: one per step and rank, made ahead after step 0 where a core is "
    "spare, in recordings and traces",
    "[data]") {
  // The loader runs where ranks leave a core free (world < cores): on a 2-core
  // machine, world 1; world 2 makes its batches in the step.
  RunConfig cfg;
  cfg.model = "mlp:2x32";
  cfg.strategy = cores_available() > 2 ? "ddp" : "single";
  cfg.world = cores_available() > 2 ? 2 : 1;
  cfg.batch = 8;
  cfg.steps = 4;
  const bool loader = cfg.world < cores_available();
  const RunResult r = run_training(cfg);
  const test::TempDir dir;
  const std::string rec = dir.file("run.json"), trace = dir.file("run.trace.json");
  save_recording(rec, r);
  std::vector<Recorder::Snapshot> snaps;
  for (const auto& recorder : r.recorders) snaps.push_back(recorder->snapshot());
  write_trace(trace, snaps, r.t0_ns, trace_metadata(r));
  for (const std::string& file : {rec, trace}) {
    const Recording back = load_run_file(file);
    for (int rank = 0; rank < cfg.world; ++rank) {
      INFO(file);
      std::vector<int> ahead(cfg.steps, -1);
      for (const Span& s : back.run.recorders[rank]->snapshot().spans)
        if (s.kind == SpanKind::data) {
          INFO("rank " << rank << " step " << s.step);
          REQUIRE(s.step >= 0);
          CHECK(ahead[s.step] == -1);  // one per step
          ahead[s.step] = s.made_ahead;
        }
      CHECK(ahead == (loader ? std::vector<int>{0, 1, 1, 1} : std::vector<int>{0, 0, 0, 0}));
    }
  }
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
