// `shardlab estimate` returns exactly the ZeRO paper's formulas and rejects bad
// input with one clear line; `shardlab run` prints predicted beside measured.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/parallel/model_state.h"

using namespace shardlab;
using shardlab::test::CliResult;
using shardlab::test::max_rel_diff;
using shardlab::test::run_cli;

namespace {

nlohmann::json estimate(const std::string& args) {
  const CliResult r = run_cli("estimate " + args + " --json");
  INFO("shardlab estimate " << args << "\n" << r.out);
  REQUIRE(r.code == 0);
  return nlohmann::json::parse(r.out);
}

double total(const nlohmann::json& j) {
  return j["model_states_per_rank"]["total"].get<double>();
}

void expect_bad(const std::string& args, const std::string& message) {
  test::expect_refused("estimate " + args, message);
}

}  // namespace

TEST_CASE("estimate reproduces the ZeRO paper's example (7.5B params, 64 GPUs)", "[estimate]") {
  // Figure 1 of the paper: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per GPU.
  const std::string base = "--params 7.5e9 --world 64 --precision bf16 --strategy ";
  const double psi = 7.5e9;
  REQUIRE(total(estimate(base + "ddp")) == 16 * psi);
  REQUIRE(total(estimate(base + "zero1")) == 4 * psi + 12 * psi / 64);
  REQUIRE(total(estimate(base + "zero2")) == 2 * psi + 14 * psi / 64);
  REQUIRE(total(estimate(base + "zero3")) == 16 * psi / 64);
  const auto j = estimate(base + "zero1");
  REQUIRE(j["model_states_per_rank"]["total_gb"].get<double>() == Approx(31.40625));
  REQUIRE(j["model_states_per_rank"]["formula"] == "4Ψ + 12Ψ/N");
  REQUIRE(j["model_states_per_rank"]["optimizer_state"].get<double>() == 12 * psi / 64);
  // Traffic: 2Ψ for DDP and stages 1-2, 3Ψ for stage 3, 2 bytes per element in mixed precision.
  REQUIRE(estimate(base + "ddp")["comm_per_step"]["volume_bytes"].get<double>() == 2 * psi * 2);
  REQUIRE(j["comm_per_step"]["volume_bytes"].get<double>() == 2 * psi * 2);
  const auto z3 = estimate(base + "zero3")["comm_per_step"];
  REQUIRE(z3["volume_bytes"].get<double>() == 3 * psi * 2);
  REQUIRE(z3["formula"] == "3Ψ");
  REQUIRE(z3["sent_bytes"].get<double>() == 3 * psi * 2 * 63 / 64);
}

TEST_CASE("estimate: fp32, SGD, dp and fsdp variants", "[estimate]") {
  const double psi = 1000000;
  const std::string base = "--params 1000000 --world 4 --strategy ";
  // fp32 AdamW: 4 + 4 + 8 bytes per parameter.
  REQUIRE(total(estimate(base + "ddp")) == 16 * psi);
  REQUIRE(total(estimate(base + "zero1")) == 8 * psi + 8 * psi / 4);
  REQUIRE(total(estimate(base + "zero2")) == 4 * psi + 12 * psi / 4);
  REQUIRE(total(estimate(base + "zero3")) == 16 * psi / 4);
  REQUIRE(total(estimate(base + "fsdp")) == 16 * psi / 4);
  REQUIRE(estimate(base + "zero2")["comm_per_step"]["volume_bytes"].get<double>() == 2 * psi * 4);
  // SGD keeps no state in fp32; in mixed precision its fp32 master copy (K = 4).
  REQUIRE(total(estimate(base + "zero1 --optimizer sgd")) == 8 * psi);
  REQUIRE(total(estimate(base + "ddp --optimizer sgd --precision fp16")) == 8 * psi);
  // dp: device 0 holds everything, the replicas params and grads; device 0 sends (N−1)Ψ.
  const auto dp = estimate(base + "dp");
  REQUIRE(total(dp) == 16 * psi);
  REQUIRE(dp["replica_model_states"]["total"].get<double>() == 8 * psi);
  REQUIRE(dp["comm_per_step"]["sent_bytes"].get<double>() == 3 * psi * 4);
  REQUIRE(dp["replica_comm_per_step"]["sent_bytes"].get<double>() == psi * 4);
  // fsdp: --no-reshard drops traffic to 2Ψ; --offload moves the states to the host.
  REQUIRE(estimate(base + "fsdp --no-reshard")["comm_per_step"]["volume_bytes"].get<double>() ==
          2 * psi * 4);
  REQUIRE(estimate(base + "fsdp --offload")["model_states_per_rank"]["pool"] == "host");
  // --model takes Ψ from a model: mlp:8x256 has 8·(256² + 256) parameters.
  REQUIRE(estimate("--model mlp:8x256 --world 4 --strategy ddp")["params"].get<double>() ==
          8 * (256 * 256 + 256));
  // The library agrees with the binary.
  ModelStateInput in{psi, 4, "zero2", "fp32", OptimizerKind::adamw};
  REQUIRE(predict_model_state(in, 0).total() == 7 * psi);
}

