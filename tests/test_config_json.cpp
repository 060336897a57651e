// The run's settings as JSON (core/io/config_json.h) and the option table's
// parsers (core/run_options.h) on hostile input. Also built alone under
// ASan+UBSan (shardlab_config_asan): every byte of these comes from a file or
// a command line.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/io/config_json.h"
#include "core/io/json_check.h"
#include "core/run_options.h"

using namespace shardlab;
using nlohmann::json;

namespace {

const JsonChecker kCheck("run.json", "recording");

RunConfig read(const json& j, const std::vector<const char*>& required = {}) {
  return config_from_json(kCheck, j, "config", required);
}

// A configuration with every option away from its default.
RunConfig everything_set() {
  RunConfig c;
  c.model = "gpt:2x32x4";
  c.seq = 16;
  c.data = "corpus.txt";
  c.attention = "flash";
  c.tf32 = true;
  c.strategy = "fsdp";
  c.world = 3;
  c.batch = 12;
  c.steps = 7;
  c.seed = 99;
  c.timeout_ms = 1234;
  c.optimizer.kind = OptimizerKind::sgd;
  c.optimizer.lr = 0.25f;
  c.micro_batches = 4;
  c.stages = 3;
  c.partition = {1, 1, 0};
  c.precision = "bf16";
  c.recompute = true;
  c.prefetch = false;
  c.overlap = false;
  c.bucket_mb = 2.5;
  c.fsdp_unit = 2;
  c.reshard_after_forward = false;
  c.offload = true;
  c.offload_to = "nvme:/mnt/nvme";
  c.offload_params = true;
  c.mesh = "dp=2,pp=2";
  c.mesh_order = "dp,pp,tp";
  c.sequence_parallel = true;
  c.dp_zero1 = true;
  c.schedule = "mine.txt";
  c.virtual_stages = 3;
  c.servers = 2;
  c.staleness = 3;
  return c;
}

}  // namespace

TEST_CASE("config JSON: every setting and every option row round-trips", "[config][json]") {
  const RunConfig c = everything_set();
  const json j = config_json(c);
  const RunConfig back = read(j);
  CHECK(config_json(back) == j);
  for (const OptionRow& r : option_rows()) {
    INFO(r.flag);
    CHECK(j.contains(r.json_key));
    if (r.flag_value_key) CHECK(j.contains(r.flag_value_key));
    CHECK(option_equal(back, c, r.id));
    CHECK(option_set(back, r.id));
  }
  CHECK(back.seq == 16);
  CHECK(back.data == "corpus.txt");
  CHECK(back.attention == "flash");
  CHECK(back.tf32);
  CHECK(back.optimizer.kind == OptimizerKind::sgd);
  CHECK(back.optimizer.lr == 0.25f);

  // The defaults write no gpt-only keys, and an empty object reads as the defaults.
  const json d = config_json(RunConfig{});
  for (const char* k : {"seq", "data", "attention", "tf32"}) CHECK_FALSE(d.contains(k));
  CHECK(config_json(read(json::object())) == d);
  // A gpt written before --attention ran the materialised attention.
  CHECK(read({{"model", "gpt:1x8x2"}}).attention == "naive");
}

