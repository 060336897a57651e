// The c10d-compatible TCP store: a poll() server on one thread, and a blocking client with
// deadlines. See tcp_store.h for the wire format.
#include "core/launch/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/rendezvous/store.h>

#include "core/launch/check_store.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>

#include "core/comm/comm.h"

namespace shardlab {

using namespace tcp_store_wire;
using Clock = std::chrono::steady_clock;

std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[32];
  if (ms.count() % 1000 == 0)
    std::snprintf(buf, sizeof buf, "%lld s", static_cast<long long>(ms.count() / 1000));
  else
    std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

namespace {

// Keys come from the network: show them printable and short in log lines and errors.
std::string shown(const std::string& s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 60; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (s.size() > 60) out += "...";
  return out + "'";
}

std::string mib_text(uint64_t bytes) {
  return bytes >= (uint64_t{1} << 20) ? std::to_string(bytes >> 20) + " MiB"
                                      : std::to_string(bytes) + " bytes";
}

void append_u64(std::string& out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);  // little-endian hosts only, like c10d itself
  out.append(b, 8);
}
void append_bytes(std::string& out, const char* p, size_t n) {
  append_u64(out, n);
  out.append(p, n);
}
void append_bytes(std::string& out, const std::string& s) {
  append_bytes(out, s.data(), s.size());
}

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
}
void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string peer_name(const sockaddr_storage& ss) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof ss, host, sizeof host, serv,
                    sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return std::string(host) + ":" + serv;
}

// ---------------------------------------------------------------------------
// Parsing one request from a client's buffered bytes. Lengths are checked as soon as they are
// read, before any of the bytes they announce arrive: an absurd length is refused without
// allocating it, and the buffer only ever holds bytes the client really sent.

struct Request {
  Query query{};
  std::string key, a, b;  // a: value / expected; b: desired
  std::vector<std::string> keys;
  int64_t delta = 0;
};

enum class Parsed { complete, need_more, bad };

class Reader {
 public:
  Reader(const char* p, size_t n) : p_(p), n_(n) {}
  size_t used() const { return pos_; }
  std::string error;

  bool raw(void* out, size_t n) {
    if (n_ - pos_ < n) return false;
    std::memcpy(out, p_ + pos_, n);
    pos_ += n;
    return true;
  }
  // false: need more bytes, or bad (error set).
  bool str(std::string& out, const char* what) {
    uint64_t len = 0;
    if (!raw(&len, 8)) return false;
    if (len > kMaxString) {
      error =
          std::string(what) + " length " + std::to_string(len) + " exceeds " + mib_text(kMaxString);
      return false;
    }
    if (n_ - pos_ < len) return false;
    out.assign(p_ + pos_, len);
    pos_ += len;
    return true;
  }

 private:
  const char* p_;
  size_t n_;
  size_t pos_ = 0;
};

Parsed parse(const char* p, size_t n, Request& req, size_t& used, std::string& error) {
  Reader r(p, n);
  const auto result = [&](bool ok) {
    if (!r.error.empty()) {
      error = r.error;
      return Parsed::bad;
    }
    if (!ok) return Parsed::need_more;
    used = r.used();
    return Parsed::complete;
  };
  uint8_t q = 0;
  if (!r.raw(&q, 1)) return Parsed::need_more;
  req = Request{};
  req.query = static_cast<Query>(q);
  switch (req.query) {
    case Query::set:
      return result(r.str(req.key, "key") && r.str(req.a, "value"));
    case Query::compare_set:
      return result(r.str(req.key, "key") && r.str(req.a, "expected value") &&
                    r.str(req.b, "desired value"));
    case Query::get:
    case Query::delete_key:
      return result(r.str(req.key, "key"));
    case Query::add:
      return result(r.str(req.key, "key") && r.raw(&req.delta, 8));
    case Query::get_num_keys:
      return result(true);
    case Query::check:
    case Query::wait: {
      uint64_t count = 0;
      if (!r.raw(&count, 8)) return Parsed::need_more;
      if (count > kMaxKeys) {
        error = "asks for " + std::to_string(count) + " keys at once (at most " +
                std::to_string(kMaxKeys) + ")";
        return Parsed::bad;
      }
      for (uint64_t i = 0; i < count; ++i) {
        req.keys.emplace_back();
        if (!r.str(req.keys.back(), "key")) return result(false);
      }
      return result(true);
    }
    case Query::watch_key:
      error = "sent WATCH_KEY (c10d's callback client), which this server does not serve";
      return Parsed::bad;
  }
  error = "sent an unknown query type " + std::to_string(q);
  return Parsed::bad;
}

}  // namespace

