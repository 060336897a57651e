// A rendezvous store that can also say whether keys are there without waiting
// (Gloo's interface can only wait, and its FileStore's shortest miss takes a
// second): the watchdog and the fail-fast waits poll with it. Adapters for
// Gloo's file and Redis stores, and a prefix that keeps one run's keys apart.
#pragma once
#include <gloo/rendezvous/store.h>

#include <memory>
#include <string>
#include <vector>

namespace shardlab {

class CheckStore : public gloo::rendezvous::Store {
 public:
  // True when every key is set; never blocks for long.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Waits by polling check() (thread-safe when the store is), in the slices
  // `wait` allows, so one caller never holds a shared store for long.
  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
};

// Gloo's FileStore on `dir` (which must exist).
std::unique_ptr<CheckStore> make_file_store(const std::string& dir);
// Gloo's RedisStore on host:port (throws when the server cannot be reached).
std::unique_ptr<CheckStore> make_redis_store(const std::string& host, int port);
// `prefix` + "/" + key on `inner`, which must outlive it.
std::unique_ptr<CheckStore> make_prefix_store(const std::string& prefix, CheckStore& inner);
// Every call of `inner` under one lock (Gloo's Redis store shares one hiredis
// context, which is not thread-safe); waits poll check() outside the lock.
std::unique_ptr<CheckStore> make_locked_store(CheckStore& inner);

}  // namespace shardlab
