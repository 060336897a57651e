// Rendezvous stores: the c10d-compatible TCP store (round trips, a malformed-message corpus,
// interop with torch 1.13's TCPStore), rendezvous URLs, and a real Gloo connectFullMesh +
// all-reduce of 4 threads through each store kind (file, redis, env/tcp).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/comm.h"
#include "core/config.h"
#include "core/launch/rdzv.h"
#include "core/launch/tcp_store.h"

extern char** environ;

using namespace shardlab;
using namespace std::chrono_literals;

namespace {

// A port nobody listens on right now (the kernel's pick; racy only in theory here).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A socket listening on a kernel-picked loopback port, for a fake server.
int listen_loopback(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(fd, 4);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

std::vector<char> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string text(const std::vector<char>& v) {
  return {v.begin(), v.end()};
}

// Wire pieces, as c10d sends them.
std::string u64(uint64_t v) {
  return std::string(reinterpret_cast<const char*>(&v), 8);
}
std::string str(const std::string& s) {
  return u64(s.size()) + s;
}
std::string q(uint8_t type) {
  return std::string(1, static_cast<char>(type));
}

// A raw connection to the server, for sending what no well-behaved client would.
class Raw {
 public:
  explicit Raw(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Raw() { close(); }
  bool ok() const { return ok_; }
  void send(const std::string& b) { ::send(fd_, b.data(), b.size(), MSG_NOSIGNAL); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Reads whatever comes within `t`; sets closed when the server hung up.
  std::string read_for(std::chrono::milliseconds t, bool& closed) {
    std::string out;
    closed = false;
    const auto end = std::chrono::steady_clock::now() + t;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) != 1) return out;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed = true;
        return out;
      }
      out.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds t = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + t;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

// The interpreter that has torch (the pyenv python3 on PATH may not).
std::string torch_python() {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    const std::string cmd = std::string(py) + " -c 'import torch.distributed' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

// A child process we started, stopped by its own pid.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    // Its chatter (redis's start-up banner) would bury the test output.
    posix_spawn_file_actions_t io;
    posix_spawn_file_actions_init(&io);
    posix_spawn_file_actions_addopen(&io, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&io, 2, "/dev/null", O_WRONLY, 0);
    if (posix_spawnp(&pid_, args[0], &io, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&io);
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  bool started() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

std::string tmp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("shardlab-store-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// 4 ranks (threads) each open the store, connect a full Gloo mesh through it, and all-reduce
// {rank, 1, 2*rank}. Returns each rank's error ("" if none) and leaves the sums in `sums`.
std::vector<std::string> rendezvous_allreduce(
    int world, const std::function<std::unique_ptr<RdzvStore>(int rank)>& open,
    std::vector<std::vector<float>>& sums, std::vector<std::string>* keys_seen = nullptr) {
  std::vector<std::string> errors(world);
  sums.assign(world, {});
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto store = open(rank);
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto device = gloo::transport::tcp::CreateDevice(attr);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
        ctx->setTimeout(20s);
        ctx->connectFullMesh(store->store(), device);
        std::vector<float> buf = {float(rank), 1.f, 2.f * rank};
        gloo::AllreduceOptions opts(ctx);
        opts.setOutput(buf.data(), buf.size());
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        gloo::allreduce(opts);
        sums[rank] = buf;
        if (rank == 0 && keys_seen) *keys_seen = store->keys();
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void check_sums(int world, const std::vector<std::string>& errors,
                const std::vector<std::vector<float>>& sums) {
  float r = 0;
  for (int i = 0; i < world; ++i) r += float(i);
  for (int rank = 0; rank < world; ++rank) {
    INFO("rank " << rank);
    REQUIRE(errors[rank] == "");
    REQUIRE(sums[rank] == std::vector<float>{r, float(world), 2 * r});
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Protocol round trips

TEST_CASE("TcpStore round trips against TcpStoreServer", "[store]") {
  TcpStoreServer server;
  REQUIRE(server.port() > 0);
  TcpStore c("127.0.0.1", server.port(), 5s);
  CHECK(c.address() == "127.0.0.1:" + std::to_string(server.port()));

  c.set("a", bytes("alpha"));
  CHECK(text(c.get("a")) == "alpha");
  c.set("a", bytes("again"));  // c10d overwrites
  CHECK(text(c.get("a")) == "again");

  const std::vector<char> binary = {'\0', 'x', '\xff', '\0'};
  c.set("bin", binary);
  CHECK(c.get("bin") == binary);
  c.set("empty", {});
  CHECK(c.get("empty").empty());
  c.set("", bytes("empty key"));
  CHECK(text(c.get("")) == "empty key");

  CHECK(c.add("n", 3) == 3);
  CHECK(c.add("n", 4) == 7);
  CHECK(c.add("n", -10) == -3);
  CHECK(text(c.get("n")) == "-3");  // stored as decimal text, as c10d does

  CHECK(c.check({"a", "n"}));
  CHECK_FALSE(c.check({"a", "missing"}));
  CHECK(c.check({}));
  CHECK(c.num_keys() == 5);
  CHECK(c.delete_key("a"));
  CHECK_FALSE(c.delete_key("a"));
  CHECK(c.num_keys() == 4);

  // A 1 MiB value crosses many reads and writes.
  std::vector<char> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  c.set("big", big);
  CHECK(c.get("big") == big);

  // WAIT returns when another client sets the last key.
  std::thread setter([port = server.port()] {
    TcpStore other("127.0.0.1", port, 5s);
    std::this_thread::sleep_for(50ms);
    other.set("late1", bytes("1"));
    std::this_thread::sleep_for(50ms);
    other.set("late2", bytes("2"));
  });
  c.wait({"late1", "late2", "n"}, 5s);
  setter.join();
  CHECK(text(c.get("late2")) == "2");

  // A timed-out WAIT says which keys; the client then reconnects and still works.
  try {
    c.wait({"never"}, 100ms);
    FAIL("wait did not time out");
  } catch (const CommError& e) {
    const std::string m = e.what();
    CHECK(m.find("timed out after 0.1 s waiting for key(s) 'never'") != std::string::npos);
    CHECK(m.find('\n') == std::string::npos);
  }
  CHECK(text(c.get("late1")) == "1");
  c.set("never", bytes("now"));  // the abandoned WAIT's client is gone; nothing breaks
  CHECK(text(c.get("never")) == "now");
  CHECK(server.dropped_clients() == 0);
}

TEST_CASE("TcpStore through Gloo's Store interface", "[store]") {
  TcpStoreServer server;
  auto g = make_gloo_store(std::make_shared<TcpStore>("127.0.0.1", server.port(), 5s));
  g->set("k", bytes("v"));
  g->wait({"k"}, 1s);
  CHECK(text(g->get("k")) == "v");
  CHECK_THROWS_AS(g->wait({"nope"}, 50ms), CommError);
}

TEST_CASE("TcpStoreServer names a port in use", "[store]") {
  TcpStoreServer first;
  try {
    TcpStoreServer second("127.0.0.1", first.port());
    FAIL("second server bound the same port");
  } catch (const CommError& e) {
    CHECK(std::string(e.what()) ==
          "cannot serve the rendezvous store on 127.0.0.1:" + std::to_string(first.port()) +
              ": port " + std::to_string(first.port()) + " is in use");
  }
  CHECK_THROWS_WITH(TcpStoreServer("127.0.0.1", 70000),
                    Catch::Contains("port 70000 is out of range"));
}

TEST_CASE("TcpStore retries until the server starts, then names host:port", "[store]") {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    TcpStore c("127.0.0.1", port, 300ms);
    FAIL("connected to nothing");
  } catch (const CommError& e) {
    CHECK(std::string(e.what()) == "cannot reach the rendezvous store at 127.0.0.1:" +
                                       std::to_string(port) + " after 0.3 s (Connection refused)");
  }
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);

  std::unique_ptr<TcpStoreServer> server;
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    server = std::make_unique<TcpStoreServer>("127.0.0.1", port);
  });
  TcpStore c("127.0.0.1", port, 5s);  // connects once the server is up
  later.join();
  c.set("x", bytes("y"));
  CHECK(text(c.get("x")) == "y");
}

// A server that answers every request with the same bytes, then optionally hangs up.
TEST_CASE("TcpStore turns a garbage-speaking server into one-line errors", "[store]") {
  struct Case {
    const char* name;
    std::string answer;
    std::function<void(TcpStore&)> op;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"a length instead of STOP_WAITING", u64(~uint64_t{0}), [](TcpStore& c) { (void)c.get("k"); },
       "malformed answer to WAIT: 255"},
      // The WAIT before GET gets its 0, then GET's length says 2^63.
      {"huge GET length after wait", std::string(1, '\0') + u64(uint64_t{1} << 63),
       [](TcpStore& c) { (void)c.get("k"); }, "malformed answer to GET"},
      {"bad CHECK byte", std::string(1, '\x07'), [](TcpStore& c) { (void)c.check({"k"}); },
       "malformed answer to CHECK"},
      {"bad WAIT byte", std::string(1, '\x05'), [](TcpStore& c) { c.wait({"k"}, 1s); },
       "malformed answer to WAIT: 5"},
      {"hang-up", "", [](TcpStore& c) { (void)c.add("k", 1); },
       "closed the connection instead of answering ADD"},
      {"short ADD reply", "abc", [](TcpStore& c) { (void)c.add("k", 1); },
       "closed the connection instead of answering ADD"},
  };
  for (const Case& cs : cases) {
    INFO(cs.name);
    int port = 0;
    const int lfd = listen_loopback(&port);
    std::thread fake([&] {
      const int fd = ::accept(lfd, nullptr, nullptr);
      char buf[256];
      pollfd p{fd, POLLIN, 0};
      // The client's probe first (a CHECK): "not ready", as a store answers.
      if (::poll(&p, 1, 2000) == 1) (void)::recv(fd, buf, sizeof buf, 0);
      ::send(fd, "\x01", 1, MSG_NOSIGNAL);
      if (::poll(&p, 1, 2000) == 1) (void)::recv(fd, buf, sizeof buf, 0);
      ::send(fd, cs.answer.data(), cs.answer.size(), MSG_NOSIGNAL);
      // Stay a while: a client's next request must not meet a closed socket first.
      std::this_thread::sleep_for(300ms);
      ::close(fd);
    });
    TcpStore c("127.0.0.1", port, 2s);
    std::string msg;
    try {
      cs.op(c);
    } catch (const CommError& e) {
      msg = e.what();
    }
    fake.join();
    ::close(lfd);
    CHECK(msg.find(cs.expect) != std::string::npos);
    CHECK(msg.find("rendezvous store at 127.0.0.1:") == 0);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("TcpStore names another service on the store's port at once", "[store]") {
  // An HTTP server (or a proxy) answers anything with "HTTP/1.1 400 ...": the
  // client's first CHECK reads 'H' and says what it found, before any rank waits.
  int port = 0;
  const int lfd = listen_loopback(&port);
  std::thread fake([&] {
    const int fd = ::accept(lfd, nullptr, nullptr);
    char buf[256];
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) == 1) (void)::recv(fd, buf, sizeof buf, 0);
    const std::string http = "HTTP/1.1 400 Bad Request\r\n\r\n";
    ::send(fd, http.data(), http.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(300ms);
    ::close(fd);
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    TcpStore c("127.0.0.1", port, 5s);
  } catch (const CommError& e) {
    msg = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fake.join();
  ::close(lfd);
  CHECK(msg == "127.0.0.1:" + std::to_string(port) +
                   " is not a rendezvous store: it answered a first CHECK with byte 72 ('H') "
                   "(valid: 0 or 1, as a c10d TCPStore answers; is another service on that "
                   "port?)");
  CHECK(seconds < 2);  // at once, not after the 5 s timeout
}

// ---------------------------------------------------------------------------
// Malformed-message corpus: each case is sent on its own connection; the server drops the
// client (or keeps waiting for the rest of a message that may still come) and keeps serving.

TEST_CASE("TcpStoreServer survives a corpus of malformed clients", "[store]") {
  TcpStoreServer server;
  const int port = server.port();
  constexpr uint64_t huge = uint64_t{1} << 63;
  constexpr uint64_t all_ones = ~uint64_t{0};
  constexpr uint64_t over = (uint64_t{64} << 20) + 1;
  const std::string key = str("/k");

  enum class Then { server_closes, we_hang_up, stays_open };
  struct Case {
    const char* name;
    std::string bytes;
    Then then;
  };
  const std::vector<Case> cases = {
      // Unknown or unserved query types.
      {"type 9", q(9), Then::server_closes},
      {"type 10 with payload", q(10) + key, Then::server_closes},
      {"type 0xff", q(0xff), Then::server_closes},
      {"WATCH_KEY", q(7) + key, Then::server_closes},
      {"HTTP request", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", Then::server_closes},
      {"a good SET, then type 0x80", q(0) + str("") + str("") + q(0x80), Then::server_closes},
      // Absurd lengths, refused before any of their bytes arrive.
      {"SET key 2^63", q(0) + u64(huge), Then::server_closes},
      {"SET key 2^64-1", q(0) + u64(all_ones), Then::server_closes},
      {"SET key 64 MiB + 1", q(0) + u64(over), Then::server_closes},
      {"SET value 2^63", q(0) + key + u64(huge), Then::server_closes},
      {"SET value 64 MiB + 1", q(0) + key + u64(over) + "xyz", Then::server_closes},
      {"GET key 2^64-1", q(2) + u64(all_ones), Then::server_closes},
      {"ADD key 2^63", q(3) + u64(huge), Then::server_closes},
      {"DELETE key 2^63", q(8) + u64(huge), Then::server_closes},
      {"CAS expected 2^63", q(1) + key + u64(huge), Then::server_closes},
      {"CAS desired 2^64-1", q(1) + key + str("") + u64(all_ones), Then::server_closes},
      {"CHECK 2^63 keys", q(4) + u64(huge), Then::server_closes},
      {"WAIT 2^64-1 keys", q(5) + u64(all_ones), Then::server_closes},
      {"CHECK 70000 keys", q(4) + u64(70000), Then::server_closes},
      {"WAIT second key 2^63", q(5) + u64(2) + key + u64(huge), Then::server_closes},
      // Well-formed but impossible.
      {"GET of a missing key", q(2) + str("/missing"), Then::server_closes},
      {"ADD to a non-number", q(0) + str("/word") + str("abc") + q(3) + str("/word") + u64(1),
       Then::server_closes},
      {"ADD overflow", q(3) + str("/big") + u64(INT64_MAX) + q(3) + str("/big") + u64(1),
       Then::server_closes},
      // Truncated messages, then the client hangs up.
      {"only SET byte", q(0), Then::we_hang_up},
      {"half a length", q(0) + u64(5).substr(0, 4), Then::we_hang_up},
      {"key cut short", q(0) + u64(10) + "abc", Then::we_hang_up},
      {"value length missing", q(0) + key, Then::we_hang_up},
      {"value cut short", q(0) + key + u64(100) + "xy", Then::we_hang_up},
      {"ADD delta cut short", q(3) + key + "\x01\x02\x03", Then::we_hang_up},
      {"CHECK one of two keys", q(4) + u64(2) + key, Then::we_hang_up},
      {"WAIT count cut short", q(5) + "\x01", Then::we_hang_up},
      {"CAS without desired", q(1) + key + str("e"), Then::we_hang_up},
      {"60 MiB announced, 3 bytes sent", q(0) + key + u64(uint64_t{60} << 20) + "abc",
       Then::we_hang_up},
      // Idle clients: nothing yet, or half a message; the server waits for them, serving
      // everyone else meanwhile.
      {"idle, nothing sent", "", Then::stays_open},
      {"idle mid-message", q(0) + u64(8) + "abcd", Then::stays_open},
      {"idle after a complete SET", q(0) + str("/idle") + str("v"), Then::stays_open},
      {"WAIT on a key never set", q(5) + u64(1) + str("/never"), Then::stays_open},
      // Legal edge cases.
      {"empty key and value", q(0) + str("") + str(""), Then::stays_open},
  };
  REQUIRE(cases.size() >= 30);

  std::vector<std::unique_ptr<Raw>> open;
  int64_t expected_drops = 0;
  for (const Case& c : cases) {
    INFO(c.name);
    auto raw = std::make_unique<Raw>(port);
    REQUIRE(raw->ok());
    raw->send(c.bytes);
    bool closed = false;
    switch (c.then) {
      case Then::server_closes:
        raw->read_for(3000ms, closed);
        CHECK(closed);
        ++expected_drops;
        break;
      case Then::we_hang_up:
        raw->read_for(50ms, closed);
        CHECK_FALSE(closed);  // still waiting for the rest
        raw->close();
        ++expected_drops;
        break;
      case Then::stays_open:
        raw->read_for(50ms, closed);
        CHECK_FALSE(closed);
        open.push_back(std::move(raw));
        break;
    }
    // After every case, a good client is served at once.
    TcpStore good("127.0.0.1", port, 2s);
    good.set("good", bytes(c.name));
    CHECK(text(good.get("good")) == c.name);
  }
  CHECK(eventually([&] { return server.dropped_clients() == expected_drops; }));
  CHECK(server.dropped_clients() == expected_drops);

  // A byte at a time is slow, not wrong.
  {
    Raw slow(port);
    const std::string msg = q(0) + str("/slow") + str("drip");
    for (char ch : msg) {
      slow.send(std::string(1, ch));
      std::this_thread::sleep_for(1ms);
    }
    TcpStore good("127.0.0.1", port, 2s);
    CHECK(text(good.get("slow")) == "drip");
  }
  // Pipelined requests in one write: SET, then GET, answered in order.
  {
    Raw pipe(port);
    pipe.send(q(0) + str("/p") + str("v1") + q(2) + str("/p") + q(6));
    bool closed = false;
    std::string got;
    const auto end = std::chrono::steady_clock::now() + 2s;
    while (got.size() < 8 + 2 + 8 && std::chrono::steady_clock::now() < end)
      got += pipe.read_for(100ms, closed);
    REQUIRE(got.size() == 18);
    CHECK(got.substr(0, 10) == str("v1"));
  }
  // A WAIT whose client hangs up, then its key is set: nothing to answer, nothing breaks.
  {
    Raw waiter(port);
    waiter.send(q(5) + u64(1) + str("/gone"));
    std::this_thread::sleep_for(20ms);
    waiter.close();
    TcpStore good("127.0.0.1", port, 2s);
    good.set("gone", bytes("x"));
    good.set("never", bytes("x"));  // wakes the idle WAIT above
    CHECK(text(good.get("gone")) == "x");
  }
  // Many clients at once, all idle; then one good one.
  {
    std::vector<std::unique_ptr<Raw>> many;
    for (int i = 0; i < 200; ++i) many.push_back(std::make_unique<Raw>(port));
    TcpStore good("127.0.0.1", port, 2s);
    CHECK(good.add("count", 1) == 1);
    for (int i = 0; i < 200; i += 2) many[i]->close();  // half hang up without a word
    CHECK(good.add("count", 1) == 2);
  }
  CHECK(server.dropped_clients() == expected_drops);
  open.clear();
}

// ---------------------------------------------------------------------------
// Limits: what clients may take from the process that hosts the store

TEST_CASE("TcpStoreServer: idle clients cannot crowd out a client that needs the store",
          "[store]") {
  TcpStoreLimits limits;
  limits.max_clients = 8;
  limits.idle_evict_after = 1s;
  TcpStoreServer server("127.0.0.1", 0, limits);
  const int port = server.port();
  // 40 connections that never say a word: the first 8 fill the table, the rest are turned
  // away at once (none is idle yet) instead of being kept.
  std::vector<std::unique_ptr<Raw>> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(std::make_unique<Raw>(port));
  CHECK(eventually([&] { return server.refused_clients() == 32; }));
  std::this_thread::sleep_for(1100ms);  // now they are idle
  const auto t0 = std::chrono::steady_clock::now();
  TcpStore rank("127.0.0.1", port, 5s);
  rank.set("addr", bytes("x"));
  CHECK(text(rank.get("addr")) == "x");
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  CHECK(server.evicted_clients() == 1);
  // Closed to make room: it reads EOF.
  int closed_count = 0;
  for (auto& r : idle) {
    bool closed = false;
    r->read_for(10ms, closed);
    closed_count += closed;
  }
  CHECK(closed_count == 33);

  // A client of ours closed while idle reconnects on its next request, unseen.
  std::this_thread::sleep_for(1100ms);
  std::vector<std::unique_ptr<Raw>> more;
  for (int i = 0; i < 8; ++i) more.push_back(std::make_unique<Raw>(port));
  // The 7 idle Raws left and `rank`.
  CHECK(eventually([&] { return server.evicted_clients() == 9; }));
  std::this_thread::sleep_for(1100ms);  // the newcomers idle in turn
  CHECK(rank.add("n", 1) == 1);
  CHECK(rank.check({"addr", "n"}));
  CHECK(server.dropped_clients() == 0);
}

TEST_CASE("TcpStoreServer: at the limit with nobody idle, a newcomer is refused in one line",
          "[store]") {
  TcpStoreLimits limits;
  limits.max_clients = 3;
  limits.idle_evict_after = 5s;
  TcpStoreServer server("127.0.0.1", 0, limits);
  std::vector<std::unique_ptr<TcpStore>> busy;
  for (int i = 0; i < 3; ++i)
    busy.push_back(std::make_unique<TcpStore>("127.0.0.1", server.port(), 2s));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    TcpStore extra("127.0.0.1", server.port(), 400ms);
    FAIL("a fourth client was served");
  } catch (const CommError& e) {
    const std::string m = e.what();
    CHECK(m == "cannot reach the rendezvous store at 127.0.0.1:" + std::to_string(server.port()) +
                   " after 0.4 s (it accepted the connection and closed it unanswered, as a "
                   "store at its connection limit does)");
  }
  // It retried for its whole timeout (the store may have had room a moment later).
  CHECK(std::chrono::steady_clock::now() - t0 >= 400ms);
  CHECK(server.refused_clients() >= 1);
  for (auto& b : busy) CHECK(b->add("n", 1) > 0);  // the three are still served
  // One leaves: the next is let in.
  busy.pop_back();
  TcpStore next("127.0.0.1", server.port(), 2s);
  CHECK(next.add("n", 1) == 4);
}

TEST_CASE("TcpStoreServer: its memory cap refuses a SET in one line and keeps serving", "[store]") {
  TcpStoreLimits limits;
  limits.max_bytes = 1 << 20;
  TcpStoreServer server("127.0.0.1", 0, limits);
  TcpStore c("127.0.0.1", server.port(), 2s);
  c.set("small", std::vector<char>(600 << 10, 'a'));
  try {
    c.set("big", std::vector<char>(600 << 10, 'b'));
    FAIL("the store took 1.2 MiB under a 1 MiB cap");
  } catch (const CommError& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m == "rendezvous store at 127.0.0.1:" + std::to_string(server.port()) +
                   ": refused SET of key 'big' (614400 bytes) by closing the connection (over "
                   "its memory cap? its host's log says why)");
  }
  CHECK(server.dropped_clients() == 1);
  // The same client goes on (it reconnects), the first value intact, the refused one absent.
  CHECK(c.check({"small"}));
  CHECK_FALSE(c.check({"big"}));
  CHECK(c.get("small").size() == size_t{600} << 10);
  // Replacing a value by one of the same size needs no room.
  c.set("small", std::vector<char>(600 << 10, 'c'));
  // A client that announces 60 MiB and streams past the cap is dropped while it sends.
  Raw hog(server.port());
  hog.send(q(0) + str("/hog") + u64(uint64_t{60} << 20));
  const std::string chunk(256 << 10, 'h');
  bool closed = false;
  for (int i = 0; i < 16 && !closed; ++i) {
    hog.send(chunk);
    hog.read_for(20ms, closed);
  }
  CHECK(closed);
  CHECK(server.dropped_clients() == 2);
  CHECK(c.num_keys() == 1);
}

TEST_CASE("TcpStoreServer drops a client stalled mid-request after stall_after", "[store]") {
  TcpStoreLimits limits;
  limits.stall_after = 300ms;
  TcpStoreServer server("127.0.0.1", 0, limits);
  Raw stalled(server.port());
  stalled.send(q(0) + u64(8) + "abcd");  // half a key, then nothing
  Raw waiter(server.port());
  waiter.send(q(5) + u64(1) + str("/later"));  // a WAIT parked is not a stall
  Raw idle(server.port());                     // nor is a client between requests
  const auto t0 = std::chrono::steady_clock::now();
  bool closed = false;
  stalled.read_for(3000ms, closed);
  CHECK(closed);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 250ms);
  CHECK(took < 2000ms);
  CHECK(server.dropped_clients() == 1);
  std::this_thread::sleep_for(300ms);
  TcpStore c("127.0.0.1", server.port(), 2s);
  c.set("later", bytes("now"));
  CHECK(waiter.read_for(1000ms, closed) == std::string(1, '\0'));  // STOP_WAITING
  idle.read_for(10ms, closed);
  CHECK_FALSE(closed);
}

TEST_CASE("TcpStore: a store that stops answering fails each later call at once, in one line",
          "[store]") {
  // A store that answers the first CHECK, then nothing: as rank 0's process under SIGSTOP.
  int port = 0;
  const int lfd = listen_loopback(&port);
  std::atomic<bool> done{false};
  std::thread frozen([&] {
    const int fd = ::accept(lfd, nullptr, nullptr);
    char buf[256];
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) == 1) (void)::recv(fd, buf, sizeof buf, 0);
    ::send(fd, "\x01", 1, MSG_NOSIGNAL);
    while (!done) std::this_thread::sleep_for(10ms);
    ::close(fd);
  });
  TcpStore c("127.0.0.1", port, 300ms);
  const std::string want = "rendezvous store at 127.0.0.1:" + std::to_string(port) +
                           ": no answer to CHECK within 0.3 s (its process stopped or gone?)";
  const auto timed = [&](const std::function<void()>& op) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string msg;
    try {
      op();
    } catch (const CommError& e) {
      msg = e.what();
    }
    CHECK(msg == want);
    return std::chrono::steady_clock::now() - t0;
  };
  CHECK(timed([&] { (void)c.check({"k"}); }) >= 290ms);
  // Each later call: the same line at once, not another timeout (nor a reconnect that the
  // stopped process's kernel would accept and never answer).
  CHECK(timed([&] { (void)c.check({"k"}); }) < 100ms);
  CHECK(timed([&] { c.set("k", bytes("v")); }) < 100ms);
  CHECK(timed([&] { (void)c.add("k", 1); }) < 100ms);
  done = true;
  frozen.join();
  ::close(lfd);
}

// ---------------------------------------------------------------------------
// torch 1.13 interop

TEST_CASE("TcpStore and torch's TCPStore understand each other", "[store][torch]") {
  const std::string py = torch_python();
  if (py.empty()) {
    WARN("skipped: python3 cannot import torch.distributed");
    return;
  }
  SECTION("our client, torch's server") {
    const int port = free_port();
    const std::string script =
        "import torch.distributed as d, datetime\n"
        "s = d.TCPStore('127.0.0.1', " +
        std::to_string(port) +
        ", 1, True, datetime.timedelta(seconds=20))\n"
        "s.set('from_py', 'hello')\n"
        "s.wait(['from_cpp'])\n"
        "assert s.get('from_cpp') == b'world', s.get('from_cpp')\n"
        "s.add('cnt', 10)\n"
        "s.set('py_done', '1')\n"
        "s.wait(['cpp_done'])\n"
        "print('PYOK', flush=True)\n";
    const std::string cmd = py + " -c \"" + script + "\" 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string err;
    try {
      TcpStore c("127.0.0.1", port, 20s);
      CHECK(text(c.get("from_py")) == "hello");
      c.set("from_cpp", bytes("world"));
      c.wait({"py_done"}, 20s);
      CHECK(c.add("cnt", 5) == 15);
      CHECK(text(c.get("cnt")) == "15");
      CHECK(c.check({"from_py", "cnt"}));
      CHECK_FALSE(c.check({"nope"}));
      CHECK(c.num_keys() >= 4);
      CHECK(c.delete_key("from_py"));
      c.set("cpp_done", bytes("1"));
    } catch (const std::exception& e) {
      err = e.what();
    }
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof buf, p)) out += buf;
    const int rc = pclose(p);
    CHECK(err == "");
    INFO(out);
    CHECK(rc == 0);
    CHECK(out.find("PYOK") != std::string::npos);
  }
  SECTION("torch's client, our server") {
    TcpStoreServer server;
    TcpStore c("127.0.0.1", server.port(), 5s);
    c.set("b", bytes("from cpp"));
    const std::string script =
        "import torch.distributed as d, datetime\n"
        "s = d.TCPStore('127.0.0.1', " +
        std::to_string(server.port()) +
        ", 1, False, datetime.timedelta(seconds=10))\n"
        "assert s.get('b') == b'from cpp'\n"
        "s.set('a', 'from py')\n"
        "assert s.add('n', 3) == 3\n"
        "assert s.add('n', 4) == 7\n"
        "s.wait(['a', 'b'])\n"
        "try:\n"
        "    s.wait(['c'], datetime.timedelta(milliseconds=200))\n"
        "    print('NO TIMEOUT')\n"
        "except Exception as e:\n"
        "    print('timed out as expected')\n"
        "print('PYOK', flush=True)\n";
    const std::string cmd = py + " -c \"" + script + "\" 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof buf, p)) out += buf;
    const int rc = pclose(p);
    INFO(out);
    CHECK(rc == 0);
    CHECK(out.find("PYOK") != std::string::npos);
    CHECK(out.find("timed out as expected") != std::string::npos);
    CHECK(text(c.get("a")) == "from py");
    CHECK(text(c.get("n")) == "7");
    CHECK(server.dropped_clients() == 0);
  }
  SECTION("4 ranks rendezvous through torch's store as torchrun's agent") {
    const int port = free_port();
    const std::string script =
        "import torch.distributed as d, datetime, time\n"
        "s = d.TCPStore('127.0.0.1', " +
        std::to_string(port) +
        ", 1, True, datetime.timedelta(seconds=30))\n"
        "print('READY', flush=True)\n"
        "s.wait(['stop'], datetime.timedelta(seconds=60))\n";
    const std::string cmd = py + " -c \"" + script + "\" 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::vector<std::vector<float>> sums;
    auto errors = rendezvous_allreduce(
        4,
        [&](int rank) {
          return std::make_unique<RdzvStore>(parse_rdzv("env://"), rank, "127.0.0.1", port, true,
                                             "agent-run", 20s);
        },
        sums);
    TcpStore("127.0.0.1", port, 5s).set("stop", bytes("1"));
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
    INFO(out);
    check_sums(4, errors, sums);
  }
}