// ---------------------------------------------------------------------------
// TcpStoreServer

namespace {
// A client's unanswered output beyond this: it is not reading its replies.
constexpr size_t kMaxPendingOut = 4 * kMaxString;
// Unparsed input beyond one largest message (compare_set: three strings).
constexpr size_t kMaxPendingIn = 3 * kMaxString + 64;
constexpr size_t kReadChunk = 256 << 10;
// What a stored key costs beside its bytes (the hash node, two strings), counted against
// TcpStoreLimits::max_bytes so a flood of empty keys is bounded too.
constexpr uint64_t kEntryOverhead = 64;
// Descriptors the store's process keeps for itself whatever the limit (Gloo's sockets, files).
constexpr size_t kMinClients = 16;
// Lines on stderr per second, at most: a flood of bad clients must not bury the run's output.
constexpr int kLinesPerSecond = 10;
}  // namespace

struct TcpStoreServer::Loop {
  struct Client {
    int fd = -1;
    std::string peer;
    std::string in;
    size_t in_off = 0;
    std::string out;
    size_t out_off = 0;
    size_t awaited = 0;  // keys its WAIT still needs; it gets no more requests parsed meanwhile
    std::vector<std::string> waiting;  // the keys of its parked WAIT (to unpark it if it leaves)
    bool dead = false;
    Clock::time_point last_request;  // connected, or its last request complete: idle since
    Clock::time_point last_in;       // its unfinished request last grew (or none was pending)
    Clock::time_point last_out;      // its replies last moved (or none was pending)
    bool has_partial() const { return awaited == 0 && in_off < in.size(); }
    bool has_output() const { return out_off < out.size(); }
    size_t pending() const { return (in.size() - in_off) + (out.size() - out_off); }
  };

  std::string where;  // "127.0.0.1:29500", for log lines
  TcpStoreLimits limits;
  std::atomic<int64_t>* dropped = nullptr;
  std::atomic<int64_t>* refused = nullptr;
  std::atomic<int64_t>* evicted = nullptr;
  std::unordered_map<std::string, std::string> kv;
  // Key -> ids of clients whose WAIT needs it (once per time the WAIT named it, as c10d).
  std::unordered_map<std::string, std::vector<uint64_t>> waiters;
  uint64_t kv_bytes = 0;    // stored keys and values, with kEntryOverhead each
  uint64_t wait_bytes = 0;  // keys named by parked WAITs
  std::map<uint64_t, Client> clients;
  uint64_t next_id = 1;
  // A WAIT completed this round: its client may have requests queued behind it that no socket
  // event will announce, so the next poll() must not sleep.
  bool woke = false;
  // accept() ran out of descriptors: the listening socket stays readable, so it is left out
  // of poll() until then rather than spun on.
  Clock::time_point accept_paused_until{};
  // Log lines this second, and those held back.
  Clock::time_point log_second{};
  int log_lines = 0;
  int64_t log_held = 0;

  // A new second: the count of the last one's held-back lines, then room for more.
  void flush_log(Clock::time_point now) {
    if (now - log_second < std::chrono::seconds(1)) return;
    if (log_held > 0)
      std::fprintf(stderr, "shardlab store %s: %lld more lines like these held back\n",
                   where.c_str(), static_cast<long long>(log_held));
    log_second = now;
    log_lines = 0;
    log_held = 0;
  }

  void log(const std::string& line) {
    flush_log(Clock::now());
    if (log_lines++ < kLinesPerSecond)
      std::fprintf(stderr, "shardlab store %s: %s\n", where.c_str(), line.c_str());
    else
      ++log_held;
  }

  void drop(Client& c, const std::string& why) {
    log("dropped client " + c.peer + ": " + why);
    dropped->fetch_add(1);
    c.dead = true;
  }

  uint64_t buffered() const {
    uint64_t n = 0;
    for (const auto& [id, c] : clients) n += c.pending();
    return n;
  }
  std::string held_text() const {
    return mib_text(kv_bytes + wait_bytes) + " stored, cap " + mib_text(limits.max_bytes);
  }
  // Whether `more` bytes can be stored beside what is (buffers aside: they pass).
  bool room_for(uint64_t more) const { return kv_bytes + wait_bytes + more <= limits.max_bytes; }

  void reply_u8(Client& c, uint8_t v) { c.out.push_back(static_cast<char>(v)); }
  void reply_i64(Client& c, int64_t v) { append_u64(c.out, static_cast<uint64_t>(v)); }

