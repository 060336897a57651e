// `shardlab bench gpu`: its FLOP count and peak table, the table it prints (on
// the CPU, at small sizes), its one line where there is no GPU, and the median
// step every command reports without step 0, the warm-up.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/gpu_speed.h"
#include "core/device/gpu.h"
#include "core/model/model.h"
#include "core/run/runner.h"
#include "test_util.h"

using namespace shardlab;
using shardlab::test::run_cli;
using shardlab::test::run_cli_within;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("bench gpu: model FLOPs count every Linear, lm_head and attention's two GEMMs",
          "[bench-gpu]") {
  ModelSpec mlp = ModelSpec::parse("mlp:8x4096");
  // 8 Linear(4096, 4096) on 1024 rows: 2·rows·in·out forward, twice that backward.
  CHECK(app::train_step_flops(mlp, 1024) == Approx(3.0 * 8 * 2 * 1024 * 4096.0 * 4096));

  ModelSpec gpt = ModelSpec::parse("gpt:6x384x6");
  gpt.seq = 256;
  gpt.vocab = 100;
  const double B = 64, T = 256, C = 384, V = 100, rows = B * T;
  const double linears = 6 * 2 * rows * (C * 3 * C + C * C + C * 4 * C + 4 * C * C);
  const double attention = 6 * 2 * (2 * B * T * T * C);
  const double head = 2 * rows * C * V;
  CHECK(app::train_step_flops(gpt, 64) == Approx(3 * (linears + attention + head)));
}

TEST_CASE("bench gpu: the peak table knows H100 SXM and PCIe, H200 and A100 by CUDA's names",
          "[bench-gpu]") {
  using app::peak_tflops;
  const std::string sxm = "1 x NVIDIA H100 80GB HBM3", pcie = "1 x NVIDIA H100 PCIe";
  CHECK(peak_tflops(sxm, "fp32", false) == 67);
  CHECK(peak_tflops(sxm, "fp32", true) == 495);
  CHECK(peak_tflops(sxm, "bf16", false) == 989);
  CHECK(peak_tflops("2 x NVIDIA H100 SXM5 80GB", "fp16", false) == 989);
  CHECK(peak_tflops(pcie, "fp32", false) == 51);
  CHECK(peak_tflops(pcie, "fp32", true) == 378);
  CHECK(peak_tflops(pcie, "bf16", false) == 756);
  CHECK(peak_tflops("1 x NVIDIA H200", "bf16", false) == 989);
  CHECK(peak_tflops("1 x NVIDIA A100-SXM4-80GB", "fp32", false) == 19.5);
  CHECK(peak_tflops("1 x NVIDIA A100-SXM4-80GB", "bf16", false) == 312);
  CHECK(!peak_tflops("1 x NVIDIA H100 NVL", "fp32", false));  // not in the table: "peak ?"
  CHECK(!peak_tflops("1 x NVIDIA GeForce RTX 4090", "bf16", false));
  CHECK(!peak_tflops("", "fp32", false));
}

TEST_CASE("bench gpu --device cpu: the table at small sizes, shares within 0..100%",
          "[bench-gpu]") {
  const auto r = run_cli_within("bench gpu --device cpu --steps 3 --only mlp", 120);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(r.seconds < 60);  // ~5 s alone on 2 cores; generous for a busy machine
  const std::vector<std::string> lines = lines_of(r.out);
  REQUIRE(lines.size() >= 3);
  CHECK(lines[0].find("bench gpu: cpu (small sizes") == 0);
  for (const char* col : {"workload", "prec", "median ms", "data", "fwd", "bwd", "opt", "comm",
                          "idle", "TFLOP/s", "of peak", "peak mem/rk"})
    CHECK(lines[1].find(col) != std::string::npos);
  // 4 model rows (mlp:8x4096 b1024 and mlp:8x1024 b64 / 16, fp32 and bf16) and 6 strategies.
  std::vector<std::string> rows;
  for (const std::string& l : lines)
    if (l.rfind("mlp:", 0) == 0 || l.find(":2/mlp:") != std::string::npos ||
        l.rfind("single:1/", 0) == 0)
      rows.push_back(l);
  REQUIRE(rows.size() == 10);
  CHECK(rows[0].rfind("mlp:8x256/b64/fp32 ", 0) == 0);
  CHECK(rows[1].rfind("mlp:8x256/b64/bf16 ", 0) == 0);
  CHECK(rows[2].rfind("mlp:8x64/b4/fp32 ", 0) == 0);
  CHECK(rows[9].rfind("fsdp:2/mlp:8x64/b4 ", 0) == 0);
  for (const std::string& row : rows) {
    INFO(row);
    std::istringstream in(row);
    std::string label, prec, of_peak;
    double ms = 0, tflops = 0;
    in >> label >> prec >> ms;
    CHECK(ms > 0);
    double sum = 0;
    for (int k = 0; k < 6; ++k) {  // data fwd bwd opt comm idle, "12%"
      std::string pct;
      in >> pct;
      REQUIRE(pct.size() >= 2);
      REQUIRE(pct.back() == '%');
      const double v = std::stod(pct.substr(0, pct.size() - 1));
      CHECK(v >= 0);
      CHECK(v <= 100);
      sum += v;
    }
    CHECK(sum >= 96);  // every instant is some kind or idle (rounded; comm may overlap compute)
    in >> tflops >> of_peak;
    CHECK(tflops > 0);
    CHECK(of_peak == "peak");  // "peak ?": a CPU has no entry in the GPU table
  }
}

