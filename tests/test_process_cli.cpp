// `shardlab run` with one process per rank, on the real binary under the real
// launchers (shardlab launch, torchrun, mpirun, ranks started by hand): final
// weights bit-identical to the threaded run, every store kind, a killed or
// stuck rank named by the others with no process left, restarts that resume.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>

#include "core/run/recording.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using shardlab::test::CliResult;
using shardlab::test::free_port;

namespace {

// Runs a shell command line (stdout and stderr together).
CliResult sh(const std::string& cmd) {
  FILE* p = popen(("( " + cmd + " ) 2>&1").c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

const std::string kBin = SHARDLAB_BIN;

bool have(const std::string& program) {
  return std::system(("command -v " + program + " >/dev/null 2>&1").c_str()) == 0;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A fresh directory for one test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("shardlab-proc-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

const std::string kModel = " --model mlp:4x64 --steps 12";

// The threaded run's final weights for `opts` (world included).
std::string threaded(const TempDir& d, const std::string& opts, const std::string& name) {
  const std::string out = d / name;
  const CliResult r = sh(kBin + " run" + kModel + " " + opts + " --save-final " + out);
  INFO(r.out);
  REQUIRE(r.code == 0);
  return slurp(out);
}

// Processes of a run still alive: any `shardlab run` naming this directory.
bool leftovers(const TempDir& d) {
  // "[s]hardlab-proc-…" matches the runs' command lines but not this shell's.
  std::string pattern = d.path.string();
  const size_t at = pattern.find("shardlab-proc-");
  pattern.replace(at, 1, "[s]");
  return sh("pgrep -f -- '" + pattern + "' >/dev/null").code == 0;
}

}  // namespace

TEST_CASE("shardlab launch: 4 processes end bit-identical to 4 threads", "[process-cli]") {
  TempDir d;
  for (const std::string opts : {"--strategy ddp", "--strategy zero3", "--strategy fsdp",
                                 "--strategy 1f1b --micro-batches 4"}) {
    INFO(opts);
    const std::string want = threaded(d, opts + " --world 4", "threads.st");
    const CliResult r = sh(kBin + " launch --nproc-per-node 4 -- run" + kModel + " " + opts +
                           " --save-final " + (d / "procs.st") + " --trace " + (d / "t.json"));
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK(slurp(d / "procs.st") == want);
    // Rank 0 speaks for the run; the others each print one line with their clock.
    CHECK_THAT(r.out,
               Catch::Contains("[rank 0]   4 processes (shardlab launch), rendezvous env://"));
    CHECK_THAT(r.out, Catch::Contains("[rank 3] rank 3 of 4 done: 12 steps, clock "));
    CHECK_THAT(r.out, Catch::Contains("clocks vs rank 0  rank 1 "));
    // Every process wrote its rank's trace; merged they hold what rank 0's whole trace holds.
    for (int rank = 0; rank < 4; ++rank)
      CHECK(fs::exists(d / ("t.rank" + std::to_string(rank) + ".json")));
    const CliResult m =
        sh(kBin + " trace merge --out " + (d / "m.json") + " " + (d / "t.rank0.json") + " " +
           (d / "t.rank1.json") + " " + (d / "t.rank2.json") + " " + (d / "t.rank3.json"));
    INFO(m.out);
    CHECK(m.code == 0);
    // The app opens both: every rank's spans, the run's losses, each rank's peaks.
    const shardlab::Recording merged = shardlab::load_run_file(d / "m.json");
    const shardlab::Recording whole = shardlab::load_run_file(d / "t.json");
    REQUIRE(merged.run.recorders.size() == 4);
    CHECK(merged.run.losses == whole.run.losses);
    CHECK(merged.run.losses.size() == 12);
    for (int rank = 0; rank < 4; ++rank) {
      CHECK(merged.run.recorders[rank]->span_count() > 0);
      CHECK(merged.run.ranks[rank].memory.device.peak_total ==
            whole.run.ranks[rank].memory.device.peak_total);
    }
    CHECK(merged.run.clock_offset_ns.size() == 4);
  }
  CHECK_FALSE(leftovers(d));
}

TEST_CASE("one process per rank under torchrun (its agent's store) and mpirun", "[process-cli]") {
  TempDir d;
  if (have("torchrun")) {
    const std::string want = threaded(d, "--strategy ddp --world 2", "threads2.st");
    // torchrun 1.13 (Debian's) spells its options with underscores; its
    // redirects keep the ranks' output (otherwise lost under --no_python).
    const CliResult r =
        sh("torchrun --no_python --nproc_per_node 2 --redirects 9:1 --tee 9:1 " + kBin + " run" +
           kModel + " --strategy ddp --save-final " + (d / "torchrun.st"));
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK(slurp(d / "torchrun.st") == want);
    CHECK_THAT(r.out, Catch::Contains("2 processes (torchrun), rendezvous env://"));
    CHECK_THAT(r.out, Catch::Contains("(torchrun's agent store)"));
    // torchrun's own restart (TORCHELASTIC_RESTART_COUNT): the group resumes
    // from its checkpoint through the same agent store, keys kept apart per attempt.
    const std::string want12 = threaded(d, "--strategy ddp --world 2", "threads2b.st");
    const CliResult again =
        sh("SHARDLAB_FAULT=1:7:kill torchrun --no_python --nproc_per_node 2 --max_restarts 1 "
           "--redirects 9:1 --tee 9:1 " +
           kBin + " run" + kModel + " --strategy ddp --checkpoint-every 5 --checkpoint-dir " +
           (d / "ck") + " --save-final " + (d / "torchrun-restarted.st"));
    INFO(again.out);
    REQUIRE(again.code == 0);
    CHECK_THAT(again.out, Catch::Contains("restart 1: resuming from " + (d / "ck") +
                                          "/step-000005 after step 5"));
    CHECK(slurp(d / "torchrun-restarted.st") == want12);
  } else {
    WARN("torchrun skipped: not installed (apt-get install python3-torch)");
  }
  if (have("mpirun")) {
    const std::string want = threaded(d, "--strategy zero3 --world 4", "threads4.st");
    // One host: no ssh needed (a bare machine has none, and Open MPI looks for it).
    const CliResult r =
        sh("mpirun --allow-run-as-root --oversubscribe --mca plm_rsh_agent false -np 4 -x "
           "MASTER_ADDR=127.0.0.1 -x "
           "MASTER_PORT=" +
           std::to_string(free_port()) + " " + kBin + " run" + kModel +
           " --strategy zero3 --save-final " + (d / "mpirun.st"));
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK(slurp(d / "mpirun.st") == want);
    CHECK_THAT(r.out, Catch::Contains("4 processes (mpirun), rendezvous env://"));
  } else {
    WARN("mpirun skipped: not installed (apt-get install openmpi-bin)");
  }
  CHECK_FALSE(leftovers(d));
}

TEST_CASE("one process per rank meets through Gloo's FileStore and RedisStore", "[process-cli]") {
  TempDir d;
  const std::string want = threaded(d, "--strategy zero2 --world 3 --batch 48", "threads.st");
  fs::create_directories(d / "rdzv");  // the store's directory is the user's to make
  const std::string file_run = kBin + " launch --nproc-per-node 3 -- run" + kModel +
                               " --strategy zero2 --batch 48 --rdzv file://" + (d / "rdzv") +
                               " --save-final " + (d / "file.st");
  CliResult r = sh(file_run);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(slurp(d / "file.st") == want);
  CHECK_THAT(r.out, Catch::Contains("rendezvous file://" + (d / "rdzv")));
  if (have("redis-server")) {
    const int port = free_port();
    r = sh("redis-server --port " + std::to_string(port) +
           " --bind 127.0.0.1 --save '' --appendonly no >/dev/null & R=$!; " + kBin +
           " launch --nproc-per-node 3 -- run" + kModel +
           " --strategy zero2 --batch 48 --rdzv redis://127.0.0.1:" + std::to_string(port) +
           " --save-final " + (d / "redis.st") + "; rc=$?; kill $R; wait $R; exit $rc");
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK(slurp(d / "redis.st") == want);
    CHECK_THAT(r.out, Catch::Contains("rendezvous redis://127.0.0.1:" + std::to_string(port)));
  } else {
    WARN("redis skipped: redis-server is not installed (apt-get install redis-server)");
  }
}

TEST_CASE("a rank killed or stuck: the others stop, name it, and no process is left",
          "[process-cli]") {
  TempDir d;
  // Four ranks started by hand (no launcher to clean up after them), rank 2
  // misbehaving at step 6; collectives time out after 3 s.
  const auto by_hand = [&](const std::string& fault, const std::string& strategy) {
    const std::string port = std::to_string(free_port());
    std::string cmd = "start=$(date +%s%N); ";
    for (int r = 0; r < 4; ++r)
      cmd += "RANK=" + std::to_string(r) + " WORLD_SIZE=4 LOCAL_RANK=" + std::to_string(r) +
             " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " SHARDLAB_FAULT=" + fault + " " +
             kBin + " run" + kModel + " --strategy " + strategy + " --timeout-ms 3000 --trace " +
             (d / "t.json") + " > " + (d / ("out" + std::to_string(r))) + " 2>&1 & ";
    cmd += "wait; echo elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))";
    return sh(cmd);
  };
  const auto rank_out = [&](int r) { return slurp(d / ("out" + std::to_string(r))); };
  const auto elapsed_ms = [](const CliResult& r) {
    const size_t at = r.out.find("elapsed_ms=");
    return at == std::string::npos ? -1 : std::atoi(r.out.c_str() + at + 11);
  };

  SECTION("SIGKILL") {
    const CliResult r = by_hand("2:5:kill", "ddp");
    for (int rank : {0, 1, 3}) {
      INFO(rank_out(rank));
      CHECK_THAT(rank_out(rank),
                 Catch::Contains("(rank 2 does not answer: its process died or cannot be reached"));
      CHECK_THAT(rank_out(rank), !Catch::Contains("rank 0, rank 2"));
    }
    // Rank 0 stays up to 3 s for the others to read the store it serves.
    CHECK(elapsed_ms(r) < 3000 + 9000);
  }
  SECTION("stuck forever") {
    const CliResult r = by_hand("2:5:hang", "1f1b --micro-batches 4");
    for (int rank : {0, 1, 3}) {
      INFO(rank_out(rank));
      CHECK_THAT(rank_out(rank), Catch::Contains("rank 2 is stuck in step 6, outside any "
                                                 "communication for "));
    }
    // Its own watchdog ends the stuck process once the others have failed.
    CHECK_THAT(rank_out(2), Catch::Contains("error: rank 2 stopped by its watchdog"));
    CHECK(elapsed_ms(r) < 3000 + 9000);
  }
  CHECK_FALSE(leftovers(d));
}

TEST_CASE(
    "shardlab launch --max-restarts: a killed rank, a restart from the checkpoint, the "
    "same final weights",
    "[process-cli]") {
  TempDir d;
  const std::string want = threaded(d, "--strategy zero3 --world 4", "threads.st");
  const CliResult r =
      sh("SHARDLAB_FAULT=2:7:kill " + kBin + " launch --nproc-per-node 4 --max-restarts 1 -- run" +
         kModel + " --strategy zero3 --checkpoint-every 5 --checkpoint-dir " + (d / "ck") +
         " --save-final " + (d / "restarted.st"));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("rank 2 was killed by SIGKILL"));
  CHECK_THAT(r.out, Catch::Contains("restart 1: resuming from " + (d / "ck") +
                                    "/step-000005 after step 5"));
  CHECK(slurp(d / "restarted.st") == want);
  CHECK_FALSE(leftovers(d));
}

TEST_CASE("one process per rank: idle clients crowding rank 0's store do not lock rank 1 out",
          "[process-cli]") {
  const std::string port = std::to_string(free_port());
  const auto rank_cmd = [&](int r) {
    return "RANK=" + std::to_string(r) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(r) +
           " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " + kBin + " run" + kModel +
           " --timeout-ms 10000";
  };
  CliResult rank0{-1, ""};
  std::thread first([&] { rank0 = sh(rank_cmd(0)); });
  // Once rank 0 serves its store, more idle connections than it takes clients (1024, or half
  // its descriptor limit), kept open while rank 1 arrives.
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(port)));
  std::vector<int> idle;
  for (int i = 0; i < 400 && idle.empty(); ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0)
      idle.push_back(fd);
    else
      close(fd);
    if (idle.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  REQUIRE(idle.size() == 1);
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  const size_t flood = std::min<size_t>(1100, nofile.rlim_cur > 300 ? nofile.rlim_cur - 200 : 0);
  while (idle.size() < flood) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      if (fd >= 0) close(fd);
      break;
    }
    idle.push_back(fd);
  }
  INFO(idle.size() << " idle connections");
  CHECK(idle.size() >= 500);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // idle past the store's 1 s
  const CliResult rank1 = sh(rank_cmd(1));
  first.join();
  for (int fd : idle) close(fd);
  INFO("rank 0:\n" << rank0.out << "\nrank 1:\n" << rank1.out);
  CHECK(rank1.code == 0);
  CHECK(rank0.code == 0);
  CHECK_THAT(rank1.out, Catch::Contains("rank 1 of 2 done: 12 steps"));
  // Room was made by closing idle clients, each said in a line (at most 10 a second).
  CHECK_THAT(rank0.out, Catch::Contains("shardlab store 127.0.0.1:" + port + ": "));
}

