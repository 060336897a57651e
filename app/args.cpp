// Argument parsing (see args.h).
#include "app/args.h"

#include "core/run_options.h"

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
      {"mesh", "dp=2,pp=2"},
      {"mesh-order", "pp,dp,tp"},
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
      {"sizes", "4K..64M"},
      {"worlds", "2,4"},
      {"iters", "20"},
      {"lang", "en"},
      {"width", "80"},
      {"step", "1"},
      {"answer", "2"},
      {"record", "run.shardrec"},
      {"open", "run.shardrec"},
      {"lesson", "zero"},
      {"lesson-step", "2"},
      {"compare-show", "memory"},
      {"nproc-per-node", "4"},
      {"nnodes", "2"},
      {"node-rank", "0"},
      {"master-addr", "127.0.0.1"},
      {"master-port", "29500"},
      {"max-restarts", "3"},
      {"monitor-interval-ms", "100"},
      {"run-id", "job42"},
  };
  auto it = kExamples.find(key);
  return it == kExamples.end() ? "" : it->second;
}

}  // namespace

Args::Args(int argc, char** argv, const std::string& command, const std::set<std::string>& options,
           const std::set<std::string>& flags, Positionals positionals)
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
      // A flag that may take a value (--offload nvme:DIR): the next word is
      // its value when it starts as one of the flag's values do.
      const OptionRow* row = find_option(key);
      const bool takes_value = row && row->flag_value;
      if (takes_value && !inline_value && i + 1 < argc)
        for (const std::string& start : row->flag_value_starts)
          if (std::string(argv[i + 1]).rfind(start, 0) == 0) {
            value = argv[++i];
            inline_value = true;
            break;
          }
      if (inline_value && !takes_value)
        throw ConfigError("option --" + key + " takes no value (got '" + value + "')");
      if (inline_value) flag_values_[key] = value;
      values_[key].assign(1, '1');
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
  // A stray word is a mistake (`demo extra`, a value after a flag): said, not ignored.
  if (positionals == Positionals::none && !positional_.empty() && !help_)
    throw ConfigError("unexpected argument '" + positional_[0] + "' (see 'shardlab " + command +
                      " --help')");
}

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Args::flag_value(const std::string& name) const {
  auto it = flag_values_.find(name);
  if (it == flag_values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  return get(name).value_or(fallback);
}

std::string Args::valid_text(const std::string& name, const std::string& valid) const {
  if (!valid.empty()) return valid;
  const std::string example = example_value(name);
  return "e.g. --" + name + " " + (example.empty() ? "4" : example);
}

int Args::integer(const std::string& name, int fallback, const std::string& valid) const {
  auto v = get(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0')
    throw ConfigError("--" + name + " '" + *v +
                      "' is not an integer (valid: " + valid_text(name, valid) + ")");
  // An integer, but beyond what any option takes: the range, not "not an integer".
  if (errno == ERANGE || x < -2147483647LL || x > 2147483647LL)
    throw ConfigError("--" + name + " " + *v + " is out of range (valid: " +
                      (valid.empty()
                           ? std::string(x < 0 ? "at least -2147483647" : "at most 2147483647")
                           : valid) +
                      ")");
  return static_cast<int>(x);
}

double Args::number(const std::string& name, double fallback, const std::string& valid) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v->c_str(), &end);
  // strtod also reads hex ("0x10"), which no option means.
  if (v->empty() || *end != '\0' || std::isnan(x) || v->find_first_of("xX") != std::string::npos)
    throw ConfigError("--" + name + " '" + *v +
                      "' is not a number (valid: " + valid_text(name, valid) + ")");
  // "inf", "1e400": a number, but not one any option can use.
  if (!std::isfinite(x) || errno == ERANGE)
    throw ConfigError("--" + name + " " + *v +
                      " is out of range (valid: " + valid_text(name, valid) + ")");
  return x;
}

uint64_t Args::u64(const std::string& name, uint64_t fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v->c_str(), &end, 10);
  // strtoull takes "-1" as 2^64 - 1: a sign is refused, not wrapped.
  if (v->empty() || *end != '\0' || errno == ERANGE || v->find('-') != std::string::npos)
    throw ConfigError("--" + name + " '" + *v +
                      "' is invalid (valid: an integer from 0 to 18446744073709551615)");
  return x;
}

}  // namespace shardlab::app
