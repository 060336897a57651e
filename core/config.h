// RunConfig: everything that defines a run, as a value. Validated up front so
// every bad setting ends in one clear line naming the value and what is valid.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

namespace shardlab {

// Bad input from the user: the CLI prints the message and exits with code 2.
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

enum class OptimizerKind { sgd, adamw };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;  // AdamW only
};
const char* to_string(OptimizerKind k);

struct RunConfig {
  std::string model = "mlp:8x256";
  std::string strategy = "ddp";
  int world = 2;
  int batch = 64;  // global batch, split across data-parallel ranks in rank order
  int steps = 100;
  OptimizerConfig optimizer;
  uint64_t seed = 1;
  std::string device = "cpu";
  std::string backend = "gloo";
  int timeout_ms = 30000;  // every collective gives up after this
  bool record = true;      // spans and allocation events (memory stats are always kept)

  // ddp
  double bucket_mb = 25.0;  // PyTorch DDP's default bucket_cap_mb
  bool overlap = true;      // all-reduce buckets during backward

  // Strategy options not known to core, as name=value (later strategies).
  std::map<std::string, std::string> options;
};

// Throws ConfigError for settings that are invalid for any strategy; the
// strategy's own validate() checks the rest.
void validate_common(const RunConfig& cfg);

}  // namespace shardlab