  // Stores key = value if the cap allows; false (why set) when it does not.
  bool store(const std::string& key, std::string value, std::string& why) {
    auto it = kv.find(key);
    const uint64_t now = it == kv.end() ? 0 : key.size() + it->second.size() + kEntryOverhead;
    const uint64_t then = key.size() + value.size() + kEntryOverhead;
    if (then > now && !room_for(then - now)) {
      why = "storing key " + shown(key) + " (" + mib_text(value.size()) +
            ") would take the store past its memory cap (" + held_text() + ")";
      return false;
    }
    kv_bytes = kv_bytes - now + then;
    if (it == kv.end())
      kv.emplace(key, std::move(value));
    else
      it->second = std::move(value);
    return true;
  }

  void wake(const std::string& key) {
    auto it = waiters.find(key);
    if (it == waiters.end()) return;
    wait_bytes -= std::min<uint64_t>(wait_bytes, key.size() * it->second.size());
    for (uint64_t id : it->second) {
      auto c = clients.find(id);
      // A client that hung up (or timed out and reconnected) is simply gone.
      if (c == clients.end() || c->second.dead || c->second.awaited == 0) continue;
      if (--c->second.awaited == 0) {
        c->second.waiting.clear();
        reply_u8(c->second, 0);  // STOP_WAITING
        woke = true;
      }
    }
    waiters.erase(it);
  }

  // A client leaving with a WAIT parked: its places in the waiters' lists go with it.
  void unpark(Client& c, uint64_t id) {
    for (const std::string& k : c.waiting) {
      auto it = waiters.find(k);
      if (it == waiters.end()) continue;
      auto& ids = it->second;
      const auto gone = std::remove(ids.begin(), ids.end(), id);
      wait_bytes -=
          std::min<uint64_t>(wait_bytes, k.size() * static_cast<uint64_t>(ids.end() - gone));
      ids.erase(gone, ids.end());
      if (ids.empty()) waiters.erase(it);
    }
    c.waiting.clear();
    c.awaited = 0;
  }

  // Runs one complete request; false when the client must be dropped (why says why).
  bool execute(Client& c, uint64_t id, Request& req, std::string& why) {
    switch (req.query) {
      case Query::set:
        if (!store(req.key, std::move(req.a), why)) return false;
        wake(req.key);
        return true;
      case Query::compare_set: {
        // c10d 1.13: a missing key is created only when `expected` is empty; the reply is the
        // value stored afterwards, or `expected` when the key is missing and nothing was set.
        auto it = kv.find(req.key);
        if (it == kv.end()) {
          if (req.a.empty()) {
            if (!store(req.key, req.b, why)) return false;
            append_bytes(c.out, req.b);
            wake(req.key);
          } else {
            append_bytes(c.out, req.a);
          }
        } else if (it->second == req.a) {
          if (!store(req.key, req.b, why)) return false;
          append_bytes(c.out, req.b);
          wake(req.key);
        } else {
          append_bytes(c.out, it->second);
        }
        return true;
      }
      case Query::get: {
        auto it = kv.find(req.key);
        if (it == kv.end()) {
          // c10d clients always WAIT before GET; there is no "missing" reply to send.
          why = "GET of a missing key " + shown(req.key);
          return false;
        }
        append_bytes(c.out, it->second);
        return true;
      }
      case Query::add: {
        int64_t value = 0;
        auto it = kv.find(req.key);
        if (it != kv.end()) {
          const std::string& s = it->second;
          auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
          if (ec != std::errc() || end != s.data() + s.size()) {
            why = "ADD to key " + shown(req.key) + ", whose value " + shown(s) + " is not a number";
            return false;
          }
        }
        if (__builtin_add_overflow(value, req.delta, &value)) {
          why = "ADD overflows key " + shown(req.key);
          return false;
        }
        // Decimal text, as c10d stores it.
        if (!store(req.key, std::to_string(value), why)) return false;
        reply_i64(c, value);
        wake(req.key);
        return true;
      }
      case Query::check: {
        const bool all = std::all_of(req.keys.begin(), req.keys.end(),
                                     [&](const std::string& k) { return kv.count(k) > 0; });
        reply_u8(c, all ? 0 : 1);  // READY = 0, NOT_READY = 1
        return true;
      }
      case Query::wait: {
        uint64_t bytes = 0;
        for (const std::string& k : req.keys)
          if (!kv.count(k)) bytes += k.size();
        if (!room_for(bytes)) {
          why = "a WAIT naming " + mib_text(bytes) +
                " of missing keys would take the store past its memory cap (" + held_text() + ")";
          return false;
        }
        size_t missing = 0;
        for (std::string& k : req.keys) {
          if (kv.count(k)) continue;
          waiters[k].push_back(id);
          c.waiting.push_back(std::move(k));
          ++missing;
        }
        wait_bytes += bytes;
        if (missing == 0) reply_u8(c, 0);
        c.awaited = missing;
        return true;
      }
      case Query::get_num_keys:
        reply_i64(c, static_cast<int64_t>(kv.size()));
        return true;
      case Query::delete_key: {
        auto it = kv.find(req.key);
        if (it != kv.end()) {
          kv_bytes -=
              std::min<uint64_t>(kv_bytes, it->first.size() + it->second.size() + kEntryOverhead);
          kv.erase(it);
          reply_i64(c, 1);
        } else {
          reply_i64(c, 0);
        }
        return true;
      }
      case Query::watch_key:
        break;
    }
    why = "unhandled query";
    return false;
  }