TEST_CASE("bench gpu --json: one object per row with the shares, FLOPs and memory per rank",
          "[bench-gpu]") {
  const auto r = run_cli("bench gpu --device cpu --steps 3 --only zero3 --json");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.out);
  REQUIRE(lines.size() == 1);
  const nlohmann::json j = nlohmann::json::parse(lines[0]);
  CHECK(j["label"] == "zero3:2/mlp:8x64/b4");
  CHECK(j["world"] == 2);
  CHECK(j["step_ms"].size() == 3);
  CHECK(j["median_step_ms"].get<double>() > 0);
  CHECK(j["flops_per_step"].get<double>() == Approx(3.0 * 8 * 2 * 4 * 64 * 64));
  CHECK(j["peak_tflops"].is_null());
  CHECK(j["peak_mem_bytes_per_rank"].size() == 2);
  for (const char* k : {"data", "forward", "backward", "optimizer", "communication", "idle"}) {
    const double v = j["shares_pct"][k].get<double>();
    CHECK(v >= 0);
    CHECK(v <= 100);
  }
  CHECK(j["shares_pct"]["communication"].get<double>() > 0);  // zero3 gathers every layer
}

TEST_CASE("bench gpu: bad input and no GPU each end in one line", "[bench-gpu]") {
  auto r = run_cli("bench gpu --device tpu");
  CHECK(r.code == 2);
  CHECK(r.out == "error: --device 'tpu' is invalid (valid: cuda, cpu)\n");
  r = run_cli("bench gpu --device cpu --steps 1");
  CHECK(r.code == 2);
  CHECK(r.out.find("--steps 1 is invalid (valid: 2 or more") != std::string::npos);
  r = run_cli("bench gpu --device cpu --only nothing-like-it");
  CHECK(r.code == 2);
  CHECK(r.out.find("--only 'nothing-like-it' matches no row (valid: a part of a label: "
                   "mlp:8x256/b64/fp32, ") != std::string::npos);
  r = run_cli("bench gpu --device cpu --tf32 --only mlp:8x64/b4/fp32");
  CHECK(r.code == 2);  // TF32 is a GPU's: the run's own check says so
  CHECK(r.out.find("--tf32 needs a GPU") != std::string::npos);
  if (cuda_device_count() == 0) {
    r = run_cli("bench gpu");
    CHECK(r.code == 2);
    CHECK(r.out == "error: bench gpu: no usable GPU here (" + cuda_status() +
                       "); --device cpu runs the same table at small sizes\n");
  }
}

TEST_CASE("warm-up: the median step leaves out step 0 unless it is the only one", "[warm-up]") {
  CHECK(steady_median({}) == 0);
  CHECK(steady_median({500}) == 500);
  CHECK(steady_median({500, 2}) == 2);
  CHECK(steady_median({500, 2, 4, 3}) == 3);
  CHECK(steady_median({500, 2, 4, 3, 5}) == 3.5);
  // What run, lesson run, the compare view and recordings report.
  RunConfig c;
  c.model = "mlp:2x16";
  c.strategy = "single";
  c.world = 1;
  c.batch = 8;
  c.steps = 3;
  const RunResult r = run_training(c);
  CHECK(r.median_step_ms == steady_median(r.step_ms));
}
