// `shardlab launch`: starts one process per rank of this very binary with torchrun's
// environment contract, prefixes their output by rank, stops the whole group on the first
// failure, and restarts it up to --max-restarts times (the ranks resume from checkpoints).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/args.h"
#include "app/commands.h"
#include "core/config.h"

extern char** environ;

namespace shardlab::app {

namespace {

using Clock = std::chrono::steady_clock;

// A child that ignores SIGTERM this long gets SIGKILL (torchrun waits 30 s; ranks here save
// nothing on SIGTERM, so a short grace keeps a failed run from lingering).
constexpr auto kTermGrace = std::chrono::seconds(5);

const char* kLaunchHelp =
    R"(usage: shardlab launch [--nproc-per-node N] [--nnodes K --node-rank I --master-addr A
                       --master-port P] [--max-restarts R] [--monitor-interval-ms M]
                       [--run-id ID] -- COMMAND [ARGS...]

Starts N processes of this shardlab binary running 'shardlab COMMAND ARGS...', one per rank,
each with the environment torchrun gives its workers:
  RANK = node-rank*N + local rank, WORLD_SIZE = N*K, LOCAL_RANK, LOCAL_WORLD_SIZE = N,
  GROUP_RANK = node-rank, GROUP_WORLD_SIZE = K, MASTER_ADDR, MASTER_PORT,
  SHARDLAB_RUN_ID (ID-restart), SHARDLAB_RESTART_COUNT, and OMP_NUM_THREADS=1 unless set.
Every line a rank prints comes out prefixed "[rank R] "; an error line several ranks print
word for word (a bad option fails every rank alike) is shown once. When a rank fails
(non-zero exit or a signal) the launcher names it, sends SIGTERM (and SIGCONT, for a stopped
rank) to the others, SIGKILL after 5 s, and then restarts the whole group if restarts are
left. SIGINT and SIGTERM are passed on to the ranks. Ranks die with the launcher. Exit
code: 0 when every rank succeeded, else the failed rank's code (1 for a rank killed by a
signal), 128+signal when the launcher was interrupted.

options:
  --nproc-per-node N       processes on this node (default 1)
  --nnodes K               nodes, each running its own 'shardlab launch' (default 1)
  --node-rank I            this node's index, 0 to K-1 (default 0)
  --master-addr A          the host of rank 0 (default 127.0.0.1; required when K > 1)
  --master-port P          its port (default: a free port on A, picked anew per attempt;
                           required when K > 1)
  --max-restarts R         restart the group up to R times after a failure (default 0)
  --monitor-interval-ms M  how often the launcher checks the ranks (default 100)
  --run-id ID              SHARDLAB_RUN_ID's stem (default: random with one node, derived
                           from the master address and port with several, so nodes agree)

example: shardlab launch --nproc-per-node 4 -- run --strategy ddp --steps 20
)";

struct LaunchOptions {
  int nproc = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free one for every attempt
  int max_restarts = 0;
  int monitor_ms = 100;
  std::string run_id;
  std::vector<std::string> command;  // what follows `--`
};

// ---- signals --------------------------------------------------------------------------------
// The handler only records the signal and wakes poll() through a pipe (async-signal-safe);
// everything else happens in the loop.
volatile sig_atomic_t g_signal = 0;        // the last SIGINT/SIGTERM received
volatile sig_atomic_t g_signal_count = 0;  // a second one means "stop now"
int g_wake_write = -1;

void on_signal(int sig) {
  const int saved = errno;
  if (sig != SIGCHLD) {
    g_signal = sig;
    g_signal_count = g_signal_count + 1;
  }
  if (g_wake_write >= 0) {
    const ssize_t n = write(g_wake_write, "x", 1);  // a full pipe already wakes poll()
    (void)n;
  }
  errno = saved;
}

// Installs the handlers for the launcher's lifetime and puts the old ones back after.
class SignalScope {
 public:
  explicit SignalScope(int wake_fd) {
    g_wake_write = wake_fd;
    g_signal = 0;
    g_signal_count = 0;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    // Restart what can be restarted (library calls that do not expect EINTR); poll() is
    // never restarted, and the wake pipe covers a signal arriving just before it.
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &old_[i]);
    // Writing to a closed stdout (`| head`) must fail with EPIPE, not kill the launcher
    // before it has stopped the ranks.
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old_pipe_);
  }
  ~SignalScope() {
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
    sigaction(SIGPIPE, &old_pipe_, nullptr);
    g_wake_write = -1;
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGCHLD};
  struct sigaction old_[3]{};
  struct sigaction old_pipe_ {};
};

