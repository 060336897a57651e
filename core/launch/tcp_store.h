// A key-value store over TCP that speaks PyTorch c10d TCPStore's wire protocol (torch 1.13), so
// ranks that are processes can rendezvous through it, or through torchrun's agent store.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shardlab {

class CheckStore;  // core/launch/check_store.h

// "30 s", "0.25 s": timeouts in messages read as people set them.
std::string seconds_text(std::chrono::milliseconds ms);

// The protocol, as torch 1.13 sends it (checked against the installed torch): one query byte,
// then its arguments; a string or byte vector is a little-endian uint64 length and the bytes.
// No handshake, no magic number (those came with torch 2.x). c10d clients put "/" before
// every user key; the server stores keys as sent.
namespace tcp_store_wire {
enum class Query : uint8_t {
  set = 0,           // key, value                    -> (nothing)
  compare_set = 1,   // key, expected, desired        -> value now stored (or expected)
  get = 2,           // key                           -> value
  add = 3,           // key, int64 delta              -> int64 new value (stored as decimal)
  check = 4,         // uint64 n, n keys              -> uint8 0 ready / 1 not ready
  wait = 5,          // uint64 n, n keys              -> uint8 0 (stop waiting) once all exist
  get_num_keys = 6,  //                               -> int64
  watch_key = 7,     // (c10d's callback client; not served here)
  delete_key = 8,    // key                           -> int64 number deleted
};
// Longest string or value either side accepts: a rendezvous carries addresses, not tensors.
constexpr uint64_t kMaxString = uint64_t{64} << 20;
// Most keys in one CHECK or WAIT.
constexpr uint64_t kMaxKeys = uint64_t{1} << 16;
}  // namespace tcp_store_wire

// What one server lets its clients take. The store lives in rank 0's process, beside its
// training: anyone who can reach the port must not be able to exhaust that process's memory
// or file descriptors, nor crowd the ranks out.
struct TcpStoreLimits {
  // Connections served at once (also capped at half the process's descriptor limit, so the
  // rank keeps descriptors for its own sockets and files). At the limit a new client takes
  // the place of the one idle longest (no request for `idle_evict_after`, no reply pending,
  // no WAIT parked; our clients reconnect unseen); with none idle it is refused.
  size_t max_clients = 1024;
  std::chrono::milliseconds idle_evict_after{1000};
  // Bytes stored (keys and values, and the keys parked WAITs name): a SET or WAIT past it is
  // refused, its client dropped. And bytes in flight (every client's unparsed input and
  // unsent replies): past it, the client holding the most is dropped. So the store's process
  // holds at most twice this for its clients.
  uint64_t max_bytes = uint64_t{1} << 30;
  // A client that stops in the middle of a request, or does not read its replies, this long
  // is dropped: what it holds is freed.
  std::chrono::milliseconds stall_after{30000};
};

// Serves the store on one background thread that poll()s every socket: a WAIT is then just a
// list of parked clients woken by the SET that completes it, with no locks, and a client that
// stalls mid-message cannot block the others (each has its own input buffer). That is also
// how c10d's own 1.13 daemon is built. A client that breaks the protocol or a limit is dropped
// with one line on stderr; the server keeps serving everyone else.
class TcpStoreServer {
 public:
  // Binds bind_host:port (port 0: the kernel picks a free one; see port()). Throws CommError
  // naming the address when it cannot, e.g. "port 29500 is in use".
  explicit TcpStoreServer(const std::string& bind_host = "127.0.0.1", int port = 0,
                          const TcpStoreLimits& limits = {});
  ~TcpStoreServer();  // stops the thread and closes every socket
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  // The limits in force (max_clients as lowered to the descriptor limit).
  const TcpStoreLimits& limits() const { return limits_; }
  // Clients dropped for breaking the protocol or a limit so far (tests check the server
  // noticed), refused at the connection limit, and closed while idle to make room.
  int64_t dropped_clients() const { return dropped_.load(); }
  int64_t refused_clients() const { return refused_.load(); }
  int64_t evicted_clients() const { return evicted_.load(); }

 private:
  struct Loop;
  void run();

  std::string host_;
  int port_ = 0;
  TcpStoreLimits limits_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::atomic<int64_t> dropped_{0}, refused_{0}, evicted_{0};
  std::unique_ptr<Loop> loop_;
  std::thread thread_;  // last: starts after everything above exists
};

// A client of a c10d-compatible store (ours or torch's). Every call is one request and its
// reply on one connection, under a mutex, so several threads may share a client. Failures
// throw CommError with one line naming host:port.
//
// A store that leaves a request unanswered for the whole timeout (or cannot be reached again
// within it) is taken for gone: every later call fails at once with the same line. It lives
// in rank 0's process, so it stops when that process stops (SIGSTOP, a debugger, a frozen
// host), and without this each of the failure path's many small reads would wait the whole
// timeout again.
class TcpStore {
 public:
  // Connects to host:port, retrying until `timeout` passes (the server may start later, or
  // be full for a moment); `timeout` is also how long get() waits for its key and any reply
  // may take.
  TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  // Confirmed by a CHECK of the key in the same write (c10d's SET has no reply), so a SET the
  // store refused (over its memory cap) throws here, naming the key.
  void set(const std::string& key, const std::vector<char>& value);
  // Waits (up to the timeout) for the key to exist, then returns its value.
  std::vector<char> get(const std::string& key);
  // Returns once every key exists; throws CommError after `timeout`.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Adds delta to the key's decimal value (a missing key counts as 0) and returns the sum.
  int64_t add(const std::string& key, int64_t delta);
  // Whether every key exists now (no waiting).
  bool check(const std::vector<std::string>& keys);
  // Keys in the whole store, c10d's own bookkeeping keys included.
  int64_t num_keys();
  bool delete_key(const std::string& key);

  std::string address() const;  // "host:port"
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  void connect_until(std::chrono::steady_clock::time_point deadline);
  enum class Probe { ok, hung_up };
  Probe probe(std::chrono::steady_clock::time_point deadline);
  void ensure_connected();
  void send_all(const std::string& bytes);
  void recv_exact(char* out, size_t n, std::chrono::steady_clock::time_point deadline,
                  const char* what);
  std::vector<char> recv_bytes(const char* what);
  [[noreturn]] void fail(const std::string& why);
  // The store did not answer in time: this and every later call throw `message`.
  [[noreturn]] void fail_gone(const std::string& message);

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  int fd_ = -1;       // -1 after a timed-out WAIT: its late reply must not be read as the next one
  std::string gone_;  // set once the store is taken for gone: the line every call throws
};

// TcpStore as Gloo's rendezvous::Store (set/get/wait) that can also check, for connectFullMesh
// and the process link's watchdog. Owns the client.
std::unique_ptr<CheckStore> make_gloo_store(std::shared_ptr<TcpStore> client);

}  // namespace shardlab