// ---------------------------------------------------------------------------
// Rendezvous URLs

TEST_CASE("parse_rdzv accepts the four forms", "[store]") {
  CHECK(parse_rdzv("env://").kind == RdzvSpec::Kind::env);
  const RdzvSpec f = parse_rdzv("file:///tmp/rdzv dir");
  CHECK(f.kind == RdzvSpec::Kind::file);
  CHECK(f.path == "/tmp/rdzv dir");
  const RdzvSpec r = parse_rdzv("redis://10.0.0.1:6379");
  CHECK(r.kind == RdzvSpec::Kind::redis);
  CHECK(r.host == "10.0.0.1");
  CHECK(r.port == 6379);
  const RdzvSpec t = parse_rdzv("tcp://node-1.example:1");
  CHECK(t.kind == RdzvSpec::Kind::tcp);
  CHECK(t.host == "node-1.example");
  CHECK(t.port == 1);
  CHECK(parse_rdzv("tcp://localhost:65535").port == 65535);
}

TEST_CASE("parse_rdzv names the bad value and the valid forms", "[store]") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "not a URL"},
      {"127.0.0.1:29500", "not a URL"},
      {"http://x:1", "unknown scheme 'http'"},
      {"ENV://", "unknown scheme 'ENV'"},
      {"env://127.0.0.1:29500", "env:// takes nothing after it"},
      {"file://relative/dir", "file:// needs an absolute directory"},
      {"file://", "file:// needs an absolute directory"},
      {"tcp://127.0.0.1", "missing :port"},
      {"tcp://:29500", "missing host"},
      {"redis://:6379", "missing host"},
      {"tcp://host:0", "port '0' is not in 1-65535"},
      {"tcp://host:65536", "port '65536' is not in 1-65535"},
      {"tcp://host:-1", "port '-1' is not in 1-65535"},
      {"tcp://host:", "port '' is not in 1-65535"},
      {"tcp://host:12ab", "port '12ab' is not in 1-65535"},
      {"redis://host:99999999999", "port '99999999999' is not in 1-65535"},
      {"tcp://a/b:1", "host 'a/b' is not a host name"},
      {"tcp://[::1]:1", "host '[::1]' is not a host name"},
  };
  for (const auto& [url, why] : bad) {
    INFO(url);
    try {
      parse_rdzv(url);
      FAIL("accepted");
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      CHECK(m.find("rendezvous '" + url + "': " + why) == 0);
      CHECK(m.find("(valid: env://, file:///abs/dir, redis://host:port, tcp://host:port)") !=
            std::string::npos);
      CHECK(m.find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("a file store refuses a directory that does not exist, creating nothing", "[store]") {
  const std::string root = tmp_dir("nodir");
  const std::string dir = root + "/typo";
  try {
    RdzvStore s(parse_rdzv("file://" + dir), 0, "", 0, false, "run1", 1s);
    FAIL("a missing directory was accepted");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) ==
          "rendezvous directory " + dir +
              " does not exist (valid: an existing directory every rank can see; create it "
              "first, e.g. mkdir -p " +
              dir + ")");
  }
  CHECK_FALSE(std::filesystem::exists(root));
  // A file where the directory should be.
  std::filesystem::create_directories(root);
  std::ofstream(root + "/file") << "x";
  CHECK_THROWS_WITH(RdzvStore(parse_rdzv("file://" + root + "/file"), 0, "", 0, false, "r", 1s),
                    "rendezvous directory " + root +
                        "/file is not a directory (valid: an existing directory every rank can "
                        "see)");
  std::filesystem::remove_all(root);
}

// ---------------------------------------------------------------------------
// 4 ranks through each store kind, then a real Gloo all-reduce

TEST_CASE("4 ranks rendezvous through a file store", "[store]") {
  const std::string root = tmp_dir("file");
  const std::string dir = root + "/shared";
  std::filesystem::create_directories(dir);
  std::vector<std::vector<float>> sums;
  std::vector<std::string> keys;
  auto errors = rendezvous_allreduce(
      4,
      [&](int rank) {
        return std::make_unique<RdzvStore>(parse_rdzv("file://" + dir), rank, "", 0, false, "run1",
                                           10s);
      },
      sums, &keys);
  check_sums(4, errors, sums);
  CHECK_FALSE(keys.empty());  // rank 0 saw keys appear
  RdzvStore again(parse_rdzv("file://" + dir), 0, "", 0, false, "run1", 1s);
  CHECK(again.describe() == "file://" + dir);
  keys = again.keys();
  CHECK(keys.size() >= 4);  // at least one key per rank
  CHECK(again.keys_listable());

  // The same run id again: Gloo's FileStore refuses to set a key twice, in one line.
  try {
    again.store().set(keys.front(), bytes("x"));
    FAIL("set an existing key");
  } catch (const CommError& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m == "rendezvous store file://" + dir + ": key '" + keys.front() +
                   "' is already set (a run id used twice?)");
    CHECK(m.find('\n') == std::string::npos);
  }
  // A second run in the same directory only needs its own id.
  errors = rendezvous_allreduce(
      4,
      [&](int rank) {
        return std::make_unique<RdzvStore>(parse_rdzv("file://" + dir), rank, "", 0, false, "run2",
                                           10s);
      },
      sums);
  check_sums(4, errors, sums);
  std::filesystem::remove_all(root);
}