// ---- small POSIX helpers --------------------------------------------------------------------

// Writes all of `s` in one go where the pipe allows, so a line never mixes with another.
void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // EPIPE: nobody reads our output any more; the ranks still get stopped
    done += static_cast<size_t>(n);
  }
}

void say(const std::string& line) {
  write_all(2, "shardlab launch: " + line + "\n");
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string errno_text(int err) {
  return std::strerror(err);
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) close(fd_);  // no EINTR retry: on Linux the fd is gone either way
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Close-on-exec on both ends, so one rank's pipes never leak into its siblings.
std::pair<Fd, Fd> make_pipe(int extra_flags = 0) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | extra_flags) != 0)
    throw std::runtime_error("cannot create a pipe: " + errno_text(errno));
  return {Fd(fds[0]), Fd(fds[1])};
}

// A port nobody listens on now: bind port 0 on the master address and read what the kernel
// chose. Another process may take it before rank 0 binds it (torchrun has the same race);
// a failed attempt then restarts with a fresh port.
int pick_free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(addr.c_str(), "0", &hints, &res);
  if (rc != 0)
    throw ConfigError("--master-addr " + addr + " cannot be resolved (" + gai_strerror(rc) + ")");
  int last_err = 0;
  int port = 0;
  for (addrinfo* a = res; a && port == 0; a = a->ai_next) {
    Fd s(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (s.get() < 0 || bind(s.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last_err = errno;
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (getsockname(s.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      last_err = errno;
      continue;
    }
    port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  }
  freeaddrinfo(res);
  if (port == 0)
    throw ConfigError("--master-addr " + addr + " is not an address of this host (" +
                      errno_text(last_err) +
                      "); with one node use 127.0.0.1 or a local address, or give --master-port");
  return port;
}

std::string random_hex() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

// The same on every node of a multi-node run without another round of communication.
std::string derived_run_id(const std::string& addr, int port) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : addr + ":" + std::to_string(port))
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string self_exe() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe: " + errno_text(errno));
  return std::string(buf.data(), static_cast<size_t>(n));
}

// ---- one rank's output ----------------------------------------------------------------------

// Error lines already shown in this attempt: every rank checks the same arguments, so a bad
// option fails them all alike, and one line says it (a rank's own error, worded differently,
// still shows).
using SeenErrors = std::set<std::string>;

// Cuts a stream into whole lines and writes each with the rank's prefix in one write(),
// so two ranks' lines never interleave mid-line. With `seen`, an "error: " line another rank
// has already printed word for word is left out.
class LinePrefixer {
 public:
  LinePrefixer(std::string prefix, int out_fd, SeenErrors* seen = nullptr)
      : prefix_(std::move(prefix)), out_fd_(out_fd), seen_(seen) {}
  void feed(const char* data, size_t n) {
    pending_.append(data, n);
    size_t start = 0;
    std::string out;
    for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1)
      add(out, pending_.substr(start, nl + 1 - start));
    pending_.erase(0, start);
    // A line without an end (a progress bar, binary junk) is cut rather than held forever.
    if (pending_.size() >= kMaxLine) {
      add(out, pending_ + "\n");
      pending_.clear();
    }
    if (!out.empty()) write_all(out_fd_, out);
  }
  void finish() {
    std::string out;
    if (!pending_.empty()) add(out, pending_ + "\n");
    pending_.clear();
    if (!out.empty()) write_all(out_fd_, out);
  }

 private:
  void add(std::string& out, const std::string& line) {
    if (seen_ && line.rfind("error: ", 0) == 0 && !seen_->insert(line).second) return;
    out += prefix_ + line;
  }

  static constexpr size_t kMaxLine = 64 * 1024;
  std::string prefix_;
  int out_fd_;
  SeenErrors* seen_;
  std::string pending_;
};

struct Stream {
  Fd fd;
  LinePrefixer lines;
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool reaped = false;
  std::vector<Stream> streams;  // stdout, stderr
};

