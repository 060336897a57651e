// The GPT-2 ops of the CUDA backend (kernels/cuda/embedding, layernorm,
// attention, flash_attention, crossentropy, residual) against the CPU backend
// on the same inputs, in fp32, bf16 and fp16, and a bad id's NaN row (a GPU
// cannot throw); flash attention also against the naive one, in ops and in
// training (the default on cuda). Runs only on a GPU machine (gpu_main.cpp
// skips otherwise).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/device/gpu.h"
#include "core/predict/memory_estimate.h"
#include "core/run/runner.h"
#include "tests/test_util.h"
#include "tests/transformer_ops.h"

using namespace shardlab;
using namespace shardlab::test;

namespace {

double rel_diff(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

}  // namespace

TEST_CASE("cuda GPT ops match the CPU backend in fp32, bf16 and fp16", "[cuda][transformer]") {
  const OpInputs in;
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend(0, nullptr);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    INFO(to_string(dt));
    const OpResults want = run_ops(*cpu, dt, in);
    const OpResults got = run_ops(*gpu, dt, in);
    REQUIRE(got.tensors.size() == want.tensors.size());
    // fp32: reduction order only (double statistics, cuBLAS vs OpenBLAS); 2-byte
    // formats: that, plus an output that lands on the other side of a rounding.
    const double tol = dt == DType::f32 ? 1e-5 : dt == DType::bf16 ? 2e-2 : 3e-3;
    for (size_t i = 0; i < want.tensors.size(); ++i) {
      INFO(kTensorNames[i]);
      const bool exact = i <= 2 || i == 14;  // embedding and residual: the same order of adds
      if (exact)
        CHECK(got.tensors[i] == want.tensors[i]);
      else
        CHECK(rel_diff(got.tensors[i], want.tensors[i]) < tol);
    }
    for (size_t i = 0; i < want.losses.size(); ++i)
      CHECK(got.losses[i] == Approx(want.losses[i]).epsilon(1e-6));
  }
}

TEST_CASE("cuda GPT ops turn a bad id's row into NaN", "[cuda][transformer]") {
  auto gpu = make_cuda_backend(0, nullptr);
  DeviceBuffers d(*gpu, DType::f32);
  void* wte = d.put(std::vector<float>(4 * 2, 1.0f));
  void* wpe = d.put(std::vector<float>(2 * 2, 1.0f));
  void* out = d.alloc(2 * 2 * 4);
  gpu->embedding_forward(DType::f32, out, d.put_ids({1, 4}), wte, wpe, 1, 2, 2, 4, 0, 4);
  const auto o = d.get(out, 4);
  CHECK(o[0] == 2.0f);
  CHECK(o[1] == 2.0f);
  CHECK(std::isnan(o[2]));
  CHECK(std::isnan(o[3]));
  void* logits = d.put(std::vector<float>(2 * 3, 0.5f));
  CHECK(std::isnan(
      gpu->crossentropy_forward_backward(DType::f32, nullptr, logits, d.put_ids({0, 3}), 2, 3, 2)));
  // -1 is the ignored target, not a bad one.
  CHECK(gpu->crossentropy_forward_backward(DType::f32, nullptr, logits, d.put_ids({0, -1}), 2, 3,
                                           1) == Approx(std::log(3.0)));
}

TEST_CASE("cuda flash attention matches the CPU's and the naive attention in fp32, bf16, fp16",
          "[cuda][transformer][flash]") {
  const OpInputs in;  // T = 37: a tile of 32 and a ragged one
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend(0, nullptr);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    INFO(to_string(dt));
    const OpResults want = run_flash_ops(*cpu, dt, in);
    const OpResults got = run_flash_ops(*gpu, dt, in);
    const OpResults naive = run_ops(*gpu, dt, in);
    REQUIRE(got.tensors.size() == want.tensors.size());
    // fp32: the order of sums and expf's last bits; 2-byte formats: an output
    // that lands on the other side of a rounding (and naive's rounded P and dS).
    const double tol = dt == DType::f32 ? 1e-5 : dt == DType::bf16 ? 2e-2 : 3e-3;
    for (size_t i = 0; i < want.tensors.size(); ++i) {
      INFO(kFlashTensorNames[i] << ": " << rel_diff(got.tensors[i], want.tensors[i]));
      CHECK(rel_diff(got.tensors[i], want.tensors[i]) < tol);
    }
    CHECK(rel_diff(got.tensors[0], naive.tensors[kAttentionFirst]) < tol);
    CHECK(rel_diff(got.tensors[2], naive.tensors[kAttentionFirst + 2]) < tol);
  }
}

TEST_CASE("cuda flash attention: many tiles, and a head too wide for 48 KiB of shared memory",
          "[cuda][transformer][flash]") {
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend(0, nullptr);
  struct Shape {
    int B, T, C, H;
  };
  // hs = 16 over 10 tiles; hs = 4096, one row a tile, opted in to more shared memory.
  for (const Shape s : {Shape{2, 300, 64, 4}, Shape{1, 40, 4096, 1}}) {
    INFO("B=" << s.B << " T=" << s.T << " C=" << s.C << " H=" << s.H);
    OpInputs in;
    in.B = s.B;
    in.T = s.T;
    in.C = s.C;
    in.H = s.H;
    in.qkv = frandn(in.N() * 3 * s.C, 50);
    in.dyc = frandn(in.N() * s.C, 51);
    const OpResults want = run_flash_ops(*cpu, DType::f32, in);
    const OpResults got = run_flash_ops(*gpu, DType::f32, in);
    for (size_t i = 0; i < want.tensors.size(); ++i) {
      INFO(kFlashTensorNames[i] << ": " << rel_diff(got.tensors[i], want.tensors[i]));
      CHECK(rel_diff(got.tensors[i], want.tensors[i]) < 1e-5);
    }
  }
}

