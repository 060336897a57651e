// One process per rank for `shardlab run`: what the launcher says this process
// is (core/launch/launch_env.h), the rendezvous store it meets the others in
// (core/launch/rdzv.h), and the address its Gloo device listens on.
#pragma once
#include <memory>
#include <string>

#include "core/launch/launch_env.h"
#include "core/launch/rdzv.h"
#include "core/run/runner.h"

namespace shardlab::app {

struct ProcessRun {
  ProcessEnv env;
  std::unique_ptr<RdzvStore> store;
  ProcessContext context;
  std::string rdzv;  // the store as the summary names it
};

// Joins the run's store (`rdzv_url`: env://, file://, redis://, tcp://) as the
// launcher's rank; `bind_host` empty: 127.0.0.1 when MASTER_ADDR is this host's
// loopback, else this host's address on the route to MASTER_ADDR.
std::unique_ptr<ProcessRun> join_process_run(const ProcessEnv& env, const std::string& rdzv_url,
                                             const std::string& bind_host, int timeout_ms);

// After a run that succeeded everywhere: each rank says it is leaving, and
// rank 0 (whose process may host the store) waits for the others before it
// exits, so no rank loses the store while it still reads it.
void leave_process_run(ProcessRun& run, int timeout_ms);

// The local address this host uses to reach `host` (a UDP socket "connected"
// to it: no packet is sent). Throws ConfigError when `host` does not resolve.
std::string route_address(const std::string& host);

}  // namespace shardlab::app