// Everything the child needs, built before fork(): between fork and exec only
// async-signal-safe calls are allowed (another thread may hold malloc's lock).
struct SpawnPlan {
  std::string exe;
  std::vector<std::string> args;
  std::vector<std::string> env;
  std::vector<char*> argv;
  std::vector<char*> envp;
  void seal() {
    argv.clear();
    envp.clear();
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
};

// Makes `fd` the child's `target` descriptor without close-on-exec. dup2 onto itself keeps
// the flag, so that case clears it explicitly.
void child_install_fd(int fd, int target) {
  if (fd == target)
    fcntl(fd, F_SETFD, 0);
  else
    dup2(fd, target);
}

[[noreturn]] void child_fail(const char* what) {
  const ssize_t n1 = write(2, what, std::strlen(what));
  const ssize_t n2 = write(2, "\n", 1);
  (void)n1;
  (void)n2;
  _exit(127);
}

pid_t spawn_rank(SpawnPlan& plan, int in_fd, int out_fd, int err_fd, const sigset_t& empty_mask) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed: " + errno_text(errno));
  if (pid == 0) {
    // Die with the launcher, even by SIGKILL. If the launcher died before this line, the
    // death signal will never come: getppid() tells (we were reparented).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    // Its own process group: a terminal's Ctrl-C reaches the launcher only, which passes it
    // on once, and a rank's own children are stopped with it by kill(-pid).
    setpgid(0, 0);
    child_install_fd(in_fd, 0);
    child_install_fd(out_fd, 1);
    child_install_fd(err_fd, 2);
    // Handlers do not survive exec but ignored signals (SIGPIPE here) and the mask do.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGINT, &dfl, nullptr);
    sigaction(SIGTERM, &dfl, nullptr);
    sigaction(SIGCHLD, &dfl, nullptr);
    sigaction(SIGPIPE, &dfl, nullptr);
    sigprocmask(SIG_SETMASK, &empty_mask, nullptr);
    execve(plan.exe.c_str(), plan.argv.data(), plan.envp.data());
    child_fail("shardlab launch: exec of this shardlab binary failed");
  }
  // Also from the parent, so a signal sent to -pid right away finds the group.
  setpgid(pid, pid);
  return pid;
}

// The environment every rank inherits, minus what the launcher sets per rank, and minus
// an outer torchrun's variables, which would tell the rank about a store that is not there.
std::vector<std::string> base_environment() {
  static const char* kOurs[] = {
      "RANK=",        "WORLD_SIZE=",       "LOCAL_RANK=",      "LOCAL_WORLD_SIZE=",
      "GROUP_RANK=",  "GROUP_WORLD_SIZE=", "ROLE_RANK=",       "ROLE_WORLD_SIZE=",
      "MASTER_ADDR=", "MASTER_PORT=",      "SHARDLAB_RUN_ID=", "SHARDLAB_RESTART_COUNT=",
      "TORCHELASTIC_"};
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string s = *e;
    bool ours = false;
    for (const char* k : kOurs) ours = ours || s.rfind(k, 0) == 0;
    if (!ours) env.push_back(s);
  }
  // N processes each with a BLAS thread per core would oversubscribe the host (torchrun
  // sets the same default).
  if (!std::getenv("OMP_NUM_THREADS")) env.push_back("OMP_NUM_THREADS=1");
  return env;
}

// ---- one attempt ----------------------------------------------------------------------------

struct AttemptResult {
  bool ok = false;
  int exit_code = 0;
  int interrupted_by = 0;  // SIGINT/SIGTERM received by the launcher
};

void signal_group(const Rank& r, int sig) {
  if (r.pid > 0 && !r.reaped) kill(-r.pid, sig);
}

