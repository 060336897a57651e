// The c10d-compatible TCP store's client: blocking calls with deadlines, one
// line naming the store for every failure (tcp_store.h), and Gloo's store over it.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/rendezvous/store.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/comm/comm.h"
#include "core/launch/check_store.h"
#include "core/launch/tcp_store.h"
#include "core/launch/tcp_store_wire.h"

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