  void process_input(Client& c, uint64_t id) {
    Request req;
    while (!c.dead && c.awaited == 0 && c.in_off < c.in.size()) {
      size_t used = 0;
      std::string why;
      const Parsed p = parse(c.in.data() + c.in_off, c.in.size() - c.in_off, req, used, why);
      if (p == Parsed::need_more) break;
      if (p == Parsed::bad || !execute(c, id, req, why)) {
        drop(c, why);
        return;
      }
      c.in_off += used;
      c.last_request = Clock::now();
    }
    if (c.in_off == c.in.size()) {
      c.in.clear();
      c.in_off = 0;
    } else if (c.in_off > (1u << 20) && c.in_off > c.in.size() / 2) {
      c.in.erase(0, c.in_off);
      c.in_off = 0;
    }
    if (!c.dead && c.in.size() - c.in_off > kMaxPendingIn)
      drop(c, "sent " + mib_text(c.in.size() - c.in_off) + " that form no complete request");
    if (!c.dead && c.out.size() - c.out_off > kMaxPendingOut)
      drop(c, "does not read its replies (" + mib_text(c.out.size() - c.out_off) + " pending)");
  }

  void read_from(Client& c) {
    const size_t old = c.in.size();
    c.in.resize(old + kReadChunk);
    const ssize_t got = ::recv(c.fd, c.in.data() + old, kReadChunk, 0);
    c.in.resize(old + (got > 0 ? static_cast<size_t>(got) : 0));
    if (got > 0) {
      c.last_in = Clock::now();
      return;
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    const size_t partial = c.in.size() - c.in_off;
    if (got < 0) {
      drop(c, std::string("connection error: ") + std::strerror(errno));
    } else if (partial > 0) {
      drop(c, "hung up in the middle of a request (" + std::to_string(partial) +
                  " bytes of it received)");
    } else {
      // A clean close between requests is how every client leaves (c10d's callback client
      // connects and closes without a word): not worth a log line.
      c.dead = true;
    }
  }

  void write_to(Client& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n =
          ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        c.last_out = Clock::now();
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0 && errno == EINTR) continue;
      // The client went away before reading its reply (e.g. a WAIT it gave up on).
      c.dead = true;
      return;
    }
    c.out.clear();
    c.out_off = 0;
  }

  // The client idle longest, if any has been idle long enough to give up its place.
  Client* idlest(Clock::time_point now) {
    Client* best = nullptr;
    for (auto& [id, c] : clients) {
      if (c.dead || c.awaited > 0 || c.pending() > 0) continue;
      if (now - c.last_request < limits.idle_evict_after) continue;
      if (!best || c.last_request < best->last_request) best = &c;
    }
    return best;
  }

  void accept_all(int listen_fd) {
    size_t live = 0;
    for (const auto& [id, c] : clients) live += !c.dead;
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd = ::accept(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) {
          log(std::string("cannot accept clients for now: ") + std::strerror(errno));
          accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
        }
        return;  // EAGAIN: all accepted; anything else: try again next round
      }
      const auto now = Clock::now();
      if (live >= limits.max_clients) {
        // Full: an idle client makes room (ours reconnect on their next request); with none
        // idle the newcomer is turned away, and a client of ours retries until its timeout.
        Client* idle = idlest(now);
        if (!idle) {
          refused->fetch_add(1);
          log("refused client " + peer_name(ss) + ": " + std::to_string(live) +
              " clients already, the limit, and none idle for " +
              seconds_text(limits.idle_evict_after));
          ::close(fd);
          continue;
        }
        evicted->fetch_add(1);
        log("closed idle client " + idle->peer + " to make room for " + peer_name(ss) + " (" +
            std::to_string(limits.max_clients) + " clients is the limit)");
        idle->dead = true;
        --live;
      }
      set_nonblocking(fd);
      set_nodelay(fd);
      Client c;
      c.fd = fd;
      c.peer = peer_name(ss);
      c.last_request = c.last_in = c.last_out = now;
      clients.emplace(next_id++, std::move(c));
      ++live;
    }
  }

  // Frees what clients hold past the limits: a stalled request or unread replies past
  // stall_after, and, while the buffers together pass the cap, the largest of them.
  void enforce(Clock::time_point now) {
    for (auto& [id, c] : clients) {
      if (c.dead) continue;
      if (!c.has_partial()) c.last_in = now;
      if (!c.has_output()) c.last_out = now;
      if (now - c.last_in > limits.stall_after)
        drop(c, "sent " + std::to_string(c.in.size() - c.in_off) +
                    " bytes of a request, then nothing for " + seconds_text(limits.stall_after));
      else if (now - c.last_out > limits.stall_after)
        drop(c, "has not read its replies (" + std::to_string(c.out.size() - c.out_off) +
                    " bytes) for " + seconds_text(limits.stall_after));
    }
    uint64_t in_flight = buffered();
    while (in_flight > limits.max_bytes) {
      Client* hog = nullptr;
      for (auto& [id, c] : clients)
        if (!c.dead && c.pending() > 0 && (!hog || c.pending() > hog->pending())) hog = &c;
      if (!hog) break;
      in_flight -= hog->pending();
      drop(*hog, "its " + mib_text(hog->pending()) +
                     " of unfinished requests and unread replies are the most of the " +
                     mib_text(in_flight + hog->pending()) + " buffered, past the cap of " +
                     mib_text(limits.max_bytes));
    }
  }

  // How long poll() may sleep: until the next stall deadline, or the end of a pause.
  int poll_ms(Clock::time_point now) const {
    if (woke) return 0;
    Clock::time_point next = Clock::time_point::max();
    for (const auto& [id, c] : clients) {
      if (c.dead) continue;
      if (c.has_partial()) next = std::min(next, c.last_in + limits.stall_after);
      if (c.has_output()) next = std::min(next, c.last_out + limits.stall_after);
    }
    if (accept_paused_until > now) next = std::min(next, accept_paused_until);
    if (log_held > 0) next = std::min(next, log_second + std::chrono::seconds(1));
    if (next == Clock::time_point::max()) return -1;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 60000));
  }

  void close_dead() {
    for (auto it = clients.begin(); it != clients.end();) {
      if (it->second.dead) {
        unpark(it->second, it->first);
        ::close(it->second.fd);
        it = clients.erase(it);
      } else {
        ++it;
      }
    }
  }

  ~Loop() {
    for (auto& [id, c] : clients) ::close(c.fd);
  }
};

