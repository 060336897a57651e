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
  // `flags` take no value; `options` take one. Throws ConfigError on anything else.
  Args(int argc, char** argv, const std::string& command, const std::set<std::string>& options,
       const std::set<std::string>& flags);
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  bool help() const { return help_; }
  std::optional<std::string> get(const std::string& name) const;
  std::string str(const std::string& name, const std::string& fallback) const;
  int integer(const std::string& name, int fallback) const;
  double number(const std::string& name, double fallback) const;
  uint64_t u64(const std::string& name, uint64_t fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // Option and flag names as typed, without "--", in command-line order.
  const std::vector<std::string>& given() const { return given_; }

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
  std::vector<std::string> given_;
  bool help_ = false;
};

}  // namespace shardlab::app
