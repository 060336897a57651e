// Options that cannot be ignored (issue 12, item 4): every strategy × every
// option it does not read, every subcommand against stray words and unknown
// options, every numeric option against values out of its range, outputs that
// name one file, and a loss that stops being finite (every rank stops at once).
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "app/args.h"
#include "app/config_args.h"
#include "app/gui/logic/compare_logic.h"
#include "app/gui/logic/run_session.h"
#include "core/model/checkpoint.h"
#include "core/model/model.h"
#include "core/parallel/strategy.h"
#include "core/run/runner.h"

using namespace shardlab;
using shardlab::test::CliResult;
using shardlab::test::expect_refused;
using shardlab::test::run_cli;
using shardlab::test::TempDir;

namespace {

// A small run every strategy accepts: 4 layers, world 2 (single: 1), batch 8.
std::string run_base(const StrategyInfo& s) {
  return "run --model mlp:4x16 --batch 8 --steps 1 --strategy " + s.name + " --world " +
         (s.family == StrategyFamily::single ? "1" : "2") + " ";
}

// Each option as a user would type it with a value valid where it is read
// (world 2, 4 layers, batch 8), and typed at RunConfig's default (empty where
// the default cannot be typed: --stages has none, flags and --partition are
// never at their default when given, fp32 is what every strategy runs).
struct Typed {
  std::string set, at_default;
  std::string needs = "";  // typed after it: an option it needs (--mesh-order needs a --mesh)
};
const std::map<StrategyOption, Typed>& typed_options() {
  static const std::map<StrategyOption, Typed> m = {
      {StrategyOption::precision, {"--precision bf16", ""}},
      {StrategyOption::bucket_mb, {"--bucket-mb 0.5", "--bucket-mb 25"}},
      {StrategyOption::no_overlap, {"--no-overlap", ""}},
      {StrategyOption::no_prefetch, {"--no-prefetch", ""}},
      {StrategyOption::fsdp_unit, {"--fsdp-unit 2", "--fsdp-unit 1"}},
      {StrategyOption::no_reshard, {"--no-reshard", ""}},
      {StrategyOption::offload, {"--offload nvme:/var/tmp", ""}},  // zero3's only offload
      {StrategyOption::offload_params, {"--offload-params", "", "--offload nvme:/var/tmp"}},
      {StrategyOption::stages, {"--stages 2", ""}},
      {StrategyOption::micro_batches, {"--micro-batches 4", "--micro-batches 1"}},
      {StrategyOption::partition, {"--partition 3,1", ""}},
      {StrategyOption::virtual_stages, {"--virtual-stages 2", ""}},
      {StrategyOption::schedule, {"--schedule " SHARDLAB_TEST_DATA "/schedules/own_p2_m1.txt", ""}},
      {StrategyOption::recompute, {"--recompute", ""}},
      {StrategyOption::mesh, {"--mesh dp=2", ""}},
      {StrategyOption::mesh_order, {"--mesh-order dp,pp,tp", "", "--mesh dp=2"}},
      // dp=2: a data-parallel strategy's tp needs a dp axis of 2 or more.
      {StrategyOption::sequence_parallel,
       {"--sequence-parallel", "", "--mesh dp=2,tp=2 --world 4 --model gpt:4x16x2 --seq 8"}},
      {StrategyOption::dp_zero1, {"--dp-zero1", "", "--mesh dp=2"}},
      {StrategyOption::servers, {"--servers 2", "--servers 1", "--world 4"}},
      {StrategyOption::staleness, {"--staleness 1", "--staleness 0"}},
  };
  return m;
}

// The lessons the commands below name ("ranks"), whatever another test set.
void use_real_lessons() {
  setenv("SHARDLAB_LESSONS", SHARDLAB_SOURCE_DIR "/lessons", 1);
}

// The subcommands as `shardlab --help` lists them.
std::set<std::string> commands_in_help() {
  const CliResult r = run_cli("--help");
  REQUIRE(r.code == 0);
  std::set<std::string> out;
  std::istringstream in(r.out);
  std::string line;
  bool in_commands = false;
  while (std::getline(in, line)) {
    if (line == "commands:") {
      in_commands = true;
      continue;
    }
    if (in_commands && line.empty()) break;
    // "  demo     run every ...": a command starts at column 2.
    if (in_commands && line.size() > 2 && line[0] == ' ' && line[1] == ' ' && line[2] != ' ')
      out.insert(line.substr(2, line.find(' ', 2) - 2));
  }
  return out;
}

}  // namespace

