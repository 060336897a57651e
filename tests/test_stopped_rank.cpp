// A rank whose process is stopped (SIGSTOP: a debugger, Ctrl-Z, a frozen host) under `shardlab
// launch`: the whole group ends within the timeout and a few seconds, whichever rank it is,
// rank 0 included, whose process serves the env:// and tcp:// store.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

using shardlab::test::alive;
using shardlab::test::free_port;

namespace {

using Clock = std::chrono::steady_clock;

// The collectives' timeout in these runs, and what the group may take beyond it to end.
constexpr int kTimeoutMs = 3000;
constexpr double kSlackS = 5;

// RANK=… from a process's environment, or -1.
int rank_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string var;
  while (std::getline(f, var, '\0'))
    if (var.rfind("RANK=", 0) == 0) return std::atoi(var.c_str() + 5);
  return -1;
}

// The launcher's children, by rank (its ranks are its direct children).
std::map<int, pid_t> ranks_of(pid_t launcher) {
  std::map<int, pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string all;
    std::getline(stat, all);
    const size_t paren = all.rfind(')');
    if (paren == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(all.c_str() + paren + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid != launcher) continue;
    const pid_t pid = std::atoi(name.c_str());
    const int rank = rank_of(pid);
    if (rank >= 0) out[rank] = pid;
  }
  return out;
}

// `shardlab launch --nproc-per-node 3 -- run …` in the background, output to a pipe; whatever
// it and its ranks are doing at the end of the test, they are continued and killed.
struct Group {
  explicit Group(const std::vector<std::string>& run_args) : launcher(argv(run_args)) {}
  ~Group() {  // before the launcher goes: a stopped rank must be continued to die
    for (const auto& [rank, r] : ranks) {
      kill(r, SIGCONT);
      kill(r, SIGKILL);
    }
  }
  static std::vector<std::string> argv(const std::vector<std::string>& run_args) {
    std::vector<std::string> all = {SHARDLAB_BIN, "launch", "--nproc-per-node", "3", "--", "run"};
    all.insert(all.end(), run_args.begin(), run_args.end());
    return all;
  }
  shardlab::test::Spawned launcher;
  std::map<int, pid_t> ranks;
};

// Stops rank `victim` mid-training and returns the launcher's output; the group must end
// within the timeout and kSlackS seconds, with no rank left.
std::string stop_rank(int victim, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"--model",     "mlp:4x64",     "--steps",
                                   "1000000",     "--batch",      "12",
                                   "--no-record", "--timeout-ms", std::to_string(kTimeoutMs)};
  args.insert(args.end(), extra.begin(), extra.end());
  Group g(args);
  // Rank 0's progress line: every rank is past the rendezvous and training.
  REQUIRE(g.launcher.read_until("[rank 0]   step ", 30));
  g.ranks = ranks_of(g.launcher.pid());
  REQUIRE(g.ranks.size() == 3);
  REQUIRE(kill(g.ranks.at(victim), SIGSTOP) == 0);
  const auto t0 = Clock::now();
  const int code = g.launcher.wait_exit(60);  // to EOF: the launcher and every rank are gone
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  INFO(g.launcher.out());
  CHECK(code == 1);
  CHECK(seconds < kTimeoutMs / 1000.0 + kSlackS);
  for (const auto& [rank, pid] : g.ranks) {
    INFO("rank " << rank);
    CHECK_FALSE(alive(pid));
  }
  std::printf("rank %d stopped: the group ended %.1f s later (timeout %.1f s)\n", victim, seconds,
              kTimeoutMs / 1000.0);
  return g.launcher.out();
}

}  // namespace

TEST_CASE("launch: rank 0 stopped (it serves the env:// store) ends the group within the timeout",
          "[launch][stopped]") {
  const std::string out = stop_rank(0);
  CHECK_THAT(out, Catch::Contains("the run's store stopped answering"));
}

TEST_CASE("launch: rank 0 stopped (it serves the tcp:// store) ends the group within the timeout",
          "[launch][stopped]") {
  const std::string out =
      stop_rank(0, {"--rdzv", "tcp://127.0.0.1:" + std::to_string(free_port())});
  CHECK_THAT(out, Catch::Contains("the run's store stopped answering"));
}

TEST_CASE("launch: rank 1 stopped ends the group within the timeout, named", "[launch][stopped]") {
  CHECK_THAT(stop_rank(1), Catch::Contains("rank 1 does not answer"));
}

TEST_CASE("launch: rank 2 stopped ends the group within the timeout, named", "[launch][stopped]") {
  CHECK_THAT(stop_rank(2), Catch::Contains("rank 2 does not answer"));
}
