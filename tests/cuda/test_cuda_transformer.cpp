// The GPT-2 ops of the CUDA backend (kernels/cuda/embedding, layernorm,
// attention, crossentropy, residual) against the CPU backend on the same
// inputs, in fp32, bf16 and fp16, and a bad id's NaN row (a GPU cannot throw).
// Runs only on a GPU machine (gpu_main.cpp skips otherwise).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/gpu.h"
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
  gpu->embedding_forward(DType::f32, out, d.put_ids({1, 4}), wte, wpe, 1, 2, 2, 4);
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
