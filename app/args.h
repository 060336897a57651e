// A small argument parser for the subcommands: --key value, --key=value and
// flags, with one clear error line for every bad value.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/config.h"

namespace shardlab::app {

class Args {
 public:
  // Whether the command takes words that are not options (lesson names, files).
  enum class Positionals { none, allowed };
  // `flags` take no value; `options` take one. Throws ConfigError on anything
  // else: an unknown option, a missing value, or (Positionals::none) any other
  // word, so nothing typed is silently ignored. --help skips the word check.
  Args(int argc, char** argv, const std::string& command, const std::set<std::string>& options,
       const std::set<std::string>& flags, Positionals positionals = Positionals::none);
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  bool help() const { return help_; }
  std::optional<std::string> get(const std::string& name) const;
  std::string str(const std::string& name, const std::string& fallback) const;
  // The numbers: `valid` says what the command accepts ("1 to 64"), for the
  // message when the value is not a number or does not fit the type.
  int integer(const std::string& name, int fallback, const std::string& valid = "") const;
  double number(const std::string& name, double fallback, const std::string& valid = "") const;
  uint64_t u64(const std::string& name, uint64_t fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // The value typed after a flag that may take one (--offload nvme:DIR); nullopt if none.
  std::optional<std::string> flag_value(const std::string& name) const;
  // Option and flag names as typed, without "--", in command-line order.
  const std::vector<std::string>& given() const { return given_; }

 private:
  std::string valid_text(const std::string& name, const std::string& valid) const;

  std::string command_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> flag_values_;
  std::vector<std::string> positional_;
  std::vector<std::string> given_;
  bool help_ = false;
};

}  // namespace shardlab::app