TEST_CASE("4 ranks rendezvous through env:// and tcp:// (rank 0 hosts the store)", "[store]") {
  for (const std::string kind : {"env", "tcp"}) {
    INFO(kind);
    const int port = free_port();
    const std::string url = kind == "env" ? "env://" : "tcp://127.0.0.1:" + std::to_string(port);
    std::vector<std::vector<float>> sums;
    std::vector<std::string> keys = {"unset"};
    auto errors = rendezvous_allreduce(
        4,
        [&](int rank) {
          return std::make_unique<RdzvStore>(parse_rdzv(url), rank, "127.0.0.1", port, false,
                                             "run-" + kind, 10s);
        },
        sums, &keys);
    check_sums(4, errors, sums);
    CHECK(keys.empty());  // c10d's protocol cannot list keys
  }
  // describe() says who serves the store.
  const int port = free_port();
  RdzvStore host(parse_rdzv("env://"), 0, "127.0.0.1", port, false, "d", 2s);
  CHECK(host.describe() == "env://127.0.0.1:" + std::to_string(port) + " (hosted by rank 0)");
  CHECK_FALSE(host.keys_listable());
  RdzvStore agent(parse_rdzv("env://"), 1, "127.0.0.1", port, true, "d", 2s);
  CHECK(agent.describe() ==
        "env://127.0.0.1:" + std::to_string(port) + " (torchrun's agent store)");
  // Rank 1 with nobody serving: one line naming the address.
  const int nobody = free_port();
  CHECK_THROWS_WITH(RdzvStore(parse_rdzv("env://"), 1, "127.0.0.1", nobody, false, "d", 200ms),
                    "cannot reach the rendezvous store at 127.0.0.1:" + std::to_string(nobody) +
                        " after 0.2 s (Connection refused)");
  CHECK_THROWS_AS(RdzvStore(parse_rdzv("env://"), 0, "", 29500, false, "d", 200ms), ConfigError);
}

