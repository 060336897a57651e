// `shardlab launch-probe` (hidden, for tests): prints what detect_process_env() reads from
// the launcher, then misbehaves on request, so tests can watch the launcher handle it.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "app/args.h"
#include "app/commands.h"
#include "core/launch/launch_env.h"

namespace shardlab::app {

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

[[noreturn]] void sleep_forever() {
  while (true) pause();
}

}  // namespace

// Environment knobs (a test sets them on the launcher, which passes them on):
//   SHARDLAB_PROBE_RANK=R        the rank that misbehaves (default: none)
//   SHARDLAB_PROBE_ACTION=A      exit:K | sigkill | sleep (sleep forever)
//   SHARDLAB_PROBE_RESTART=N     misbehave only when SHARDLAB_RESTART_COUNT is N
//   SHARDLAB_PROBE_OTHERS=sleep  the other ranks sleep forever instead of exiting 0
//   SHARDLAB_PROBE_IGNORE_TERM=1 every rank ignores SIGTERM (the launcher must SIGKILL)
//   SHARDLAB_PROBE_ERRORS=1      every rank prints two error lines: its own, and one alike
//                                on every rank (the launcher shows that one once)
int cmd_launch_probe(int argc, char** argv) {
  const Args a(argc, argv, "launch-probe", {}, {});
  if (a.help()) {
    std::printf("usage: shardlab launch-probe (for tests; see app/launch_probe.cpp)\n");
    return 0;
  }
  if (env_or("SHARDLAB_PROBE_IGNORE_TERM", "") == "1") signal(SIGTERM, SIG_IGN);
  const ProcessEnv e = detect_process_env();
  std::printf(
      "probe pid=%d present=%d launcher=%s rank=%d world=%d local_rank=%d local_world=%d "
      "node_rank=%d nnodes=%d master=%s:%d agent_store=%d restart=%d run_id=%s\n",
      static_cast<int>(getpid()), e.present, e.launcher.c_str(), e.rank, e.world, e.local_rank,
      e.local_world, e.node_rank, e.nnodes, e.master_addr.c_str(), e.master_port, e.agent_store,
      e.restart, e.run_id.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "probe stderr rank=%d\n", e.rank);
  if (env_or("SHARDLAB_PROBE_ERRORS", "") == "1")
    std::fprintf(stderr, "error: probe error of rank %d\nerror: probe error alike on every rank\n",
                 e.rank);
  // One line in two writes with a pause between: the launcher must still print it whole.
  std::fputs("half ", stdout);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  std::printf("line rank=%d\n", e.rank);
  std::fflush(stdout);

  const std::string who = env_or("SHARDLAB_PROBE_RANK", "");
  const std::string when = env_or("SHARDLAB_PROBE_RESTART", "");
  const bool me =
      who == std::to_string(e.rank) && (when.empty() || when == std::to_string(e.restart));
  if (!me) {
    if (env_or("SHARDLAB_PROBE_OTHERS", "") == "sleep") sleep_forever();
    return 0;
  }
  // Late enough that every rank has printed its pid for the test to check.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::string action = env_or("SHARDLAB_PROBE_ACTION", "exit:1");
  if (action == "sigkill") raise(SIGKILL);
  if (action == "sleep") sleep_forever();
  if (action.rfind("exit:", 0) == 0) return std::atoi(action.c_str() + 5);
  std::fprintf(stderr, "launch-probe: unknown SHARDLAB_PROBE_ACTION '%s'\n", action.c_str());
  return 2;
}

}  // namespace shardlab::app