TEST_CASE("every strategy x every option it does not read: exit 2 naming its readers",
          "[options][cli]") {
  // Issue 12's example, word for word.
  const CliResult issue = run_cli(
      "run --strategy ddp --offload --recompute --micro-batches 4 --stages 2 --fsdp-unit 2 "
      "--no-prefetch --no-reshard");
  INFO(issue.out);
  CHECK(issue.code == 2);
  CHECK(issue.out == "error: --offload: ddp has no offload; used by fsdp, zero3\n");

  // From the registry: a new strategy or option is covered without editing this test.
  REQUIRE(typed_options().size() == std::size(kStrategyOptions));
  int refused = 0;
  for (const StrategyInfo& s : all_strategies()) {
    for (StrategyOption o : kStrategyOptions) {
      const Typed& t = typed_options().at(o);
      if (s.reads_option(o)) continue;
      const std::string readers = strategies_reading(o);
      REQUIRE_FALSE(readers.empty());
      for (const std::string& typed : {t.set, t.at_default}) {
        if (typed.empty()) continue;
        const CliResult r = run_cli(run_base(s) + typed + " " + t.needs);
        INFO(run_base(s) + typed << "\n" << r.out);
        CHECK(r.code == 2);
        // "error: --micro-batches 1: ddp has no micro-batches; used by gpipe, 1f1b"
        CHECK(r.out.rfind("error: " + typed + ": " + s.name + " has no ", 0) == 0);
        CHECK(r.out.size() > readers.size());
        CHECK(r.out.substr(r.out.size() - readers.size() - 11) == "; used by " + readers + "\n");
        ++refused;
      }
    }
  }
  CHECK(refused >= 60);
  // Typed fp32 is what every strategy runs: no error.
  CHECK(
      run_cli("run --model mlp:4x16 --batch 8 --steps 1 --strategy gpipe --precision fp32").code ==
      0);
}

TEST_CASE("every strategy takes every option it reads from the command line", "[options][cli]") {
  for (const StrategyInfo& s : all_strategies())
    for (StrategyOption o : kStrategyOptions) {
      if (!s.reads_option(o)) continue;
      Typed t = typed_options().at(o);
      // Interleaved cuts 4 layers on 2 stages into 4 chunks, and its file names them.
      if (s.reads_option(StrategyOption::virtual_stages)) {
        if (o == StrategyOption::partition) t.set = "--partition 1,1,1,1";
        if (o == StrategyOption::schedule)
          t.set = "--schedule " SHARDLAB_TEST_DATA "/schedules/own_p2_m2_v2.txt --micro-batches 2";
      }
      const CliResult r = run_cli(run_base(s) + t.set + " " + t.needs + " --json");
      INFO(run_base(s) + typed_options().at(o).set << "\n" << r.out);
      CHECK(r.code == 0);
    }
}

TEST_CASE("stage counts of 0, or other than the world size, are refused (--stages 0)",
          "[options][cli]") {
  for (const StrategyInfo& s : all_strategies()) {
    if (!s.reads_option(StrategyOption::stages)) continue;
    const std::string base = "run --model mlp:4x16 --batch 8 --world 2 --strategy " + s.name;
    expect_refused(base + " --stages 0", "--stages 0 is invalid (valid: --stages 2");
    expect_refused(base + " --stages=0", "--stages 0 is invalid (valid: --stages 2");
    expect_refused(base + " --stages -1", "--stages -1 is invalid (valid: --stages 2");
    expect_refused(base + " --stages 3", "--stages 3 does not match --world 2");
    expect_refused(base + " --stages 99999999999", "--stages 99999999999 is out of range");
  }
  // A strategy without stages refuses --stages 0 too (it used to pass as "not given").
  expect_refused("run --strategy ddp --stages 0", "--stages 0 is invalid");
  // The GUI's compare list likewise.
  RunConfig base;
  try {
    gui::parse_compare_slots("gpipe:4/stages=0", base);
    FAIL("stages=0 accepted");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) ==
          "--compare item 'gpipe:4/stages=0': 'stages=0' is invalid (valid: one stage per rank of "
          "--world, or leave it out)");
  }
  CHECK(gui::parse_compare_slots("gpipe:4/stages=4", base).size() == 1);
}

