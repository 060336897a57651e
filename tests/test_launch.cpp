// `shardlab launch` on the real binary with `launch-probe` as the ranks: the environment each
// rank gets, whole prefixed lines, failure reports, teardown with no survivors, restarts.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include "tests/test_util.h"

using shardlab::test::Spawned;
using shardlab::test::alive;

namespace {

using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;

struct Launched {
  int code = -1;
  std::string out;  // stdout and stderr together
  double seconds = 0;
};

// The shardlab binary with `args`, and `env` added to ours.
Spawned background(const std::vector<std::string>& args, const Env& env) {
  std::vector<std::string> all = {SHARDLAB_BIN};
  all.insert(all.end(), args.begin(), args.end());
  return Spawned(all, env);
}

Launched launch(const std::vector<std::string>& args, const Env& env = {}) {
  const auto t0 = Clock::now();
  Spawned b = background(args, env);
  Launched r;
  r.code = b.wait_exit(30);
  r.out = b.out();
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

// The pids the probes printed ("[rank R] probe pid=P ..."), by rank.
std::map<int, pid_t> probe_pids(const std::string& out) {
  std::map<int, pid_t> pids;
  for (size_t at = 0; (at = out.find("[rank ", at)) != std::string::npos; ++at) {
    const int rank = std::atoi(out.c_str() + at + 6);
    const size_t close = out.find("] probe pid=", at);
    if (close == std::string::npos || close > out.find('\n', at)) continue;
    pids[rank] = static_cast<pid_t>(std::atol(out.c_str() + close + 12));
  }
  return pids;
}

// True when none of `pids` is alive within `timeout_s`.
bool all_gone(const std::map<int, pid_t>& pids, double timeout_s = 3) {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    bool any = false;
    for (const auto& [rank, pid] : pids) any = any || alive(pid);
    if (!any) return true;
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The value after "key=" on rank R's probe line.
std::string probe_field(const std::string& out, int rank, const std::string& key) {
  const std::string tag = "[rank " + std::to_string(rank) + "] probe ";
  const size_t line = out.find(tag);
  if (line == std::string::npos) return "<no probe line for rank " + std::to_string(rank) + ">";
  const size_t end = out.find('\n', line);
  const size_t at = out.find(" " + key + "=", line);
  if (at == std::string::npos || at > end) return "<no " + key + ">";
  const size_t from = at + key.size() + 2;
  const size_t to = std::min(out.find(' ', from), end);
  return out.substr(from, to - from);
}

// How many times `what` occurs in `text`.
size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("launch: each rank gets torchrun's variables and prints whole prefixed lines",
          "[launch]") {
  const Launched r = launch({"launch", "--nproc-per-node", "3", "--", "launch-probe"});
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string port = probe_field(r.out, 0, "master");
  CHECK(port.rfind("127.0.0.1:", 0) == 0);
  for (int rank = 0; rank < 3; ++rank) {
    CHECK(probe_field(r.out, rank, "launcher") == "shardlab");  // "shardlab launch"
    CHECK(probe_field(r.out, rank, "rank") == std::to_string(rank));
    CHECK(probe_field(r.out, rank, "world") == "3");
    CHECK(probe_field(r.out, rank, "local_rank") == std::to_string(rank));
    CHECK(probe_field(r.out, rank, "local_world") == "3");
    CHECK(probe_field(r.out, rank, "node_rank") == "0");
    CHECK(probe_field(r.out, rank, "nnodes") == "1");
    CHECK(probe_field(r.out, rank, "master") == port);  // one free port, the same for all
    CHECK(probe_field(r.out, rank, "restart") == "0");
    CHECK(probe_field(r.out, rank, "run_id") == probe_field(r.out, 0, "run_id"));
    // Written in two pieces 30 ms apart, printed as one line; stderr prefixed too.
    CHECK_THAT(r.out, Catch::Contains("[rank " + std::to_string(rank) +
                                      "] half line rank=" + std::to_string(rank) + "\n"));
    CHECK_THAT(r.out, Catch::Contains("[rank " + std::to_string(rank) +
                                      "] probe stderr rank=" + std::to_string(rank) + "\n"));
  }
  CHECK_THAT(probe_field(r.out, 0, "run_id"), Catch::EndsWith("-0"));
  // Every line is the launcher's or a rank's: nothing unprefixed, nothing cut.
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    CHECK((line.rfind("[rank ", 0) == 0 || line.rfind("shardlab launch: ", 0) == 0));
  }
}

TEST_CASE("launch: node 1 of 2 holds ranks 2-3 of 4, and both nodes agree on the run id",
          "[launch]") {
  const std::vector<std::string> args = {
      "launch",      "--nproc-per-node", "2",         "--nnodes",      "2",     "--node-rank",
      "1",           "--master-addr",    "127.0.0.1", "--master-port", "29733", "--",
      "launch-probe"};
  const Launched r = launch(args);
  INFO(r.out);
  REQUIRE(r.code == 0);
  for (int rank = 2; rank < 4; ++rank) {
    CHECK(probe_field(r.out, rank, "world") == "4");
    CHECK(probe_field(r.out, rank, "local_rank") == std::to_string(rank - 2));
    CHECK(probe_field(r.out, rank, "node_rank") == "1");
    CHECK(probe_field(r.out, rank, "nnodes") == "2");
    CHECK(probe_field(r.out, rank, "master") == "127.0.0.1:29733");
  }
  // The stem is derived from the master address and port, so node 0 gets the same.
  const Launched again = launch(args);
  CHECK(probe_field(again.out, 2, "run_id") == probe_field(r.out, 2, "run_id"));
}

TEST_CASE("launch: a rank killed by SIGKILL is named, the others are stopped", "[launch]") {
  const Launched r = launch({"launch", "--nproc-per-node", "3", "--", "launch-probe"},
                            {{"SHARDLAB_PROBE_RANK", "1"},
                             {"SHARDLAB_PROBE_ACTION", "sigkill"},
                             {"SHARDLAB_PROBE_OTHERS", "sleep"}});
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("shardlab launch: rank 1 was killed by SIGKILL\n"));
  CHECK_THAT(r.out, Catch::Contains("stopping the other 2 ranks"));
  CHECK(r.seconds < 4);  // the sleepers took SIGTERM; no wait for the 5 s grace
  const auto pids = probe_pids(r.out);
  REQUIRE(pids.size() == 3);
  CHECK(all_gone(pids, 0));  // reaped by the launcher before it exited
}

TEST_CASE("launch: the failed rank's exit code is the launcher's", "[launch]") {
  const Launched r = launch({"launch", "--nproc-per-node", "3", "--", "launch-probe"},
                            {{"SHARDLAB_PROBE_RANK", "2"}, {"SHARDLAB_PROBE_ACTION", "exit:7"}});
  INFO(r.out);
  CHECK(r.code == 7);
  CHECK_THAT(r.out, Catch::Contains("shardlab launch: rank 2 exited with code 7\n"));
  // A rank that cannot even start (an unknown command) fails the same way.
  const Launched bad = launch({"launch", "--nproc-per-node", "2", "--", "no-such-command"});
  INFO(bad.out);
  CHECK(bad.code == 2);
  CHECK(count_of(bad.out, "unknown command 'no-such-command'") == 1);
  CHECK_THAT(bad.out, Catch::Contains("exited with code 2"));
}

TEST_CASE("launch: an error every rank prints alike (a bad option) is shown once, exit 2",
          "[launch]") {
  const Launched r = launch(
      {"launch", "--nproc-per-node", "3", "--", "run", "--model", "mlp:4x64", "--bogus", "1"});
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(count_of(r.out, "error: unknown option '--bogus' for 'shardlab run'") == 1);
  CHECK(count_of(r.out, "error: ") == 1);
  // A typo in the store's directory: refused, once, and nothing created.
  const std::string dir = "/tmp/shardlab-no-such-dir-" + std::to_string(getpid()) + "/rdzv";
  const Launched typo = launch({"launch", "--nproc-per-node", "3", "--", "run", "--model",
                                "mlp:4x64", "--steps", "3", "--rdzv", "file://" + dir});
  INFO(typo.out);
  CHECK(typo.code == 2);
  CHECK(count_of(typo.out, "error: rendezvous directory " + dir +
                               " does not exist (valid: an existing directory every rank can "
                               "see; create it first, e.g. mkdir -p " +
                               dir + ")\n") == 1);
  CHECK(count_of(typo.out, "error: ") == 1);
  CHECK(access(dir.substr(0, dir.rfind('/')).c_str(), F_OK) != 0);
  // Error lines that differ from rank to rank are each shown.
  const Launched each = launch({"launch", "--nproc-per-node", "3", "--", "launch-probe"},
                               {{"SHARDLAB_PROBE_ERRORS", "1"}});
  INFO(each.out);
  CHECK(each.code == 0);
  for (int rank = 0; rank < 3; ++rank)
    CHECK(count_of(each.out, "] error: probe error of rank " + std::to_string(rank) + "\n") == 1);
  CHECK(count_of(each.out, "] error: probe error alike on every rank\n") == 1);
}

TEST_CASE("launch: a rank that ignores SIGTERM gets SIGKILL after 5 s", "[launch]") {
  const Launched r = launch({"launch", "--nproc-per-node", "2", "--", "launch-probe"},
                            {{"SHARDLAB_PROBE_RANK", "0"},
                             {"SHARDLAB_PROBE_ACTION", "exit:3"},
                             {"SHARDLAB_PROBE_OTHERS", "sleep"},
                             {"SHARDLAB_PROBE_IGNORE_TERM", "1"}});
  INFO(r.out);
  CHECK(r.code == 3);
  CHECK_THAT(r.out, Catch::Contains("rank 1 did not stop within 5 s: SIGKILL"));
  CHECK(r.seconds >= 5);
  CHECK(r.seconds < 12);
  CHECK(all_gone(probe_pids(r.out), 0));
}

TEST_CASE("launch: --max-restarts restarts the group, which succeeds the second time", "[launch]") {
  const Launched r =
      launch({"launch", "--nproc-per-node", "2", "--max-restarts", "2", "--", "launch-probe"},
             {{"SHARDLAB_PROBE_RANK", "1"},
              {"SHARDLAB_PROBE_ACTION", "exit:5"},
              {"SHARDLAB_PROBE_RESTART", "0"}});
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("rank 1 exited with code 5"));
  CHECK_THAT(r.out, Catch::Contains("restarting the group (restart 1 of 2)"));
  CHECK_THAT(r.out, Catch::Contains(" restart=1 "));
  CHECK_THAT(r.out, Catch::Contains("-1\n"));  // SHARDLAB_RUN_ID's suffix: the restart count
  // Same stem in both attempts.
  const std::string first = probe_field(r.out, 0, "run_id");
  CHECK_THAT(r.out, Catch::Contains(first.substr(0, first.size() - 2) + "-1"));

