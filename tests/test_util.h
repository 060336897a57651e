// Helpers shared by the test files: running the `shardlab` binary, and
// comparing final weights within float32 reduction-order tolerance.
#pragma once
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
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
#include <map>
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

// A program running beside the test with its stdout and stderr on one pipe:
// read while it runs, waited for, and killed and reaped when it goes out of
// scope (so a failed REQUIRE leaves no process behind).
class Spawned {
 public:
  // argv[0] is the program's path; env is set in the child only.
  explicit Spawned(std::vector<std::string> argv,
                   const std::map<std::string, std::string>& env = {}) {
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    int p[2];
    REQUIRE(pipe2(p, O_CLOEXEC) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      dup2(p[1], 1);
      dup2(p[1], 2);
      execv(args[0], args.data());
      _exit(127);
    }
    close(p[1]);
    fd_ = p[0];
  }
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;
  ~Spawned() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }

  pid_t pid() const { return pid_; }
  // Everything it wrote so far.
  const std::string& out() const { return out_; }

  // Reads for up to `timeout_s`, until done(out()) (true), or the output ends
  // (then whether done(out()) holds).
  template <class F>
  bool read_until(F done, double timeout_s) {
    using Clock = std::chrono::steady_clock;
    const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (!done(out_)) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
      if (left <= 0) return false;
      pollfd f{fd_, POLLIN, 0};
      if (poll(&f, 1, static_cast<int>(left)) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) return done(out_);
      out_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  bool read_until(const char* text, double timeout_s) {
    return read_until(std::string(text), timeout_s);
  }
  bool read_until(const std::string& text, double timeout_s) {
    return read_until([&](const std::string& out) { return out.find(text) != std::string::npos; },
                      timeout_s);
  }

  // Reads to the end of its output (for up to `timeout_s`), then its exit code
  // (128 + the signal when a signal ended it).
  int wait_exit(double timeout_s) {
    read_until([](const std::string&) { return false; }, timeout_s);
    int status = 0;
    REQUIRE(waitpid(pid_, &status, 0) == pid_);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string out_;
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

// `shardlab ARGS` is refused as bad input should be: exit code 2 and one
// line, "error: " first, that contains `part`.
inline void expect_refused(const std::string& args, const std::string& part) {
  const CliResult r = run_cli(args);
  INFO("shardlab " << args << "\n" << r.out);
  CHECK(r.code == 2);
  CHECK(r.out.rfind("error: ", 0) == 0);
  CHECK(r.out.find('\n') == r.out.size() - 1);
  CHECK(r.out.find(part) != std::string::npos);
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
