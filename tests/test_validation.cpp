// Options a strategy does not read are refused, never silently ignored: every
// strategy × every option, on a RunConfig (what the GUI's run bar holds) and on
// the command line; strategy traits come from the registry; a missing option
// value is named; ranks outnumbering cores are said plainly.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <sched.h>

#include <map>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/gui/logic/run_session.h"
#include "core/comm/cores.h"
#include "core/parallel/model_state.h"
#include "core/parallel/schedule.h"
#include "core/parallel/strategy.h"
#include "core/predict/pipeline_analysis.h"

using namespace shardlab;
using shardlab::test::CliResult;
using shardlab::test::run_cli;

namespace {

using Names = std::set<std::string>;

// The specification, written out rather than read from the registry: who reads what.
const std::map<StrategyOption, Names>& expected_readers() {
  static const std::map<StrategyOption, Names> m = {
      {StrategyOption::precision, {"single", "ddp", "dp", "zero1", "zero2", "zero3", "fsdp", "ps"}},
      {StrategyOption::servers, {"ps"}},
      {StrategyOption::staleness, {"ps"}},
      {StrategyOption::bucket_mb, {"ddp"}},
      {StrategyOption::no_overlap, {"ddp"}},
      {StrategyOption::no_prefetch, {"zero3", "fsdp"}},
      {StrategyOption::fsdp_unit, {"fsdp"}},
      {StrategyOption::no_reshard, {"fsdp"}},
      {StrategyOption::offload, {"zero3", "fsdp"}},
      {StrategyOption::offload_params, {"zero3", "fsdp"}},
      {StrategyOption::stages, {"naive-mp", "gpipe", "1f1b", "zb-h1", "interleaved"}},
      {StrategyOption::micro_batches, {"gpipe", "1f1b", "zb-h1", "interleaved"}},
      {StrategyOption::partition, {"naive-mp", "gpipe", "1f1b", "zb-h1", "interleaved"}},
      {StrategyOption::schedule, {"gpipe", "1f1b", "zb-h1", "interleaved"}},
      {StrategyOption::virtual_stages, {"interleaved"}},
      // zb-h1 keeps each linear's input from B to W: a recompute or a
      // sequence-parallel gather would drop it first.
      {StrategyOption::recompute, {"gpipe", "1f1b"}},
      {StrategyOption::mesh,
       {"ddp", "zero1", "zero2", "zero3", "fsdp", "naive-mp", "gpipe", "1f1b", "zb-h1"}},
      {StrategyOption::mesh_order,
       {"ddp", "zero1", "zero2", "zero3", "fsdp", "naive-mp", "gpipe", "1f1b", "zb-h1"}},
      {StrategyOption::sequence_parallel,
       {"ddp", "zero1", "zero2", "zero3", "fsdp", "naive-mp", "gpipe", "1f1b"}},
      {StrategyOption::dp_zero1, {"naive-mp", "gpipe", "1f1b", "zb-h1"}},
  };
  return m;
}

// A configuration every strategy accepts as it is.
RunConfig base_config(const std::string& strategy) {
  RunConfig c;
  c.model = "mlp:4x16";
  c.strategy = strategy;
  c.world = strategy_info(strategy).world_for(2);
  c.batch = 8;
  c.steps = 2;
  // Interleaved sends micro-batches through its chunks in groups of P.
  if (strategy_info(strategy).reads_option(StrategyOption::virtual_stages)) c.micro_batches = 2;
  return c;
}

// Sets o to a value that is valid for a strategy that reads it (world 2, 4 layers),
// and returns how the user would have typed it.
std::string set_option(RunConfig& c, StrategyOption o) {
  const bool data_parallel = strategy_info(c.strategy).is_data_parallel();
  // Interleaved cuts the model into stages × 2 chunks, 1 layer each here.
  const bool chunked = strategy_info(c.strategy).reads_option(StrategyOption::virtual_stages);
  switch (o) {
    case StrategyOption::precision:
      c.precision = "bf16";
      return "--precision bf16";
    case StrategyOption::bucket_mb:
      c.bucket_mb = 0.5;
      return "--bucket-mb 0.5";
    case StrategyOption::no_overlap:
      c.overlap = false;
      return "--no-overlap";
    case StrategyOption::no_prefetch:
      c.prefetch = false;
      return "--no-prefetch";
    case StrategyOption::fsdp_unit:
      c.fsdp_unit = 2;
      return "--fsdp-unit 2";
    case StrategyOption::no_reshard:
      c.reshard_after_forward = false;
      return "--no-reshard";
    case StrategyOption::offload:  // the form both readers take (zero3 offloads to NVMe only)
      c.offload = true;
      c.offload_to = "nvme:/var/tmp";
      return "--offload nvme:/var/tmp";
    case StrategyOption::offload_params:  // needs the file: --offload nvme:DIR
      c.offload_params = true;
      if (strategy_info(c.strategy).reads_option(StrategyOption::offload)) {
        c.offload = true;
        c.offload_to = "nvme:/var/tmp";
      }
      return "--offload-params";
    case StrategyOption::stages:
      c.stages = 2;
      return "--stages 2";
    case StrategyOption::micro_batches:
      c.micro_batches = 4;
      return "--micro-batches 4";
    case StrategyOption::partition:
      c.partition = chunked ? std::vector<int>{1, 1, 1, 1} : std::vector<int>{3, 1};
      return chunked ? "--partition 1,1,1,1" : "--partition 3,1";
    case StrategyOption::recompute:
      c.recompute = true;
      return "--recompute";
    case StrategyOption::schedule:  // 2 stages, 1 micro-batch: F0 B0 on each
      c.schedule = chunked ? SHARDLAB_TEST_DATA "/schedules/own_p2_m2_v2.txt"
                           : SHARDLAB_TEST_DATA "/schedules/own_p2_m1.txt";
      return "--schedule " + c.schedule;
    case StrategyOption::virtual_stages:
      c.virtual_stages = 2;
      return "--virtual-stages 2";
    case StrategyOption::servers:  // 2 servers and 2 workers
      c.servers = 2;
      if (strategy_info(c.strategy).servers) c.world = 4;
      return "--servers 2";
    case StrategyOption::staleness:
      c.staleness = 1;
      return "--staleness 1";
    // A data-parallel strategy's mesh is dp and tp (test_data_parallel_mesh.cpp);
    // a pipeline's any (test_hybrid.cpp).
    case StrategyOption::mesh:
      c.mesh = data_parallel ? "dp=2" : "dp=1,pp=2";
      return "--mesh " + c.mesh;
    case StrategyOption::mesh_order:
      // An order needs a mesh to order (where a mesh is read at all).
      if (strategy_info(c.strategy).reads_option(StrategyOption::mesh))
        c.mesh = data_parallel ? "dp=2" : "pp=2";
      c.mesh_order = "dp,pp,tp";
      return "--mesh-order dp,pp,tp";
    case StrategyOption::sequence_parallel:  // needs a gpt on a tp axis (test_tensor_parallel.cpp)
      c.model = "gpt:4x16x2";
      if (strategy_info(c.strategy).reads_option(StrategyOption::mesh)) {
        c.mesh = data_parallel ? "dp=2,tp=2" : chunked ? "pp=2,tp=2" : "tp=2";
        c.world = data_parallel || chunked ? 4 : c.world;
      }
      c.sequence_parallel = true;
      return "--sequence-parallel";
    case StrategyOption::dp_zero1:  // needs a dp axis (test_hybrid.cpp)
      if (strategy_info(c.strategy).reads_option(StrategyOption::mesh)) c.mesh = "dp=2";

      c.dp_zero1 = true;
      return "--dp-zero1";
  }
  return "";
}

std::string message_of(const RunConfig& c) {
  try {
    validate(c);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Restricts this thread (and the processes it starts) to one core for its lifetime.
class OneCore {
 public:
  OneCore() {
    REQUIRE(sched_getaffinity(0, sizeof saved_, &saved_) == 0);
    int first = 0;
    while (!CPU_ISSET(first, &saved_)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  }
  ~OneCore() { sched_setaffinity(0, sizeof saved_, &saved_); }

 private:
  cpu_set_t saved_;
};

}  // namespace

TEST_CASE("every strategy declares what it is and which options it reads", "[validation]") {
  const std::map<std::string, StrategyFamily> families = {
      {"single", StrategyFamily::single},       {"ddp", StrategyFamily::data_parallel},
      {"dp", StrategyFamily::data_parallel},    {"zero1", StrategyFamily::data_parallel},
      {"zero2", StrategyFamily::data_parallel}, {"zero3", StrategyFamily::data_parallel},
      {"fsdp", StrategyFamily::data_parallel},  {"naive-mp", StrategyFamily::pipeline},
      {"gpipe", StrategyFamily::pipeline},      {"1f1b", StrategyFamily::pipeline},
      {"zb-h1", StrategyFamily::pipeline},      {"interleaved", StrategyFamily::pipeline},
      {"ps", StrategyFamily::parameter_server}};
  REQUIRE(all_strategies().size() == families.size());
  for (const StrategyInfo& s : all_strategies()) {
    INFO(s.name);
    REQUIRE(families.count(s.name));
    CHECK(s.family == families.at(s.name));
    for (const auto& [o, readers] : expected_readers())
      CHECK(s.reads_option(o) == (readers.count(s.name) > 0));
    // The families the reports and views ask about answer from the registry.
    CHECK(is_pipeline_strategy(s.name) == (s.family == StrategyFamily::pipeline));
    // ZeRO's accounting: the reference and the data-parallel family (not a
    // parameter server's two kinds of rank: its report is its own).
    CHECK(has_model_state_prediction(s.name) ==
          (s.family == StrategyFamily::single || s.family == StrategyFamily::data_parallel));
    CHECK(static_cast<bool>(s.schedule) == (s.family == StrategyFamily::pipeline));
  }
  CHECK_FALSE(is_pipeline_strategy("nope"));
  CHECK_FALSE(has_model_state_prediction("nope"));
  const std::map<std::string, int> stages = {{"ddp", 0},   {"dp", 0},    {"zero1", 1},
                                             {"zero2", 2}, {"zero3", 3}, {"fsdp", 3}};
  for (const auto& [name, stage] : stages) CHECK(strategy_info(name).zero_stage == stage);
  CHECK(strategy_info("dp").controller);
  CHECK_FALSE(strategy_info("ddp").controller);
  // The schedules' activations in flight: M for gpipe, P − rank for 1f1b, 1 for naive-mp.
  const auto alive = [](const char* name, int M, int rank, int V = 1) {
    return unit_timing(named_schedule(name, 4, M, V)).peak_alive.at(rank);
  };
  CHECK(alive("gpipe", 8, 3) == 8);
  CHECK(alive("1f1b", 8, 1) == 3);
  CHECK(alive("1f1b", 2, 0) == 2);
  CHECK(alive("naive-mp", 1, 0) == 1);
  CHECK(alive("zb-h1", 8, 3) == 4);  // F to W: P on every stage
  CHECK(alive("zb-h1", 2, 0) == 2);
  // Interleaved, in chunks: its warm-up 2(P − rank − 1) + (V − 1)P, and one more.
  CHECK(alive("interleaved", 8, 0, 2) == 11);
  CHECK(alive("interleaved", 8, 3, 2) == 5);
}

TEST_CASE("every strategy x every option: refused when not read, accepted when read",
          "[validation]") {
  for (const StrategyInfo& s : all_strategies()) {
    INFO(s.name);
    REQUIRE(message_of(base_config(s.name)).empty());  // every option at its default: fine
    for (const auto& [o, readers] : expected_readers()) {
      RunConfig c = base_config(s.name);
      const std::string typed = set_option(c, o);
      INFO(typed);
      REQUIRE(option_set(c, o));
      REQUIRE(option_text(c, o) == typed);
      const std::string m = message_of(c);
      if (readers.count(s.name)) {
        CHECK(m.empty());
        continue;
      }
      // "--micro-batches 4: zero3 has no micro-batches; used by gpipe, 1f1b"
      INFO(m);
      REQUIRE(m.rfind(typed + ": " + s.name + " has no ", 0) == 0);
      const size_t used = m.find("; used by ");
      REQUIRE(used != std::string::npos);
      Names named;
      std::string rest = m.substr(used + 10);
      for (size_t comma; (comma = rest.find(", ")) != std::string::npos; rest.erase(0, comma + 2))
        named.insert(rest.substr(0, comma));
      named.insert(rest);
      CHECK(named == readers);
      CHECK(m.find('\n') == std::string::npos);
      // for_strategy puts back exactly what the strategy does not read.
      const RunConfig kept = for_strategy(c, s.name);
      CHECK_FALSE(option_set(kept, o));
      CHECK(message_of(kept).empty());
    }
  }
}

TEST_CASE("the message names the option the user gave first", "[validation]") {
  RunConfig c = base_config("ddp");
  c.offload = c.recompute = true;
  c.micro_batches = 4;
  // Without an order: the option table's order (--micro-batches comes before --offload).
  CHECK(message_of(c).rfind(
            "--micro-batches 4: ddp has no micro-batches; used by gpipe, 1f1b, zb-h1, interleaved",
            0) == 0);
  try {
    validate(c, {"world", "offload", "micro-batches", "recompute"});
    FAIL("accepted");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == "--offload: ddp has no offload; used by fsdp, zero3");
  }
}

TEST_CASE("comparisons take for each strategy only the options it reads", "[validation]") {
  RunConfig base = base_config("gpipe");
  base.micro_batches = 4;
  base.recompute = true;
  Names listed;
  for (const RunConfig& c : gui::default_compare_configs(base)) {
    listed.insert(c.strategy);
    CHECK(unread_options(c).empty());
    if (c.strategy == "gpipe" || c.strategy == "1f1b") CHECK((c.micro_batches == 4 && c.recompute));
  }
  // Before, --micro-batches 4 left every data-parallel strategy out of the list.
  CHECK(listed.count("ddp"));
  CHECK(listed.count("zero3"));
  CHECK(listed.count("naive-mp"));
  const std::vector<RunConfig> two = gui::parse_compare_list("ddp,1f1b", base);
  REQUIRE(two.size() == 2);
  CHECK(two[0].micro_batches == 1);
  CHECK(two[1].micro_batches == 4);
}

TEST_CASE("the command line refuses options the strategy does not read", "[validation][cli]") {
  // Issue 12's command line: seven options ddp does not read; it used to exit 0.
  const CliResult r = run_cli(
      "run --strategy ddp --offload --recompute --micro-batches 4 --stages 2 --fsdp-unit 2 "
      "--no-prefetch --no-reshard");
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out == "error: --offload: ddp has no offload; used by fsdp, zero3\n");

  const CliResult z = run_cli("run --strategy zero3 --micro-batches 8");
  INFO(z.out);
  CHECK(z.code == 2);
  CHECK(z.out ==
        "error: --micro-batches 8: zero3 has no micro-batches; used by gpipe, 1f1b, zb-h1, "
        "interleaved\n");

  const CliResult p = run_cli("run --strategy gpipe --world 2 --precision fp16");
  INFO(p.out);
  CHECK(p.code == 2);
  CHECK(p.out.rfind("error: --precision fp16: gpipe has no mixed precision; used by ", 0) == 0);

  // A read option is taken: a real (short) run.
  const CliResult ok = run_cli(
      "run --model mlp:4x16 --steps 2 --batch 8 --strategy fsdp "
      "--fsdp-unit 2 --no-reshard --json");
  INFO(ok.out);
  CHECK(ok.code == 0);
}

TEST_CASE("an option without its value is named", "[validation][cli]") {
  const CliResult r = run_cli("run --world --batch 64");
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out == "error: --world needs a value (e.g. --world 4)\n");
  const CliResult end = run_cli("run --batch 64 --micro-batches");
  INFO(end.out);
  CHECK(end.code == 2);
  CHECK(end.out == "error: --micro-batches needs a value (e.g. --micro-batches 8)\n");
  // A negative number is a value, not an option: the message is about the value.
  const CliResult neg = run_cli("run --lr -1");
  INFO(neg.out);
  CHECK(neg.code == 2);
  CHECK(neg.out.find("--lr -1 is invalid") != std::string::npos);
}