// Owns the ranks of one attempt; whatever way the attempt ends (an exception included),
// nothing it started outlives it.
class Attempt {
 public:
  Attempt(const LaunchOptions& o, int restart, const std::string& run_id, int port)
      : o_(o), restart_(restart), run_id_(run_id), port_(port) {}
  ~Attempt() {
    for (auto& r : ranks_) signal_group(r, SIGKILL);
    for (auto& r : ranks_)
      if (r.pid > 0 && !r.reaped) {
        while (waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        r.reaped = true;
      }
  }
  Attempt(const Attempt&) = delete;
  Attempt& operator=(const Attempt&) = delete;

  AttemptResult run(int wake_read);

 private:
  void start_all();
  void reap(Rank& r, int status);
  void begin_stop(int sig);

  const LaunchOptions& o_;
  int restart_;
  std::string run_id_;
  int port_;
  std::vector<Rank> ranks_;
  SeenErrors seen_errors_;
  bool failed_ = false;
  AttemptResult result_;
  std::optional<Clock::time_point> kill_at_;  // SIGKILL whoever is left then
};

void Attempt::start_all() {
  const std::string exe = self_exe();
  const std::vector<std::string> base = base_environment();
  const int world = o_.nproc * o_.nnodes;
  Fd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (devnull.get() < 0) throw std::runtime_error("cannot open /dev/null: " + errno_text(errno));
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  ranks_.reserve(o_.nproc);
  for (int local = 0; local < o_.nproc; ++local) {
    const int rank = o_.node_rank * o_.nproc + local;
    SpawnPlan plan;
    // This very binary, even if a rebuild has replaced the file since the launcher started:
    // in the forked child /proc/self/exe still names the launcher's own image.
    plan.exe = "/proc/self/exe";
    plan.args.push_back(exe);
    plan.args.insert(plan.args.end(), o_.command.begin(), o_.command.end());
    plan.env = base;
    const std::pair<const char*, std::string> vars[] = {
        {"RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(local)},
        {"LOCAL_WORLD_SIZE", std::to_string(o_.nproc)},
        {"GROUP_RANK", std::to_string(o_.node_rank)},
        {"GROUP_WORLD_SIZE", std::to_string(o_.nnodes)},
        {"MASTER_ADDR", o_.master_addr},
        {"MASTER_PORT", std::to_string(port_)},
        {"SHARDLAB_RUN_ID", run_id_ + "-" + std::to_string(restart_)},
        {"SHARDLAB_RESTART_COUNT", std::to_string(restart_)},
    };
    for (const auto& [k, v] : vars) plan.env.push_back(std::string(k) + "=" + v);
    plan.seal();
    auto [out_r, out_w] = make_pipe();
    auto [err_r, err_w] = make_pipe();
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    Rank r;
    r.rank = rank;
    r.streams.push_back({std::move(out_r), LinePrefixer(prefix, 1)});
    r.streams.push_back({std::move(err_r), LinePrefixer(prefix, 2, &seen_errors_)});
    r.pid = spawn_rank(plan, devnull.get(), out_w.get(), err_w.get(), empty_mask);
    ranks_.push_back(std::move(r));
    // out_w/err_w close here: the child holds the only write ends, so EOF means it is gone.
  }
}

void Attempt::begin_stop(int sig) {
  // SIGCONT after it: a stopped rank (SIGSTOP, Ctrl-Z, a frozen debugger session) would hold
  // the signal pending until SIGKILL comes after the grace; continued, it acts on it now.
  for (auto& r : ranks_) {
    signal_group(r, sig);
    signal_group(r, SIGCONT);
  }
  if (!kill_at_) kill_at_ = Clock::now() + kTermGrace;
}

void Attempt::reap(Rank& r, int status) {
  r.reaped = true;
  // Whatever the rank left in its group (its own children) goes with it.
  kill(-r.pid, SIGKILL);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok || failed_ || result_.interrupted_by) return;
  failed_ = true;
  int others = 0;
  for (const auto& x : ranks_) others += !x.reaped;
  if (WIFSIGNALED(status)) {
    say("rank " + std::to_string(r.rank) + " was killed by " + signal_name(WTERMSIG(status)));
    result_.exit_code = 1;
  } else {
    say("rank " + std::to_string(r.rank) + " exited with code " +
        std::to_string(WEXITSTATUS(status)));
    result_.exit_code = WEXITSTATUS(status);
  }
  if (others > 0)
    say("stopping the other " + std::to_string(others) + " rank" + (others == 1 ? "" : "s") +
        " (SIGTERM, SIGKILL after 5 s)");
  begin_stop(SIGTERM);
}

AttemptResult Attempt::run(int wake_read) {
  start_all();
  bool drained_after_exit = false;
  Clock::time_point drain_until{};
  while (true) {
    // Reap first: a rank that exited is reported before its last lines are drained.
    for (auto& r : ranks_) {
      if (r.reaped) continue;
      int status = 0;
      pid_t got;
      while ((got = waitpid(r.pid, &status, WNOHANG)) < 0 && errno == EINTR) {
      }
      if (got == r.pid) reap(r, status);
    }
    const int sig = g_signal;
    if (sig && !result_.interrupted_by) {
      result_.interrupted_by = sig;
      say("received " + signal_name(sig) + ", passing it on to the ranks");
      begin_stop(sig);
    }
    if (g_signal_count >= 2) {
      for (auto& r : ranks_) signal_group(r, SIGKILL);
    }
    if (kill_at_ && Clock::now() >= *kill_at_) {
      for (auto& r : ranks_)
        if (!r.reaped) {
          say("rank " + std::to_string(r.rank) + " did not stop within 5 s: SIGKILL");
          signal_group(r, SIGKILL);
        }
      kill_at_.reset();
    }

    bool all_reaped = true;
    for (const auto& r : ranks_) all_reaped = all_reaped && r.reaped;
    // A rank's own child may still hold its pipe: once every rank is gone, read what is
    // there for a moment and stop waiting for an EOF that may never come.
    if (all_reaped && !drained_after_exit) {
      drained_after_exit = true;
      drain_until = Clock::now() + std::chrono::milliseconds(200);
    }
    std::vector<pollfd> fds{{wake_read, POLLIN, 0}};
    std::vector<Stream*> streams;
    for (auto& r : ranks_)
      for (auto& s : r.streams)
        if (s.fd.get() >= 0) {
          fds.push_back({s.fd.get(), POLLIN, 0});
          streams.push_back(&s);
        }
    const auto now = Clock::now();
    if (all_reaped && (streams.empty() || now >= drain_until)) break;

    int timeout = o_.monitor_ms;
    auto cap = [&](Clock::time_point t) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count();
      timeout = std::min<int>(timeout, static_cast<int>(std::max<long long>(ms, 0)) + 1);
    };
    if (kill_at_) cap(*kill_at_);
    if (all_reaped) cap(drain_until);
    const int n = poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) throw std::runtime_error("poll failed: " + errno_text(errno));
    if (n <= 0) continue;
    if (fds[0].revents) {
      char junk[64];
      while (read(wake_read, junk, sizeof(junk)) > 0) {
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Stream& s = *streams[i - 1];
      char buf[65536];
      const ssize_t got = read(s.fd.get(), buf, sizeof(buf));
      if (got < 0 && errno == EINTR) continue;
      if (got > 0) {
        s.lines.feed(buf, static_cast<size_t>(got));
      } else {
        s.lines.finish();
        s.fd.reset();
      }
    }
  }
  for (auto& r : ranks_)
    for (auto& s : r.streams) s.lines.finish();
  result_.ok = !failed_ && !result_.interrupted_by;
  if (result_.interrupted_by) result_.exit_code = 128 + result_.interrupted_by;
  return result_;
}

