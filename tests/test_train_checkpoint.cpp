// Checkpoints that resume bit for bit: a run stopped after a checkpoint and
// resumed ends with the uninterrupted run's exact weights, for every strategy;
// resumed on another world size or strategy (re-sharded), within fp32 rounding.
// Each checkpoint names its run: two runs' files never resume as one.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/io/safetensors.h"
#include "core/mesh.h"
#include "core/run/runner.h"
#include "core/run/train_checkpoint.h"
#include "tests/test_util.h"

using namespace shardlab;
using nlohmann::json;
using shardlab::test::CliResult;
using shardlab::test::run_cli;
using shardlab::test::run_cli_within;
using shardlab::test::run_shell;
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
  run_training(first, nullptr, {}, nullptr, Checkpointing{2, dir.string(), nullptr, ""});
  const ResumeState r = load_checkpoint(dir.string(), make_layout(resumed));
  REQUIRE(r.steps_done == stop);
  return run_training(resumed, nullptr, {}, nullptr, Checkpointing{0, "", &r, ""});
}

// Rewrites a rank file's Shardlab metadata (and, with `tensors_edit`, its values).
void edit_rank_file(const fs::path& path, const std::function<void(json&)>& meta_edit,
                    const std::function<void(std::vector<NamedTensor>&)>& tensors_edit = {}) {
  std::map<std::string, std::string> meta;
  std::vector<NamedTensor> tensors = load_safetensors(path.string(), meta);
  json m = json::parse(meta.at("shardlab"));
  if (meta_edit) meta_edit(m);
  meta["shardlab"] = m.dump();
  if (tensors_edit) tensors_edit(tensors);
  save_safetensors(path.string(), tensors, meta);
}

void edit_manifest(const fs::path& step_dir, const std::function<void(json&)>& edit) {
  const fs::path path = step_dir / "manifest.json";
  std::ifstream in(path);
  json m = json::parse(in);
  in.close();
  edit(m);
  std::ofstream(path) << m.dump(1) << "\n";
}