TEST_CASE("cores available: the affinity mask's count", "[validation][cores]") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  CHECK(cores_available() == CPU_COUNT(&set));
  CHECK(cores_available() >= 1);
  int inside = 0;
  std::thread([&] {
    OneCore one;
    inside = cores_available();
  }).join();
  CHECK(inside == 1);
  CHECK(cores_available() == CPU_COUNT(&set));  // the restriction ended with that thread
}

TEST_CASE("oversubscription is said plainly", "[validation][cores]") {
  CHECK(oversubscription_note(2, 2).empty());
  CHECK(oversubscription_note(1, 16).empty());
  CHECK(oversubscription_note(4, 2) ==
        "4 ranks on 2 cores: ranks take turns on the cores, so step times and compute spans are "
        "stretched and waits grow; compare timings at world \xE2\x89\xA4 2 here");
  CHECK(oversubscription_short(3, 1) == "3 ranks on 1 core: timings stretched");
  RunConfig c = base_config("ddp");
  c.world = 4;
  CHECK(oversubscription_note(c, 2) == oversubscription_note(4, 2));
  CHECK(oversubscription_note(c, 4).empty());
  c.device = "no-such-device";  // invalid: validate() speaks, not this note
  CHECK(oversubscription_note(c, 2).empty());
}