// ---- options --------------------------------------------------------------------------------

LaunchOptions parse_options(int argc, char** argv, bool& help) {
  // Everything after `--` belongs to the ranks' command, --help included.
  int dashdash = -1;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) {
      dashdash = i;
      break;
    }
  const int own_argc = dashdash < 0 ? argc : dashdash;
  const Args a(own_argc, argv, "launch",
               {"nproc-per-node", "nnodes", "node-rank", "master-addr", "master-port",
                "max-restarts", "monitor-interval-ms", "run-id"},
               {});
  help = a.help();
  LaunchOptions o;
  if (help) return o;
  const std::string example = "e.g. shardlab launch --nproc-per-node 2 -- run --strategy ddp";
  if (dashdash < 0)
    throw ConfigError("shardlab launch needs '--' before the command the ranks run (" + example +
                      ")");
  for (int i = dashdash + 1; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.command.empty()) throw ConfigError("nothing to run after '--' (" + example + ")");
  if (o.command[0] == "launch")
    throw ConfigError("the ranks cannot run 'launch' themselves (give the command they run, " +
                      example + ")");

  o.nproc = a.integer("nproc-per-node", 1, "1 to 1024");
  if (o.nproc < 1 || o.nproc > 1024)
    throw ConfigError("--nproc-per-node " + std::to_string(o.nproc) +
                      " is out of range (valid: 1 to 1024)");
  o.nnodes = a.integer("nnodes", 1, "1 to 4096");
  if (o.nnodes < 1 || o.nnodes > 4096)
    throw ConfigError("--nnodes " + std::to_string(o.nnodes) +
                      " is out of range (valid: 1 to 4096)");
  o.node_rank = a.integer("node-rank", 0, "0 to --nnodes - 1");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw ConfigError("--node-rank " + std::to_string(o.node_rank) + " is not in 0.." +
                      std::to_string(o.nnodes - 1) + " (--nnodes " + std::to_string(o.nnodes) +
                      ")");
  if (static_cast<long long>(o.nproc) * o.nnodes > 65536)
    throw ConfigError("--nproc-per-node " + std::to_string(o.nproc) + " x --nnodes " +
                      std::to_string(o.nnodes) + " is more than 65536 ranks");
  if (o.nnodes > 1 && (!a.has("master-addr") || !a.has("master-port")))
    throw ConfigError("--nnodes " + std::to_string(o.nnodes) +
                      " needs --master-addr and --master-port (node 0's address and a port, "
                      "the same on every node)");
  o.master_addr = a.str("master-addr", "127.0.0.1");
  if (o.master_addr.empty())
    throw ConfigError("--master-addr is empty (valid: a host name or address, e.g. 127.0.0.1)");
  o.master_port = a.integer("master-port", 0, "1 to 65535");
  if (a.has("master-port") && (o.master_port < 1 || o.master_port > 65535))
    throw ConfigError("--master-port " + std::to_string(o.master_port) +
                      " is out of range (valid: 1 to 65535)");
  o.max_restarts = a.integer("max-restarts", 0, "0 to 1000");
  if (o.max_restarts < 0 || o.max_restarts > 1000)
    throw ConfigError("--max-restarts " + std::to_string(o.max_restarts) +
                      " is out of range (valid: 0 to 1000)");
  o.monitor_ms = a.integer("monitor-interval-ms", 100, "1 to 60000");
  if (o.monitor_ms < 1 || o.monitor_ms > 60000)
    throw ConfigError("--monitor-interval-ms " + std::to_string(o.monitor_ms) +
                      " is out of range (valid: 1 to 60000)");
  o.run_id = a.str("run-id", "");
  for (char c : o.run_id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      throw ConfigError("--run-id '" + o.run_id +
                        "' has a character other than letters, digits, '-', '_' and '.'");
  return o;
}

}  // namespace