TcpStoreServer::TcpStoreServer(const std::string& bind_host, int port, const TcpStoreLimits& limits)
    : host_(bind_host), limits_(limits), loop_(std::make_unique<Loop>()) {
  const std::string where = bind_host + ":" + std::to_string(port);
  if (port < 0 || port > 65535)
    throw CommError("rendezvous store: port " + std::to_string(port) +
                    " is out of range (0 picks a free one, else 1-65535)");
  // Half the descriptors at most: the rest of the process (Gloo's pairs, its files) must not
  // find them all taken by clients, and accept() must not run out either.
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    limits_.max_clients =
        std::min<size_t>(limits_.max_clients, std::max<size_t>(kMinClients, nofile.rlim_cur / 2));
  limits_.max_clients = std::max<size_t>(limits_.max_clients, 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(bind_host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0)
    throw CommError("cannot serve the rendezvous store on " + where + ": " + gai_strerror(gai));
  int err = 0;
  for (addrinfo* ai = res; ai && listen_fd_ < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // Lets a restarted run bind while the last one's connections sit in TIME_WAIT; Linux still
    // refuses a second listener on the port.
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
    } else {
      err = errno;
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) {
    if (err == EADDRINUSE)
      throw CommError("cannot serve the rendezvous store on " + where + ": port " +
                      std::to_string(port) + " is in use");
    throw CommError("cannot serve the rendezvous store on " + where + ": " + std::strerror(err));
  }
  set_nonblocking(listen_fd_);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                         : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    throw CommError(std::string("rendezvous store: pipe: ") + std::strerror(errno));
  }
  loop_->where = host_ + ":" + std::to_string(port_);
  loop_->limits = limits_;
  loop_->dropped = &dropped_;
  loop_->refused = &refused_;
  loop_->evicted = &evicted_;
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::~TcpStoreServer() {
  const char stop = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_pipe_[1], &stop, 1);
  thread_.join();
  loop_.reset();  // closes the clients' sockets
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

void TcpStoreServer::run() {
  Loop& L = *loop_;
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (;;) {
    fds.clear();
    ids.clear();
    const auto now = Clock::now();
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(now >= L.accept_paused_until ? POLLIN : 0), 0});
    for (auto& [id, c] : L.clients) {
      // Always POLLIN, even while a WAIT is parked: that is how a hang-up is noticed.
      const short out = c.out_off < c.out.size() ? POLLOUT : 0;
      fds.push_back({c.fd, static_cast<short>(POLLIN | out), 0});
      ids.push_back(id);
    }
    const int wait_ms = L.poll_ms(now);
    L.woke = false;
    if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "shardlab store %s: poll failed: %s; stopping\n", L.where.c_str(),
                   std::strerror(errno));
      return;
    }
    if (fds[0].revents) return;
    if (fds[1].revents & POLLIN) L.accept_all(listen_fd_);
    for (size_t i = 0; i < ids.size(); ++i) {
      const short ev = fds[i + 2].revents;
      if (!ev) continue;
      Loop::Client& c = L.clients.at(ids[i]);
      if (c.dead) continue;  // closed to make room just now
      if (ev & (POLLIN | POLLHUP | POLLERR)) L.read_from(c);
      if (!c.dead && (ev & POLLOUT)) L.write_to(c);
    }
    // Requests of every client, not only those just read: a woken WAIT may have more queued.
    for (auto& [id, c] : L.clients) {
      L.process_input(c, id);
      if (!c.dead && c.out_off < c.out.size()) L.write_to(c);  // answer now, not next round
    }
    L.enforce(Clock::now());
    L.close_dead();
    L.flush_log(Clock::now());
  }
}