TEST_CASE("cuda gpt trains with flash attention by default, as the CPU's flash and naive do",
          "[cuda][gpt][flash]") {
  RunConfig c;
  c.model = "gpt:2x64x4";
  c.seq = 64;
  c.strategy = "single";
  c.world = 1;
  c.batch = 8;
  c.steps = 10;
  c.record = false;
  c.device = "cpu";
  c.attention = "naive";
  const RunResult cpu_naive = run_training(c);
  c.attention = "flash";
  const RunResult cpu_flash = run_training(c);
  c.device = "cuda";
  c.attention = "";
  const MemoryEstimate plan = estimate_memory(c);
  const RunResult gpu = run_training(c);
  CHECK(gpu.cfg.attention == "flash");
  // cuBLAS against OpenBLAS elsewhere in the model: the bound of the strategy tests.
  CHECK(test::max_rel_diff(gpu.final_params, cpu_flash.final_params) < 2e-4);
  CHECK(test::max_rel_diff(gpu.final_params, cpu_naive.final_params) < 2e-4);
  // The plan knows the flash block: no [T,T] matrix among the activations.
  const int act = static_cast<int>(MemCategory::activations);
  CHECK(plan.ranks[0].at_report.device.peak[act] == gpu.ranks[0].memory.device.peak[act]);
  c.attention = "naive";
  const RunResult gpu_naive = run_training(c);
  CHECK(gpu_naive.ranks[0].memory.device.peak[act] > gpu.ranks[0].memory.device.peak[act]);
  for (const char* precision : {"bf16", "fp16"}) {
    c.precision = precision;
    c.attention = "naive";
    const RunResult n = run_training(c);
    c.attention = "flash";
    const RunResult f = run_training(c);
    INFO(precision << ": " << test::max_rel_diff(f.final_params, n.final_params));
    CHECK(test::max_rel_diff(f.final_params, n.final_params) < 2e-2);
  }
}

TEST_CASE("cuda vocabulary slices: embedding and cross-entropy match the CPU backend",
          "[cuda][transformer][tp]") {
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend(0, nullptr);
  const int B = 2, T = 3, C = 4, V = 7, rows = B * T;
  const std::vector<int32_t> ids = {6, 0, 3, 3, 5, 1}, targets = {6, 0, -1, 3, 4, 5};
  std::vector<float> wte(4 * C), wpe(T * C), dout(rows * C), logits(rows * 4);
  Rng rng(3);
  for (auto* v : {&wte, &wpe, &dout, &logits})
    for (float& x : *v) x = static_cast<float>(rng.normal());
  for (const int begin : {0, 4}) {  // 2 slices of 4 rows: the second holds 3 ids and padding
    INFO("slice from id " << begin);
    const int valid = std::min(4, V - begin);
    std::vector<std::vector<float>> got;
    for (DeviceBackend* dev : {cpu.get(), gpu.get()}) {
      DeviceBuffers d(*dev, DType::f32);
      void* out = d.alloc(rows * C * 4);
      void* w = d.put(wte);
      const int32_t* x = d.put_ids(ids);
      dev->embedding_forward(DType::f32, out, x, w, begin == 0 ? d.put(wpe) : nullptr, B, T, C, V,
                             begin, 4);
      void* dw = d.put(std::vector<float>(wte.size(), 0.5f));
      dev->embedding_backward(DType::f32, dw, nullptr, d.put(dout), x, B, T, C, V, begin, 4);
      void* stats = d.alloc(rows * 3 * 4);
      void* lg = d.put(logits);
      const int32_t* t = d.put_ids(targets);
      dev->crossentropy_slice_stats(static_cast<float*>(stats), static_cast<const float*>(lg), t,
                                    rows, 4, valid, begin);
      std::vector<float> ms(rows * 2);
      for (int r = 0; r < rows; ++r) ms[2 * r] = 1.0f, ms[2 * r + 1] = 3.0f;
      void* dl = d.alloc(rows * 4 * 4);
      dev->crossentropy_slice_grad(static_cast<float*>(dl), static_cast<const float*>(lg),
                                   static_cast<const float*>(d.put(ms)), t, rows, 4, valid, begin,
                                   8);
      got.push_back(d.get(out, rows * C));
      got.push_back(d.get(dw, wte.size()));
      got.push_back(d.get(stats, rows * 3));
      got.push_back(d.get(dl, rows * 4));
    }
    CHECK(got[0] == got[4]);  // embeddings: the same adds in the same order
    CHECK(got[1] == got[5]);
    CHECK(rel_diff(got[6], got[2]) < 1e-6);
    CHECK(rel_diff(got[7], got[3]) < 1e-6);
  }
}