int cmd_launch(int argc, char** argv) {
  bool help = false;
  LaunchOptions o = parse_options(argc, argv, help);
  if (help) {
    std::fputs(kLaunchHelp, stdout);
    return 0;
  }
  const bool auto_port = o.master_port == 0;
  if (o.run_id.empty())
    o.run_id = o.nnodes > 1 ? derived_run_id(o.master_addr, o.master_port) : random_hex();

  auto [wake_r, wake_w] = make_pipe(O_NONBLOCK);
  SignalScope signals(wake_w.get());
  for (int restart = 0;; ++restart) {
    if (g_signal) return 128 + g_signal;  // interrupted between attempts
    const int port = auto_port ? pick_free_port(o.master_addr) : o.master_port;
    say(std::to_string(o.nproc) + " rank" + (o.nproc == 1 ? "" : "s") + " of " +
        std::to_string(o.nproc * o.nnodes) + " (node " + std::to_string(o.node_rank) + " of " +
        std::to_string(o.nnodes) + "), MASTER_ADDR=" + o.master_addr + " MASTER_PORT=" +
        std::to_string(port) + ", SHARDLAB_RUN_ID=" + o.run_id + "-" + std::to_string(restart));
    AttemptResult res;
    {
      Attempt attempt(o, restart, o.run_id, port);
      res = attempt.run(wake_r.get());
    }
    if (res.ok) return 0;
    if (res.interrupted_by) return res.exit_code;
    if (restart >= o.max_restarts) {
      if (o.max_restarts > 0)
        say("giving up after " + std::to_string(o.max_restarts) + " restart" +
            (o.max_restarts == 1 ? "" : "s"));
      return res.exit_code;
    }
    say("restarting the group (restart " + std::to_string(restart + 1) + " of " +
        std::to_string(o.max_restarts) + ")");
  }
}

}  // namespace shardlab::app