TEST_CASE("every subcommand refuses stray words and unknown options", "[options][cli]") {
  use_real_lessons();
  // Each subcommand (and each of its own subcommands) as typed before the bad word.
  const std::vector<std::string> commands = {"run",
                                             "demo",
                                             "gui",
                                             "estimate",
                                             "sample",
                                             "devices",
                                             "bench comm",
                                             "bench step",
                                             "bench strategies",
                                             "lesson list",
                                             "lesson show ranks",
                                             "lesson run ranks",
                                             "launch"};
  // Commands whose positional words are file names: only unknown options are stray.
  const std::vector<std::string> takes_files = {"trace merge", "project", "schedule"};
  // Every command `shardlab --help` names is covered.
  for (const std::string& c : commands_in_help()) {
    bool covered = false;
    for (const std::string& typed : commands) covered |= typed.rfind(c, 0) == 0;
    for (const std::string& typed : takes_files) covered |= typed.rfind(c, 0) == 0;
    INFO(c);
    CHECK(covered);
  }
  for (const std::string& c : commands) {
    // lesson show/run take one NAME: a second is named as "takes one lesson NAME".
    expect_refused(c + " extra",
                   c.rfind("lesson s", 0) == 0 || c.rfind("lesson r", 0) == 0
                       ? "takes one lesson NAME"
                       : "unexpected argument 'extra' (see 'shardlab " + c + " --help')");
    expect_refused(c + " --bogus", "unknown option '--bogus'");
    expect_refused(c + " --bogus=1", "unknown option '--bogus=1'");
  }
  for (const std::string& c : takes_files) {
    expect_refused(c + " --bogus", "unknown option '--bogus'");
    expect_refused(c + " --bogus=1", "unknown option '--bogus=1'");
  }
  expect_refused("trace extra", "'shardlab trace' takes 'merge', not 'extra'");
  expect_refused("lesson run --all ranks", "--all runs every step of every lesson");
  expect_refused("lesson check --bogus", "unknown option '--bogus'");
  expect_refused("bench --bogus", "unknown benchmark '--bogus'");
  expect_refused("lesson extra", "unknown lesson command 'extra'");
  expect_refused("help extra", "unknown command 'extra'");
  expect_refused("help run extra", "unexpected argument 'extra'");
  // A value after a flag is a stray word, not the flag's value.
  expect_refused("run --json 1", "unexpected argument '1'");
  // --help still answers, whatever else is on the line.
  for (const char* c : {"run extra --help", "devices --help", "help run", "bench comm --help",
                        "lesson run --help", "help lesson"}) {
    const CliResult r = run_cli(c);
    INFO(c << "\n" << r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find("usage") != std::string::npos);
  }
}