// ---------------------------------------------------------------------------
// TcpStore (client)

namespace {
// c10d clients put this before every user key (TCPStore's regularPrefix_), so a Python
// `store.get("foo")` and our get("foo") name the same key.
const std::string kKeyPrefix = "/";
}  // namespace

TcpStore::TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout)
    : host_(host), port_(port), timeout_(timeout) {
  if (port < 1 || port > 65535)
    throw CommError("rendezvous store " + address() + ": port out of range (1-65535)");
  connect_until(Clock::now() + timeout_);
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStore::address() const {
  return host_ + ":" + std::to_string(port_);
}

void TcpStore::fail(const std::string& why) {
  // Whatever was half sent or half read, the stream is out of step now: start afresh.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  throw CommError("rendezvous store at " + address() + ": " + why);
}

void TcpStore::fail_gone(const std::string& message) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  gone_ = message;
  throw CommError(message);
}

void TcpStore::connect_until(Clock::time_point deadline) {
  std::string last = "no address";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int gai = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res);
    if (gai != 0) last = gai_strerror(gai);
    // Freed on every way out, a probe's exception included.
    const std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(gai == 0 ? res : nullptr,
                                                               [](addrinfo* a) {
                                                                 if (a) ::freeaddrinfo(a);
                                                               });
    for (addrinfo* ai = owned.get(); ai; ai = ai->ai_next) {
      const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      set_nonblocking(fd);
      int err = ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        err = ETIMEDOUT;
        if (::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1000))) == 1) {
          socklen_t len = sizeof err;
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
      if (err == 0) {
        set_nodelay(fd);
        fd_ = fd;
        if (probe(Clock::now() + timeout_) == Probe::ok) return;
        // Accepted, then closed unanswered: how a store at its connection limit refuses a
        // client (or one shutting down). It may have room in a moment.
        last =
            "it accepted the connection and closed it unanswered, as a store at its "
            "connection limit does";
        continue;
      }
      last = std::strerror(err);
      ::close(fd);
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(std::chrono::milliseconds(50), deadline - Clock::now()));
  }
  throw CommError("cannot reach the rendezvous store at " + address() + " after " +
                  seconds_text(timeout_) + " (" + last + ")");
}

