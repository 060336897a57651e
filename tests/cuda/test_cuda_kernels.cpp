// Every kernels/cuda.h launcher against the CPU kernels on random inputs of
// several sizes (1, odd, > 1M): outputs start as NaN poison, so an element the
// GPU never wrote fails the comparison.
#include <catch2/catch.hpp>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu.h"
#include "kernels/cuda.h"
#include "kernels/math.h"
#include "kernels/precision.h"

using namespace shardlab;

namespace {

#define CUDA_OK(expr)                                     \
  do {                                                    \
    const cudaError_t cuda_ok_e = (expr);                 \
    INFO(#expr << ": " << cudaGetErrorString(cuda_ok_e)); \
    REQUIRE(cuda_ok_e == cudaSuccess);                    \
  } while (0)

#define CUBLAS_OK(expr)                                      \
  do {                                                       \
    const cublasStatus_t cublas_ok_s = (expr);               \
    INFO(#expr << ": " << cublasGetStatusName(cublas_ok_s)); \
    REQUIRE(cublas_ok_s == CUBLAS_STATUS_SUCCESS);           \
  } while (0)

// n = 1, odd sizes around a block's 256 threads, and one past 2^20 (more
// elements than the grid has threads, so the grid-stride loops go round).
const std::vector<size_t> kSizes = {1, 2, 7, 255, 256, 257, 4099, (size_t{1} << 20) + 3};

// A stream of its own (not the default one) and a cuBLAS handle bound to it.
struct Gpu {
  cudaStream_t s = nullptr;
  cublasHandle_t blas = nullptr;
  Gpu() {
    CUDA_OK(cudaStreamCreate(&s));
    CUBLAS_OK(cublasCreate(&blas));
    CUBLAS_OK(cublasSetStream(blas, s));
  }
  ~Gpu() {
    if (blas) cublasDestroy(blas);
    if (s) cudaStreamDestroy(s);
  }
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;
  void sync() const { CUDA_OK(cudaStreamSynchronize(s)); }
};

// Device memory for n values of T; all-ones bytes are NaN in f32, bf16, fp16 and f64.
template <typename T>
class DevBuf {
 public:
  explicit DevBuf(size_t n) : n_(n) {
    if (n_) CUDA_OK(cudaMalloc(&p_, bytes()));
  }
  explicit DevBuf(const std::vector<T>& host) : DevBuf(host.size()) { upload(host); }
  ~DevBuf() {
    if (p_) cudaFree(p_);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;

  T* get() const { return p_; }
  size_t bytes() const { return n_ * sizeof(T); }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == n_);
    if (n_) CUDA_OK(cudaMemcpy(p_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  void poison() {
    if (n_) CUDA_OK(cudaMemset(p_, 0xff, bytes()));
  }
  // Waits for `gpu`'s stream first: the launchers only queue work.
  std::vector<T> download(const Gpu& gpu) const {
    gpu.sync();
    std::vector<T> host(n_);
    if (n_) CUDA_OK(cudaMemcpy(host.data(), p_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t n_;
  T* p_ = nullptr;
};

std::vector<float> randn(size_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint16_t> random_bits16(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = static_cast<uint16_t>(rng());
  return v;
}

// Passes when every |got - want| <= rtol * |want| + atol (equal infinities and
// NaN where NaN is expected pass too); reports the count and the first failure.
void require_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                   double atol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool ok =
        std::isnan(w) ? std::isnan(g) : (g == w || std::abs(g - w) <= rtol * std::abs(w) + atol);
    if (!ok && bad++ == 0) first = i;
  }
  INFO(what << ": " << bad << " of " << got.size() << " out of tolerance; first at " << first
            << ": got " << (bad ? got[first] : 0.0f) << ", want " << (bad ? want[first] : 0.0f));
  REQUIRE(bad == 0);
}

// Bit-for-bit equality (NaN payloads and signed zeros included).
template <typename T>
void require_same_bits(const std::vector<T>& got, const std::vector<T>& want,
                       const std::string& what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  INFO(what << ": " << bad << " of " << got.size() << " differ; first at " << first);
  REQUIRE(bad == 0);
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::abs(x)));
  return m;
}

// Values that exercise the conversions' special paths, placed at the front of
// the random data: signed zeros, ties, overflow, fp16 subnormals, inf, NaN.
std::vector<float> with_specials(std::vector<float> v) {
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            1.0f + 1.0f / 256,             // bf16 tie -> even (down)
                            1.0f + 3.0f / 256,             // bf16 tie -> even (up)
                            1.0f + std::ldexp(1.0f, -11),  // fp16 tie
                            65504.0f,                      // largest fp16
                            65520.0f,                      // fp16 overflow by rounding
                            -1e6f,                         // fp16 overflow
                            std::ldexp(1.0f, -24),         // smallest fp16 subnormal
                            std::ldexp(1.5f, -24),         // fp16 subnormal tie
                            std::ldexp(1.0f, -26),         // underflows to zero
                            std::ldexp(1.0f, -140),        // fp32 subnormal
                            -3.0e38f,                      // bf16 rounds to -inf
                            inf,
                            -inf,
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN()};
  for (size_t i = 0; i < v.size() && i < std::size(specials); ++i) v[i] = specials[i];
  return v;
}

uint16_t cpu_to_half(float f, DType dt) {
  return dt == DType::bf16 ? kernels::float_to_bf16(f) : kernels::float_to_fp16(f);
}
float cpu_from_half(uint16_t h, DType dt) {
  return dt == DType::bf16 ? kernels::bf16_to_float(h) : kernels::fp16_to_float(h);
}

const char* name(DType dt) {
  return dt == DType::f32 ? "f32" : dt == DType::bf16 ? "bf16" : "f16";
}

}  // namespace

TEST_CASE("cuda gemm matches the CPU gemm for every transpose and shape", "[cuda][gemm]") {
  Gpu gpu;
  struct Shape {
    int M, N, K;
  };
  // The last shape gives C more than 2^20 elements.
  const Shape shapes[] = {{1, 1, 1},      {2, 3, 4},     {7, 5, 3},      {33, 65, 17},
                          {128, 96, 200}, {257, 1, 129}, {1, 300, 1025}, {1030, 1031, 48}};
  uint64_t seed = 100;
  for (const Shape& sh : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.0f, 1.0f, -0.5f}) {
          const float alpha = beta == 0.0f ? 1.0f : 0.75f;
          const size_t mk = static_cast<size_t>(sh.M) * sh.K;
          const size_t kn = static_cast<size_t>(sh.K) * sh.N;
          const size_t mn = static_cast<size_t>(sh.M) * sh.N;
          const auto a = randn(mk, ++seed), b = randn(kn, ++seed);
          // With beta == 0 the old C is never read (BLAS semantics): poison it.
          std::vector<float> c0 = beta == 0.0f ? std::vector<float>(mn, NAN) : randn(mn, ++seed);
          std::vector<float> want = beta == 0.0f ? std::vector<float>(mn, 0.0f) : c0;
          kernels::gemm(ta, tb, sh.M, sh.N, sh.K, alpha, a.data(), b.data(), beta, want.data());

          DevBuf<float> da(a), db(b), dc(c0);
          kernels::cuda::gemm(gpu.blas, ta, tb, sh.M, sh.N, sh.K, alpha, da.get(), db.get(), beta,
                              dc.get());
          const auto got = dc.download(gpu);
          INFO("M=" << sh.M << " N=" << sh.N << " K=" << sh.K << " trans_a=" << ta
                    << " trans_b=" << tb << " beta=" << beta);
          require_close(got, want, 0, 1e-5 * std::max(max_abs(want), 1e-30), "gemm");
        }
}

TEST_CASE("cuda gemm with K = 0 scales C by beta", "[cuda][gemm]") {
  Gpu gpu;
  const int M = 5, N = 3;
  const auto c0 = randn(M * N, 7);
  DevBuf<float> dc(c0), dummy(1);
  kernels::cuda::gemm(gpu.blas, false, false, M, N, 0, 1.0f, dummy.get(), dummy.get(), 0.5f,
                      dc.get());
  std::vector<float> want = c0;
  for (float& x : want) x *= 0.5f;
  require_same_bits(dc.download(gpu), want, "gemm K=0, beta=0.5");
  dc.poison();  // beta = 0 must not read C
  kernels::cuda::gemm(gpu.blas, true, true, M, N, 0, 1.0f, dummy.get(), dummy.get(), 0.0f,
                      dc.get());
  require_same_bits(dc.download(gpu), std::vector<float>(M * N, 0.0f), "gemm K=0, beta=0");
}

TEST_CASE("cuda bias_rows broadcasts the bias over every row", "[cuda][bias]") {
  Gpu gpu;
  const std::pair<int, int> shapes[] = {{1, 1}, {3, 7}, {1, 1025}, {1025, 1}, {1025, 1031}};
  uint64_t seed = 200;
  for (auto [rows, cols] : shapes) {
    const auto bias = randn(cols, ++seed);
    DevBuf<float> db(bias), out(static_cast<size_t>(rows) * cols);
    out.poison();
    kernels::cuda::bias_rows(out.get(), db.get(), rows, cols, gpu.s);
    std::vector<float> want(static_cast<size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) want[static_cast<size_t>(r) * cols + c] = bias[c];
    INFO("rows=" << rows << " cols=" << cols);
    require_same_bits(out.download(gpu), want, "bias_rows");
  }
}

TEST_CASE("cuda bias_grad_accumulate adds the row sums onto dbias", "[cuda][bias]") {
  Gpu gpu;
  const std::pair<int, int> shapes[] = {{1, 1},   {3, 7},    {1, 1025},   {1025, 1},
                                        {33, 65}, {4099, 3}, {1025, 1031}};
  uint64_t seed = 300;
  for (auto [rows, cols] : shapes) {
    const auto dout = randn(static_cast<size_t>(rows) * cols, ++seed);
    const auto dbias0 = randn(cols, ++seed);
    // Reference in double; the tolerance scales with Σ|terms|, which bounds any
    // float summation order's error (CPU row by row, GPU in 32 lanes).
    std::vector<float> want(cols);
    double worst_scale = 0;
    for (int c = 0; c < cols; ++c) {
      double sum = dbias0[c], abs_sum = std::abs(dbias0[c]);
      for (int r = 0; r < rows; ++r) {
        sum += dout[static_cast<size_t>(r) * cols + c];
        abs_sum += std::abs(dout[static_cast<size_t>(r) * cols + c]);
      }
      want[c] = static_cast<float>(sum);
      worst_scale = std::max(worst_scale, abs_sum);
    }
    DevBuf<float> dd(dout), db(dbias0);
    DevBuf<float> part(static_cast<size_t>(kernels::cuda::column_sum_chunks(rows)) * cols);
    kernels::cuda::bias_grad_accumulate(db.get(), dd.get(), rows, cols, part.get(), gpu.s);
    INFO("rows=" << rows << " cols=" << cols);
    require_close(db.download(gpu), want, 0, 1e-6 * worst_scale, "bias_grad_accumulate");
  }
}

TEST_CASE("cuda launchers compose kernels::linear_forward and linear_backward", "[cuda][gemm]") {
  // The way the CUDA backend builds nn.Linear: bias_rows then gemm with beta = 1.
  Gpu gpu;
  const int rows = 37, in = 19, out = 23;
  const auto x = randn(rows * in, 401), w = randn(out * in, 402), b = randn(out, 403);
  const auto dy = randn(rows * out, 404);
  std::vector<float> y(rows * out), dx(rows * in), dw(out * in, 0.25f), dbias(out, -0.5f);
  kernels::linear_forward(y.data(), x.data(), w.data(), b.data(), rows, in, out);
  kernels::linear_backward(dx.data(), dw.data(), dbias.data(), dy.data(), x.data(), w.data(), rows,
                           in, out);

  DevBuf<float> gx(x), gw(w), gb(b), gdy(dy), gy(rows * out), gdx(rows * in);
  DevBuf<float> gdw(std::vector<float>(out * in, 0.25f)), gdb(std::vector<float>(out, -0.5f));
  gy.poison();
  gdx.poison();
  kernels::cuda::bias_rows(gy.get(), gb.get(), rows, out, gpu.s);
  kernels::cuda::gemm(gpu.blas, false, true, rows, out, in, 1.0f, gx.get(), gw.get(), 1.0f,
                      gy.get());
  kernels::cuda::gemm(gpu.blas, true, false, out, in, rows, 1.0f, gdy.get(), gx.get(), 1.0f,
                      gdw.get());
  DevBuf<float> part(static_cast<size_t>(kernels::cuda::column_sum_chunks(rows)) * out);
  kernels::cuda::bias_grad_accumulate(gdb.get(), gdy.get(), rows, out, part.get(), gpu.s);
  kernels::cuda::gemm(gpu.blas, false, false, rows, in, out, 1.0f, gdy.get(), gw.get(), 0.0f,
                      gdx.get());
  require_close(gy.download(gpu), y, 0, 1e-5 * max_abs(y), "linear forward");
  require_close(gdx.download(gpu), dx, 0, 1e-5 * max_abs(dx), "linear din");
  require_close(gdw.download(gpu), dw, 0, 1e-5 * max_abs(dw), "linear dweight");
  require_close(gdb.download(gpu), dbias, 0, 1e-5 * max_abs(dbias), "linear dbias");
}

TEST_CASE("cuda gelu forward and backward match the CPU, in place too", "[cuda][gelu]") {
  Gpu gpu;
  uint64_t seed = 500;
  for (size_t n : kSizes) {
    INFO("n=" << n);
    auto x = randn(n, ++seed, 3.0f);
    // Saturated tails and zero, where erf reaches ±1 exactly.
    const float tails[] = {0.0f, -0.0f, 20.0f, -20.0f, 6.0f, -6.0f, 1e-30f};
    for (size_t i = 0; i < n && i < std::size(tails); ++i) x[i] = tails[i];
    const auto dy = randn(n, ++seed);
    std::vector<float> y(n), dx(n);
    kernels::gelu_forward(y.data(), x.data(), n);
    kernels::gelu_backward(dx.data(), dy.data(), x.data(), n);
    // CUDA's erff/expf and glibc's differ by an ulp or two, so compare against
    // the values' own scale (GELU's negative tail is a cancellation: absolute error).
    const double rtol = 1e-6, atol = 1e-6;

    DevBuf<float> gx(x), gy(n), gdy(dy), gdx(n);
    gy.poison();
    gdx.poison();
    kernels::cuda::gelu_forward(gy.get(), gx.get(), n, gpu.s);
    kernels::cuda::gelu_backward(gdx.get(), gdy.get(), gx.get(), n, gpu.s);
    require_close(gy.download(gpu), y, rtol, atol, "gelu_forward");
    require_close(gdx.download(gpu), dx, rtol, atol * 4, "gelu_backward");

    // Aliased: out == in, and din == dout.
    DevBuf<float> inplace(x), grad_inplace(dy);
    kernels::cuda::gelu_backward(grad_inplace.get(), grad_inplace.get(), inplace.get(), n, gpu.s);
    kernels::cuda::gelu_forward(inplace.get(), inplace.get(), n, gpu.s);
    require_close(inplace.download(gpu), y, rtol, atol, "gelu_forward in place");
    require_close(grad_inplace.download(gpu), dx, rtol, atol * 4, "gelu_backward in place");
  }
}

TEST_CASE("cuda mse_forward_backward matches the CPU loss and gradient", "[cuda][mse]") {
  Gpu gpu;
  uint64_t seed = 600;
  for (size_t n : kSizes) {
    for (size_t divisor : {n, 3 * n + 1}) {
      INFO("n=" << n << " divisor=" << divisor);
      const auto pred = randn(n, ++seed), target = randn(n, ++seed);
      std::vector<float> dpred(n);
      const double loss =
          kernels::mse_forward_backward(dpred.data(), pred.data(), target.data(), n, divisor);
      const double want_sum = loss * static_cast<double>(divisor);

      DevBuf<float> gp(pred), gt(target), gd(n);
      DevBuf<double> sum(1);
      gd.poison();
      sum.poison();
      kernels::cuda::mse_forward_backward(gd.get(), gp.get(), gt.get(), n, divisor, sum.get(),
                                          gpu.s);
      const double got_sum = sum.download(gpu)[0];
      REQUIRE(std::abs(got_sum - want_sum) <= 1e-9 * want_sum);
      // The same float product on both sides (2/divisor, then times the difference).
      require_same_bits(gd.download(gpu), dpred, "mse dpred");

      // Loss only (no gradient); the sum is overwritten, not added to.
      kernels::cuda::mse_forward_backward(nullptr, gp.get(), gt.get(), n, divisor, sum.get(),
                                          gpu.s);
      REQUIRE(std::abs(sum.download(gpu)[0] - want_sum) <= 1e-9 * want_sum);
    }
  }
}

TEST_CASE("cuda mse_forward_backward of an empty slice writes a zero sum", "[cuda][mse]") {
  Gpu gpu;
  DevBuf<double> sum(1);
  sum.poison();
  kernels::cuda::mse_forward_backward(nullptr, nullptr, nullptr, 0, 8, sum.get(), gpu.s);
  REQUIRE(sum.download(gpu)[0] == 0.0);
}

TEST_CASE("cuda adamw_step matches the CPU over steps 1 to 5", "[cuda][optim]") {
  Gpu gpu;
  kernels::AdamWParams h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  uint64_t seed = 700;
  for (size_t n : {size_t{1}, size_t{7}, size_t{4099}, (size_t{1} << 20) + 3}) {
    INFO("n=" << n);
    std::vector<float> p = randn(n, ++seed), m(n, 0.0f), v(n, 0.0f);
    DevBuf<float> gp(p), gm(m), gv(v), gg(n);
    for (int64_t t = 1; t <= 5; ++t) {
      INFO("t=" << t);
      // Gradients of very different sizes across steps, so m and v keep changing.
      const auto g = randn(n, ++seed, t % 2 ? 1.0f : 1e-3f);
      kernels::adamw_step(p.data(), g.data(), m.data(), v.data(), n, h, t);
      gg.upload(g);
      kernels::cuda::adamw_step(gp.get(), gg.get(), gm.get(), gv.get(), n,
                                kernels::adamw_scalars(h, t), gpu.s);
      require_close(gp.download(gpu), p, 1e-6, 1e-9, "param");
      require_close(gm.download(gpu), m, 1e-6, 1e-12, "exp_avg");
      require_close(gv.download(gpu), v, 1e-6, 1e-15, "exp_avg_sq");
    }
  }
}

TEST_CASE("cuda sgd_step and scale match the CPU", "[cuda][optim]") {
  Gpu gpu;
  uint64_t seed = 800;
  for (size_t n : kSizes) {
    INFO("n=" << n);
    auto p = randn(n, ++seed);
    const auto g = randn(n, ++seed);
    DevBuf<float> gp(p), gg(g);
    kernels::sgd_step(p.data(), g.data(), n, 0.05f);
    kernels::cuda::sgd_step(gp.get(), gg.get(), n, 0.05f, gpu.s);
    require_close(gp.download(gpu), p, 1e-6, 1e-7, "sgd_step");

    // scale is one float multiply on both sides: bit-exact.
    auto x = randn(n, ++seed);
    DevBuf<float> gx(x);
    kernels::scale(x.data(), n, 1.0f / 3.0f);
    kernels::cuda::scale(gx.get(), n, 1.0f / 3.0f, gpu.s);
    require_same_bits(gx.download(gpu), x, "scale");
  }
}

TEST_CASE("cuda cast matches the CPU conversions bit for bit", "[cuda][cast]") {
  Gpu gpu;
  const DType all[] = {DType::f32, DType::bf16, DType::f16};
  uint64_t seed = 900;
  std::vector<size_t> sizes = kSizes;
  sizes.push_back(65536);  // every 16-bit pattern, when the source is 2 bytes
  for (size_t n : sizes) {
    // Sources: fp32 values with the special cases up front, and 16-bit patterns
    // (all of them for n = 65536, random otherwise).
    const auto f32 = with_specials(randn(n, ++seed, 100.0f));
    std::vector<uint16_t> h16 = random_bits16(n, ++seed);
    if (n == 65536)
      for (size_t i = 0; i < n; ++i) h16[i] = static_cast<uint16_t>(i);
    for (DType src_dt : all)
      for (DType dst_dt : all) {
        INFO("n=" << n << " " << name(src_dt) << " -> " << name(dst_dt));
        // The source as fp32 values (what the CPU converts from).
        std::vector<float> src_f(n);
        for (size_t i = 0; i < n; ++i)
          src_f[i] = src_dt == DType::f32 ? f32[i] : cpu_from_half(h16[i], src_dt);
        if (dst_dt == DType::f32) {
          DevBuf<float> dst(n);
          dst.poison();
          if (src_dt == DType::f32) {
            DevBuf<float> src(f32);
            kernels::cuda::cast(dst.get(), dst_dt, src.get(), src_dt, n, gpu.s);
          } else {
            DevBuf<uint16_t> src(h16);
            kernels::cuda::cast(dst.get(), dst_dt, src.get(), src_dt, n, gpu.s);
          }
          require_same_bits(dst.download(gpu), src_f, "cast");
        } else {
          std::vector<uint16_t> want(n);
          for (size_t i = 0; i < n; ++i)
            want[i] = src_dt == dst_dt ? h16[i] : cpu_to_half(src_f[i], dst_dt);
          DevBuf<uint16_t> dst(n);
          dst.poison();
          if (src_dt == DType::f32) {
            DevBuf<float> src(f32);
            kernels::cuda::cast(dst.get(), dst_dt, src.get(), src_dt, n, gpu.s);
          } else {
            DevBuf<uint16_t> src(h16);
            kernels::cuda::cast(dst.get(), dst_dt, src.get(), src_dt, n, gpu.s);
          }
          require_same_bits(dst.download(gpu), want, "cast");
        }
      }
  }
}

TEST_CASE("cuda add sums in fp32 and rounds once, like the CPU", "[cuda][cast]") {
  Gpu gpu;
  uint64_t seed = 1000;
  for (size_t n : kSizes) {
    INFO("n=" << n);
    {
      const auto a = randn(n, ++seed), b = randn(n, ++seed);
      std::vector<float> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
      DevBuf<float> ga(a), gb(b);
      kernels::cuda::add(ga.get(), gb.get(), DType::f32, n, gpu.s);
      require_same_bits(ga.download(gpu), want, "add f32");
    }
    for (DType dt : {DType::bf16, DType::f16}) {
      INFO(name(dt));
      // Large finite values, so some fp16 sums overflow to inf. Inputs stay finite:
      // inf + -inf would make a NaN whose sign differs between x86 and the GPU.
      const auto fa = randn(n, ++seed, 20000.0f), fb = randn(n, ++seed, 20000.0f);
      std::vector<uint16_t> a(n), b(n), want(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = cpu_to_half(std::clamp(fa[i], -60000.0f, 60000.0f), dt);
        b[i] = cpu_to_half(std::clamp(fb[i], -60000.0f, 60000.0f), dt);
      }
      if (dt == DType::bf16)
        kernels::sum_bf16(want.data(), a.data(), b.data(), n);
      else
        kernels::sum_fp16(want.data(), a.data(), b.data(), n);
      DevBuf<uint16_t> ga(a), gb(b);
      kernels::cuda::add(ga.get(), gb.get(), dt, n, gpu.s);
      require_same_bits(ga.download(gpu), want, "add");
    }
  }
}

TEST_CASE("cuda flag_nonfinite sets the flag on inf or NaN and never clears it", "[cuda][cast]") {
  Gpu gpu;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint64_t seed = 1100;
  for (size_t n : kSizes)
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      INFO("n=" << n << " " << name(dt));
      const auto base = randn(n, ++seed, 100.0f);
      // Runs flag_nonfinite on `vals` (stored as dt) with the flag starting at `start`.
      auto run = [&](const std::vector<float>& vals, int start) {
        DevBuf<int> flag(std::vector<int>{start});
        if (dt == DType::f32) {
          DevBuf<float> src(vals);
          kernels::cuda::flag_nonfinite(src.get(), dt, n, flag.get(), gpu.s);
          return flag.download(gpu)[0];
        }
        std::vector<uint16_t> h(n);
        for (size_t i = 0; i < n; ++i) h[i] = cpu_to_half(vals[i], dt);
        DevBuf<uint16_t> src(h);
        kernels::cuda::flag_nonfinite(src.get(), dt, n, flag.get(), gpu.s);
        return flag.download(gpu)[0];
      };
      REQUIRE(run(base, 0) == 0);
      REQUIRE(run(base, 1) == 1);  // never cleared
      auto last_inf = base;
      last_inf[n - 1] = -inf;
      REQUIRE(run(last_inf, 0) == 1);
      auto first_nan = base;
      first_nan[0] = nan;
      REQUIRE(run(first_nan, 0) == 1);
      if (dt == DType::f16 && n > 1) {
        // Finite in fp32, overflows to inf once stored as fp16.
        auto big = base;
        big[n / 2] = 1e6f;
        REQUIRE(run(big, 0) == 1);
      }
    }
}

TEST_CASE("cuda launchers do nothing for n = 0", "[cuda]") {
  Gpu gpu;
  DevBuf<int> flag(std::vector<int>{0});
  kernels::cuda::gelu_forward(nullptr, nullptr, 0, gpu.s);
  kernels::cuda::gelu_backward(nullptr, nullptr, nullptr, 0, gpu.s);
  kernels::cuda::adamw_step(nullptr, nullptr, nullptr, nullptr, 0,
                            kernels::adamw_scalars(kernels::AdamWParams{}, 1), gpu.s);
  kernels::cuda::sgd_step(nullptr, nullptr, 0, 0.1f, gpu.s);
  kernels::cuda::scale(nullptr, 0, 2.0f, gpu.s);
  kernels::cuda::bias_rows(nullptr, nullptr, 0, 5, gpu.s);
  kernels::cuda::bias_grad_accumulate(nullptr, nullptr, 5, 0, nullptr, gpu.s);
  for (DType a : {DType::f32, DType::bf16, DType::f16}) {
    kernels::cuda::add(nullptr, nullptr, a, 0, gpu.s);
    kernels::cuda::flag_nonfinite(nullptr, a, 0, flag.get(), gpu.s);
    for (DType b : {DType::f32, DType::bf16, DType::f16})
      kernels::cuda::cast(nullptr, a, nullptr, b, 0, gpu.s);
  }
  REQUIRE(flag.download(gpu)[0] == 0);
}