TEST_CASE("numeric options: out of range, not a number, nan, inf: one line with the range",
          "[options][cli]") {
  use_real_lessons();
  // Every option `shardlab run` takes is here: a new one must say how it is checked.
  const std::set<std::string> not_numeric = {
      "model", "strategy",  "optimizer",  "precision",  "device",    "backend",
      "trace", "save-init", "save-final", "init-from",  "save-data", "record",
      "data",  "attention", "mesh",       "mesh-order", "schedule"};
  struct Numeric {
    std::string strategy;            // one that reads it
    std::vector<std::string> valid;  // of the values below, those the option takes
  };
  const std::map<std::string, Numeric> numeric = {
      {"world", {"ddp", {}}},
      // --batch and --steps 2147483647 are numbers in range for the parser;
      // whether they fit in memory is the memory check's answer.
      {"batch", {"ddp", {"2147483647"}}},
      {"steps", {"ddp", {"2147483647"}}},
      // A huge learning rate is a number; a loss it makes non-finite stops the run (below).
      {"lr", {"ddp", {"99999999999", "2147483647"}}},
      {"seed", {"ddp", {"0", "99999999999", "2147483647"}}},
      {"bucket-mb", {"ddp", {}}},
      {"timeout-ms", {"ddp", {"2147483647"}}},
      {"fsdp-unit", {"fsdp", {}}},
      {"stages", {"gpipe", {}}},
      {"micro-batches", {"gpipe", {}}},
      {"partition", {"gpipe", {}}},
      {"virtual-stages", {"interleaved", {}}},
      {"servers", {"ps", {}}},
      {"staleness", {"ps", {"0"}}},
      {"seq", {"ddp", {}}},  // refused for an MLP whatever its value; gpt's range: 1 to 4096
  };
  std::set<std::string> listed = not_numeric;
  for (const auto& [k, n] : numeric) listed.insert(k);
  std::set<std::string> takes_value(app::run_options().begin(), app::run_options().end());
  CHECK(listed == takes_value);

  const std::vector<std::string> values = {"-1",    "0",   "99999999999", "2147483647",
                                           "1e300", "abc", "nan",         "inf",
                                           "-inf",  "",    "1x",          "0x10"};
  for (const auto& [key, n] : numeric)
    for (const std::string& v : values) {
      if (std::find(n.valid.begin(), n.valid.end(), v) != n.valid.end()) continue;
      const std::string args = "run --model mlp:4x16 --batch 8 --steps 1 --strategy " + n.strategy +
                               " --" + key + "=" + v;
      const CliResult r = run_cli(args);
      INFO("shardlab " << args << "\n" << r.out);
      CHECK(r.code == 2);
      // "error: --world 99999999999 is out of range (valid: 1 to 64)"
      CHECK(r.out.rfind("error: --" + key + " ", 0) == 0);
      CHECK(r.out.find("(valid: ") != std::string::npos);
      CHECK(r.out.find('\n') == r.out.size() - 1);
    }
  // The exact words for the cases that used to be wrong.
  expect_refused("run --world 99999999999", "--world 99999999999 is out of range (valid: 1 to 64)");
  expect_refused("run --lr 1e39", "--lr 1e39 is out of range (valid: a positive number below");
  expect_refused("run --lr nan", "--lr 'nan' is not a number (valid: a positive number");
  expect_refused("run --bucket-mb 1e300", "(valid: a positive number of MiB up to 1048576");
  expect_refused("run --seed -1", "--seed '-1' is invalid (valid: an integer from 0 to ");

  // The other commands' numbers.
  const std::vector<std::pair<std::string, std::string>> others = {
      {"demo", "steps"},
      {"bench step", "steps"},
      {"bench step", "rounds"},
      {"bench step", "world"},
      {"bench strategies", "world"},
      {"bench strategies", "steps"},
      {"bench strategies", "rounds"},
      {"bench strategies", "batch"},
      {"bench comm", "iters"},
      {"bench comm", "timeout-ms"},
      {"bench comm", "worlds"},
      {"bench comm", "sizes"},
      {"lesson list", "width"},
      {"gui", "frames"},
      {"gui", "font-scale"},
      {"gui", "size"},
      {"gui", "projected"},
      {"gui --lesson ranks", "lesson-step"},
      {"estimate --params 1e6 --strategy ddp", "world"},
      {"estimate --world 2 --strategy ddp", "params"}};
  for (const auto& [command, key] : others)
    for (const char* v : {"-1", "0", "1e300", "abc", "nan", "inf", ""}) {
      const std::string args = command + " --" + key + "=" + v;
      const CliResult r = run_cli(args);
      INFO("shardlab " << args << "\n" << r.out);
      CHECK(r.code == 2);
      CHECK(r.out.rfind("error: ", 0) == 0);
      CHECK(r.out.find("--" + key) != std::string::npos);
      CHECK(r.out.find('\n') == r.out.size() - 1);
    }
}

