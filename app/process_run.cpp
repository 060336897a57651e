// One process per rank for `shardlab run` (see process_run.h).
#include "app/process_run.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "core/config.h"
#include "core/launch/check_store.h"

namespace shardlab::app {

namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string key_left(int rank) {
  return "left/" + std::to_string(rank);
}

}  // namespace

std::string route_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr)
    throw ConfigError("MASTER_ADDR '" + host +
                      "' does not resolve to an IPv4 address (valid: a host name or address "
                      "of rank 0's host)");
  std::string out;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      sockaddr_in local{};
      socklen_t len = sizeof local;
      char text[INET_ADDRSTRLEN] = {};
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
          inet_ntop(AF_INET, &local.sin_addr, text, sizeof text) != nullptr)
        out = text;
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (out.empty())
    throw ConfigError("no route from this host to MASTER_ADDR '" + host +
                      "' (give --bind-host ADDR, an address of this host the others can reach)");
  return out;
}

std::unique_ptr<ProcessRun> join_process_run(const ProcessEnv& env, const std::string& rdzv_url,
                                             const std::string& bind_host, int timeout_ms) {
  auto run = std::make_unique<ProcessRun>();
  run->env = env;
  const RdzvSpec spec = parse_rdzv(rdzv_url);
  // A restarted group meets under a new name: the stores that refuse a key
  // set twice (Gloo's file and Redis stores) still hold the last attempt's.
  const std::string run_id = (env.run_id.empty() ? std::string("shardlab") : env.run_id) +
                             "/attempt-" + std::to_string(env.restart);
  run->store =
      std::make_unique<RdzvStore>(spec, env.rank, env.master_addr, env.master_port, env.agent_store,
                                  run_id, std::chrono::milliseconds(timeout_ms));
  run->rdzv = run->store->describe();
  ProcessContext& c = run->context;
  c.rank = env.rank;
  c.local_rank = env.local_rank;
  c.store = &run->store->store();
  c.bind_host = !bind_host.empty()             ? bind_host
                : is_loopback(env.master_addr) ? std::string("127.0.0.1")
                                               : route_address(env.master_addr);
  return run;
}

void leave_process_run(ProcessRun& run, int timeout_ms) {
  CheckStore& store = run.store->store();
  try {
    store.set(key_left(run.env.rank), {'1'});
    if (run.env.rank != 0) return;
    std::vector<std::string> keys;
    for (int r = 1; r < run.env.world; ++r) keys.push_back(key_left(r));
    store.wait(keys, std::chrono::milliseconds(timeout_ms));
  } catch (const std::exception&) {
    // The run itself succeeded: a peer that left without a word (or a store
    // gone first) changes nothing in what was computed.
  }
}

}  // namespace shardlab::app