// A first CHECK tells a store from another service on that port (an HTTP
// server answers 'H'): one line naming it now, not a muddled failure later.
TcpStore::Probe TcpStore::probe(Clock::time_point deadline) {
  std::string msg(1, static_cast<char>(Query::check));
  append_u64(msg, 1);
  append_bytes(msg, kKeyPrefix + std::string("probe"));
  char reply = 0;
  try {
    send_all(msg);
    recv_exact(&reply, 1, deadline, "a first CHECK");
  } catch (const CommError&) {
    if (!gone_.empty()) throw;  // no answer within the timeout
    return Probe::hung_up;      // fail() has closed the socket
  }
  if (reply == 0 || reply == 1) return Probe::ok;
  ::close(fd_);
  fd_ = -1;
  const unsigned char b = static_cast<unsigned char>(reply);
  throw CommError(address() + " is not a rendezvous store: it answered a first CHECK with byte " +
                  std::to_string(b) +
                  (b >= 32 && b < 127 ? std::string(" ('") + static_cast<char>(b) + "')" : "") +
                  " (valid: 0 or 1, as a c10d TCPStore answers; is another service on that "
                  "port?)");
}

void TcpStore::ensure_connected() {
  if (!gone_.empty()) throw CommError(gone_);
  if (fd_ >= 0) {
    // Between requests only a hang-up can arrive (a full store closes idle clients to make
    // room): then start afresh. Bytes (out of step) are left for the next read to name.
    pollfd p{fd_, POLLIN, 0};
    char byte = 0;
    const ssize_t r = ::poll(&p, 1, 0) == 1 ? ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) : 1;
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  if (fd_ >= 0) return;
  try {
    connect_until(Clock::now() + timeout_);
  } catch (const CommError& e) {
    // Unreachable for the whole timeout: its process has ended or stopped.
    if (gone_.empty()) gone_ = e.what();
    throw;
  }
}

void TcpStore::send_all(const std::string& bytes) {
  const auto deadline = Clock::now() + timeout_;
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{fd_, POLLOUT, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0)
        fail_gone("rendezvous store at " + address() + ": could not send a request within " +
                  seconds_text(timeout_));
      continue;
    }
    fail(std::string("sending a request failed: ") + std::strerror(errno));
  }
}

void TcpStore::recv_exact(char* out, size_t n, Clock::time_point deadline, const char* what) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd_, out + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) fail(std::string("closed the connection instead of answering ") + what);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      fail(std::string("reading the answer to ") + what + " failed: " + std::strerror(errno));
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (deadline == Clock::time_point::max()) {
      ::poll(&p, 1, -1);
    } else if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
      fail_gone("rendezvous store at " + address() + ": no answer to " + what + " within " +
                seconds_text(std::max(timeout_, std::chrono::milliseconds(0))) +
                " (its process stopped or gone?)");
    }
  }
}

std::vector<char> TcpStore::recv_bytes(const char* what) {
  const auto deadline = Clock::now() + timeout_;
  uint64_t len = 0;
  recv_exact(reinterpret_cast<char*>(&len), 8, deadline, what);
  if (len > kMaxString)
    fail(std::string("malformed answer to ") + what + ": a value of " + std::to_string(len) +
         " bytes (at most " + mib_text(kMaxString) + ")");
  std::vector<char> value(len);
  recv_exact(value.data(), len, deadline, what);
  return value;
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  std::lock_guard<std::mutex> lock(mu_);
  ensure_connected();
  std::string msg(1, static_cast<char>(Query::set));
  append_bytes(msg, kKeyPrefix + key);
  append_bytes(msg, value.data(), value.size());
  // c10d's SET has no reply: a CHECK of the key in the same write gets one, so a SET the
  // store refused (over its memory cap, it drops the client) fails here, naming the key,
  // rather than later as a key that never arrives.
  msg += static_cast<char>(Query::check);
  append_u64(msg, 1);
  append_bytes(msg, kKeyPrefix + key);
  send_all(msg);
  char reply = 0;
  try {
    recv_exact(&reply, 1, Clock::now() + timeout_, "SET");
  } catch (const CommError&) {
    if (!gone_.empty()) throw;
    fail("refused SET of key " + shown(key) + " (" + std::to_string(value.size()) +
         " bytes) by closing the connection (over its memory cap? its host's log says why)");
  }
}

