// Where ranks that are processes meet: a rendezvous URL (env://, file://, redis://, tcp://)
// parsed into a spec, and the key-value store it names, ready for Gloo's connectFullMesh.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/launch/check_store.h"

namespace shardlab {

struct RdzvSpec {
  enum class Kind { env, file, redis, tcp };
  Kind kind = Kind::env;
  std::string path;  // file: an absolute directory
  std::string host;  // redis, tcp
  int port = 0;      // redis, tcp
};

// Accepts "env://" (MASTER_ADDR:MASTER_PORT, as torchrun sets them), "file:///abs/dir",
// "redis://host:port" and "tcp://host:port". Throws ConfigError with one line naming the
// value and the valid forms.
RdzvSpec parse_rdzv(const std::string& url);
std::string to_string(RdzvSpec::Kind kind);
// file://: the directory must exist already (it is shared by every rank, so a typo must not
// quietly create one nobody else reads). Throws ConfigError naming the directory; other kinds
// pass.
void check_rdzv_directory(const RdzvSpec& spec);

// The store of one run, as seen by one rank. Every key lives under "shardlab/<run_id>/", so
// runs sharing a directory or a Redis server never see each other's keys (Gloo's FileStore
// and RedisStore refuse to set a key twice).
//  - file:      Gloo's FileStore on the directory, which must exist (check_rdzv_directory).
//  - redis:     Gloo's RedisStore.
//  - env, tcp:  a TcpStore client of master_addr:master_port (env) or host:port (tcp); rank 0
//               also serves the store there, unless agent_store (torchrun's agent already
//               serves one on MASTER_PORT: TORCHELASTIC_USE_AGENT_STORE=True).
// Throws CommError (one line naming the address) when the store cannot be reached in time.
class RdzvStore {
 public:
  RdzvStore(const RdzvSpec& spec, int rank, const std::string& master_addr, int master_port,
            bool agent_store, const std::string& run_id, std::chrono::milliseconds timeout);
  ~RdzvStore();
  RdzvStore(const RdzvStore&) = delete;
  RdzvStore& operator=(const RdzvStore&) = delete;

  // The run's store, keys already prefixed; give it to connectFullMesh and to the process
  // link (which polls it with check()).
  CheckStore& store();
  // "file:///tmp/x", "redis://127.0.0.1:6379", "env://127.0.0.1:29500 (hosted by rank 0)",
  // "env://127.0.0.1:29500 (torchrun's agent store)".
  std::string describe() const;
  // Keys set so far under this run (without the run prefix), sorted, where the backend can
  // list them: file and redis. A c10d TCP store cannot (its protocol has no listing), so
  // env:// and tcp:// give an empty list; keys_listable() says which.
  std::vector<std::string> keys() const;
  bool keys_listable() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardlab
