// Argument parsing (see args.h).
#include "app/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace shardlab::app {

namespace {

// A value to show in "--world needs a value (e.g. --world 4)".
std::string example_value(const std::string& key) {
  static const std::map<std::string, std::string> kExamples = {
      {"model", "mlp:8x256"},
      {"strategy", "ddp"},
      {"world", "4"},
      {"batch", "64"},
      {"steps", "100"},
      {"optimizer", "adamw"},
      {"lr", "1e-3"},
      {"seed", "1"},
      {"bucket-mb", "25"},
      {"timeout-ms", "30000"},
      {"precision", "bf16"},
      {"fsdp-unit", "2"},
      {"stages", "4"},
      {"micro-batches", "8"},
      {"partition", "3,2,2,1"},
      {"device", "cpu"},
      {"backend", "gloo"},
      {"trace", "out.json"},
      {"save-init", "init.safetensors"},
      {"save-final", "final.safetensors"},
      {"init-from", "init.safetensors"},
      {"save-data", "data.safetensors"},
      {"params", "7.5e9"},
      {"view", "memory"},
      {"compare", "ddp,single:1"},
      {"screenshot", "out.png"},
      {"frames", "3"},
      {"replay-at", "0.5"},
      {"size", "1600x1000"},
      {"font-scale", "1.5"},
      {"out", "shardlab-demo"},
      {"rounds", "2"},
      {"models", "mlp:8x256"},
      {"strategies", "ddp,zero3"},
  };
  auto it = kExamples.find(key);
  return it == kExamples.end() ? "" : it->second;
}

}  // namespace

Args::Args(int argc, char** argv, const std::string& command, const std::set<std::string>& options,
           const std::set<std::string>& flags)
    : command_(command) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      positional_.push_back(a);
      continue;
    }
    std::string key = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
      inline_value = true;
    }
    if (flags.count(key)) {
      if (inline_value)
        throw ConfigError("option --" + key + " takes no value (got '" + value + "')");
      values_[key] = "1";
      given_.push_back(key);
    } else if (options.count(key)) {
      if (!inline_value) {
        // The next word is another option (`--world --batch 64`): the value is
        // missing, whatever follows would be misread.
        if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0) {
          const std::string example = example_value(key);
          throw ConfigError("--" + key + " needs a value (" +
                            (example.empty() ? "see 'shardlab " + command + " --help'"
                                             : "e.g. --" + key + " " + example) +
                            ")");
        }
        value = argv[++i];
      }
      values_[key] = value;
      given_.push_back(key);
    } else {
      throw ConfigError("unknown option '" + a + "' for 'shardlab " + command +
                        "' (see 'shardlab " + command + " --help')");
    }
  }
}

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  return get(name).value_or(fallback);
}

int Args::integer(const std::string& name, int fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno == ERANGE || x < -2147483647L || x > 2147483647L)
    throw ConfigError("--" + name + " '" + *v + "' is not an integer (valid: e.g. --" + name +
                      " 4)");
  return static_cast<int>(x);
}

double Args::number(const std::string& name, double fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || !std::isfinite(x))
    throw ConfigError("--" + name + " '" + *v + "' is not a number (valid: e.g. --" + name +
                      " 1e-3)");
  return x;
}

uint64_t Args::u64(const std::string& name, uint64_t fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno == ERANGE || (*v)[0] == '-')
    throw ConfigError("--" + name + " '" + *v + "' is not a non-negative integer");
  return x;
}

}  // namespace shardlab::app
