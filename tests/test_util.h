// Helpers shared by the test files: running the `shardlab` binary, and
// comparing final weights within float32 reduction-order tolerance.
#pragma once
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace shardlab::test {

struct CliResult {
  int code;
  std::string out;  // stdout and stderr together
};

// Runs `shardlab ARGS` (the binary CMake built, SHARDLAB_BIN) through the shell.
inline CliResult run_cli(const std::string& args) {
  const std::string cmd = std::string(SHARDLAB_BIN) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// Largest |a−b| relative to the largest |a|: float32 reduction-order noise is ~1e-6.
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(a[i])));
  }
  return diff / scale;
}

}  // namespace shardlab::test
