// The c10d-compatible TCP store: a poll() server on one thread, and a blocking client with
// deadlines. See tcp_store.h for the wire format.
#include "core/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/rendezvous/store.h>

#include "core/check_store.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>

#include "core/comm.h"

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
constexpr size_t kMaxClients = 1024;
// A client's unanswered output beyond this: it is not reading its replies.
constexpr size_t kMaxPendingOut = 4 * kMaxString;
// Unparsed input beyond one largest message (compare_set: three strings).
constexpr size_t kMaxPendingIn = 3 * kMaxString + 64;
constexpr size_t kReadChunk = 256 << 10;
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
    bool dead = false;
  };

  std::string where;  // "127.0.0.1:29500", for log lines
  std::atomic<int64_t>* dropped = nullptr;
  std::unordered_map<std::string, std::string> kv;
  // Key -> ids of clients whose WAIT needs it (once per time the WAIT named it, as c10d).
  std::unordered_map<std::string, std::vector<uint64_t>> waiters;
  std::map<uint64_t, Client> clients;
  uint64_t next_id = 1;
  // A WAIT completed this round: its client may have requests queued behind it that no socket
  // event will announce, so the next poll() must not sleep.
  bool woke = false;

  void drop(Client& c, const std::string& why) {
    std::fprintf(stderr, "shardlab store %s: dropped client %s: %s\n", where.c_str(),
                 c.peer.c_str(), why.c_str());
    dropped->fetch_add(1);
    c.dead = true;
  }

  void reply_u8(Client& c, uint8_t v) { c.out.push_back(static_cast<char>(v)); }
  void reply_i64(Client& c, int64_t v) { append_u64(c.out, static_cast<uint64_t>(v)); }

  void wake(const std::string& key) {
    auto it = waiters.find(key);
    if (it == waiters.end()) return;
    for (uint64_t id : it->second) {
      auto c = clients.find(id);
      // A client that hung up (or timed out and reconnected) is simply gone.
      if (c == clients.end() || c->second.dead || c->second.awaited == 0) continue;
      if (--c->second.awaited == 0) {
        reply_u8(c->second, 0);  // STOP_WAITING
        woke = true;
      }
    }
    waiters.erase(it);
  }

  // Runs one complete request; false when the client must be dropped (why says why).
  bool execute(Client& c, uint64_t id, Request& req, std::string& why) {
    switch (req.query) {
      case Query::set:
        kv[req.key] = std::move(req.a);
        wake(req.key);
        return true;
      case Query::compare_set: {
        // c10d 1.13: a missing key is created only when `expected` is empty; the reply is the
        // value stored afterwards, or `expected` when the key is missing and nothing was set.
        auto it = kv.find(req.key);
        if (it == kv.end()) {
          if (req.a.empty()) {
            kv[req.key] = req.b;
            append_bytes(c.out, req.b);
            wake(req.key);
          } else {
            append_bytes(c.out, req.a);
          }
        } else if (it->second == req.a) {
          it->second = req.b;
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
        kv[req.key] = std::to_string(value);  // decimal text, as c10d stores it
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
        size_t missing = 0;
        for (const std::string& k : req.keys) {
          if (kv.count(k)) continue;
          waiters[k].push_back(id);
          ++missing;
        }
        if (missing == 0) reply_u8(c, 0);
        c.awaited = missing;
        return true;
      }
      case Query::get_num_keys:
        reply_i64(c, static_cast<int64_t>(kv.size()));
        return true;
      case Query::delete_key:
        reply_i64(c, static_cast<int64_t>(kv.erase(req.key)));
        return true;
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
    if (got > 0) return;
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

  void accept_all(int listen_fd) {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd = ::accept(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
      if (fd < 0) return;  // EAGAIN: all accepted; anything else: try again next round
      if (clients.size() >= kMaxClients) {
        std::fprintf(stderr, "shardlab store %s: refused client %s: already %zu clients\n",
                     where.c_str(), peer_name(ss).c_str(), kMaxClients);
        ::close(fd);
        continue;
      }
      set_nonblocking(fd);
      set_nodelay(fd);
      Client c;
      c.fd = fd;
      c.peer = peer_name(ss);
      clients.emplace(next_id++, std::move(c));
    }
  }

  void close_dead() {
    for (auto it = clients.begin(); it != clients.end();) {
      if (it->second.dead) {
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

TcpStoreServer::TcpStoreServer(const std::string& bind_host, int port)
    : host_(bind_host), loop_(std::make_unique<Loop>()) {
  const std::string where = bind_host + ":" + std::to_string(port);
  if (port < 0 || port > 65535)
    throw CommError("rendezvous store: port " + std::to_string(port) +
                    " is out of range (0 picks a free one, else 1-65535)");
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
  loop_->dropped = &dropped_;
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
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& [id, c] : L.clients) {
      // Always POLLIN, even while a WAIT is parked: that is how a hang-up is noticed.
      const short out = c.out_off < c.out.size() ? POLLOUT : 0;
      fds.push_back({c.fd, static_cast<short>(POLLIN | out), 0});
      ids.push_back(id);
    }
    const int wait_ms = L.woke ? 0 : -1;
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
      if (ev & (POLLIN | POLLHUP | POLLERR)) L.read_from(c);
      if (!c.dead && (ev & POLLOUT)) L.write_to(c);
    }
    // Requests of every client, not only those just read: a woken WAIT may have more queued.
    for (auto& [id, c] : L.clients) {
      L.process_input(c, id);
      if (!c.dead && c.out_off < c.out.size()) L.write_to(c);  // answer now, not next round
    }
    L.close_dead();
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

void TcpStore::connect_until(Clock::time_point deadline) {
  std::string last = "no address";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int gai = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res);
    if (gai != 0) last = gai_strerror(gai);
    for (addrinfo* ai = gai == 0 ? res : nullptr; ai; ai = ai->ai_next) {
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
        ::freeaddrinfo(res);
        probe();
        return;
      }
      last = std::strerror(err);
      ::close(fd);
    }
    if (res) ::freeaddrinfo(res);
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(std::chrono::milliseconds(50), deadline - Clock::now()));
  }
  throw CommError("cannot reach the rendezvous store at " + address() + " after " +
                  seconds_text(timeout_) + " (" + last + ")");
}

// A first CHECK tells a store from another service on that port (an HTTP
// server answers 'H'): one line naming it now, not a muddled failure later.
void TcpStore::probe() {
  std::string msg(1, static_cast<char>(Query::check));
  append_u64(msg, 1);
  append_bytes(msg, kKeyPrefix + std::string("probe"));
  send_all(msg);
  char reply = 0;
  recv_exact(&reply, 1, Clock::now() + timeout_, "a first CHECK");
  if (reply == 0 || reply == 1) return;
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
  if (fd_ < 0) connect_until(Clock::now() + timeout_);
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
        fail("could not send a request within " + seconds_text(timeout_));
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
      fail(std::string("no answer to ") + what + " within " +
           seconds_text(std::max(timeout_, std::chrono::milliseconds(0))));
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
  send_all(msg);  // c10d's SET has no reply
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
