// detect_process_env: each launcher's variables read into one ProcessEnv, every bad value a
// one-line error, and what the real torchrun and mpirun set read back the same way.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "core/config.h"
#include "core/launch/launch_env.h"
#include "tests/test_util.h"

using shardlab::ConfigError;
using shardlab::detect_process_env;
using shardlab::ProcessEnv;

namespace {

using Vars = std::map<std::string, std::string>;

ProcessEnv detect(const Vars& vars) {
  return detect_process_env([&](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

// What detect() throws, or "" when it does not.
std::string error_of(const Vars& vars) {
  try {
    detect(vars);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

Vars torchrun_rank(int rank, int local, int node, int nproc, int nnodes) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(nproc * nnodes)},
          {"LOCAL_RANK", std::to_string(local)},
          {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
          {"GROUP_RANK", std::to_string(node)},
          {"GROUP_WORLD_SIZE", std::to_string(nnodes)},
          {"ROLE_RANK", std::to_string(rank)},
          {"MASTER_ADDR", "10.1.2.3"},
          {"MASTER_PORT", "29517"},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"TORCHELASTIC_RESTART_COUNT", "2"},
          {"TORCHELASTIC_RUN_ID", "none"}};
}

Vars with(Vars v, const std::string& k, const std::string& value) {
  v[k] = value;
  return v;
}

Vars without(Vars v, const std::string& k) {
  v.erase(k);
  return v;
}

bool have(const char* tool) {
  return std::system(("command -v " + std::string(tool) + " >/dev/null 2>&1").c_str()) == 0;
}

// A port free right now on loopback, for the launchers' rendezvous.
int free_port() {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(s >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  close(s);
  return ntohs(a.sin_port);
}

// `env` output (one VAR=value a line) as the lookup a rank would have seen.
Vars read_env_file(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  Vars v;
  for (std::string line; std::getline(in, line);)
    if (auto eq = line.find('='); eq != std::string::npos)
      v[line.substr(0, eq)] = line.substr(eq + 1);
  return v;
}

}  // namespace

TEST_CASE("launch env: no launcher variables is a single process", "[launch]") {
  const ProcessEnv e = detect({{"HOME", "/root"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}});
  // A Slurm batch script sees SLURM_PROCID and the job's task count, but is no rank: no step.
  CHECK_FALSE(e.present);
  CHECK(e.rank == 0);
  CHECK(e.world == 1);
  CHECK(e.master_addr == "127.0.0.1");
  CHECK(e.master_port == 29500);
}

TEST_CASE("launch env: torchrun's variables, rank 5 of 2 nodes x 4", "[launch]") {
  const ProcessEnv e = detect(torchrun_rank(5, 1, 1, 4, 2));
  CHECK(e.present);
  CHECK(e.launcher == "torchrun");
  CHECK(e.rank == 5);
  CHECK(e.world == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world == 4);
  CHECK(e.node_rank == 1);
  CHECK(e.nnodes == 2);
  CHECK(e.master_addr == "10.1.2.3");
  CHECK(e.master_port == 29517);
  CHECK(e.agent_store);
  CHECK(e.restart == 2);
  CHECK(e.run_id == "none");
}

TEST_CASE("launch env: shardlab launch, and RANK/WORLD_SIZE set by hand", "[launch]") {
  Vars ours = without(without(torchrun_rank(1, 1, 0, 2, 1), "TORCHELASTIC_USE_AGENT_STORE"),
                      "TORCHELASTIC_RESTART_COUNT");
  ours.erase("TORCHELASTIC_RUN_ID");
  ours["SHARDLAB_RUN_ID"] = "abc-1";
  ours["SHARDLAB_RESTART_COUNT"] = "1";
  const ProcessEnv e = detect(ours);
  CHECK(e.launcher == "shardlab launch");
  CHECK_FALSE(e.agent_store);
  CHECK(e.restart == 1);
  CHECK(e.run_id == "abc-1");

  // env:// by hand: one node holding every rank, loopback by default.
  const ProcessEnv h = detect({{"RANK", "3"}, {"WORLD_SIZE", "4"}});
  CHECK(h.launcher == "env");
  CHECK(h.local_rank == 3);
  CHECK(h.local_world == 4);
  CHECK(h.nnodes == 1);
  CHECK(h.master_addr == "127.0.0.1");
  CHECK(h.master_port == 29500);
  // Only LOCAL_WORLD_SIZE: the nodes follow from it.
  const ProcessEnv l = detect(
      {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h0"}});
  CHECK(l.local_rank == 1);
  CHECK(l.nnodes == 2);
  CHECK(l.node_rank == 1);
}

TEST_CASE("launch env: RANK/WORLD_SIZE win over Open MPI, which wins over Slurm", "[launch]") {
  const Vars ompi = {{"OMPI_COMM_WORLD_RANK", "1"},
                     {"OMPI_COMM_WORLD_SIZE", "2"},
                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                     {"OMPI_MCA_ess_base_jobid", "1514209281"}};
  const Vars slurm = {{"SLURM_PROCID", "3"},  {"SLURM_NTASKS", "4"},
                      {"SLURM_LOCALID", "3"}, {"SLURM_NODEID", "0"},
                      {"SLURM_NNODES", "1"},  {"SLURM_JOB_ID", "77"},
                      {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_TASKS_PER_NODE", "4"}};
  Vars all = slurm;
  all.insert(ompi.begin(), ompi.end());
  CHECK(detect(slurm).launcher == "slurm");
  CHECK(detect(all).launcher == "mpirun");
  all["RANK"] = "0";
  all["WORLD_SIZE"] = "1";
  CHECK(detect(all).launcher == "env");
  CHECK(detect(all).rank == 0);
}

TEST_CASE("launch env: Open MPI on one node and on two", "[launch]") {
  const Vars one = {{"OMPI_COMM_WORLD_RANK", "1"},       {"OMPI_COMM_WORLD_SIZE", "2"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                    {"OMPI_COMM_WORLD_NODE_RANK", "1"},  {"OMPI_MCA_ess_base_jobid", "1514209281"}};
  const ProcessEnv e = detect(one);
  CHECK(e.launcher == "mpirun");
  CHECK(e.rank == 1);
  CHECK(e.world == 2);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world == 2);
  // OMPI_COMM_WORLD_NODE_RANK is the rank within the node, not the node's index.
  CHECK(e.node_rank == 0);
  CHECK(e.nnodes == 1);
  CHECK(e.master_addr == "127.0.0.1");
  CHECK(e.master_port == 29500);
  CHECK(e.run_id == "1514209281");

  Vars two = {{"OMPI_COMM_WORLD_RANK", "3"},
              {"OMPI_COMM_WORLD_SIZE", "4"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  const std::string err = error_of(two);
  CHECK_THAT(err, Catch::Contains("MASTER_ADDR is not set") &&
                      Catch::Contains("export MASTER_ADDR") && Catch::EndsWith("(mpirun)"));
  two["MASTER_ADDR"] = "node0";
  two["MASTER_PORT"] = "29400";
  const ProcessEnv t = detect(two);
  CHECK(t.nnodes == 2);
  CHECK(t.node_rank == 1);
  CHECK(t.master_addr == "node0");
  CHECK(t.master_port == 29400);
}

TEST_CASE("launch env: Slurm steps, even and uneven", "[launch]") {
  const Vars even = {{"SLURM_PROCID", "5"},
                     {"SLURM_NTASKS", "8"},
                     {"SLURM_LOCALID", "1"},
                     {"SLURM_NODEID", "1"},
                     {"SLURM_NNODES", "2"},
                     {"SLURM_JOB_ID", "4242"},
                     {"SLURM_STEP_ID", "3"},
                     {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                     {"SLURM_STEP_NODELIST", "gpu[07-08]"}};
  const ProcessEnv e = detect(even);
  CHECK(e.launcher == "slurm");
  CHECK(e.rank == 5);
  CHECK(e.world == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world == 4);
  CHECK(e.node_rank == 1);
  CHECK(e.nnodes == 2);
  CHECK(e.master_addr == "gpu07");  // the first host of the step, rank 0's
  CHECK(e.run_id == "4242.3");
  CHECK(detect(with(even, "MASTER_ADDR", "10.0.0.9")).master_addr == "10.0.0.9");
  CHECK_THAT(error_of(without(even, "SLURM_STEP_NODELIST")), Catch::Contains("export MASTER_ADDR"));

  // 3 tasks on node 0, 1 on node 1: this rank is the only one on its node.
  Vars uneven = with(with(even, "SLURM_STEP_TASKS_PER_NODE", "3,1"), "SLURM_NTASKS", "4");
  uneven = with(with(uneven, "SLURM_PROCID", "3"), "SLURM_LOCALID", "0");
  const ProcessEnv u = detect(uneven);
  CHECK(u.local_world == 1);
  CHECK(u.world == 4);

  CHECK(shardlab::first_slurm_host("node[03-05,9],gpu1") == "node03");
  CHECK(shardlab::first_slurm_host("rack[2-3]-n[01-04]") == "rack2-n01");
  CHECK(shardlab::first_slurm_host("login1,login2") == "login1");
  CHECK(shardlab::first_slurm_host("solo") == "solo");
}

TEST_CASE("launch env: every bad value is one line naming it", "[launch]") {
  const Vars good = torchrun_rank(1, 1, 0, 4, 1);
  const Vars slurm = {{"SLURM_PROCID", "1"},
                      {"SLURM_NTASKS", "4"},
                      {"SLURM_LOCALID", "1"},
                      {"SLURM_NODEID", "0"},
                      {"SLURM_NNODES", "2"},
                      {"SLURM_STEP_ID", "0"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                      {"MASTER_ADDR", "n0"}};
  const std::vector<std::pair<Vars, std::string>> cases = {
      {with(good, "RANK", "4"), "RANK=4 is not below WORLD_SIZE=4 (torchrun)"},
      {with(good, "RANK", "-1"), "RANK=-1 is out of range (valid: 0 to WORLD_SIZE-1) (torchrun)"},
      {with(good, "RANK", "abc"),
       "RANK=abc is not an integer (valid: 0 to WORLD_SIZE-1) (torchrun)"},
      {with(good, "RANK", "1 "), "RANK=1  is not an integer"},
      {with(good, "RANK", "+1"), "RANK=+1 is not an integer"},
      {with(good, "WORLD_SIZE", "0"), "WORLD_SIZE=0 is out of range (valid: a positive integer)"},
      {with(good, "WORLD_SIZE", "99999999999"), "WORLD_SIZE=99999999999 is out of range"},
      {without(good, "WORLD_SIZE"), "WORLD_SIZE is not set, but RANK is set (torchrun)"},
      {without(good, "RANK"), "RANK is not set, but WORLD_SIZE is set (torchrun)"},
      {with(good, "LOCAL_RANK", "4"), "LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4 (torchrun)"},
      {with(good, "GROUP_RANK", "1"), "GROUP_RANK=1 is not below GROUP_WORLD_SIZE=1 (torchrun)"},
      {with(good, "GROUP_WORLD_SIZE", "2"),
       "WORLD_SIZE=4 is not LOCAL_WORLD_SIZE=4 x GROUP_WORLD_SIZE=2 (torchrun)"},
      {with(good, "LOCAL_WORLD_SIZE", "8"), "LOCAL_WORLD_SIZE=8 is larger than WORLD_SIZE=4"},
      {with(good, "MASTER_PORT", "0"),
       "MASTER_PORT=0 is out of range (valid: 1 to 65535) (torchrun)"},
      {with(good, "MASTER_PORT", "65536"), "MASTER_PORT=65536 is out of range (valid: 1 to 65535)"},
      {with(good, "MASTER_PORT", "http"), "MASTER_PORT=http is not an integer (valid: 1 to 65535)"},
      {with(good, "TORCHELASTIC_RESTART_COUNT", "-2"),
       "TORCHELASTIC_RESTART_COUNT=-2 is out of range"},
      {{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
       "OMPI_COMM_WORLD_RANK=2 is not below OMPI_COMM_WORLD_SIZE=2 (mpirun)"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}},
       "OMPI_COMM_WORLD_SIZE is not set, but OMPI_COMM_WORLD_RANK is set (mpirun)"},
      {{{"OMPI_COMM_WORLD_RANK", "0"},
        {"OMPI_COMM_WORLD_SIZE", "2"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
       "OMPI_COMM_WORLD_LOCAL_RANK=2 is not below OMPI_COMM_WORLD_LOCAL_SIZE=2 (mpirun)"},
      {with(slurm, "SLURM_NODEID", "2"), "SLURM_NODEID=2 is not below SLURM_NNODES=2 (slurm)"},
      {with(slurm, "SLURM_PROCID", "4"), "SLURM_PROCID=4 is not below SLURM_NTASKS=4 (slurm)"},
      {with(slurm, "SLURM_STEP_TASKS_PER_NODE", "2(x"),
       "SLURM_STEP_TASKS_PER_NODE=2(x is not a Slurm task count list"},
      {with(slurm, "SLURM_STEP_TASKS_PER_NODE", "3(x2)"),
       "SLURM_STEP_TASKS_PER_NODE=3(x2) adds up to 6 tasks, not SLURM_NTASKS=4 (slurm)"},
      {with(slurm, "SLURM_STEP_TASKS_PER_NODE", "4"),
       "SLURM_STEP_TASKS_PER_NODE=4 lists 1 nodes, not SLURM_NNODES=2 (slurm)"},
      {with(slurm, "SLURM_LOCALID", "2"),
       "SLURM_LOCALID=2 is not below 2, this node's task count (SLURM_STEP_TASKS_PER_NODE=2(x2)) "
       "(slurm)"},
  };
  for (const auto& [vars, want] : cases) {
    const std::string err = error_of(vars);
    INFO("expected: " << want);
    CHECK_THAT(err, Catch::StartsWith(want));
    CHECK(err.find('\n') == std::string::npos);
  }
  CHECK(error_of(slurm).empty());
}

TEST_CASE("launch env: what the real torchrun sets", "[launch]") {
  if (!have("torchrun")) {
    WARN("skipped: torchrun is not installed (Debian: apt-get install python3-torch)");
    return;
  }
  shardlab::test::TempDir dir;
  const int port = free_port();
  // --redirects/--tee name a local rank that does not exist: torch 1.13's defaults ("0") map
  // to None under Python 3.11's enum.Flag iteration and torchrun crashes in to_map().
  const std::string cmd = "cd " + dir.path.string() +
                          " && timeout 120 torchrun --no_python --nproc_per_node 2 --master_port " +
                          std::to_string(port) +
                          " --redirects 9:1 --tee 9:1 sh -c 'env > env.$RANK' > torchrun.log 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream log(dir.file("torchrun.log"));
  std::stringstream text;
  text << log.rdbuf();
  INFO(text.str());
  REQUIRE(rc == 0);
  for (int rank = 0; rank < 2; ++rank) {
    const ProcessEnv e = detect(read_env_file(dir.file("env." + std::to_string(rank))));
    CHECK(e.present);
    CHECK(e.launcher == "torchrun");
    CHECK(e.rank == rank);
    CHECK(e.world == 2);
    CHECK(e.local_rank == rank);
    CHECK(e.local_world == 2);
    CHECK(e.node_rank == 0);
    CHECK(e.nnodes == 1);
    CHECK(e.master_port == port);
    CHECK(e.agent_store);
    CHECK(e.restart == 0);
  }
}

TEST_CASE("launch env: what the real mpirun sets", "[launch]") {
  if (!have("mpirun")) {
    WARN("skipped: mpirun is not installed (Debian: apt-get install openmpi-bin)");
    return;
  }
  shardlab::test::TempDir dir;
  const std::string cmd = "cd " + dir.path.string() +
                          " && MASTER_PORT=29612 timeout 120 mpirun --allow-run-as-root "
                          "--oversubscribe -np 2 -x MASTER_PORT sh -c "
                          "'env > env.$OMPI_COMM_WORLD_RANK' > mpirun.log 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream log(dir.file("mpirun.log"));
  std::stringstream text;
  text << log.rdbuf();
  INFO(text.str());
  REQUIRE(rc == 0);
  std::string job;
  for (int rank = 0; rank < 2; ++rank) {
    const ProcessEnv e = detect(read_env_file(dir.file("env." + std::to_string(rank))));
    CHECK(e.present);
    CHECK(e.launcher == "mpirun");
    CHECK(e.rank == rank);
    CHECK(e.world == 2);
    CHECK(e.local_rank == rank);
    CHECK(e.local_world == 2);
    CHECK(e.nnodes == 1);
    CHECK(e.master_addr == "127.0.0.1");  // one node: loopback without MASTER_ADDR
    CHECK(e.master_port == 29612);        // passed on with -x
    CHECK_FALSE(e.run_id.empty());
    if (rank == 0) job = e.run_id;
    CHECK(e.run_id == job);
  }
}