  const Launched never =
      launch({"launch", "--nproc-per-node", "2", "--max-restarts", "1", "--", "launch-probe"},
             {{"SHARDLAB_PROBE_RANK", "0"}, {"SHARDLAB_PROBE_ACTION", "exit:4"}});
  INFO(never.out);
  CHECK(never.code == 4);
  CHECK_THAT(never.out, Catch::Contains("giving up after 1 restart\n"));
}

TEST_CASE("launch: SIGTERM to the launcher reaches the ranks, SIGKILL takes them along",
          "[launch]") {
  const Env sleepers = {{"SHARDLAB_PROBE_OTHERS", "sleep"}};
  auto two_pids = [](const std::string& out) { return probe_pids(out).size() == 2; };
  {
    Spawned b = background({"launch", "--nproc-per-node", "2", "--", "launch-probe"}, sleepers);
    REQUIRE(b.read_until(two_pids, 20));
    const auto pids = probe_pids(b.out());
    for (const auto& [rank, pid] : pids) CHECK(alive(pid));
    kill(b.pid(), SIGTERM);
    const int code = b.wait_exit(30);
    INFO(b.out());
    CHECK(code == 128 + SIGTERM);
    CHECK_THAT(b.out(), Catch::Contains("received SIGTERM, passing it on to the ranks"));
    CHECK(all_gone(pids, 0));
  }
  {
    // The launcher dies without a word: the ranks' parent-death signal kills them.
    Spawned b = background({"launch", "--nproc-per-node", "2", "--", "launch-probe"}, sleepers);
    REQUIRE(b.read_until(two_pids, 20));
    const auto pids = probe_pids(b.out());
    kill(b.pid(), SIGKILL);
    CHECK(b.wait_exit(30) == 128 + SIGKILL);
    INFO(b.out());
    CHECK(all_gone(pids, 3));
  }
}