std::vector<char> TcpStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::lock_guard<std::mutex> lock(mu_);
  ensure_connected();
  std::string msg(1, static_cast<char>(Query::get));
  append_bytes(msg, kKeyPrefix + key);
  send_all(msg);
  return recv_bytes("GET");
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  ensure_connected();
  std::string msg(1, static_cast<char>(Query::wait));
  append_u64(msg, keys.size());
  for (const std::string& k : keys) append_bytes(msg, kKeyPrefix + k);
  send_all(msg);
  // Gloo's kNoTimeout is zero: wait for as long as it takes.
  const auto deadline = timeout.count() <= 0 ? Clock::time_point::max() : Clock::now() + timeout;
  pollfd p{fd_, POLLIN, 0};
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (deadline != Clock::time_point::max() &&
      (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0)) {
    std::string names;
    for (size_t i = 0; i < keys.size() && i < 8; ++i) names += (i ? ", " : "") + shown(keys[i]);
    if (keys.size() > 8) names += ", ...";
    // The server still owes this WAIT a reply; closing the connection is the only way to be
    // sure the next request does not read it (torch 1.13 has no CANCEL_WAIT).
    ::close(fd_);
    fd_ = -1;
    throw CommError("rendezvous store at " + address() + ": timed out after " +
                    seconds_text(timeout) + " waiting for key(s) " + names);
  }
  char reply = 0;
  recv_exact(&reply, 1, deadline, "WAIT");
  if (reply != 0)
    fail("malformed answer to WAIT: " + std::to_string(static_cast<unsigned char>(reply)) +
         " (expected 0, STOP_WAITING)");
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  ensure_connected();
  std::string msg(1, static_cast<char>(Query::add));
  append_bytes(msg, kKeyPrefix + key);
  append_u64(msg, static_cast<uint64_t>(delta));
  send_all(msg);
  int64_t value = 0;
  recv_exact(reinterpret_cast<char*>(&value), 8, Clock::now() + timeout_, "ADD");
  return value;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  ensure_connected();
  std::string msg(1, static_cast<char>(Query::check));
  append_u64(msg, keys.size());
  for (const std::string& k : keys) append_bytes(msg, kKeyPrefix + k);
  send_all(msg);
  char reply = 0;
  recv_exact(&reply, 1, Clock::now() + timeout_, "CHECK");
  if (reply != 0 && reply != 1)
    fail("malformed answer to CHECK: " + std::to_string(static_cast<unsigned char>(reply)) +
         " (expected 0 ready or 1 not ready)");
  return reply == 0;
}

int64_t TcpStore::num_keys() {
  std::lock_guard<std::mutex> lock(mu_);
  ensure_connected();
  send_all(std::string(1, static_cast<char>(Query::get_num_keys)));
  int64_t n = 0;
  recv_exact(reinterpret_cast<char*>(&n), 8, Clock::now() + timeout_, "GETNUMKEYS");
  return n;
}

bool TcpStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  ensure_connected();
  std::string msg(1, static_cast<char>(Query::delete_key));
  append_bytes(msg, kKeyPrefix + key);
  send_all(msg);
  int64_t n = 0;
  recv_exact(reinterpret_cast<char*>(&n), 8, Clock::now() + timeout_, "DELETE_KEY");
  return n == 1;
}

// ---------------------------------------------------------------------------
// Gloo adapter

namespace {
// Waits poll check() rather than send WAIT: a WAIT holds the client's connection (and its
// lock) until the keys arrive, which would stall the watchdog's checks on the same client.
class GlooTcpStore final : public CheckStore {
 public:
  explicit GlooTcpStore(std::shared_ptr<TcpStore> c) : c_(std::move(c)) {}
  void set(const std::string& key, const std::vector<char>& data) override { c_->set(key, data); }
  std::vector<char> get(const std::string& key) override {
    wait({key}, c_->timeout());
    return c_->get(key);
  }
  bool check(const std::vector<std::string>& keys) override { return c_->check(keys); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, c_->timeout()); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    try {
      CheckStore::wait(keys, timeout);
    } catch (const CommError&) {
      throw;
    } catch (const std::runtime_error& e) {  // the poll's timeout: one line naming the store
      std::string why = e.what();
      if (why.rfind("rendezvous: ", 0) == 0) why.erase(0, 12);
      throw CommError("rendezvous store at " + c_->address() + ": " + why);
    }
  }

 private:
  std::shared_ptr<TcpStore> c_;
};
}  // namespace

std::unique_ptr<CheckStore> make_gloo_store(std::shared_ptr<TcpStore> client) {
  return std::make_unique<GlooTcpStore>(std::move(client));
}

}  // namespace shardlab