TEST_CASE("one process per rank: what it refuses, in one line", "[process-cli]") {
  const std::string env = "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 ";
  const auto refused = [&](const std::string& cmd, const std::string& message) {
    const CliResult r = sh(cmd);
    INFO(cmd << "\n" << r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains(message));
  };
  refused(env + kBin + " run --world 4",
          "--world 4 disagrees with the env group of 2 processes (valid: --world 2, or leave it "
          "out)");
  refused(kBin + " run --rdzv env://", "--rdzv applies to one process per rank, and no launcher");
  refused(kBin + " run --bind-host 127.0.0.1", "--bind-host applies to one process per rank");
  refused(env + kBin + " run --rdzv ftp://x", "rendezvous 'ftp://x'");
  // A typo in the shared directory: refused before anything is created.
  refused(env + kBin + " run --rdzv file:///nonexistent/shardlab-rdzv",
          "error: rendezvous directory /nonexistent/shardlab-rdzv does not exist (valid: an "
          "existing directory every rank can see; create it first, e.g. mkdir -p "
          "/nonexistent/shardlab-rdzv)");
  CHECK_FALSE(fs::exists("/nonexistent"));
  refused(env + kBin + " run --strategy dp", "dp cannot run one process per rank");
  refused(env + "SHARDLAB_FAULT=x " + kBin + " run",
          "SHARDLAB_FAULT 'x' is invalid (valid: RANK:STEP:kill|hang|exit[:ATTEMPT])");
}

TEST_CASE("ranks as threads: a rank stuck forever ends the command within the timeout, named",
          "[process-cli]") {
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = sh("SHARDLAB_FAULT=2:5:hang " + kBin + " run" + kModel +
                         " --strategy ddp --world 4 --timeout-ms 3000");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("rank 2 (step 6) did not return within 2000 ms of it: stuck "
                                    "outside any communication, so the run ends here"));
  CHECK(s < 3 + 2 + 5);  // the timeout, the grace, and room for a loaded machine
}
