// Helpers shared by the test files: running the `shardlab` binary, and
// comparing final weights within float32 reduction-order tolerance.
#pragma once
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace shardlab::test {

// A TCP port on 127.0.0.1 that was free a moment ago (for a store or a rendezvous).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Alive and not a zombie (an orphan that nobody reaped yet is gone for our purposes).
inline bool alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string all;
  if (!std::getline(stat, all)) return false;
  const size_t paren = all.rfind(')');
  return paren != std::string::npos && paren + 2 < all.size() && all[paren + 2] != 'Z';
}

struct CliResult {
  int code;
  std::string out;  // stdout and stderr together
};

// Runs a shell command line; `out` is what it wrote.
inline CliResult run_shell(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// Runs `shardlab ARGS` (the binary CMake built, SHARDLAB_BIN) through the shell.
inline CliResult run_cli(const std::string& args) {
  return run_shell(std::string(SHARDLAB_BIN) + " " + args + " 2>&1");
}

// run_cli under timeout(1): a command that should fail at once but hangs is
// killed after `limit_s` (code 137) instead of hanging the suite. `seconds`
// is the wall time it took.
struct TimedCliResult : CliResult {
  double seconds;
};
inline TimedCliResult run_cli_within(const std::string& args, int limit_s) {
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = run_shell("timeout -s KILL " + std::to_string(limit_s) + " " +
                                std::string(SHARDLAB_BIN) + " " + args + " 2>&1");
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  return {r, took.count()};
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

// Central differences of f with respect to every element of x.
inline std::vector<double> numeric_grad(std::vector<double>& x, const std::function<double()>& f) {
  const double h = 1e-6;
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = f();
    x[i] = keep - h;
    const double down = f();
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

inline void require_close(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i << ": analytic " << a[i] << " numeric " << b[i]);
    REQUIRE(std::abs(a[i] - b[i]) <= tol * (1 + std::abs(b[i])));
  }
}

// A fresh directory per test case, removed at the end, so runs never see stale files.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("shardlab-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace shardlab::test
