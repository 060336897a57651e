// Checkpoints that resume bit for bit: a run stopped after a checkpoint and
// resumed ends with the uninterrupted run's exact weights, for every strategy;
// resumed on another world size or strategy (re-sharded), within fp32 rounding.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/runner.h"
#include "core/train_checkpoint.h"
#include "tests/test_util.h"

using namespace shardlab;
using shardlab::test::CliResult;
using shardlab::test::run_cli;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("shardlab-ckpt-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

RunConfig base(const std::string& strategy, int world) {
  RunConfig cfg;
  cfg.model = "mlp:4x32";
  cfg.strategy = strategy;
  cfg.world = world;
  cfg.batch = 16;
  cfg.steps = 6;
  if (strategy == "gpipe" || strategy == "1f1b") cfg.micro_batches = 4;
  return cfg;
}

// The run stopped after `stop` steps with a checkpoint every 2, then resumed as `resumed`.
RunResult stop_and_resume(const RunConfig& cfg, int stop, const RunConfig& resumed,
                          const fs::path& dir) {
  RunConfig first = cfg;
  first.steps = stop;
  run_training(first, nullptr, {}, nullptr, Checkpointing{2, dir.string(), nullptr});
  const ResumeState r = load_checkpoint(dir.string(), make_layout(resumed));
  REQUIRE(r.steps_done == stop);
  return run_training(resumed, nullptr, {}, nullptr, Checkpointing{0, "", &r});
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST_CASE("resume is bit-identical to the uninterrupted run, every strategy", "[checkpoint]") {
  for (const char* s :
       {"single", "dp", "ddp", "zero1", "zero2", "zero3", "fsdp", "naive-mp", "gpipe", "1f1b"}) {
    const int world = std::string(s) == "single" ? 1 : 2;
    const RunConfig cfg = base(s, world);
    INFO(s);
    const RunResult whole = run_training(cfg);
    const fs::path dir = fresh_dir(s);
    const RunResult resumed = stop_and_resume(cfg, 4, cfg, dir);
    CHECK(resumed.final_params == whole.final_params);  // bit for bit
    CHECK(resumed.losses == whole.losses);              // the first 4 from the manifest
    CHECK(resumed.step_ms.size() == 2);
    fs::remove_all(dir);
  }
}

TEST_CASE("resume: a +bn model's running statistics come back too", "[checkpoint]") {
  // BatchNorm runs on single and the pipelines; its running mean and variance
  // change every step, so a resume without them would drift at once.
  for (const char* s : {"single", "naive-mp", "gpipe", "1f1b"}) {
    RunConfig cfg = base(s, std::string(s) == "single" ? 1 : 2);
    cfg.model = "mlp:4x32+bn";
    INFO(s);
    const RunResult whole = run_training(cfg);
    const fs::path dir = fresh_dir(std::string("bn-") + s);
    const RunResult resumed = stop_and_resume(cfg, 4, cfg, dir);
    CHECK(resumed.final_params == whole.final_params);
    fs::remove_all(dir);
  }
  // gpipe's stages to single: the statistics re-assembled from both stages' files.
  RunConfig cfg = base("gpipe", 2);
  cfg.model = "mlp:4x32+bn";
  cfg.micro_batches = 1;  // one micro-batch: the statistics single would compute
  const RunResult whole = run_training(cfg);
  RunConfig one = base("single", 1);
  one.model = cfg.model;
  const fs::path dir = fresh_dir("bn-to-single");
  CHECK(max_diff(stop_and_resume(cfg, 4, one, dir).final_params, whole.final_params) < 1e-5f);
  fs::remove_all(dir);
}

TEST_CASE("resume: mixed precision and fp16's loss scale come back too", "[checkpoint]") {
  for (const char* p : {"bf16", "fp16"})
    for (const char* s : {"dp", "ddp", "zero3"}) {
      RunConfig cfg = base(s, 2);
      cfg.precision = p;
      INFO(s << " " << p);
      const RunResult whole = run_training(cfg);
      const fs::path dir = fresh_dir(std::string(s) + p);
      CHECK(stop_and_resume(cfg, 2, cfg, dir).final_params == whole.final_params);
      fs::remove_all(dir);
    }
}

TEST_CASE("resume re-shards: another world size or strategy", "[checkpoint]") {
  for (const char* s : {"zero3", "fsdp"}) {
    const RunConfig cfg = base(s, 4);
    const RunResult whole = run_training(cfg);
    RunConfig two = cfg;
    two.world = 2;
    const fs::path dir = fresh_dir(std::string("reshard-") + s);
    const RunResult resumed = stop_and_resume(cfg, 4, two, dir);
    INFO(s);
    CHECK(max_diff(resumed.final_params, whole.final_params) < 1e-5f);
    fs::remove_all(dir);
  }
  // zero3 on 4 ranks to ddp and dp on 2 and to single.
  const RunConfig cfg = base("zero3", 4);
  const RunResult whole = run_training(cfg);
  for (const char* s : {"ddp", "dp", "single"}) {
    RunConfig other = base(s, std::string(s) == "single" ? 1 : 2);
    const fs::path dir = fresh_dir(std::string("to-") + s);
    CHECK(max_diff(stop_and_resume(cfg, 4, other, dir).final_params, whole.final_params) < 1e-5f);
    fs::remove_all(dir);
  }
}

TEST_CASE("a checkpoint counts only when complete, bad ones are named", "[checkpoint]") {
  const RunConfig cfg = base("zero3", 2);
  const fs::path dir = fresh_dir("partial");
  RunConfig first = cfg;
  first.steps = 4;
  run_training(first, nullptr, {}, nullptr, Checkpointing{2, dir.string(), nullptr});
  const ModelLayout layout = make_layout(cfg);
  // A later step whose manifest was never written (a rank died mid-save) is skipped.
  fs::create_directories(dir / "step-000006");
  fs::copy_file(dir / "step-000004" / "rank-00000.safetensors",
                dir / "step-000006" / "rank-00000.safetensors");
  CHECK(load_checkpoint(dir.string(), layout).steps_done == 4);
  // A rank file cut short is refused with its name.
  const fs::path f = dir / "step-000004" / "rank-00001.safetensors";
  fs::resize_file(f, fs::file_size(f) - 7);
  CHECK_THROWS_WITH(load_checkpoint(dir.string(), layout), Catch::Contains("rank-00001"));
  // Settings that cannot continue this run.
  fs::remove_all(dir);
  run_training(first, nullptr, {}, nullptr, Checkpointing{2, dir.string(), nullptr});
  const ResumeState r = load_checkpoint(dir.string(), layout);
  RunConfig other = cfg;
  other.seed = 7;
  CHECK_THROWS_WITH(run_training(other, nullptr, {}, nullptr, Checkpointing{0, "", &r}),
                    Catch::Contains("was saved with --seed 1, this run has 7"));
  other = cfg;
  other.steps = 4;
  CHECK_THROWS_WITH(run_training(other, nullptr, {}, nullptr, Checkpointing{0, "", &r}),
                    Catch::Contains("valid: --steps above 4"));
  CHECK_THROWS_WITH(load_checkpoint((dir / "nothing").string(), layout),
                    Catch::Contains("not a directory"));
  fs::remove_all(dir);
  RunConfig bn = cfg;
  bn.model = "mlp:4x32+bn";
  CHECK_NOTHROW(check_checkpointable(bn));  // its running statistics are saved
}

TEST_CASE("the command line: --checkpoint-every, --resume, and what they refuse", "[checkpoint]") {
  const fs::path dir = fresh_dir("cli");
  fs::create_directories(dir);
  const std::string common = " --model mlp:4x32 --strategy fsdp --world 2 --batch 16 ";
  const std::string ck = (dir / "ck").string(), full = (dir / "full.st").string(),
                    res = (dir / "res.st").string();
  REQUIRE(run_cli("run" + common + "--steps 6 --save-final " + full).code == 0);
  REQUIRE(run_cli("run" + common + "--steps 4 --checkpoint-every 2 --checkpoint-dir " + ck).code ==
          0);
  const CliResult r = run_cli("run" + common + "--steps 6 --resume " + ck + " --save-final " + res);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("resuming from"));
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  CHECK(bytes(full) == bytes(res));  // the same file, byte for byte
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--checkpoint-every 2", "--checkpoint-every needs --checkpoint-dir"},
           {"--checkpoint-dir " + ck, "--checkpoint-dir needs --checkpoint-every"},
           {"--checkpoint-every -1 --checkpoint-dir " + ck, "valid: 1 or more"},
           {"--checkpoint-every 1 --checkpoint-dir " + full, "is not a directory"},
           {"--resume " + ck + " --init-from " + full, "--resume and --init-from"},
           {"--resume " + (dir / "none").string(), "not a directory"},
       }) {
    const CliResult bad = run_cli("run" + common + "--steps 6 " + args);
    INFO(args);
    CHECK(bad.code == 2);
    CHECK_THAT(bad.out, Catch::Contains(message));
  }
  fs::remove_all(dir);
}