TEST_CASE("run's summary and --json say when ranks outnumber cores", "[validation][cores][cli]") {
  const std::string args = "run --model mlp:2x16 --steps 2 --batch 8 --strategy ddp --world 2";
  CliResult text, json, fits;
  {
    OneCore one;  // the binary inherits this thread's single core
    text = run_cli(args);
    json = run_cli(args + " --json");
    fits = run_cli("run --model mlp:2x16 --steps 2 --batch 8 --strategy single --world 1");
  }
  INFO(text.out);
  REQUIRE(text.code == 0);
  CHECK(text.out.find("\n  cores             2 ranks on 1 core: ranks take turns on the cores, "
                      "so step times and compute spans are stretched and waits grow; compare "
                      "timings at world \xE2\x89\xA4 1 here\n") != std::string::npos);
  REQUIRE(json.code == 0);
  INFO(json.out);
  const auto j = nlohmann::json::parse(json.out.substr(json.out.rfind("\n{") + 1));
  CHECK(j["cores_available"] == 1);
  CHECK(j["oversubscribed"] == true);
  CHECK(j["oversubscription"].get<std::string>().rfind("2 ranks on 1 core: ", 0) == 0);
  INFO(fits.out);
  REQUIRE(fits.code == 0);
  CHECK(fits.out.find("  cores  ") == std::string::npos);
}