TEST_CASE("estimate prints bytes and GB", "[estimate]") {
  const CliResult r =
      run_cli("estimate --params 7.5e9 --world 64 --strategy zero3 --precision bf16");
  INFO(r.out);
  REQUIRE(r.code == 0);
  REQUIRE(r.out.find("16Ψ/N = 1875000000 bytes (1.875 GB)") != std::string::npos);
  REQUIRE(r.out.find("3Ψ × 2 bytes = 45000000000 bytes (45.000 GB)") != std::string::npos);
  const CliResult help = run_cli("--help");
  REQUIRE(help.out.find("estimate") != std::string::npos);
  REQUIRE(run_cli("estimate --help").out.find("usage: shardlab estimate") != std::string::npos);
}

TEST_CASE("estimate: bad arguments give one clear line and exit code 2", "[estimate]") {
  const std::string ok = "--world 4 --strategy zero2";
  expect_bad(ok, "--params is required");
  expect_bad("--params 1e6 --strategy zero2", "--world is required");
  expect_bad("--params 1e6 --world 4", "--strategy is required");
  expect_bad("--params -5 " + ok, "--params '-5' is invalid");
  expect_bad("--params lots " + ok, "--params 'lots' is invalid");
  expect_bad("--params 1.5 " + ok, "--params '1.5' is invalid");
  expect_bad("--params 1e6 --world 0 --strategy zero2", "--world 0 is invalid");
  expect_bad("--params 1e6 --world four --strategy zero2", "--world 'four' is not an integer");
  expect_bad("--params 1e6 --world 4 --strategy gpipe",
             "--params does not apply to a mesh or a pipeline strategy");
  expect_bad("--params 1e6 " + ok + " --precision fp8", "--precision 'fp8' is invalid");
  expect_bad("--params 1e6 " + ok + " --optimizer adam", "unknown optimizer 'adam'");
  expect_bad("--params 1e6 " + ok + " --frobnicate", "unknown option '--frobnicate'");
  expect_bad("--params 1e6 " + ok + " --no-reshard", "--no-reshard applies to strategy fsdp");
  expect_bad("--params 1e6 --model mlp:2x8 " + ok, "either --params or --model");
  expect_bad("--model mlp:eight " + ok, "unknown model 'mlp:eight'");
  expect_bad("--params 1e6 --world 2 --strategy single",
             "--world 2 is invalid for strategy single");
}

TEST_CASE("run summary shows measured model states and traffic beside the prediction",
          "[estimate]") {
  const std::string common = "run --model mlp:4x32 --world 2 --batch 8 --steps 2 ";
  const CliResult text = run_cli(common + "--strategy zero2");
  INFO(text.out);
  REQUIRE(text.code == 0);
  REQUIRE(text.out.find("model states per rank: measured peak vs predicted") != std::string::npos);
  REQUIRE(text.out.find("4Ψ + 12Ψ/N") != std::string::npos);
  REQUIRE(text.out.find("bytes sent per step: measured vs predicted") != std::string::npos);
  REQUIRE(text.out.find("why they differ:") != std::string::npos);

  const double psi = 4 * (32 * 32 + 32);
  for (const char* s : {"ddp", "dp", "zero1", "zero3", "fsdp"}) {
    const CliResult r = run_cli(common + "--json --strategy " + s);
    INFO(s << "\n" << r.out);
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out)["model_state"];
    REQUIRE(j["ranks"].size() == 2);
    const auto& r1 = j["ranks"][1];
    const double measured = r1["measured"]["total"].get<double>();
    const double predicted = r1["predicted"]["total"].get<double>();
    // 32·33 = 1056 values per layer: world 2 divides it, no padding.
    REQUIRE(measured == Approx(predicted).epsilon(1e-9));
    if (std::string(s) == "dp") REQUIRE(predicted == 8 * psi);  // a replica: params + grads
    if (std::string(s) == "zero3") REQUIRE(predicted == 16 * psi / 2);
    REQUIRE(r1["bytes_sent_per_step"]["measured"].get<double>() > 0);
    REQUIRE(r1["bytes_sent_per_step"]["predicted"].get<double>() > 0);
    REQUIRE(!j["why_they_differ"].get<std::string>().empty());
  }
}

TEST_CASE("estimate says why it has no run peak for a configuration a run refuses", "[estimate]") {
  // The model-state accounting answers for any world; the peak of this
  // implementation needs a configuration a run accepts, and its absence is
  // explained, not silent.
  const CliResult r = run_cli("estimate --model mlp:4x64 --world 3 --strategy ddp");
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("16Ψ") || Catch::Contains("model states per rank"));
  CHECK_THAT(r.out, Catch::Contains("not predicted, as a run would refuse this configuration: "
                                    "--batch 64 is not divisible by --world 3"));
  const CliResult ok = run_cli("estimate --model mlp:4x64 --world 2 --strategy ddp");
  CHECK_THAT(ok.out, Catch::Contains("the strategy's own code run on meta devices"));
  CHECK_THAT(ok.out, !Catch::Contains("not predicted"));
}

