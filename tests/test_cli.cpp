// The `shardlab` binary end to end: every bad input ends in one clear line and
// exit code 2; a good run prints its summary, writes its files and JSON.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/io/safetensors.h"
#include "core/model/checkpoint.h"

using shardlab::test::CliResult;
using shardlab::test::max_rel_diff;
using shardlab::test::run_cli;

namespace {

std::filesystem::path tmpdir() {
  auto d = std::filesystem::temp_directory_path() / "shardlab_cli_test";
  std::filesystem::create_directories(d);
  return d;
}

void expect_bad(const std::string& args, const std::string& message) {
  shardlab::test::expect_refused(args, message);
}

}  // namespace

TEST_CASE("bad input: one line naming the value, exit code 2", "[cli]") {
  const std::string base = "run --model mlp:2x16 --steps 2 --batch 8 ";
  expect_bad(base + "--strategy zero9", "unknown strategy 'zero9' (valid: ");
  expect_bad(base + "--model mlp:eight", "unknown model 'mlp:eight'");
  expect_bad(base + "--model resnet50", "unknown model 'resnet50'");
  expect_bad(base + "--world 0", "--world 0 is invalid");
  expect_bad(base + "--world -3", "--world -3 is invalid");
  expect_bad(base + "--world two", "--world 'two' is not an integer");
  expect_bad("run --model mlp:2x16 --steps 2 --batch 10 --world 4",
             "--batch 10 is not divisible by --world 4");
  expect_bad(base + "--steps 0", "--steps 0 is invalid");
  expect_bad(base + "--steps -5", "--steps -5 is invalid");
  expect_bad(base + "--lr 0", "--lr 0");
  expect_bad(base + "--lr -1e-3", "--lr -0.001");
  expect_bad(base + "--optimizer adam", "unknown optimizer 'adam' (valid: adamw, sgd)");
  expect_bad(base + "--frobnicate 3", "unknown option '--frobnicate'");
  expect_bad(base + "--init-from /nonexistent/w.safetensors", "/nonexistent/w.safetensors");
  expect_bad(base + "--trace /nonexistent-dir/t.json",
             "cannot write --trace '/nonexistent-dir/t.json'");
  expect_bad(base + "--save-final /nonexistent-dir/f.safetensors", "cannot write --save-final");
  expect_bad("frobnicate", "unknown command 'frobnicate'");
  expect_bad("bench disk", "disk");
}

TEST_CASE("bad input: mismatched --init-from says which tensor", "[cli]") {
  const auto dir = tmpdir();
  const std::string other = (dir / "other.safetensors").string();
  // Saved from a different model: shapes differ.
  REQUIRE(
      run_cli("run --strategy single --world 1 --model mlp:2x8 --steps 1 --batch 4 --save-init " +
              other)
          .code == 0);
  expect_bad(
      "run --strategy single --world 1 --model mlp:2x16 --steps 1 --batch 4 --init-from " + other,
      "tensor 'layers.0.weight' has shape [8,8], model mlp:2x16 needs [16,16]");
  // Missing layers.
  expect_bad(
      "run --strategy single --world 1 --model mlp:3x8 --steps 1 --batch 4 --init-from " + other,
      "has no tensor 'layers.2.weight'");
  // Not a safetensors file.
  const std::string junk = (dir / "junk.safetensors").string();
  std::ofstream(junk) << "this is not a checkpoint";
  expect_bad(
      "run --strategy single --world 1 --model mlp:2x8 --steps 1 --batch 4 --init-from " + junk,
      junk);
}

TEST_CASE("run writes trace, checkpoints and data, --init-from reproduces it", "[cli]") {
  const auto dir = tmpdir();
  const std::string init = (dir / "init.safetensors").string(),
                    fin = (dir / "final.safetensors").string(),
                    fin2 = (dir / "final2.safetensors").string(),
                    data = (dir / "data.safetensors").string(),
                    trace = (dir / "trace.json").string();
  const std::string common =
      "run --strategy ddp --world 2 --model mlp:3x16 --steps 4 --batch 8 --seed 5 ";
  const CliResult r = run_cli(common + "--save-init " + init + " --save-final " + fin +
                              " --save-data " + data + " --trace " + trace);
  INFO(r.out);
  REQUIRE(r.code == 0);
  REQUIRE(r.out.find("final loss") != std::string::npos);
  REQUIRE(r.out.find("median step time") != std::string::npos);
  REQUIRE(r.out.find("trace written to " + trace) != std::string::npos);

  const auto x = shardlab::load_safetensors(data);
  REQUIRE(x.size() == 2);
  REQUIRE(x[0].shape == std::vector<int64_t>{4, 8, 16});

  const CliResult again =
      run_cli(common + "--init-from " + init + " --save-final " + fin2 + " --json");
  REQUIRE(again.code == 0);
  const auto a = shardlab::load_safetensors(fin), b = shardlab::load_safetensors(fin2);
  REQUIRE(a.size() == 6);
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i].data == b[i].data);

  const auto j = nlohmann::json::parse(again.out);
  REQUIRE(j["strategy"] == "ddp");
  REQUIRE(j["ranks"].size() == 2);
  REQUIRE(j["ranks"][0]["peak_bytes_by_category"]["params"] == (3 * (16 * 16 + 16)) * 4);
  REQUIRE(j["ranks"][0]["bytes_sent_per_step"].get<double>() > 0);
  REQUIRE(j["losses"].size() == 4);
}

TEST_CASE("help works everywhere (--help)", "[cli]") {
  for (const char* args :
       {"--help", "run --help", "demo --help", "bench --help", "bench comm --help"}) {
    const CliResult r = run_cli(args);
    INFO(args << "\n" << r.out);
    REQUIRE(r.code == 0);
    REQUIRE(r.out.find("usage") != std::string::npos);
  }
}
