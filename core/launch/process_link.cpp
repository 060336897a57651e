// One process per rank: the messages that replace the shared memory of a
// threaded run (see process_link.h).
#include "core/launch/process_link.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>
#include <type_traits>

#include "core/clock.h"
#include "core/launch/check_store.h"

namespace shardlab {

namespace {

// The control group moves opaque bytes: an all-gather copies elements without
// reading them, and f32 is only their size (4 bytes).
size_t words(size_t bytes) {
  return (bytes + 3) / 4;
}

std::vector<char> all_gather_bytes(Comm& c, const void* mine, size_t bytes) {
  const size_t n = words(bytes);
  std::vector<char> in(n * 4, 0), out(n * 4 * static_cast<size_t>(c.world()));
  std::memcpy(in.data(), mine, bytes);
  c.all_gather(in.data(), out.data(), std::vector<size_t>(c.world(), n), DType::f32);
  return out;
}

constexpr int kClockTag = 7;
// How long a rank whose communication broke waits for the others to say
// theirs broke too (they time out together, give or take the compute skew).
constexpr std::chrono::milliseconds kPeerWindow{1000};
constexpr int kClockRounds = 32;  // a busy machine delays some; the fastest decides

}  // namespace

ProcessLink::ProcessLink(const ProcessContext& process, int world, const GlooGroupOptions& options)
    : process_(process), world_(world), options_(options) {
  if (!process.store) throw CommError("one process per rank: no rendezvous store");
  locked_ = make_locked_store(*process.store);
}

ProcessLink::~ProcessLink() {
  stop_watchdog();
}

CheckStore& ProcessLink::store() {
  return *locked_;
}

void ProcessLink::attach(FailureBoard& train_board) {
  train_board_ = &train_board;
  auto publish = [this](int rank, const std::string& what) {
    try {
      const std::string v = what;
      locked_->set(key_failed(rank), std::vector<char>(v.begin(), v.end()));
    } catch (const std::exception&) {
      // The store may be what failed; the process's exit code still tells.
    }
  };
  auto remote = [this] { return describe_peers(); };
  train_board.set_remote(publish, remote);
  // The control group's ops are the link's, not the run's: its own board, so
  // the run's board times only the training's communication.
  GlooGroupOptions control = options_;
  control.failures = nullptr;
  control_group_ = std::make_unique<GlooGroup>(world_, control, *locked_, "control");
  control_group_->failures().set_remote(publish, remote);
}

std::string ProcessLink::key_failed(int rank) const {
  return "failed/" + std::to_string(rank);
}

bool ProcessLink::has_key(const std::string& key) {
  try {
    return locked_->check({key});
  } catch (const std::exception&) {
    return false;  // the store is unreachable: nothing to learn from it
  }
}

std::string ProcessLink::key_stalled(int rank) const {
  return "stalled/" + std::to_string(rank);
}

std::string ProcessLink::key_alive(int rank) const {
  return "alive/" + std::to_string(rank);
}

void ProcessLink::answer_alive() {
  if (answered_.exchange(true)) return;
  // "<step> <ms outside communication>": 0 ms while inside an op (waiting on
  // peers like the one asking); seconds outside every op is a stuck rank.
  const int64_t outside_ms = train_board_ ? train_board_->outside_comm_ns() / 1000000 : 0;
  const std::string v = std::to_string(step_.load() + 1) + " " + std::to_string(outside_ms);
  try {
    locked_->set(key_alive(process_.rank), std::vector<char>(v.begin(), v.end()));
  } catch (const std::exception&) {
  }
}

std::string ProcessLink::read_key(const std::string& key) {
  try {
    const std::vector<char> v = locked_->get(key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception&) {
    return "";
  }
}

std::string ProcessLink::first_failure() {
  // A rank that failed without stalling first failed for a reason of its own
  // (a stalled rank's failure is an echo: its collective timed out or broke).
  for (int r = 0; r < world_; ++r)
    if (r != process_.rank && has_key(key_failed(r)) && !has_key(key_stalled(r)))
      return "rank " + std::to_string(r) + " failed: " + read_key(key_failed(r));
  return "";
}

std::string ProcessLink::describe_peers() {
  std::lock_guard<std::mutex> once(describe_mu_);
  if (described_) return *described_;
  const int step = step_.load();
  // This rank's communication broke (a timeout, a closed connection): say so,
  // then give the others a moment to say the same. A rank that neither says
  // it is stalled nor reports a failure is the one that stopped: stuck
  // outside any collective, or its process gone.
  if (!stalled_published_) {
    stalled_published_ = true;
    try {
      const std::string v = std::to_string(step + 1);
      locked_->set(key_stalled(process_.rank), std::vector<char>(v.begin(), v.end()));
    } catch (const std::exception&) {
    }
  }
  // Every other rank answers: "stalled" or "failed" from its own thread, or
  // "alive" from its watchdog (which answers for a thread that cannot).
  std::vector<int> silent;
  const auto deadline = std::chrono::steady_clock::now() + kPeerWindow;
  try {
    for (;;) {
      silent.clear();
      for (int r = 0; r < world_; ++r)
        if (r != process_.rank && !locked_->check({key_stalled(r)}) &&
            !locked_->check({key_failed(r)}))
          silent.push_back(r);
      bool all_answered = true;
      for (int r : silent) all_answered &= locked_->check({key_alive(r)});
      if (all_answered || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const std::exception& e) {
    // The store itself is gone (with env:// it lives in rank 0's process, which has ended
    // or stopped): nobody's word can be read, and asking again would only wait again.
    described_ = std::string("the run's store stopped answering: ") + e.what();
    return *described_;
  }
  std::string out = first_failure();
  if (out.empty()) {
    std::string dead, stuck;
    for (int r : silent) {
      const std::string who = "rank " + std::to_string(r);
      if (!has_key(key_alive(r))) {
        dead += (dead.empty() ? "" : ", ") + who;
        continue;
      }
      // A rank outside every op for most of the timeout is stuck there; one
      // inside an op is waiting like this one (its timeout comes later).
      int step = 0;
      long long outside_ms = 0;
      const std::string v = read_key(key_alive(r));
      if (std::sscanf(v.c_str(), "%d %lld", &step, &outside_ms) == 2 &&
          outside_ms >= options_.timeout.count() / 2)
        stuck += (stuck.empty() ? "" : "; ") + who + " is stuck in step " + std::to_string(step) +
                 ", outside any communication for " + std::to_string(outside_ms) + " ms";
    }
    if (!dead.empty())
      out = dead + (dead.find(',') == std::string::npos ? " does" : " do") +
            " not answer: its process died or cannot be reached (killed, crashed, or its host "
            "is gone)";
    if (!stuck.empty()) out += (out.empty() ? "" : "; ") + stuck;
  }
  described_ = out;
  return out;
}

std::string ProcessLink::peer_failure_for_watchdog() {
  for (int r = 0; r < world_; ++r)
    if (r != process_.rank && has_key(key_failed(r))) {
      const std::string cause = first_failure();
      return cause.empty() ? "rank " + std::to_string(r) + " failed: " + read_key(key_failed(r))
                           : cause;
    }
  return "";
}

int64_t ProcessLink::connect_and_align(RunResult& result) {
  const int rank = process_.rank;
  control_ = control_group_->connect(rank, nullptr, nullptr);
  Comm& c = *control_;
  // Cristian's algorithm, rank by rank: a rank asks rank 0 for its time and
  // takes the round trip with the least delay; its offset is the midpoint of
  // the round trip minus rank 0's answer.
  int64_t mine[2] = {0, 0};  // offset, rtt
  if (rank == 0) {
    for (int r = 1; r < world_; ++r)
      for (int i = 0; i < kClockRounds; ++i) {
        int64_t ping = 0;
        c.recv(&ping, sizeof ping, r, kClockTag);
        const int64_t t = now_ns();
        c.send(&t, sizeof t, r, kClockTag);
      }
  } else {
    int64_t best_rtt = std::numeric_limits<int64_t>::max();
    for (int i = 0; i < kClockRounds; ++i) {
      const int64_t t1 = now_ns();
      c.send(&t1, sizeof t1, 0, kClockTag);
      int64_t t_root = 0;
      c.recv(&t_root, sizeof t_root, 0, kClockTag);
      const int64_t t2 = now_ns();
      if (t2 - t1 < best_rtt) {
        best_rtt = t2 - t1;
        mine[0] = t1 + (t2 - t1) / 2 - t_root;
        mine[1] = best_rtt;
      }
    }
  }
  const std::vector<char> all = all_gather_bytes(c, mine, sizeof mine);
  result.clock_offset_ns.assign(world_, 0);
  result.clock_rtt_ns.assign(world_, 0);
  for (int r = 0; r < world_; ++r) {
    int64_t v[2];
    std::memcpy(v, all.data() + static_cast<size_t>(r) * words(sizeof mine) * 4, sizeof v);
    result.clock_offset_ns[r] = v[0];
    result.clock_rtt_ns[r] = v[1];
  }
  // Rank 0's zero, on this clock: every process's trace shares one time axis.
  int64_t t0[1] = {rank == 0 ? now_ns() : 0};
  c.broadcast(t0, 2, DType::f32, 0);
  return t0[0] + mine[0];
}

void ProcessLink::note_step(int step) {
  step_.store(step);
}

void ProcessLink::gather_shares(LossShare* row, int rank) {
  static_assert(std::is_trivially_copyable_v<LossShare>);
  const std::vector<char> all = all_gather_bytes(*control_, &row[rank], sizeof(LossShare));
  for (int r = 0; r < world_; ++r)
    std::memcpy(&row[r], all.data() + static_cast<size_t>(r) * words(sizeof(LossShare)) * 4,
                sizeof(LossShare));
}

void ProcessLink::gather_reports(std::vector<RankReport>& ranks, int rank, int steps) {
  static_assert(std::is_trivially_copyable_v<MemStats>);
  // [memory | bytes sent per step | by axis | step_ms × steps], the same size on every rank.
  constexpr size_t kAxes = sizeof(SentByAxis);
  const size_t bytes = sizeof(MemStats) + sizeof(double) * (1 + static_cast<size_t>(steps)) + kAxes;
  std::vector<char> mine(bytes, 0);
  const RankReport& me = ranks[rank];
  if (static_cast<int>(me.step_ms.size()) != steps)
    throw RunError("rank " + std::to_string(rank) + " has " + std::to_string(me.step_ms.size()) +
                   " step times for " + std::to_string(steps) + " steps");
  std::memcpy(mine.data(), &me.memory, sizeof(MemStats));
  std::memcpy(mine.data() + sizeof(MemStats), &me.bytes_sent_per_step, sizeof(double));
  std::memcpy(mine.data() + sizeof(MemStats) + sizeof(double), me.sent_by_axis_per_step.data(),
              kAxes);
  std::memcpy(mine.data() + sizeof(MemStats) + sizeof(double) + kAxes, me.step_ms.data(),
              sizeof(double) * steps);
  const std::vector<char> all = all_gather_bytes(*control_, mine.data(), bytes);
  for (int r = 0; r < world_; ++r) {
    if (r == rank) continue;
    const char* p = all.data() + static_cast<size_t>(r) * words(bytes) * 4;
    RankReport& rep = ranks[r];
    std::memcpy(&rep.memory, p, sizeof(MemStats));
    std::memcpy(&rep.bytes_sent_per_step, p + sizeof(MemStats), sizeof(double));
    rep.step_ms.resize(steps);
    std::memcpy(rep.sent_by_axis_per_step.data(), p + sizeof(MemStats) + sizeof(double), kAxes);
    std::memcpy(rep.step_ms.data(), p + sizeof(MemStats) + sizeof(double) + kAxes,
                sizeof(double) * steps);
  }
}

namespace {

// Allocation events as bytes: the fixed fields, then the name's length and bytes.
void put(std::vector<char>& out, const void* p, size_t n) {
  out.insert(out.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
}

std::vector<char> pack_records(const Recorder::Snapshot& snap) {
  static_assert(std::is_trivially_copyable_v<Span>);
  std::vector<char> out;
  const uint64_t spans = snap.spans.size(), allocs = snap.allocs.size();
  put(out, &spans, sizeof spans);
  put(out, &allocs, sizeof allocs);
  put(out, snap.spans.data(), sizeof(Span) * spans);
  for (const AllocEvent& a : snap.allocs) {
    put(out, &a.t_ns, sizeof a.t_ns);
    put(out, &a.delta_bytes, sizeof a.delta_bytes);
    put(out, &a.buffer_id, sizeof a.buffer_id);
    put(out, &a.category, sizeof a.category);
    put(out, &a.pool, sizeof a.pool);
    const uint64_t n = a.name.size();
    put(out, &n, sizeof n);
    put(out, a.name.data(), n);
  }
  static_assert(std::is_trivially_copyable_v<Mark>);
  const uint64_t marks = snap.marks.size();
  put(out, &marks, sizeof marks);
  put(out, snap.marks.data(), sizeof(Mark) * marks);
  return out;
}

// The inverse; `shift` moves every time onto the receiving process's clock.
// The bytes come from a peer running this same binary; sizes are still checked.
Recorder::Snapshot unpack_records(const char* p, size_t size, int64_t shift, int from) {
  size_t at = 0;
  auto take = [&](void* dst, size_t n) {
    if (n > size - at)
      throw RunError("rank " + std::to_string(from) + "'s records are truncated (" +
                     std::to_string(size) + " bytes)");
    std::memcpy(dst, p + at, n);
    at += n;
  };
  uint64_t spans = 0, allocs = 0;
  take(&spans, sizeof spans);
  take(&allocs, sizeof allocs);
  if (spans > size / sizeof(Span) || allocs > size)
    throw RunError("rank " + std::to_string(from) + "'s records are malformed");
  Recorder::Snapshot snap;
  snap.spans.resize(spans);
  take(snap.spans.data(), sizeof(Span) * spans);
  for (Span& s : snap.spans) {
    s.t_begin_ns += shift;
    s.t_end_ns += shift;
  }
  snap.allocs.resize(allocs);
  for (AllocEvent& a : snap.allocs) {
    take(&a.t_ns, sizeof a.t_ns);
    take(&a.delta_bytes, sizeof a.delta_bytes);
    take(&a.buffer_id, sizeof a.buffer_id);
    take(&a.category, sizeof a.category);
    take(&a.pool, sizeof a.pool);
    uint64_t n = 0;
    take(&n, sizeof n);
    if (n > size - at) throw RunError("rank " + std::to_string(from) + "'s records are truncated");
    a.name.assign(p + at, n);
    at += n;
    a.t_ns += shift;
  }
  uint64_t marks = 0;
  take(&marks, sizeof marks);
  if (marks > size / sizeof(Mark))
    throw RunError("rank " + std::to_string(from) + "'s records are malformed");
  snap.marks.resize(marks);
  take(snap.marks.data(), sizeof(Mark) * marks);
  for (Mark& m : snap.marks) {  // CPU clocks are the rank's own: not shifted
    m.t_begin_ns += shift;
    m.t_end_ns += shift;
  }
  return snap;
}

}  // namespace

void ProcessLink::gather_records(RunResult& result, int rank) {
  Comm& c = *control_;
  const std::vector<char> mine = pack_records(result.recorders[rank]->snapshot());
  // Sizes first (an all-gather of one 8-byte value each), then the records.
  const uint64_t size = mine.size();
  const std::vector<char> sizes_raw = all_gather_bytes(c, &size, sizeof size);
  std::vector<size_t> counts(world_);
  std::vector<uint64_t> sizes(world_);
  for (int r = 0; r < world_; ++r) {
    std::memcpy(&sizes[r], sizes_raw.data() + static_cast<size_t>(r) * 8, 8);
    counts[r] = words(sizes[r]);
  }
  size_t total = 0;
  for (size_t n : counts) total += n;
  std::vector<char> in(counts[rank] * 4, 0), out(total * 4);
  std::memcpy(in.data(), mine.data(), mine.size());
  c.all_gather(in.data(), out.data(), counts, DType::f32);
  size_t at = 0;
  for (int r = 0; r < world_; ++r) {
    const size_t begin = at;
    at += counts[r] * 4;
    if (r == rank) continue;
    // Peer r's clock minus rank 0's is offset[r]; this one's is offset[rank].
    const int64_t shift = result.clock_offset_ns[rank] - result.clock_offset_ns[r];
    const Recorder::Snapshot snap = unpack_records(out.data() + begin, sizes[r], shift, r);
    auto rec = std::make_shared<Recorder>(r, true);
    for (const Span& s : snap.spans) rec->add_span(s);
    for (const AllocEvent& a : snap.allocs) rec->add_alloc(a);
    for (const Mark& m : snap.marks) rec->add_mark(m);
    result.recorders[r] = std::move(rec);
  }
}

void ProcessLink::start_watchdog() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = false;
  watchdog_ = std::thread([this] { watch(); });
}

void ProcessLink::stop_watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void ProcessLink::watch() {
  using clock = std::chrono::steady_clock;
  clock::time_point seen{};  // when a peer's failure was first seen
  std::string cause;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (stop_) break;
    lock.unlock();
    if (!answered_.load())
      for (int r = 0; r < world_; ++r)
        if (r != process_.rank && (has_key(key_stalled(r)) || has_key(key_failed(r)))) {
          answer_alive();
          break;
        }
    if (cause.empty()) {
      // Read only: this rank's own thread may be the stuck one, so it must
      // not say "stalled" on its behalf.
      cause = peer_failure_for_watchdog();
      if (cause.empty()) {
        // A store that stopped answering is a failure too: it lived in rank
        // 0's process (env://), which has ended, or its server went away.
        try {
          locked_->check({key_failed(process_.rank)});
        } catch (const std::exception& e) {
          cause = std::string("the run's store stopped answering (") + e.what() + ")";
        }
      }
      if (!cause.empty()) seen = clock::now();
    } else if (clock::now() - seen > process_.watchdog_grace) {
      // This rank's thread is stuck outside anything that could fail (a
      // collective would have): no way to unwind it, so end the process. The
      // peers' processes have ended or are ending; the launcher reaps this one.
      const int step = step_.load();
      const std::string where = step < 0 ? std::string("before step 1, connecting to its peers")
                                         : "stuck in step " + std::to_string(step + 1);
      std::fprintf(stderr,
                   "error: rank %d stopped by its watchdog: %s, and this rank's thread did not "
                   "return within %lld ms (%s)\n",
                   process_.rank, cause.c_str(),
                   static_cast<long long>(process_.watchdog_grace.count()), where.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }
    lock.lock();
  }
}

}  // namespace shardlab