// One line: what a refused command prints.
bool one_line(const std::string& out) {
  return !out.empty() && out.find('\n') == out.size() - 1;
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

TEST_CASE("resume: an optimizer state kept on disk (--offload nvme:DIR) is saved and restored",
          "[checkpoint][nvme]") {
  // The checkpoint reads the moments and masters from the offload file, and
  // the resumed run writes them back into its own file before its first step.
  const fs::path disk = fresh_dir("offload-file");
  fs::create_directories(disk);
  // With --offload-params the fp32 weights are read from the file too.
  for (const char* s : {"zero3", "fsdp"})
    for (const char* p : {"fp32", "bf16"})
      for (bool params : {false, true}) {
        RunConfig cfg = base(s, 2);
        cfg.precision = p;
        cfg.offload = true;
        cfg.offload_to = "nvme:" + disk.string();
        cfg.offload_params = params;
        INFO(s << " " << p << (params ? " --offload-params" : ""));
        const RunResult whole = run_training(cfg);
        const fs::path dir = fresh_dir(std::string("nvme-") + s + p + (params ? "-params" : ""));
        CHECK(stop_and_resume(cfg, 2, cfg, dir).final_params == whole.final_params);
        // And into a run that keeps the state in memory: the same values.
        RunConfig in_memory = cfg;
        in_memory.offload = std::string(s) == "fsdp";
        in_memory.offload_to.clear();
        in_memory.offload_params = false;
        fs::remove_all(dir);
        CHECK(stop_and_resume(cfg, 2, in_memory, dir).final_params == whole.final_params);
        fs::remove_all(dir);
        CHECK(fs::is_empty(disk));
      }
  fs::remove_all(disk);
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

TEST_CASE("mesh checkpoints: every slice saves where its values lie, and resume is bit for bit",
          "[checkpoint][mesh][tp]") {
  // The gpt's padded vocabulary (719 ids in 2 slices of 360 rows) and its
  // heads, the mlp +bn's sliced running statistics, pipelines side by side.
  struct Case {
    std::string model, strategy, mesh;
    int M;
    bool zero1 = false;  // --dp-zero1: each replica saves its own parameters' state
  };
  for (const Case& k :
       {Case{"gpt:2x32x4", "gpipe", "dp=2,pp=2,tp=2", 2}, Case{"gpt:2x32x4", "1f1b", "tp=2", 2},
        Case{"gpt:2x32x4", "1f1b", "dp=2,tp=2", 2, true},
        Case{"mlp:4x32+bn", "1f1b", "pp=2,tp=2", 1}}) {  // M 1: single's statistics
    RunConfig cfg = base(k.strategy, parse_mesh(k.mesh, "").world());
    cfg.model = k.model;
    cfg.seq = k.model.rfind("gpt", 0) == 0 ? 8 : 0;
    cfg.batch = 8;
    cfg.mesh = k.mesh;
    cfg.micro_batches = k.M;
    cfg.dp_zero1 = k.zero1;
    // The biases before a BatchNorm have a gradient of 0 up to rounding, which
    // AdamW turns into ±lr steps: SGD keeps the comparison with single fair.
    if (k.model.find("+bn") != std::string::npos) cfg.optimizer.kind = OptimizerKind::sgd;
    INFO(k.model << " " << k.strategy << " --mesh " << k.mesh);
    const RunResult whole = run_training(cfg);
    const fs::path dir = fresh_dir("mesh");
    const RunResult resumed = stop_and_resume(cfg, 4, cfg, dir);
    CHECK(resumed.final_params == whole.final_params);  // bit for bit
    CHECK(resumed.losses == whole.losses);
    // The checkpoint is the whole model: single's run to step 4, tensor by
    // tensor, up to the reduction order's rounding.
    const ModelLayout layout = make_layout(cfg);
    const ResumeState saved = load_checkpoint(dir.string(), layout);
    RunConfig one = cfg;
    one.strategy = "single";
    one.world = 1;
    one.mesh.clear();
    one.dp_zero1 = false;
    one.micro_batches = 1;
    one.steps = 4;
    const RunResult single = run_training(one);
    REQUIRE(saved.weights.size() == single.final_params.size());
    for (const ParamInfo& p : layout.params()) {
      INFO(p.name);
      const std::vector<float> a(saved.weights.begin() + p.offset,
                                 saved.weights.begin() + p.offset + p.numel);
      const std::vector<float> b(single.final_params.begin() + p.offset,
                                 single.final_params.begin() + p.offset + p.numel);
      CHECK(max_diff(a, b) < 1e-4f);
    }
    // And it resumes elsewhere: on single, re-sharded from the slices.
    one.steps = cfg.steps;
    const RunResult on_one =
        run_training(one, nullptr, {}, nullptr, Checkpointing{0, "", &saved, ""});
    CHECK(max_diff(on_one.final_params, whole.final_params) < 1e-4f);
    fs::remove_all(dir);
  }
}

TEST_CASE("a checkpoint counts only when complete, bad ones are named", "[checkpoint]") {
  const RunConfig cfg = base("zero3", 2);
  const fs::path dir = fresh_dir("partial");
  RunConfig first = cfg;
  first.steps = 4;
  run_training(first, nullptr, {}, nullptr, Checkpointing{2, dir.string(), nullptr, ""});
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
  run_training(first, nullptr, {}, nullptr, Checkpointing{2, dir.string(), nullptr, ""});
  const ResumeState r = load_checkpoint(dir.string(), layout);
  RunConfig other = cfg;
  other.seed = 7;
  CHECK_THROWS_WITH(run_training(other, nullptr, {}, nullptr, Checkpointing{0, "", &r, ""}),
                    Catch::Contains("was saved with --seed 1, this run has 7"));
  other = cfg;
  other.steps = 4;
  CHECK_THROWS_WITH(run_training(other, nullptr, {}, nullptr, Checkpointing{0, "", &r, ""}),
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

TEST_CASE("two runs into one checkpoint directory never make a resumable mix", "[checkpoint]") {
  RunConfig first = base("zero3", 2);
  first.steps = 4;
  RunConfig other = first;
  other.seed = 7;
  const fs::path a = fresh_dir("mix-a"), b = fresh_dir("mix-b");
  run_training(first, nullptr, {}, nullptr, Checkpointing{2, a.string(), nullptr, ""});
  // The second run into a directory holding the first's checkpoints is refused
  // before it trains, and the first's files stay as they were.
  CHECK_THROWS_WITH(
      run_training(other, nullptr, {}, nullptr, Checkpointing{2, a.string(), nullptr, ""}),
      Catch::Contains("--checkpoint-dir '" + a.string() +
                      "' already holds another run's checkpoints (step-000004 the newest)") &&
          Catch::Contains("valid: --resume " + a.string()));
  run_training(other, nullptr, {}, nullptr, Checkpointing{2, b.string(), nullptr, ""});
  const ModelLayout layout = make_layout(first);
  const ResumeState ra = load_checkpoint(a.string(), layout);
  const ResumeState rb = load_checkpoint(b.string(), layout);
  CHECK(ra.run_id.size() == 16);
  CHECK(rb.run_id.size() == 16);
  CHECK(ra.run_id != rb.run_id);

  // What two runs saving at once leave behind: a step holding one run's
  // manifest and another run's rank file. Refused, naming both.
  const fs::path rank1 = a / "step-000004" / "rank-00001.safetensors";
  fs::copy_file(b / "step-000004" / "rank-00001.safetensors", rank1,
                fs::copy_options::overwrite_existing);
  CHECK_THROWS_WITH(load_checkpoint(a.string(), layout),
                    "--resume '" + a.string() +
                        "': step-000004 mixes two runs' files: manifest.json is run " + ra.run_id +
                        "'s, rank-00001.safetensors is run " + rb.run_id +
                        "'s (two runs saved into one --checkpoint-dir; valid: a checkpoint one "
                        "run saved whole)");
  // A run about to commit such a step refuses to make it count.
  CHECK_THROWS_WITH(
      commit_checkpoint(a.string(), 4, first, 2, std::vector<double>(4, 1.0), ra.run_id),
      Catch::Contains("'" + rank1.string() + "' is run " + rb.run_id + "'s, not this run's (" +
                      ra.run_id +
                      "): another run is saving into "
                      "--checkpoint-dir '" +
                      a.string() + "'"));

  // A checkpoint from before run ids (version 1: no id anywhere) still loads...
  fs::remove_all(a);
  run_training(first, nullptr, {}, nullptr, Checkpointing{2, a.string(), nullptr, ""});
  const fs::path step = a / "step-000004";
  edit_manifest(step, [](json& m) {
    m.erase("run_id");
    m["version"] = 1;
  });
  for (const char* f : {"rank-00000.safetensors", "rank-00001.safetensors"})
    edit_rank_file(step / f, [](json& m) { m.erase("run_id"); });
  const ResumeState old = load_checkpoint(a.string(), layout);
  CHECK(old.run_id.empty());
  CHECK(old.steps_done == 4);
  // ...but not with a newer run's file in it.
  fs::copy_file(b / "step-000004" / "rank-00001.safetensors", step / "rank-00001.safetensors",
                fs::copy_options::overwrite_existing);
  CHECK_THROWS_WITH(load_checkpoint(a.string(), layout),
                    Catch::Contains("manifest.json is an older Shardlab's (no run id), "
                                    "rank-00001.safetensors is run " +
                                    rb.run_id + "'s"));
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST_CASE("the command line: a second run into a checkpoint directory, resuming in place",
          "[checkpoint]") {
  const fs::path dir = fresh_dir("second");
  fs::create_directories(dir);
  const std::string common = " --model mlp:4x32 --strategy zero2 --world 2 --batch 16 ";
  const std::string ck = (dir / "ck").string();
  REQUIRE(run_cli("run" + common + "--steps 4 --checkpoint-every 2 --checkpoint-dir " + ck).code ==
          0);
  const auto bytes = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string before = bytes(fs::path(ck) / "step-000004" / "rank-00001.safetensors");
  // Another run (another seed) into the same directory: refused at once, in one line.
  auto r = run_cli_within(
      "run" + common + "--seed 7 --steps 4 --checkpoint-every 2 --checkpoint-dir " + ck, 20);
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(one_line(r.out));
  CHECK(r.seconds < 1.0);
  CHECK_THAT(r.out, Catch::Contains("error: --checkpoint-dir '" + ck +
                                    "' already holds another run's checkpoints (step-000004 the "
                                    "newest)"));
  CHECK(bytes(fs::path(ck) / "step-000004" / "rank-00001.safetensors") == before);
  // Continuing that run in place is what --resume is for.
  r = run_cli_within(
      "run" + common + "--steps 6 --resume " + ck + " --checkpoint-every 2 --checkpoint-dir " + ck,
      60);
  CHECK(r.code == 0);
  CHECK(fs::exists(fs::path(ck) / "step-000006" / "manifest.json"));
  // Resuming an older step into it would overwrite the newer ones.
  r = run_cli_within("run" + common + "--steps 8 --resume " + ck +
                         "/step-000002 --checkpoint-every 2 --checkpoint-dir " + ck,
                     20);
  CHECK(r.code == 2);
  CHECK(one_line(r.out));
  CHECK_THAT(r.out, Catch::Contains("holds checkpoints up to step-000006 that this run, resumed "
                                    "from '" +
                                    ck + "/step-000002', would overwrite"));
  // A mixed step is refused on resume, naming the file and both runs.
  const std::string other = (dir / "other").string();
  REQUIRE(
      run_cli("run" + common + "--seed 7 --steps 6 --checkpoint-every 2 --checkpoint-dir " + other)
          .code == 0);
  fs::copy_file(fs::path(other) / "step-000006" / "rank-00000.safetensors",
                fs::path(ck) / "step-000006" / "rank-00000.safetensors",
                fs::copy_options::overwrite_existing);
  r = run_cli_within("run" + common + "--steps 8 --resume " + ck, 20);
  CHECK(r.code == 2);
  CHECK(one_line(r.out));
  CHECK_THAT(r.out, Catch::Contains("step-000006 mixes two runs' files: manifest.json is run ") &&
                        Catch::Contains("rank-00000.safetensors is run "));
  fs::remove_all(dir);
}

TEST_CASE("resume takes the newest checkpoint by step number, not by name", "[checkpoint]") {
  RunConfig first = base("ddp", 2);
  first.steps = 4;
  const fs::path dir = fresh_dir("order");
  run_training(first, nullptr, {}, nullptr, Checkpointing{2, dir.string(), nullptr, ""});
  // Relabelled as a long run's: step-1000000 sorts before step-999999 as text.
  auto relabel = [&](const std::string& from, const std::string& to, int steps) {
    fs::rename(dir / from, dir / to);
    edit_manifest(dir / to, [&](json& m) {
      m["steps_done"] = steps;
      m["losses"] = std::vector<double>(static_cast<size_t>(steps), 1.0);
    });
    for (const char* f : {"rank-00000.safetensors", "rank-00001.safetensors"})
      edit_rank_file(dir / to / f, [&](json& m) { m["steps_done"] = steps; });
  };
  relabel("step-000004", "step-999999", 999999);
  relabel("step-000002", "step-1000000", 1000000);
  const ResumeState r = load_checkpoint(dir.string(), make_layout(first));
  CHECK(r.steps_done == 1000000);
  CHECK(fs::path(r.path).filename() == "step-1000000");
  // A manifest whose step is not its directory's is refused, not trusted.
  edit_manifest(dir / "step-1000000", [](json& m) { m["steps_done"] = 999999; });
  CHECK_THROWS_WITH(load_checkpoint(dir.string(), make_layout(first)),
                    Catch::Contains("says 999999 steps done, its directory step-1000000"));
  fs::remove_all(dir);
}

TEST_CASE("a resume checkpoint holding NaN or Inf is refused, naming the tensor and the file",
          "[checkpoint]") {
  RunConfig first = base("zero3", 2);
  first.steps = 4;
  const fs::path dir = fresh_dir("nan");
  run_training(first, nullptr, {}, nullptr, Checkpointing{2, dir.string(), nullptr, ""});
  const ModelLayout layout = make_layout(first);
  const fs::path rank1 = dir / "step-000004" / "rank-00001.safetensors";
  edit_rank_file(rank1, nullptr, [](std::vector<NamedTensor>& t) {
    for (NamedTensor& x : t)
      if (x.name == "weight/0") x.data.at(3) = std::numeric_limits<float>::quiet_NaN();
  });
  CHECK_THROWS_WITH(load_checkpoint(dir.string(), layout),
                    Catch::StartsWith("--resume '" + dir.string() + "': " + rank1.string() +
                                      ": tensor 'weight/0' holds 1 non-finite value of ") &&
                        Catch::Contains("the first NaN at index 3; training from it would give "
                                        "NaN"));
  const CliResult r =
      run_cli("run --model mlp:4x32 --strategy zero3 --world 2 --batch 16 --steps 6 --resume " +
              dir.string());
  CHECK(r.code == 2);
  CHECK(one_line(r.out));
  CHECK_THAT(r.out, Catch::Contains("tensor 'weight/0' holds 1 non-finite value"));
  // The optimizer's moments too.
  edit_rank_file(rank1, nullptr, [](std::vector<NamedTensor>& t) {
    for (NamedTensor& x : t) {
      if (x.name == "weight/0") x.data.at(3) = 0.5f;
      if (x.name == "exp_avg_sq/0") x.data.at(0) = std::numeric_limits<float>::infinity();
    }
  });
  CHECK_THROWS_WITH(load_checkpoint(dir.string(), layout),
                    Catch::Contains("tensor 'exp_avg_sq/0' holds 1 non-finite value") &&
                        Catch::Contains("the first +Inf at index 0"));
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint directory that cannot be written is refused before the run",
          "[checkpoint]") {
  const fs::path dir = fresh_dir("readonly");
  const fs::path ro = dir / "ro";
  fs::create_directories(ro);
  ::chmod(dir.c_str(), 0755);
  ::chmod(ro.c_str(), 0555);
  // Root writes anywhere: the check runs as nobody then (the case it is for).
  std::string as;
  if (::geteuid() == 0) {
    if (run_shell("command -v setpriv >/dev/null 2>&1").code != 0) {
      WARN("running as root without setpriv: skipped");
      fs::remove_all(dir);
      return;
    }
    as = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  }
  const std::string cmd = "timeout -s KILL 20 " + as + SHARDLAB_BIN +
                          " run --model mlp:2x16 --strategy single --world 1 --batch 4 --steps "
                          "2 --checkpoint-every 1 --checkpoint-dir " +
                          ro.string() + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = run_shell(cmd);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(one_line(r.out));
  CHECK(took.count() < 1.0);
  CHECK(r.out == "error: --checkpoint-dir '" + ro.string() +
                     "' is not writable: Permission denied (valid: a directory this user can "
                     "create files in)\n");
  CHECK(fs::is_empty(ro));  // the check leaves nothing behind
  fs::remove_all(dir);
}

TEST_CASE("a gpt checkpoint names its attention, and one from before --attention reads as naive",
          "[checkpoint][flash]") {
  RunConfig cfg = base("single", 1);
  cfg.model = "gpt:1x16x2";
  cfg.seq = 8;
  cfg.steps = 2;
  cfg.attention = "flash";
  const fs::path dir = fresh_dir("attention");
  run_training(cfg, nullptr, {}, nullptr, Checkpointing{2, dir.string(), nullptr, ""});
  const ModelLayout layout = make_layout(cfg);
  CHECK(load_checkpoint(dir.string(), layout).saved.attention == "flash");
  edit_manifest(dir / "step-000002", [](json& m) { m["settings"].erase("attention"); });
  const ResumeState old = load_checkpoint(dir.string(), layout);
  CHECK(old.saved.attention == "naive");
  // Either attention resumes it: the two compute the same function.
  cfg.steps = 3;
  CHECK(run_training(cfg, nullptr, {}, nullptr, Checkpointing{0, "", &old, ""}).losses.size() == 3);
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint's settings are the run's configuration as recordings write it",
          "[checkpoint][config]") {
  RunConfig cfg = base("ddp", 2);
  cfg.steps = 2;
  const fs::path dir = fresh_dir("settings");
  run_training(cfg, nullptr, {}, nullptr, Checkpointing{2, dir.string(), nullptr, ""});
  const ModelLayout layout = make_layout(cfg);
  const ResumeState now = load_checkpoint(dir.string(), layout);
  CHECK(now.saved.strategy == "ddp");
  CHECK(now.saved.world == 2);
  CHECK(now.saved.timeout_ms == cfg.timeout_ms);  // the whole configuration, not a part
  CHECK(now.saved.optimizer.lr == cfg.optimizer.lr);

  // A version-2 manifest wrote a shorter block, with unset values as 0 and "".
  edit_manifest(dir / "step-000002", [&](json& m) {
    m["version"] = 2;
    m["settings"] = {{"model", cfg.model},
                     {"seq", 0},
                     {"data", ""},
                     {"attention", ""},
                     {"seed", cfg.seed},
                     {"batch", cfg.batch},
                     {"strategy", "ddp"},
                     {"world", 2},
                     {"precision", "fp32"},
                     {"steps", 2},
                     {"optimizer", m["settings"]["optimizer"]}};
  });
  const ResumeState old = load_checkpoint(dir.string(), layout);
  CHECK(old.saved.model == cfg.model);
  CHECK(old.saved.seq == 0);
  CHECK(old.saved.data.empty());
  CHECK(old.saved.attention.empty());
  cfg.steps = 3;
  CHECK(run_training(cfg, nullptr, {}, nullptr, Checkpointing{0, "", &old, ""}).losses.size() == 3);

  // A bad value is one line naming the manifest, the field and what is valid.
  edit_manifest(dir / "step-000002", [](json& m) { m["settings"]["world"] = "two"; });
  CHECK_THROWS_WITH(
      load_checkpoint(dir.string(), layout),
      Catch::Contains("checkpoint manifest '") &&
          Catch::Contains("settings.world: expected an integer, got the string 'two'"));
  edit_manifest(dir / "step-000002", [](json& m) {
    m["settings"]["world"] = 2;
    m["settings"]["colour"] = "red";
  });
  CHECK_THROWS_WITH(load_checkpoint(dir.string(), layout),
                    Catch::Contains("settings: unknown key 'colour' (valid: "));
  fs::remove_all(dir);
}
