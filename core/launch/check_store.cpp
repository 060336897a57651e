// CheckStore adapters over Gloo's stores (see check_store.h).
#include "core/launch/check_store.h"

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/redis_store.h>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace shardlab {

void CheckStore::wait(const std::vector<std::string>& keys,
                      const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  while (!check(keys)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string names;
      for (const std::string& k : keys) names += (names.empty() ? "" : ", ") + k;
      throw std::runtime_error("rendezvous: timed out after " + std::to_string(timeout.count()) +
                               " ms waiting for key(s) " + names);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}

namespace {

// FileStore's check is protected; a subclass may call it.
class FileCheckStore final : public CheckStore {
 public:
  explicit FileCheckStore(const std::string& dir) : store_(dir) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override {
    CheckStore::wait({key}, kDefaultTimeout);
    return store_.get(key);
  }
  bool check(const std::vector<std::string>& keys) override { return store_.check_keys(keys); }

 private:
  struct Exposed : gloo::rendezvous::FileStore {
    using FileStore::FileStore;
    bool check_keys(const std::vector<std::string>& keys) { return check(keys); }
  };
  Exposed store_;
};

class RedisCheckStore final : public CheckStore {
 public:
  RedisCheckStore(const std::string& host, int port) : store_(host, port) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override {
    CheckStore::wait({key}, kDefaultTimeout);
    return store_.get(key);
  }
  bool check(const std::vector<std::string>& keys) override { return store_.check(keys); }

 private:
  gloo::rendezvous::RedisStore store_;
};

class PrefixCheckStore final : public CheckStore {
 public:
  PrefixCheckStore(std::string prefix, CheckStore& inner)
      : prefix_(std::move(prefix)), inner_(inner) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    inner_.set(joined(key), data);
  }
  std::vector<char> get(const std::string& key) override { return inner_.get(joined(key)); }
  bool check(const std::vector<std::string>& keys) override {
    std::vector<std::string> full;
    for (const std::string& k : keys) full.push_back(joined(k));
    return inner_.check(full);
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const std::string& k : keys) full.push_back(joined(k));
    inner_.wait(full, timeout);
  }

 private:
  std::string joined(const std::string& key) const { return prefix_ + "/" + key; }
  const std::string prefix_;
  CheckStore& inner_;
};

class LockedCheckStore final : public CheckStore {
 public:
  explicit LockedCheckStore(CheckStore& inner) : inner_(inner) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    std::lock_guard<std::mutex> lock(mu_);
    inner_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override {
    CheckStore::wait({key}, kDefaultTimeout);  // polls check(), a lock at a time
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.get(key);
  }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.check(keys);
  }

 private:
  CheckStore& inner_;
  std::mutex mu_;
};

}  // namespace

std::unique_ptr<CheckStore> make_file_store(const std::string& dir) {
  return std::make_unique<FileCheckStore>(dir);
}

std::unique_ptr<CheckStore> make_redis_store(const std::string& host, int port) {
  return std::make_unique<RedisCheckStore>(host, port);
}

std::unique_ptr<CheckStore> make_prefix_store(const std::string& prefix, CheckStore& inner) {
  return std::make_unique<PrefixCheckStore>(prefix, inner);
}

std::unique_ptr<CheckStore> make_locked_store(CheckStore& inner) {
  return std::make_unique<LockedCheckStore>(inner);
}

}  // namespace shardlab