TEST_CASE("launch: bad options are one line naming the value", "[launch]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"launch", "--nproc-per-node", "0", "--", "launch-probe"},
       "--nproc-per-node 0 is out of range (valid: 1 to 1024)"},
      {{"launch", "--nproc-per-node", "two", "--", "launch-probe"},
       "--nproc-per-node 'two' is not an integer (valid: 1 to 1024)"},
      {{"launch", "--nnodes", "2", "--node-rank", "2", "--master-addr", "h", "--master-port", "1",
        "--", "launch-probe"},
       "--node-rank 2 is not in 0..1 (--nnodes 2)"},
      {{"launch", "--nproc-per-node", "2", "launch-probe"}, "unexpected argument 'launch-probe'"},
      {{"launch", "--nproc-per-node", "2"}, "shardlab launch needs '--' before the command"},
      {{"launch", "--nproc-per-node", "2", "--"}, "nothing to run after '--'"},
      {{"launch", "--nnodes", "2", "--", "launch-probe"},
       "--nnodes 2 needs --master-addr and --master-port"},
      {{"launch", "--master-port", "70000", "--", "launch-probe"},
       "--master-port 70000 is out of range (valid: 1 to 65535)"},
      {{"launch", "--master-port", "0", "--", "launch-probe"},
       "--master-port 0 is out of range (valid: 1 to 65535)"},
      {{"launch", "--max-restarts", "-1", "--", "launch-probe"},
       "--max-restarts -1 is out of range (valid: 0 to 1000)"},
      {{"launch", "--master-addr", "192.0.2.1", "--", "launch-probe"},
       "--master-addr 192.0.2.1 is not an address of this host"},
      {{"launch", "--run-id", "a/b", "--", "launch-probe"}, "--run-id 'a/b' has a character"},
      {{"launch", "--", "launch", "--", "run"}, "the ranks cannot run 'launch' themselves"},
      {{"launch", "--bogus", "--", "run"}, "unknown option '--bogus' for 'shardlab launch'"},
  };
  for (const auto& [args, want] : cases) {
    const Launched r = launch(args);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::StartsWith("error: " + want));
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  }
  const Launched help = launch({"launch", "--help"});
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("usage: shardlab launch"));
}
