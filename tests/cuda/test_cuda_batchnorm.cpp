// BatchNorm1d on the GPU (kernels/cuda/batchnorm.cu) against the CPU kernel,
// and `mlp:LxD+bn` runs on --device cuda against the same runs on the CPU.
// Runs only on a GPU machine (gpu_main.cpp skips otherwise).
#include <cuda_runtime.h>

#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../test_util.h"
#include "core/run/runner.h"
#include "kernels/cpu.h"
#include "kernels/cuda.h"

using shardlab::test::max_rel_diff;
using namespace shardlab;

namespace {

#define BN_CUDA_OK(expr)                                  \
  do {                                                    \
    const cudaError_t bn_cuda_e = (expr);                 \
    INFO(#expr << ": " << cudaGetErrorString(bn_cuda_e)); \
    REQUIRE(bn_cuda_e == cudaSuccess);                    \
  } while (0)

// Device copy of a host vector; all-ones bytes (NaN) when `poison`.
struct Buf {
  float* p = nullptr;
  size_t n = 0;
  explicit Buf(const std::vector<float>& host) : n(host.size()) {
    BN_CUDA_OK(cudaMalloc(&p, n * sizeof(float)));
    BN_CUDA_OK(cudaMemcpy(p, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  explicit Buf(size_t count) : n(count) {
    BN_CUDA_OK(cudaMalloc(&p, n * sizeof(float)));
    BN_CUDA_OK(cudaMemset(p, 0xff, n * sizeof(float)));
  }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  std::vector<float> get(cudaStream_t s) const {
    BN_CUDA_OK(cudaStreamSynchronize(s));
    std::vector<float> h(n);
    BN_CUDA_OK(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
};

std::vector<float> randn(size_t n, uint64_t seed, float sigma, float mean) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(mean, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Statistics are summed in double on both sides, in different orders: the
// results agree to a few float ulps.
void require_close(const std::vector<float>& got, const std::vector<float>& want,
                   const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what << "[" << i << "]: gpu " << got[i] << " cpu " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= 1e-5 * (1 + std::abs(want[i])));
  }
}

}  // namespace

TEST_CASE("cuda batchnorm forward and backward match the CPU, in place too", "[cuda][batchnorm]") {
  cudaStream_t s = nullptr;
  BN_CUDA_OK(cudaStreamCreate(&s));
  uint64_t seed = 900;
  // Columns under and over one 32-wide tile, rows under and over the block's 32 y lanes.
  for (auto [rows, cols] :
       {std::pair{2, 1}, std::pair{7, 33}, std::pair{64, 256}, std::pair{1000, 70}}) {
    INFO("rows " << rows << " cols " << cols);
    const size_t n = static_cast<size_t>(rows) * cols;
    const auto x = randn(n, ++seed, 2.0f, 3.0f), dy = randn(n, ++seed, 1.0f, 0.0f);
    const auto w = randn(cols, ++seed, 0.5f, 1.0f), b = randn(cols, ++seed, 0.5f, 0.0f);
    std::vector<float> rm = randn(cols, ++seed, 1.0f, 0.0f), rv(cols, 1.5f);
    std::vector<float> y(n), xhat(n), invstd(cols), dx(n), dw(cols, 0.25f), db(cols, -0.25f);
    Buf gx(x), gdy(dy), gw(w), gb(b), grm(rm), grv(rv), gdw(dw), gdb(db);
    Buf gy(n), gxhat(n), ginvstd(cols), gdx(n);
    kernels::batchnorm_forward(y.data(), xhat.data(), invstd.data(), x.data(), w.data(), b.data(),
                               rm.data(), rv.data(), rows, cols, {});
    kernels::batchnorm_backward(dx.data(), dw.data(), db.data(), dy.data(), xhat.data(),
                                invstd.data(), w.data(), rows, cols);
    kernels::cuda::batchnorm_forward(gy.p, gxhat.p, ginvstd.p, gx.p, gw.p, gb.p, grm.p, grv.p, rows,
                                     cols, {}, s);
    kernels::cuda::batchnorm_backward(gdx.p, gdw.p, gdb.p, gdy.p, gxhat.p, ginvstd.p, gw.p, rows,
                                      cols, s);
    require_close(gy.get(s), y, "y");
    require_close(gxhat.get(s), xhat, "xhat");
    require_close(ginvstd.get(s), invstd, "invstd");
    require_close(grm.get(s), rm, "running_mean");
    require_close(grv.get(s), rv, "running_var");
    require_close(gdx.get(s), dx, "dx");
    require_close(gdw.get(s), dw, "dweight");
    require_close(gdb.get(s), db, "dbias");

    // In place (out == in, din == dout), without running statistics: they stay put.
    Buf inplace(x), grad(dy), xh2(n), is2(cols), dw2(cols), db2(cols);
    BN_CUDA_OK(cudaMemset(dw2.p, 0, cols * sizeof(float)));
    BN_CUDA_OK(cudaMemset(db2.p, 0, cols * sizeof(float)));
    kernels::cuda::batchnorm_forward(inplace.p, xh2.p, is2.p, inplace.p, gw.p, gb.p, nullptr,
                                     nullptr, rows, cols, {}, s);
    kernels::cuda::batchnorm_backward(grad.p, dw2.p, db2.p, grad.p, xh2.p, is2.p, gw.p, rows, cols,
                                      s);
    require_close(inplace.get(s), y, "y in place");
    require_close(grad.get(s), dx, "dx in place");
    require_close(grm.get(s), rm, "running_mean untouched");
  }
  cudaStreamDestroy(s);
}

TEST_CASE("cuda mlp+bn runs match the CPU: single, and gpipe with per-micro-batch statistics",
          "[cuda][batchnorm]") {
  for (auto [strategy, world, m] :
       {std::tuple{"single", 1, 1}, std::tuple{"gpipe", 2, 4}, std::tuple{"1f1b", 2, 4}}) {
    RunConfig c;
    c.model = "mlp:4x128+bn";
    c.strategy = strategy;
    c.world = world;
    c.micro_batches = m;
    c.batch = 32;
    c.steps = 10;
    const RunResult cpu = run_training(c);
    c.device = "cuda";
    c.backend = "gloo";
    const RunResult gpu = run_training(c);
    INFO(strategy << " M=" << m << ": " << gpu.placement.summary);
    CHECK(max_rel_diff(cpu.final_params, gpu.final_params) < 2e-4);  // weights and buffers
  }
}