TEST_CASE("two outputs naming one file are refused before the run", "[options][cli]") {
  TempDir dir;
  const std::string w = dir.file("w.safetensors");
  const std::string base = "run --model mlp:2x16 --batch 8 --steps 2 ";
  expect_refused(base + "--save-init " + w + " --save-final " + w,
                 "--save-init '" + w + "' and --save-final '" + w +
                     "' name the same file (valid: a different path for each)");
  // Spelled differently, the same file: "..", "./", a symbolic link to the directory.
  std::filesystem::create_directories(dir.path / "sub");
  std::filesystem::create_directory_symlink(dir.path, dir.path / "link");
  expect_refused(base + "--save-init " + w + " --save-final " + dir.file("sub/../w.safetensors"),
                 "name the same file");
  expect_refused(base + "--save-init " + w + " --save-final " + dir.file("./w.safetensors"),
                 "name the same file");
  expect_refused(base + "--save-init " + w + " --save-final " + dir.file("link/w.safetensors"),
                 "name the same file");
  expect_refused(base + "--trace " + dir.file("t") + " --record " + dir.file("t"),
                 "--trace '" + dir.file("t") + "' and --record");
  expect_refused(base + "--save-data " + w + " --save-final " + w, "--save-data");
  // Nothing was written: refused before the run.
  CHECK_FALSE(std::filesystem::exists(w));
  CHECK_FALSE(std::filesystem::exists(dir.file("t")));

  // Resuming in place overwrites a checkpoint with a checkpoint: allowed.
  REQUIRE(run_cli(base + "--save-final " + w).code == 0);
  const CliResult resumed = run_cli(base + "--init-from " + w + " --save-final " + w);
  INFO(resumed.out);
  CHECK(resumed.code == 0);
  // ... but a trace over the checkpoint it starts from is not.
  expect_refused(base + "--init-from " + w + " --trace " + w,
                 "--init-from '" + w + "' and --trace");
}

TEST_CASE("a non-finite loss stops the run on every rank, with the step and the rank",
          "[options][nan]") {
  // The command line: one line, a non-zero exit, quickly. A rank left waiting
  // in a collective would show here as the 60 s timeout.
  struct Case {
    std::string args, line;
  };
  const std::vector<Case> cases = {
      {"--strategy ddp --world 2",
       "error: loss became nan at step 2 on rank 0; try a smaller --lr (now 1e+30)\n"},
      {"--strategy gpipe --world 2 --micro-batches 2",
       "error: loss became nan at step 2 on rank 1; try a smaller --lr (now 1e+30)\n"},
      {"--strategy single --world 1",
       "error: loss became nan at step 2 on rank 0; try a smaller --lr (now 1e+30)\n"},
  };
  for (const Case& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const CliResult r =
        run_cli("run --model mlp:4x16 --batch 8 --steps 50 --lr 1e30 --timeout-ms 60000 " + c.args);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(c.args << "\n" << r.out);
    CHECK(r.code == 1);
    // The line on stderr (stdout, a pipe here, may come after it).
    CHECK(r.out.find(c.line) != std::string::npos);
    CHECK(r.out.find("error: ") == r.out.rfind("error: "));
    CHECK(r.out.find("final loss") == std::string::npos);
    CHECK(s < 20);
  }

  // The engine, where the GUI's and the lessons' runs go too: every strategy,
  // the loss going bad on the last step (the others may be in export_params)
  // and on an early one; more ranks than stages see a loss.
  for (const StrategyInfo& s : all_strategies())
    for (int world : {2, 4})
      for (int steps : {2, 30}) {
        RunConfig c;
        // (Interleaved cuts world × 2 chunks: 8 layers.)
        c.model = s.reads_option(StrategyOption::virtual_stages) ? "mlp:8x16" : "mlp:4x16";
        c.strategy = s.name;
        // (A parameter server's server on top of `world` workers.)
        c.world = s.family == StrategyFamily::single ? 1 : s.servers ? world + 1 : world;
        c.batch = 16;
        c.steps = steps;
        c.optimizer.lr = 1e30f;
        c.timeout_ms = 60000;
        if (s.reads_option(StrategyOption::micro_batches)) c.micro_batches = 4;
        INFO(s.name << " world " << c.world << " steps " << steps);
        int reported = 0;
        bool finite = true;
        RunCallbacks cb;
        cb.on_step = [&](int, double loss) {
          ++reported;
          finite = finite && std::isfinite(loss);
        };
        const auto t0 = std::chrono::steady_clock::now();
        try {
          run_training(c, nullptr, cb);
          FAIL("a loss of nan was not noticed");
        } catch (const LossDiverged& e) {
          const std::string m = e.what();
          INFO(m);
          CHECK(m.rfind("loss became nan at step 2 on rank ", 0) == 0);
          // The rank named is one that computes a loss: the last stage of a
          // pipeline, a parameter server's first worker.
          const int last = c.world - 1;
          if (s.family == StrategyFamily::pipeline)
            CHECK(m.find("on rank " + std::to_string(last) + ";") != std::string::npos);
          else
            CHECK(m.find("on rank " + std::to_string(s.server_ranks(c)) + ";") !=
                  std::string::npos);
        }
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
        // Step 1 was reported; the non-finite step 2 never reaches the views.
        CHECK(reported == 1);
        CHECK(finite);
      }
}