TEST_CASE("4 ranks rendezvous through redis", "[store]") {
  if (std::system("command -v redis-server >/dev/null 2>&1") != 0) {
    WARN("skipped: redis-server is not installed (apt-get install redis-server)");
    return;
  }
  const int port = free_port();
  Child redis({"redis-server", "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--loglevel", "warning"});
  REQUIRE(redis.started());
  const std::string url = "redis://127.0.0.1:" + std::to_string(port);
  std::vector<std::vector<float>> sums;
  std::vector<std::string> keys;
  // RdzvStore retries until redis accepts connections, so no sleep is needed here.
  auto errors = rendezvous_allreduce(
      4,
      [&](int rank) {
        return std::make_unique<RdzvStore>(parse_rdzv(url), rank, "", 0, false, "run*[1]", 10s);
      },
      sums, &keys);
  check_sums(4, errors, sums);
  CHECK(keys.size() >= 4);
  RdzvStore look(parse_rdzv(url), 0, "", 0, false, "run*[1]", 2s);
  CHECK(look.describe() == url);
  CHECK(look.keys() == keys);
  // Another run id sees none of those keys (its glob is escaped).
  RdzvStore other(parse_rdzv(url), 0, "", 0, false, "run", 2s);
  CHECK(other.keys().empty());
  other.store().set("mine", bytes("1"));
  CHECK(other.keys() == std::vector<std::string>{"mine"});

  const int nobody = free_port();
  CHECK_THROWS_WITH(RdzvStore(parse_rdzv("redis://127.0.0.1:" + std::to_string(nobody)), 0, "", 0,
                              false, "r", 300ms),
                    Catch::StartsWith("cannot reach redis at 127.0.0.1:" + std::to_string(nobody) +
                                      " after 0.3 s (Connection refused"));
}
