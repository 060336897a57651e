// `mlp:LxD+bn` (Linear → BatchNorm1d → GELU) against its specification: the
// kernel against finite differences and PyTorch's running-statistics rule, the
// checkpoint names and shapes of PyTorch's state_dict, the GPipe caveat run for
// real (M = 1 is `single`, M > 1 is not: statistics per micro-batch), and a
// one-line refusal from every strategy that does not keep BatchNorm statistics.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/safetensors.h"
#include "core/model/checkpoint.h"
#include "core/model/layer_stack.h"
#include "core/model/optimizer.h"
#include "core/parallel/strategy.h"
#include "core/predict/pipeline_analysis.h"
#include "core/rng.h"
#include "core/run/runner.h"
#include "kernels/cpu.h"

using namespace shardlab;
using shardlab::test::max_rel_diff;
using shardlab::test::numeric_grad;
using shardlab::test::require_close;
using shardlab::test::run_cli;

namespace {

std::vector<double> randn(size_t n, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = shift + scale * rng.normal();
  return v;
}

RunConfig bn_config(const std::string& strategy, int world, int micro_batches) {
  RunConfig c;
  c.model = "mlp:4x32+bn";
  c.strategy = strategy;
  c.world = world;
  c.micro_batches = micro_batches;
  c.batch = 32;
  c.steps = 12;
  c.optimizer.kind = OptimizerKind::adamw;
  c.optimizer.lr = 1e-2f;
  c.seed = 5;
  c.timeout_ms = 20000;
  return c;
}

// Largest |a − b| over [begin, end).
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b, size_t begin,
                    size_t end) {
  double m = 0;
  for (size_t i = begin; i < end; ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

std::string config_error(const RunConfig& c) {
  try {
    validate(c);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("BatchNorm forward is the batch normalisation, backward matches finite differences",
          "[batchnorm]") {
  const int rows = 5, cols = 3;
  // Columns with a large mean and different spreads: the two-pass variance must hold up.
  auto x = randn(rows * cols, 1, 2.0, 3.0), w = randn(cols, 2), b = randn(cols, 3),
       r = randn(rows * cols, 4);
  const kernels::BatchNormParams p;
  std::vector<double> y(rows * cols), xhat(rows * cols), invstd(cols);
  kernels::batchnorm_forward<double>(y.data(), xhat.data(), invstd.data(), x.data(), w.data(),
                                     b.data(), nullptr, nullptr, rows, cols, p);
  for (int c = 0; c < cols; ++c) {
    double mean = 0, var = 0;
    for (int i = 0; i < rows; ++i) mean += x[i * cols + c] / rows;
    for (int i = 0; i < rows; ++i)
      var += (x[i * cols + c] - mean) * (x[i * cols + c] - mean) / rows;
    REQUIRE(invstd[c] == Approx(1 / std::sqrt(var + 1e-5)).epsilon(1e-12));
    for (int i = 0; i < rows; ++i) {
      const double expect = (x[i * cols + c] - mean) / std::sqrt(var + 1e-5);
      REQUIRE(xhat[i * cols + c] == Approx(expect).epsilon(1e-12));
      REQUIRE(y[i * cols + c] == Approx(w[c] * expect + b[c]).epsilon(1e-12));
    }
  }

  // Loss = Σ r ⊙ bn(x), so dL/dy = r; the batch statistics depend on x, which the
  // finite differences see (each perturbed x moves the mean and variance too).
  auto loss = [&] {
    std::vector<double> yy(rows * cols), xh(rows * cols), is(cols);
    kernels::batchnorm_forward<double>(yy.data(), xh.data(), is.data(), x.data(), w.data(),
                                       b.data(), nullptr, nullptr, rows, cols, p);
    double s = 0;
    for (size_t i = 0; i < yy.size(); ++i) s += r[i] * yy[i];
    return s;
  };
  std::vector<double> dx(rows * cols), dw(cols, 0.0), db(cols, 0.0);
  kernels::batchnorm_backward<double>(dx.data(), dw.data(), db.data(), r.data(), xhat.data(),
                                      invstd.data(), w.data(), rows, cols);
  require_close(dx, numeric_grad(x, loss), 1e-6);
  require_close(dw, numeric_grad(w, loss), 1e-6);
  require_close(db, numeric_grad(b, loss), 1e-6);

  // Parameter gradients accumulate (+=); the input gradient may be computed in place.
  std::vector<double> dy(r), dw2(dw), db2(db);
  kernels::batchnorm_backward<double>(dy.data(), dw2.data(), db2.data(), dy.data(), xhat.data(),
                                      invstd.data(), w.data(), rows, cols);
  REQUIRE(dy == dx);
  for (int c = 0; c < cols; ++c) {
    REQUIRE(dw2[c] == Approx(2 * dw[c]));
    REQUIRE(db2[c] == Approx(2 * db[c]));
  }
  // And the forward in place (out aliasing in), as the layer runs it.
  std::vector<double> inplace(x), xh2(rows * cols), is2(cols);
  kernels::batchnorm_forward<double>(inplace.data(), xh2.data(), is2.data(), inplace.data(),
                                     w.data(), b.data(), nullptr, nullptr, rows, cols, p);
  REQUIRE(inplace == y);
}

TEST_CASE("BatchNorm running statistics follow PyTorch's rule (momentum 0.1, unbiased variance)",
          "[batchnorm]") {
  const int rows = 4, cols = 2;
  const std::vector<float> x = {1, 10, 2, 20, 4, 30, 7, 60};  // column 0: 1,2,4,7; column 1: 10..60
  const std::vector<float> w = {1, 1}, b = {0, 0};
  std::vector<float> rm = {0.5f, -1.0f}, rv = {2.0f, 1.0f}, y(rows * cols), xhat(rows * cols),
                     invstd(cols);
  kernels::batchnorm_forward<float>(y.data(), xhat.data(), invstd.data(), x.data(), w.data(),
                                    b.data(), rm.data(), rv.data(), rows, cols, {});
  // Column 0: mean 3.5, Σ(x−mean)² = 6.25 + 2.25 + 0.25 + 12.25 = 21: biased 5.25, unbiased 7.
  REQUIRE(rm[0] == Approx(0.9 * 0.5 + 0.1 * 3.5).epsilon(1e-7));
  REQUIRE(rv[0] == Approx(0.9 * 2.0 + 0.1 * 7.0).epsilon(1e-7));
  REQUIRE(invstd[0] == Approx(1 / std::sqrt(5.25 + 1e-5)).epsilon(1e-6));
  // Column 1: mean 30, Σ(x−mean)² = 400 + 100 + 0 + 900 = 1400: biased 350, unbiased 466.67.
  REQUIRE(rm[1] == Approx(0.9 * -1.0 + 0.1 * 30.0).epsilon(1e-7));
  REQUIRE(rv[1] == Approx(0.9 * 1.0 + 0.1 * 1400.0 / 3).epsilon(1e-7));

  // Without running buffers (a recomputed forward) the outputs are the same.
  std::vector<float> y2(rows * cols), xhat2(rows * cols), invstd2(cols);
  kernels::batchnorm_forward<float>(y2.data(), xhat2.data(), invstd2.data(), x.data(), w.data(),
                                    b.data(), nullptr, nullptr, rows, cols, {});
  REQUIRE(y2 == y);
  REQUIRE(invstd2 == invstd);
}

TEST_CASE("the model spec +bn: parsing, layout, init", "[batchnorm]") {
  const ModelSpec s = ModelSpec::parse("mlp:3x8+bn");
  REQUIRE((s.layers == 3 && s.dim == 8 && s.batchnorm));
  REQUIRE(s.str() == "mlp:3x8+bn");
  REQUIRE_FALSE(ModelSpec::parse("mlp:3x8").batchnorm);

  auto error = [](const std::string& spec) {
    try {
      ModelSpec::parse(spec);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  REQUIRE(error("mlp:8x256+ln") ==
          "model 'mlp:8x256+ln' has unknown suffix '+ln' (valid: mlp:8x256, or mlp:8x256+bn with "
          "BatchNorm1d after each hidden Linear)");
  REQUIRE(error("mlp:8x256+bn+bn").find("unknown suffix '+bn+bn'") != std::string::npos);
  REQUIRE(error("mlp:8x256bn").find("mlp:LxD+bn") != std::string::npos);
  REQUIRE(error("mlp:1x8+bn").find("no hidden layer for BatchNorm1d") != std::string::npos);
  for (const char* bad : {"mlp:8x256+ln", "mlp:8x256bn", "mlp:1x8+bn", "mlp:0x8+bn"})
    REQUIRE(error(bad).find('\n') == std::string::npos);

  // BatchNorm on the hidden layers only: the output Linear stays plain.
  const ModelLayout bn(s), plain(ModelSpec::parse("mlp:3x8"));
  REQUIRE((bn.has_bn(0) && bn.has_bn(1) && !bn.has_bn(2)));
  REQUIRE_FALSE(plain.has_bn(0));
  REQUIRE(bn.params().size() == 2 + 4 + 4 - 2 + 2);  // 2 BN layers of 4, the last of 2
  REQUIRE(bn.total() == plain.total() + 2 * 2 * 8);
  REQUIRE(bn.state_total() == bn.total() + 2 * (8 + 8 + 1));
  REQUIRE(plain.state_total() == plain.total());
  // Parameters of each layer contiguous, then the buffers.
  size_t next = 0;
  for (const ParamInfo& p : bn.params()) {
    REQUIRE(p.offset == next);
    next += p.numel;
  }
  REQUIRE(next == bn.total());
  for (const ParamInfo& p : bn.buffers()) {
    REQUIRE(p.offset == next);
    next += p.numel;
  }
  REQUIRE(next == bn.state_total());
  REQUIRE(bn.layer_begin(3) == bn.total());
  REQUIRE(bn.buffer_begin(2) == bn.buffer_begin(3));  // the last layer has no buffers

  // Init: the Linear weights of the same seed are the plain model's; BN weight 1,
  // bias 0, running_mean 0, running_var 1, num_batches_tracked 0.
  const auto a = init_params(bn, 7), p = init_params(plain, 7);
  REQUIRE(a.size() == bn.state_total());
  for (int l = 0; l < 3; ++l)
    for (size_t i = 0; i < bn.weight(l).numel; ++i)
      REQUIRE(a[bn.weight(l).offset + i] == p[plain.weight(l).offset + i]);
  for (int l = 0; l < 2; ++l)
    for (size_t i = 0; i < 8; ++i) {
      REQUIRE(a[bn.bn_weight(l).offset + i] == 1.0f);
      REQUIRE(a[bn.bn_bias(l).offset + i] == 0.0f);
      REQUIRE(a[bn.running_mean(l).offset + i] == 0.0f);
      REQUIRE(a[bn.running_var(l).offset + i] == 1.0f);
    }
  REQUIRE(a[bn.num_batches_tracked(0).offset] == 0.0f);
}

TEST_CASE("LayerStack with BatchNorm: gradients match the same network in double", "[batchnorm]") {
  const ModelLayout layout(ModelSpec::parse("mlp:3x8+bn"));
  auto init = init_params(layout, 3);
  // Not the init's 1 and 0: the gradient must go through BatchNorm's weight and bias.
  for (int l = 0; l < 2; ++l)
    for (int i = 0; i < 8; ++i) {
      init[layout.bn_weight(l).offset + i] = 0.5f + 0.1f * i;
      init[layout.bn_bias(l).offset + i] = 0.05f * (i - 4);
    }
  auto backend = make_cpu_backend();
  Allocator alloc(*backend, nullptr);
  LayerStack stack(layout, 0, 3, alloc, nullptr, FlatParams(init));
  const int rows = 6, d = 8;
  auto xd = randn(rows * d, 20), td = randn(rows * d, 21);
  std::vector<float> x(xd.begin(), xd.end()), t(td.begin(), td.end()), dpred(rows * d);
  const auto* pred = static_cast<const float*>(stack.forward(x.data(), rows));
  kernels::mse_forward_backward(dpred.data(), pred, t.data(), dpred.size(), dpred.size());
  stack.backward(dpred.data(), -1, false);

  // Reference in double: numeric gradient of Linear → BatchNorm1d → GELU, in double.
  std::vector<double> p(init.begin(), init.begin() + layout.total());
  auto loss = [&] {
    std::vector<double> a(xd), pre(rows * d), out(rows * d), xhat(rows * d), invstd(d);
    for (int l = 0; l < 3; ++l) {
      kernels::linear_forward(pre.data(), a.data(), p.data() + layout.weight(l).offset,
                              p.data() + layout.bias(l).offset, rows, d, d);
      if (layout.has_bn(l))
        kernels::batchnorm_forward<double>(pre.data(), xhat.data(), invstd.data(), pre.data(),
                                           p.data() + layout.bn_weight(l).offset,
                                           p.data() + layout.bn_bias(l).offset, nullptr, nullptr,
                                           rows, d, {});
      if (layout.has_gelu(l))
        kernels::gelu_forward(out.data(), pre.data(), out.size());
      else
        out = pre;
      a = out;
    }
    return kernels::mse_forward_backward<double>(nullptr, a.data(), td.data(), a.size(), a.size());
  };
  const auto numeric = numeric_grad(p, loss);
  const std::vector<const float*> grads = stack.grad_ptrs();
  REQUIRE(grads.size() == layout.params().size());
  for (size_t k = 0; k < layout.params().size(); ++k) {
    const ParamInfo& info = layout.params()[k];
    for (size_t i = 0; i < info.numel; ++i) {
      INFO(info.name << "[" << i << "]");
      REQUIRE(grads[k][i] == Approx(numeric[info.offset + i]).margin(1e-5).epsilon(2e-3));
    }
  }
  REQUIRE(alloc.stats().device.current[static_cast<int>(MemCategory::activations)] == 0);

  // One forward counted once in the buffers; a recompute does not count again.
  std::vector<float> state(layout.state_total());
  stack.copy_params_to(state);
  REQUIRE(state[layout.num_batches_tracked(0).offset] == 1.0f);
  REQUIRE(state[layout.num_batches_tracked(1).offset] == 1.0f);
  Tensor out = stack.forward_keep_input(x.data(), rows, 0);
  stack.recompute(0);
  stack.backward(dpred.data(), 0, false);
  stack.copy_params_to(state);
  REQUIRE(state[layout.num_batches_tracked(0).offset] == 2.0f);
}

TEST_CASE("BatchNorm checkpoints have PyTorch's state_dict names, shapes and dtypes",
          "[batchnorm]") {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("shardlab_test_bn_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "bn.safetensors").string();
  const ModelLayout layout(ModelSpec::parse("mlp:3x8+bn"));
  std::vector<float> state = init_params(layout, 1);
  state[layout.num_batches_tracked(1).offset] = 42;
  save_params(path, layout, state);

  // The header as any safetensors reader sees it.
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, len));
  struct Expect {
    std::string name, dtype;
    std::vector<int64_t> shape;
  };
  std::vector<Expect> expect;
  for (int l = 0; l < 3; ++l) {
    const std::string p = "layers." + std::to_string(l);
    expect.push_back({p + ".weight", "F32", {8, 8}});
    expect.push_back({p + ".bias", "F32", {8}});
    if (l == 2) continue;  // the output Linear has no BatchNorm
    expect.push_back({p + ".bn.weight", "F32", {8}});
    expect.push_back({p + ".bn.bias", "F32", {8}});
    expect.push_back({p + ".bn.running_mean", "F32", {8}});
    expect.push_back({p + ".bn.running_var", "F32", {8}});
    expect.push_back({p + ".bn.num_batches_tracked", "I64", {}});
  }
  REQUIRE(header.size() == expect.size() + 1);  // + __metadata__
  REQUIRE(header["__metadata__"]["model"] == "mlp:3x8+bn");
  for (const Expect& e : expect) {
    INFO(e.name);
    REQUIRE(header.contains(e.name));
    REQUIRE(header[e.name]["dtype"] == e.dtype);
    REQUIRE(header[e.name]["shape"].get<std::vector<int64_t>>() == e.shape);
  }
  const auto nbt = header["layers.1.bn.num_batches_tracked"]["data_offsets"];
  int64_t stored = 0;
  std::memcpy(&stored, bytes.data() + 8 + len + nbt[0].get<size_t>(), 8);
  REQUIRE(stored == 42);

  // Round trip, and a checkpoint without the buffers is refused by name (strict loading).
  REQUIRE(load_params(path, layout) == state);
  const ModelLayout plain(ModelSpec::parse("mlp:3x8"));
  const std::string plain_path = (dir / "plain.safetensors").string();
  save_params(plain_path, plain, init_params(plain, 1));
  try {
    load_params(plain_path, layout);
    FAIL("a checkpoint without BatchNorm loaded into " << layout.spec().str());
  } catch (const ConfigError& e) {
    REQUIRE(std::string(e.what()).find("has no tensor 'layers.0.bn.weight'") != std::string::npos);
  }
  try {
    load_params(path, plain);
    FAIL("a BatchNorm checkpoint loaded into mlp:3x8");
  } catch (const ConfigError& e) {
    REQUIRE(std::string(e.what()).find("that model mlp:3x8 does not have") != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("gpipe with BatchNorm: M = 1 is single, M > 1 is not (statistics per micro-batch)",
          "[batchnorm]") {
  const RunResult ref = run_training(bn_config("single", 1, 1));
  const ModelLayout layout(ModelSpec::parse(ref.cfg.model));
  const auto& l = ref.losses;
  REQUIRE(l[9] + l[10] + l[11] < 0.9 * (l[0] + l[1] + l[2]));  // it trains
  REQUIRE(ref.final_params.size() == layout.state_total());
  REQUIRE(ref.final_params[layout.num_batches_tracked(0).offset] == 12.0f);

  // One micro-batch: each BatchNorm sees the whole batch, as in single.
  for (const char* strategy : {"gpipe", "1f1b", "naive-mp"}) {
    const RunResult r = run_training(bn_config(strategy, 2, 1));
    INFO(strategy << " M=1");
    REQUIRE(max_rel_diff(r.final_params, ref.final_params) < 2e-5);  // weights and buffers
    for (int s = 0; s < ref.cfg.steps; ++s)
      REQUIRE(r.losses[s] == Approx(ref.losses[s]).epsilon(1e-4));
  }

  // Four micro-batches of 8 rows: each BatchNorm normalises by its micro-batch's
  // statistics, so the gradients are not the full batch's and the weights part.
  const RunResult m4 = run_training(bn_config("gpipe", 2, 4));
  const double dw = max_abs_diff(m4.final_params, ref.final_params, 0, layout.total());
  INFO("max |w(gpipe M=4) - w(single)| = " << dw);
  REQUIRE(dw > 1e-3);  // fp32 reduction-order noise is ~1e-6 here
  // The running statistics were updated once per micro-batch.
  REQUIRE(m4.final_params[layout.num_batches_tracked(0).offset] == 12.0f * 4);
  REQUIRE(max_abs_diff(m4.final_params, ref.final_params, layout.running_mean(0).offset,
                       layout.running_var(0).offset + 32) > 1e-3);
  // Without BatchNorm the same run matches single: the difference is BatchNorm's.
  RunConfig plain_single = bn_config("single", 1, 1), plain_gpipe = bn_config("gpipe", 2, 4);
  plain_single.model = plain_gpipe.model = "mlp:4x32";
  REQUIRE(max_rel_diff(run_training(plain_gpipe).final_params,
                       run_training(plain_single).final_params) < 2e-5);

  // The schedules and recomputation change when, not what: bit for bit the same,
  // so a recomputed forward did not update the running statistics a second time.
  RunConfig rc = bn_config("gpipe", 2, 4);
  rc.recompute = true;
  REQUIRE(run_training(rc).final_params == m4.final_params);
  REQUIRE(run_training(bn_config("1f1b", 2, 4)).final_params == m4.final_params);
}

TEST_CASE("BatchNorm pipelines: measured activations as predicted, guarded device exact",
          "[batchnorm]") {
  for (bool recompute : {false, true}) {
    RunConfig c = bn_config("gpipe", 2, 4);
    c.steps = 2;
    c.recompute = recompute;
    const RunResult r = run_training(c);
    for (int rank = 0; rank < 2; ++rank) {
      INFO("rank " << rank << (recompute ? " --recompute" : ""));
      REQUIRE(r.ranks[rank].memory.device.peak[static_cast<int>(MemCategory::activations)] ==
              predicted_peak_activation_bytes(c, rank));
    }
    if (recompute) continue;
    // Stage 0 holds layers 0-1 (both with BatchNorm): input, 2 outputs, 2 pre-GELU,
    // 2 xhat of 8 × 32 floats, and 2 invstd of 32 floats, per micro-batch.
    REQUIRE(micro_batch_activation_bytes(c, 0) == 8 * 32 * 4 * 7 + 2 * 32 * 4);
    // Every BatchNorm call went through the device backend: cpu-guarded agrees exactly.
    c.device = "cpu-guarded";
    REQUIRE(run_training(c).final_params == r.final_params);
  }
}

// single first, then the pipelines in registration order (the message's order).
std::string strategies_supporting_bn() {
  std::string out = "single";
  for (const StrategyInfo& i : all_strategies())
    if (i.family == StrategyFamily::pipeline) out += ", " + i.name;
  return out;
}

TEST_CASE("strategies without BatchNorm statistics refuse +bn in one line", "[batchnorm]") {
  for (const char* s : {"ddp", "dp", "zero1", "zero2", "zero3", "fsdp"}) {
    RunConfig c = bn_config(s, 2, 1);
    c.model = "mlp:8x256+bn";
    REQUIRE(config_error(c) == "--model mlp:8x256+bn: " + std::string(s) +
                                   " does not support BatchNorm yet (supported by: " +
                                   strategies_supporting_bn() + ")");
  }
  RunConfig c = bn_config("single", 1, 1);
  c.precision = "bf16";
  REQUIRE(config_error(c) ==
          "--model mlp:4x32+bn: --precision bf16 does not support BatchNorm yet (valid: fp32)");
  c = bn_config("single", 1, 1);
  c.batch = 1;
  REQUIRE(config_error(c).find("--batch 1 gives BatchNorm1d one row") != std::string::npos);
  c = bn_config("gpipe", 2, 8);
  c.batch = 8;
  REQUIRE(config_error(c) ==
          "--model mlp:4x32+bn: --batch 8 in --micro-batches 8 gives BatchNorm1d 1 row per "
          "micro-batch (valid: 2 or more rows per micro-batch, e.g. --micro-batches 4 or fewer)");
  for (const char* s : {"single", "naive-mp", "gpipe", "1f1b"}) {
    RunConfig ok = bn_config(s, std::string(s) == "single" ? 1 : 2, 1);
    REQUIRE(config_error(ok) == "(accepted)");
  }

  // The command line: exit 2 and one line; --help documents the form.
  const auto r = run_cli("run --model mlp:8x256+bn --strategy zero3 --world 2 --steps 1");
  REQUIRE(r.code == 2);
  REQUIRE(r.out ==
          "error: --model mlp:8x256+bn: zero3 does not support BatchNorm yet (supported by: " +
              strategies_supporting_bn() + ")\n");
  for (const char* s : {"single", "naive-mp", "gpipe", "1f1b"})
    REQUIRE(strategies_supporting_bn().find(s) != std::string::npos);
  const auto h = run_cli("run --help");
  REQUIRE(h.out.find("mlp:LxD+bn") != std::string::npos);
}

TEST_CASE("BatchNorm trains as PyTorch's nn.BatchNorm1d, per micro-batch too", "[batchnorm]") {
  // tests/data/make_batchnorm_reference.py: PyTorch 1.13 trains the README's module
  // (mlp:3x8+bn) for 3 SGD steps with M = 1 and M = 3 module calls per batch.
  const std::string path = std::string(SHARDLAB_TEST_DATA) + "/batchnorm_reference.safetensors";
  std::map<std::string, NamedTensor> ref;
  for (NamedTensor& t : load_safetensors(path)) ref[t.name] = std::move(t);
  const ModelLayout layout(ModelSpec::parse("mlp:3x8+bn"));
  auto state_from = [&](const std::string& prefix) {
    std::vector<float> state(layout.state_total());
    for (const auto* list : {&layout.params(), &layout.buffers()})
      for (const ParamInfo& p : *list) {
        INFO(prefix + p.name);
        const NamedTensor& t = ref.at(prefix + p.name);
        REQUIRE(t.shape == p.shape);
        REQUIRE(t.int64 == p.int64);
        std::copy(t.data.begin(), t.data.end(), state.begin() + p.offset);
      }
    return state;
  };
  const std::vector<float> init = state_from("init.");
  const NamedTensor& x = ref.at("x");
  const NamedTensor& y = ref.at("y");
  const int steps = static_cast<int>(x.shape[0]), B = static_cast<int>(x.shape[1]), D = 8;

  for (int M : {1, 3}) {
    INFO("M = " << M);
    auto backend = make_cpu_backend();
    Allocator alloc(*backend, nullptr);
    LayerStack stack(layout, 0, 3, alloc, nullptr, FlatParams(init));
    OptimizerConfig sgd;
    sgd.kind = OptimizerKind::sgd;
    sgd.lr = 0.1f;
    Optimizer opt(sgd, alloc, stack.ranges());
    const int rows = B / M;
    std::vector<float> losses;
    for (int s = 0; s < steps; ++s) {
      stack.zero_grads();
      double loss = 0;
      for (int mb = 0; mb < M; ++mb) {
        const size_t off = (static_cast<size_t>(s) * B + static_cast<size_t>(mb) * rows) * D;
        const auto* pred = static_cast<const float*>(stack.forward(x.data.data() + off, rows, mb));
        std::vector<float> dpred(static_cast<size_t>(rows) * D);
        loss += kernels::mse_forward_backward(dpred.data(), pred, y.data.data() + off, dpred.size(),
                                              static_cast<size_t>(B) * D);
        stack.backward(dpred.data(), mb, false);
      }
      opt.step(stack.param_ptrs(), stack.grad_ptrs());
      losses.push_back(static_cast<float>(loss));
    }
    std::vector<float> state(layout.state_total());
    stack.copy_params_to(state);
    const std::vector<float> expect = state_from("final_m" + std::to_string(M) + ".");
    REQUIRE(max_rel_diff(state, expect) < 1e-5);
    REQUIRE(state[layout.num_batches_tracked(0).offset] == static_cast<float>(steps * M));
    const NamedTensor& ref_losses = ref.at("losses_m" + std::to_string(M));
    for (int s = 0; s < steps; ++s) REQUIRE(losses[s] == Approx(ref_losses.data[s]).epsilon(1e-5));
  }
  // The two references differ: the per-micro-batch statistics are visible in PyTorch too.
  REQUIRE(max_rel_diff(state_from("final_m1."), state_from("final_m3.")) > 1e-3);
}
