// The c10d-compatible TCP store's server: one poll() loop on one thread,
// bounded in clients, bytes and log lines (tcp_store.h).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>

#include "core/comm/comm.h"
#include "core/launch/tcp_store.h"
#include "core/launch/tcp_store_wire.h"

namespace shardlab {

using namespace tcp_store_wire;
using Clock = std::chrono::steady_clock;

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

}  // namespace shardlab