TEST_CASE("estimate lays out GPT-3 175B under ZeRO-3 on 1024 ranks in seconds", "[estimate]") {
  // Nothing is allocated: the real zero3 code runs on meta devices for every
  // rank. Its model states per rank are the ZeRO paper's 16Ψ/N, plus the
  // padding of each layer's flat group to 1024 equal shards, which it reports.
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = run_cli(
      "estimate --model gpt:96x12288x96 --seq 2048 --world 1024 --strategy zero3 --batch 1024 "
      "--precision bf16 --json");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.out);
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const double psi = j["params"].get<double>();
  // 175B less most of the embeddings: a character vocabulary instead of GPT-2's 50257 tokens.
  CHECK(psi > 173e9);
  CHECK(psi < 176e9);
  REQUIRE(j["run_peak_bytes_per_rank"].size() == 1024);
  REQUIRE(!j["run_peak_groups"].empty());
  for (const auto& g : j["run_peak_groups"]) {
    const double states = g["model_states_bytes"].get<double>();
    const double over = g["model_states_over_formula_bytes"].get<double>();
    INFO(g.dump());
    CHECK(std::abs(states - over - 16 * psi / 1024) < 1.0);
    CHECK(over >= 0);
    // At most one padding value per layer group and state (2 + 2 + 12 bytes).
    CHECK(over <= 98 * 16 * 1024);
    // The figures lessons/13-predict-memory.toml quotes (GB = 10^9 bytes, as printed).
    const auto gb = [&](const char* category) {
      return std::round(g["category_peak_bytes"][category].get<double>() / 1e8) / 10;
    };
    CHECK(std::round(g["peak_bytes"].get<double>() / 1e8) / 10 == 178.4);
    CHECK(gb("activations") == 154.7);
    CHECK(gb("comm_buffers") == 18.1);
    CHECK(gb("temporary") == 6.0);
    CHECK(std::round(states / 1e6) / 1000 == 2.719);
  }
  CHECK(seconds < 10);
}

TEST_CASE("estimate predicts worlds past what a run starts, and says where runs stop",
          "[estimate]") {
  const CliResult r = run_cli("estimate --model mlp:4x64 --world 128 --strategy zero3 --batch 128");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("every rank: peak"));
  const CliResult run = run_cli("run --model mlp:4x64 --world 128 --strategy zero3 --batch 128");
  CHECK(run.code == 2);
  CHECK_THAT(run.out, Catch::Contains("--world 128 is invalid (valid: 1 to 64)"));
}

TEST_CASE("estimate --ops writes each rank's operation list from the meta run", "[estimate]") {
  const test::TempDir dir;
  const std::string path = (dir.path / "ops.jsonl").string();
  const CliResult r =
      run_cli("estimate --model mlp:4x64 --world 2 --strategy ddp --batch 24 --ops " + path);
  INFO(r.out);
  REQUIRE(r.code == 0);
  std::ifstream in(path);
  std::string line;
  REQUIRE(std::getline(in, line));
  const nlohmann::json head = nlohmann::json::parse(line);
  CHECK(head["strategy"] == "ddp");
  CHECK(head["world"] == 2);
  int ranks = 0;
  while (std::getline(in, line)) {
    const nlohmann::json rank = nlohmann::json::parse(line);
    CHECK(rank["rank"] == ranks);
    ++ranks;
    // Step 0: 12 rows a rank, each layer's GEMM 2·12·64·64 FLOPs forward; backward
    // two of them (weight and input gradients), one for the first layer.
    const int64_t gemm = 2LL * 12 * 64 * 64;
    int64_t forward = 0, backward = 0, all_reduce_bytes = 0;
    std::set<uint64_t> issued, waited;
    for (const auto& op : rank["ops"]) {
      if (op["step"] != 0) continue;
      if (op.contains("wait")) {
        waited.insert(op["wait"].get<uint64_t>());
        continue;
      }
      const std::string kind = op["op"];
      if (kind == "forward") forward += op["flops"].get<int64_t>();
      if (kind == "backward") backward += op["flops"].get<int64_t>();
      if (kind == "all_reduce") {
        all_reduce_bytes += op["bytes"].get<int64_t>();
        issued.insert(op["id"].get<uint64_t>());
      }
    }
    CHECK(forward == 4 * gemm);
    CHECK(backward == 7 * gemm);
    // DDP all-reduces every gradient once: 4 x (64·64 + 64) floats.
    CHECK(all_reduce_bytes == 4 * (64 * 64 + 64) * 4);
    CHECK(issued == waited);
  }
  CHECK(ranks == 2);

  const CliResult no_model =
      run_cli("estimate --params 1e9 --world 2 --strategy ddp --ops " + path);
  CHECK(no_model.code == 2);
  CHECK_THAT(no_model.out, Catch::Contains("--ops needs --model"));
  const CliResult bad = run_cli("estimate --model mlp:4x64 --world 2 --strategy ddp --ops /tmp");
  CHECK(bad.code == 2);
  CHECK_THAT(bad.out, Catch::Contains("--ops '/tmp'"));
}