TEST_CASE("config JSON: hostile values are one line naming the field and what is valid",
          "[config][json]") {
  auto refused = [](const json& j, const std::string& want) {
    INFO(j.dump());
    CHECK_THROWS_WITH(read(j),
                      Catch::StartsWith("recording 'run.json': config") && Catch::Contains(want));
  };
  refused(json::array(), "expected an object, got an array");
  refused({{"colour", 1}}, "unknown key 'colour' (valid: ");
  refused({{"col\x01our", 1}}, "unknown key 'col\\x01our'");
  refused({{"world", "two"}}, "config.world: expected an integer, got the string 'two'");
  refused({{"world", 0}}, "config.world: 0 is out of range (valid: 1 to 64)");
  refused({{"world", 1e300}}, "config.world: expected an integer");
  refused({{"world", std::numeric_limits<uint64_t>::max()}}, "out of range");
  refused({{"batch", -1}}, "config.batch: -1 is out of range");
  refused({{"seed", -3}}, "config.seed: expected a non-negative integer");
  refused({{"model", ""}}, "config.model: is empty");
  refused({{"model", std::string(5000, 'x')}}, "is 5000 bytes long (valid: up to 4096)");
  refused({{"model", "mlp\n"}}, "contains a control character");
  refused({{"attention", "fast"}}, "'fast' is not an attention (valid: naive, flash)");
  refused({{"device", "tpu"}}, "'tpu' is not a device (valid: cpu, cuda, auto, cpu-guarded)");
  refused({{"backend", "mpi"}}, "'mpi' is not a backend (valid: auto, gloo, nccl)");
  refused({{"optimizer", {{"kind", "adam"}}}}, "config.optimizer: missing key 'lr'");
  refused({{"optimizer",
            {{"kind", "adam"},
             {"lr", 1},
             {"beta1", 0.9},
             {"beta2", 0.9},
             {"eps", 1},
             {"weight_decay", 0}}}},
          "'adam' is not an optimizer (valid: adamw, sgd)");
  refused({{"optimizer",
            {{"kind", "sgd"},
             {"lr", 1e300},
             {"beta1", 0.9},
             {"beta2", 0.9},
             {"eps", 1},
             {"weight_decay", 0}}}},
          "config.optimizer.lr: 1e+300 is out of range");
  refused({{"partition", {1, "2"}}}, "config.partition[1]: expected an integer");
  refused({{"partition", std::vector<int>(5000, 1)}}, "has 5000 entries (valid: 0 to 4096)");
  refused({{"bucket_mb", -1}}, "config.bucket_mb: -1 is out of range");
  refused({{"offload", 1}}, "config.offload: expected true or false, got 1");
  refused({{"precision", nullptr}}, "config.precision: expected a string, got null");
  // A required key missing.
  CHECK_THROWS_WITH(read(json::object(), {"model"}), Catch::Contains("missing key 'model'"));
}

TEST_CASE("option values typed after a flag: only values of the option's type", "[options]") {
  RunConfig c;
  CHECK(parse_option_value(c, StrategyOption::micro_batches, "8"));
  CHECK(c.micro_batches == 8);
  for (const char* bad : {"", "8x", "x8", "8 ", "99999999999999999999", "2147483648", "1e3"}) {
    INFO(bad);
    CHECK_FALSE(parse_option_value(c, StrategyOption::micro_batches, bad));
  }
  CHECK(c.micro_batches == 8);  // a refused value changes nothing
  CHECK(parse_option_value(c, StrategyOption::bucket_mb, "0.5"));
  CHECK(c.bucket_mb == 0.5);
  for (const char* bad : {"", "nan", "inf", "-inf", "1e999", "0.5MB"}) {
    INFO(bad);
    CHECK_FALSE(parse_option_value(c, StrategyOption::bucket_mb, bad));
  }
  CHECK(c.bucket_mb == 0.5);
  CHECK(parse_option_value(c, StrategyOption::precision, "fp16"));
  CHECK_FALSE(parse_option_value(c, StrategyOption::precision, "fp8"));
  CHECK_FALSE(parse_option_value(c, StrategyOption::precision, std::string("fp16\0", 5)));
  CHECK(c.precision == "fp16");
  CHECK(parse_option_value(c, StrategyOption::partition, "3,2,2,1"));
  CHECK(c.partition == std::vector<int>{3, 2, 2, 1});
  for (const char* bad : {",", "1,,2", "1,", ",1", "1;2", "a", "1,99999999999"}) {
    INFO(bad);
    CHECK_FALSE(parse_option_value(c, StrategyOption::partition, bad));
    CHECK_THROWS_AS(parse_int_list(bad, "--partition"), ConfigError);
  }
  CHECK(c.partition == std::vector<int>{3, 2, 2, 1});
  // A long list is parsed, not refused for its length here (validate() checks it).
  std::string many = "1";
  for (int i = 0; i < 10000; ++i) many += ",1";
  CHECK(parse_int_list(many, "--partition").size() == 10001);
  // Every row is found by its flag, with or without dashes, and by its JSON key.
  for (const OptionRow& r : option_rows()) {
    INFO(r.flag);
    CHECK(find_option(r.flag) == &r);
    CHECK(find_option(std::string(r.flag).substr(2)) == &r);
    CHECK(find_option(r.json_key) == &r);
  }
  CHECK(find_option("") == nullptr);
  CHECK(find_option("--") == nullptr);
  CHECK(find_option("--nope") == nullptr);
}