TEST_CASE("the GUI's run stops on a non-finite loss and says why", "[options][nan][gui]") {
  RunConfig cfg;
  cfg.model = "mlp:4x16";
  cfg.strategy = "1f1b";
  cfg.world = 2;
  cfg.batch = 8;
  cfg.steps = 50;
  cfg.micro_batches = 2;
  cfg.optimizer.lr = 1e30f;
  gui::RunSession session;
  gui::RunData data;
  std::vector<double> losses;
  session.start(cfg, /*paused=*/false);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (session.state() != gui::RunState::failed && std::chrono::steady_clock::now() < until) {
    session.poll(data, losses);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  session.poll(data, losses);
  REQUIRE(session.state() == gui::RunState::failed);
  CHECK(session.error().find("loss became nan at step 2 on rank 1") != std::string::npos);
  for (double l : losses) CHECK(std::isfinite(l));
}

TEST_CASE("fp16's loss scaler skipping a step does not stop the run", "[options][nan][mixed]") {
  // Weights 8 times PyTorch's init: the loss (fp32) is finite, but its gradient
  // times the initial scale 65536 overflows fp16, so the scaler skips steps
  // and halves its scale until the gradients fit (test_mixed_precision.cpp).
  RunConfig c;
  c.model = "mlp:4x32";
  c.strategy = "ddp";
  c.world = 2;
  c.batch = 48;
  c.seed = 5;
  c.optimizer.lr = 1e-2f;
  c.precision = "fp16";
  const ModelLayout layout(ModelSpec::parse(c.model));
  std::vector<float> init = init_params(layout, c.seed);
  for (float& w : init) w *= 8.0f;
  c.steps = 1;
  const RunResult one = run_training(c, &init);
  REQUIRE(one.final_params == init);  // the step was skipped
  c.steps = 40;
  const RunResult many = run_training(c, &init);
  CHECK(many.final_params != init);
  for (double l : many.losses) CHECK(std::isfinite(l));

  // The same from the command line, the weights from a checkpoint.
  TempDir dir;
  const std::string w = dir.file("big.safetensors");
  save_params(w, layout, init);
  const CliResult r = run_cli(
      "run --model mlp:4x32 --batch 48 --seed 5 --lr 1e-2 --steps 40 --precision fp16 "
      "--init-from " +
      w);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(r.out.find("final loss") != std::string::npos);
}

// `gui --world 0` died of SIGFPE (the compare slots divided by the world
// before anything validated it), and `gui --screenshot ''` read as "no
// screenshot" and opened the interactive app for good. Both are one line,
// exit 2, before any window.
TEST_CASE("gui: --world 0 and an empty --screenshot are one line and exit 2 at once",
          "[options][cli][gui]") {
  TempDir dir;
  const std::string shot = dir.file("out.png");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"gui --world 0", "--world 0 is invalid (valid: 1 to 64)"},
      {"gui --world 0 --screenshot " + shot, "--world 0 is invalid (valid: 1 to 64)"},
      {"gui --world 0 --view compare", "--world 0 is invalid (valid: 1 to 64)"},
      {"gui --strategy gpipe --world 0", "--world 0 is invalid (valid: 1 to 64)"},
      {"gui --batch 0", "--batch 0 is invalid (valid: a positive integer)"},
      {"gui --screenshot ''", "--screenshot '' is no file path (valid: a PNG file path"},
      {"gui --screenshot=", "--screenshot '' is no file path (valid: a PNG file path"},
  };
  for (const auto& [args, part] : cases) {
    // Measured about 0.3 s; the bound leaves room for a loaded machine, and a
    // regression that opens the app is killed at 10 s.
    const test::TimedCliResult r = test::run_cli_within(args, 10);
    INFO("shardlab " << args << "\n" << r.out << "(" << r.seconds << " s)");
    CHECK(r.code == 2);
    CHECK(r.out.rfind("error: ", 0) == 0);
    CHECK(r.out.find('\n') == r.out.size() - 1);
    CHECK(r.out.find(part) != std::string::npos);
    CHECK(r.seconds < 2.0);
  }
  // The compare slots themselves no longer divide by a zero world.
  RunConfig base;
  base.strategy = "gpipe";
  base.world = 0;
  CHECK_NOTHROW(gui::default_compare_slots(base));
}

