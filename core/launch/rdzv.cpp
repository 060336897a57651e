// Rendezvous URLs and the store behind each: Gloo's FileStore and RedisStore, or our
// c10d-compatible TcpStore (hosted by rank 0, or by torchrun's agent).
#include "core/launch/rdzv.h"

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/rendezvous/store.h>
#include <hiredis.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/comm/comm.h"
#include "core/config.h"
#include "core/launch/check_store.h"
#include "core/launch/tcp_store.h"

namespace shardlab {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// parse_rdzv

std::string to_string(RdzvSpec::Kind kind) {
  switch (kind) {
    case RdzvSpec::Kind::env:
      return "env";
    case RdzvSpec::Kind::file:
      return "file";
    case RdzvSpec::Kind::redis:
      return "redis";
    case RdzvSpec::Kind::tcp:
      return "tcp";
  }
  return "?";
}

RdzvSpec parse_rdzv(const std::string& url) {
  const auto bad = [&](const std::string& why) {
    throw ConfigError("rendezvous '" + url + "': " + why +
                      " (valid: env://, file:///abs/dir, redis://host:port, tcp://host:port)");
  };
  const size_t sep = url.find("://");
  if (sep == std::string::npos) bad("not a URL");
  const std::string scheme = url.substr(0, sep);
  const std::string rest = url.substr(sep + 3);
  RdzvSpec spec;
  if (scheme == "env") {
    if (!rest.empty()) bad("env:// takes nothing after it (it reads MASTER_ADDR and MASTER_PORT)");
    spec.kind = RdzvSpec::Kind::env;
    return spec;
  }
  if (scheme == "file") {
    if (rest.empty() || rest[0] != '/')
      bad("file:// needs an absolute directory, e.g. file:///tmp/rdzv");
    spec.kind = RdzvSpec::Kind::file;
    spec.path = rest;
    return spec;
  }
  if (scheme != "redis" && scheme != "tcp") bad("unknown scheme '" + scheme + "'");
  spec.kind = scheme == "redis" ? RdzvSpec::Kind::redis : RdzvSpec::Kind::tcp;
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) bad("missing :port");
  spec.host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  if (spec.host.empty()) bad("missing host");
  if (spec.host.find_first_of(":/@ ") != std::string::npos)
    bad("host '" + spec.host + "' is not a host name or IPv4 address");
  const bool digits =
      !port.empty() && port.size() <= 5 &&
      std::all_of(port.begin(), port.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  spec.port = digits ? std::stoi(port) : 0;
  if (spec.port < 1 || spec.port > 65535) bad("port '" + port + "' is not in 1-65535");
  return spec;
}

void check_rdzv_directory(const RdzvSpec& spec) {
  if (spec.kind != RdzvSpec::Kind::file) return;
  std::error_code ec;
  const fs::file_status st = fs::status(spec.path, ec);
  if (!fs::exists(st))
    throw ConfigError("rendezvous directory " + spec.path +
                      " does not exist (valid: an existing directory every rank can see; "
                      "create it first, e.g. mkdir -p " +
                      spec.path + ")");
  if (!fs::is_directory(st))
    throw ConfigError("rendezvous directory " + spec.path +
                      " is not a directory (valid: an existing directory every rank can see)");
}

// ---------------------------------------------------------------------------
// RdzvStore

namespace {

// Gloo's messages start with "[/path/file.cc:123] "; a CommError is one readable line.
std::string clean(std::string msg) {
  if (!msg.empty() && msg[0] == '[') {
    const size_t close = msg.find("] ");
    if (close != std::string::npos) msg.erase(0, close + 2);
  }
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  while (!msg.empty() && msg.back() == ' ') msg.pop_back();
  return msg;
}

// Marker file names: keys may hold any byte, file names may not hold '/'.
std::string pct_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}
std::string pct_decode(const std::string& s) {
  const auto hex = [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
           : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                       : -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Redis KEYS takes a glob: a run id must match itself only.
std::string glob_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// What every backend's store is wrapped in: Gloo's exceptions (multi-line, with source paths)
// become one-line CommErrors naming the store, and on a file store each key set also leaves a
// marker file named after the key (FileStore names its files by a hash of the key, so the
// directory alone cannot say which keys exist). The marker is written after the key, so a
// listed key can always be read.
class RunStore final : public CheckStore {
 public:
  RunStore(CheckStore& inner, std::string where, std::string marker_dir)
      : inner_(inner), where_(std::move(where)), marker_dir_(std::move(marker_dir)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    try {
      inner_.set(key, data);
    } catch (const std::exception& e) {
      // FileStore and RedisStore set a key once ("File already exists" / "Key ... already
      // set", behind an assertion's text): say what it means.
      const std::string m = e.what();
      if (m.find("already") != std::string::npos)
        throw CommError("rendezvous store " + where_ + ": key '" + key +
                        "' is already set (a run id used twice?)");
      guard([&] { throw; });
    }
    if (!marker_dir_.empty()) std::ofstream(marker_dir_ + "/" + pct_encode(key));
  }
  std::vector<char> get(const std::string& key) override {
    std::vector<char> out;
    guard([&] { out = inner_.get(key); });
    return out;
  }
  bool check(const std::vector<std::string>& keys) override {
    bool ready = false;
    guard([&] { ready = inner_.check(keys); });
    return ready;
  }
  void wait(const std::vector<std::string>& keys) override {
    guard([&] { inner_.wait(keys); });
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    guard([&] { inner_.wait(keys, timeout); });
  }

 private:
  template <class F>
  void guard(F&& f) {
    try {
      f();
    } catch (const CommError&) {
      throw;  // ours, already one line naming the store
    } catch (const std::exception& e) {
      throw CommError("rendezvous store " + where_ + ": " + clean(e.what()));
    }
  }

  CheckStore& inner_;
  const std::string where_;
  const std::string marker_dir_;
};

redisContext* redis_connect(const std::string& host, int port, std::string& error) {
  timeval tv{2, 0};
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, tv);
  if (c == nullptr) {
    error = "out of memory";
    return nullptr;
  }
  if (c->err != 0) {
    error = c->errstr;
    redisFree(c);
    return nullptr;
  }
  return c;
}

}  // namespace

// Members in construction order; they are destroyed in reverse, so the server goes last.
struct RdzvStore::Impl {
  RdzvSpec spec;
  std::string prefix;  // "shardlab/<run_id>"; PrefixStore adds the "/"
  std::string host;
  int port = 0;
  bool agent_store = false;
  std::string marker_dir;  // file only
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<CheckStore> raw;  // redis: the one hiredis context, behind `base`'s lock
  std::unique_ptr<CheckStore> base;
  std::unique_ptr<CheckStore> prefixed;
  std::unique_ptr<RunStore> top;
};

RdzvStore::RdzvStore(const RdzvSpec& spec, int rank, const std::string& master_addr,
                     int master_port, bool agent_store, const std::string& run_id,
                     std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  Impl& I = *impl_;
  I.spec = spec;
  I.prefix = "shardlab/" + run_id;
  I.agent_store = agent_store;
  if (run_id.empty()) throw ConfigError("rendezvous: the run id must not be empty");
  switch (spec.kind) {
    case RdzvSpec::Kind::file: {
      // The directory is the user's (shared by every host): a typo must not create one that
      // no other rank will ever look in.
      check_rdzv_directory(spec);
      std::error_code ec;
      // Markers live beside FileStore's hashed files, one directory per run.
      I.marker_dir = spec.path + "/shardlab-keys/" + pct_encode(run_id);
      fs::create_directories(I.marker_dir, ec);
      if (ec)
        throw CommError("rendezvous directory " + spec.path +
                        ": cannot create its key markers: " + ec.message());
      try {
        I.base = make_file_store(spec.path);
      } catch (const std::exception& e) {
        throw CommError("rendezvous directory " + spec.path + ": " + clean(e.what()));
      }
      break;
    }
    case RdzvSpec::Kind::redis: {
      I.host = spec.host;
      I.port = spec.port;
      // Probe with our own connection first: RedisStore's constructor leaks its context when
      // the connection fails, and we retry until the timeout (redis may start after us).
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      std::string error;
      for (;;) {
        if (redisContext* c = redis_connect(I.host, I.port, error)) {
          redisFree(c);
          break;
        }
        if (std::chrono::steady_clock::now() >= deadline)
          throw CommError("cannot reach redis at " + I.host + ":" + std::to_string(I.port) +
                          " after " + seconds_text(timeout) + " (" + error + ")");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      try {
        I.raw = make_redis_store(I.host, I.port);
        I.base = make_locked_store(*I.raw);
      } catch (const std::exception& e) {
        throw CommError("cannot reach redis at " + I.host + ":" + std::to_string(I.port) + ": " +
                        clean(e.what()));
      }
      break;
    }
    case RdzvSpec::Kind::env:
    case RdzvSpec::Kind::tcp: {
      I.host = spec.kind == RdzvSpec::Kind::env ? master_addr : spec.host;
      I.port = spec.kind == RdzvSpec::Kind::env ? master_port : spec.port;
      if (I.host.empty() || I.port < 1 || I.port > 65535)
        throw ConfigError("rendezvous env:// needs MASTER_ADDR and MASTER_PORT (1-65535); got '" +
                          I.host + "' and " + std::to_string(I.port));
      if (rank == 0 && !agent_store) {
        // A client stopped mid-request for a whole timeout is broken: what it holds is freed.
        TcpStoreLimits limits;
        limits.stall_after = std::max(timeout, std::chrono::milliseconds(1000));
        I.server = std::make_unique<TcpStoreServer>(I.host, I.port, limits);
      }
      I.base = make_gloo_store(std::make_shared<TcpStore>(I.host, I.port, timeout));
      break;
    }
  }
  I.prefixed = make_prefix_store(I.prefix, *I.base);
  I.top = std::make_unique<RunStore>(*I.prefixed, describe(), I.marker_dir);
}

RdzvStore::~RdzvStore() = default;

CheckStore& RdzvStore::store() {
  return *impl_->top;
}

std::string RdzvStore::describe() const {
  const Impl& I = *impl_;
  const std::string addr = I.host + ":" + std::to_string(I.port);
  switch (I.spec.kind) {
    case RdzvSpec::Kind::file:
      return "file://" + I.spec.path;
    case RdzvSpec::Kind::redis:
      return "redis://" + addr;
    case RdzvSpec::Kind::env:
    case RdzvSpec::Kind::tcp:
      return to_string(I.spec.kind) + "://" + addr +
             (I.agent_store ? " (torchrun's agent store)" : " (hosted by rank 0)");
  }
  return "?";
}

bool RdzvStore::keys_listable() const {
  return impl_->spec.kind == RdzvSpec::Kind::file || impl_->spec.kind == RdzvSpec::Kind::redis;
}

std::vector<std::string> RdzvStore::keys() const {
  const Impl& I = *impl_;
  std::vector<std::string> out;
  if (I.spec.kind == RdzvSpec::Kind::file) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(I.marker_dir, ec))
      out.push_back(pct_decode(entry.path().filename().string()));
  } else if (I.spec.kind == RdzvSpec::Kind::redis) {
    // Its own short connection: RedisStore's is in use by the rank's thread, and hiredis
    // contexts are not thread-safe.
    std::string error;
    redisContext* c = redis_connect(I.host, I.port, error);
    if (c == nullptr) return out;
    const std::string pattern = glob_escape(I.prefix + "/") + "*";
    auto* reply =
        static_cast<redisReply*>(redisCommand(c, "KEYS %b", pattern.data(), pattern.size()));
    if (reply != nullptr && reply->type == REDIS_REPLY_ARRAY) {
      const size_t skip = I.prefix.size() + 1;
      for (size_t i = 0; i < reply->elements; ++i) {
        const redisReply* e = reply->element[i];
        if (e->type == REDIS_REPLY_STRING && e->len >= skip)
          out.emplace_back(e->str + skip, e->len - skip);
      }
    }
    if (reply != nullptr) freeReplyObject(reply);
    redisFree(c);
  }
  // env://, tcp://: c10d's protocol has GETNUMKEYS but no way to list keys; nothing to show.
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace shardlab