namespace {

// A value of row r's type other than its default, valid for a strategy reading
// it at world 2 with mlp:4x16 and batch 8: from the row alone, so a new row is
// covered without editing this test.
RunConfig with_other_value(RunConfig c, const OptionRow& r) {
  switch (r.kind) {
    case OptionKind::integer:
      // 2 micro-batches, 2 stages of world 2, 2 layers per unit, 2 servers of world 4.
      c.*r.integer = 2;
      if (r.id == StrategyOption::servers) c.world = 4;
      break;
    case OptionKind::number:
      c.*r.number = 0.5;
      break;
    case OptionKind::on_flag:
    case OptionKind::off_flag:
      c.*r.boolean = !(c.*r.boolean);
      // Sequence parallelism splits a gpt's tokens over a tp axis: it comes with both.
      if (r.id == StrategyOption::sequence_parallel) {
        c.model = "gpt:4x16x2";
        c.seq = 8;
        c.mesh = "dp=2,tp=2";  // (a data-parallel strategy's tp needs a dp axis)
        c.world = 4;
      }
      // ZeRO-1 over dp shards over pipelines side by side: a dp axis.
      if (r.id == StrategyOption::dp_zero1) c.mesh = "dp=2";
      // The parameter shards go to the offload file: --offload nvme:DIR.
      if (r.id == StrategyOption::offload_params) {
        c.offload = true;
        c.offload_to = "nvme:/var/tmp";
      }
      break;
    case OptionKind::choice:
      c.*r.text = r.choices.at(1);
      break;
    case OptionKind::int_list:
      c.*r.list = {3, 1};
      break;
    case OptionKind::text:
      // --mesh-order orders a --mesh, so it comes with one.
      if (r.id == StrategyOption::mesh_order) c.mesh = "dp=2";
      c.*r.text = r.id == StrategyOption::mesh_order ? "dp,pp,tp"
                  : r.id == StrategyOption::schedule ? SHARDLAB_TEST_DATA
                      "/schedules/own_p2_m1.txt"  // world 2, M 1
                                                     : "dp=2";
      break;
  }
  return c;
}

RunConfig from_command_line(const std::vector<std::string>& words) {
  std::vector<std::string> storage = {"run"};
  storage.insert(storage.end(), words.begin(), words.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  const app::Args a(static_cast<int>(argv.size()), argv.data(), "run", app::run_options(),
                    app::run_flags());
  return app::config_from(a);
}

}  // namespace

TEST_CASE("option table: every row round-trips through the command line and a compare item",
          "[options]") {
  const std::vector<OptionRow>& rows = option_rows();
  REQUIRE(rows.size() == std::size(kStrategyOptions));
  for (size_t i = 0; i < rows.size(); ++i) {
    const OptionRow& r = rows[i];
    INFO(r.flag);
    CHECK(r.id == kStrategyOptions[i]);
    CHECK(&option_row(r.id) == &r);
    CHECK(find_option(r.flag) == &r);
    CHECK(find_option(r.flag + 2) == &r);
    CHECK(find_option(r.json_key) == &r);
    CHECK_FALSE(option_set(RunConfig{}, r.id));
    // Exactly one member, the one its kind uses.
    const int members = (r.integer != nullptr) + (r.number != nullptr) + (r.boolean != nullptr) +
                        (r.text != nullptr) + (r.list != nullptr);
    CHECK(members == 1);
    const StrategyInfo* reader = nullptr;
    for (const StrategyInfo& s : all_strategies())
      if (s.reads_option(r.id) && !reader) reader = &s;
    REQUIRE(reader);
    RunConfig base;
    base.model = "mlp:4x16";
    base.batch = 8;
    base.steps = 1;
    base.strategy = reader->name;
    base.world = reader->world_for(2);
    const RunConfig set = with_other_value(base, r);
    REQUIRE(option_set(set, r.id));
    CHECK_NOTHROW(validate(set));
    // The command line: the text option_text gives reads back as the same value.
    std::istringstream words(option_text(set, r.id));
    std::vector<std::string> typed = {
        "--model",    "mlp:4x16",   "--batch", "8",
        "--strategy", reader->name, "--world", std::to_string(base.world)};
    for (std::string w; words >> w;) typed.push_back(w);
    // What sequence parallelism needs beside it (a gpt on a tp axis) is typed too,
    // and is part of the compare view's base.
    if (r.id == StrategyOption::sequence_parallel) {
      for (const char* w :
           {"--model", "gpt:4x16x2", "--seq", "8", "--mesh", "dp=2,tp=2", "--world", "4"})
        typed.push_back(w);
      base.model = set.model;
      base.seq = set.seq;
      base.mesh = set.mesh;
      base.world = set.world;
    }
    if (r.id == StrategyOption::dp_zero1) {
      for (const char* w : {"--mesh", "dp=2"}) typed.push_back(w);
      base.mesh = set.mesh;
    }
    if (r.id == StrategyOption::offload_params)
      for (const char* w : {"--offload", "nvme:/var/tmp"}) typed.push_back(w);
    if (r.id == StrategyOption::servers) {  // two servers need two workers beside them
      for (const char* w : {"--world", "4"}) typed.push_back(w);
      base.world = set.world;
    }
    const RunConfig parsed = from_command_line(typed);
    CHECK(option_equal(parsed, set, r.id));
    CHECK(parsed.strategy == reader->name);
    // Resetting puts the default back; copying carries the value.
    RunConfig reset = set;
    reset_option(reset, r.id);
    CHECK_FALSE(option_set(reset, r.id));
    copy_option(set, reset, r.id);
    CHECK(option_equal(reset, set, r.id));
    // A compare item, where the row has a key: its text parses back to the same slot.
    if (r.compare_key) {
      gui::CompareSlot slot = gui::slot_from(set, reader->name);
      const std::string item = gui::slot_text(slot);
      CHECK(item.find(option_compare_text(set, r.id)) != std::string::npos);
      const gui::CompareSlot back = gui::parse_compare_item(item, base);
      CHECK(back == slot);
      CHECK(option_equal(gui::config_for(back, base), set, r.id));
    } else {
      CHECK(option_compare_text(set, r.id).empty());
    }
  }
}

TEST_CASE("run --help lists every strategy option from its row, with the strategies reading it",
          "[options][cli]") {
  const CliResult h = run_cli("run --help");
  REQUIRE(h.code == 0);
  for (const OptionRow& r : option_rows()) {
    INFO(r.flag);
    // "  --micro-batches M   gpipe/1f1b: micro-batches per global batch (default 1)"
    std::string head =
        std::string("\n  ") + r.flag + (r.metavar ? std::string(" ") + r.metavar : "");
    const size_t at = h.out.find(head + " ");
    REQUIRE(at != std::string::npos);
    const std::string line = h.out.substr(at + 1, h.out.find('\n', at + 1) - at - 1);
    if (r.help_names_readers) {
      std::string readers = strategies_reading(r.id);
      for (size_t k = readers.find(", "); k != std::string::npos; k = readers.find(", ", k))
        readers.replace(k, 2, "/");
      CHECK(line.find(readers + ": ") != std::string::npos);
    }
    const std::string first = std::string(r.help).substr(0, std::string(r.help).find('\n'));
    CHECK(line.find(first) != std::string::npos);
  }
  CHECK(h.out.find("  --bucket-mb X       ddp: gradient bucket size in MiB (default 25)\n") !=
        std::string::npos);
  CHECK(
      h.out.find("  --partition A,B,..  gpipe/naive-mp/1f1b/zb-h1/interleaved: layers per stage") !=
      std::string::npos);
}
