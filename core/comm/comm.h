// The communicator every strategy talks to: collectives and point-to-point,
// each blocking or asynchronous (a Work handle to wait on). Every call has a
// timeout and records a span with its byte count on the rank's comm lane.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/device/memory.h"
#include "core/record/recorder.h"

namespace shardlab {

// Thrown when a collective fails or times out; the message names the rank,
// the operation and, where known, the peer that failed.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One per run, owned by the run (core/run/runner.cpp) and shared by its ranks
// and communicators, so that a rank that times out can say which peer failed
// first and why.
class FailureBoard {
 public:
  FailureBoard();
  void report(int rank, const std::string& what);
  // "rank 1 failed: <what>" for the first reported failure (the root cause), or "".
  std::string describe() const;
  // One line for the whole run: the root cause, then which ranks stopped after it.
  std::string summary() const;
  bool any() const;

  // Called with every failure reported to this board (in this process), after
  // it is recorded: a communicator wakes the sends and receives its rank is
  // blocked in, which a failed peer may never complete (a send whose bytes
  // sat in the socket when the peer closed). remove_listener returns once no
  // call of that listener is running.
  int add_listener(std::function<void()> on_failure);
  void remove_listener(int id);

  // Each rank notes the sequence number of every collective it issues, so a
  // rank that times out can name the peers that never got that far (stalled).
  void note_issued(int rank, uint64_t seq);
  // "rank 2 (it issued 41 collectives, this is #42)" for every rank behind `seq`, or "".
  std::string behind(uint64_t seq) const;

  // One process per rank: peers are not on this board. `publish` sends this
  // process's failure to them (through the run's store), `remote` tells what
  // the peers reported ("rank 2 failed: …", or who has not reached this step),
  // consulted by describe() and behind() when this board knows nothing.
  void set_remote(std::function<void(int rank, const std::string& what)> publish,
                  std::function<std::string()> remote);

  // One process per rank: whether this process's rank is inside a
  // communication op (waiting on its peers) or outside, and for how long: a
  // rank stuck outside every op while its peers time out is the one that stopped.
  void note_comm(bool inside);
  // 0 while inside an op; else nanoseconds since the last op ended (or since
  // the board was made).
  int64_t outside_comm_ns() const;

 private:
  std::atomic<int> inside_{0};
  std::atomic<int64_t> changed_ns_;  // made, or the last op began or ended
  std::function<void(int, const std::string&)> publish_;
  std::function<std::string()> remote_;
  std::mutex listeners_mu_;  // held while listeners run: remove_listener waits for them
  std::map<int, std::function<void()>> listeners_;
  int next_listener_ = 0;
  mutable std::mutex mu_;
  std::vector<std::pair<int, std::string>> failures_;
  std::map<int, uint64_t> issued_;
};

// Completion of an asynchronous operation. wait() rethrows its error.
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}
  void wait();
  bool done() const;
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<State> state_;
};

// Annotations a strategy attaches to a communication span.
struct CommMeta {
  int layer = -1;
  int micro_batch = -1;
};

struct CommStats {
  int64_t bytes_sent = 0;  // wire bytes this rank sent, by each algorithm's definition
  int64_t ops = 0;
};

// Element counts per rank for a buffer of `total` elements: the first
// total % world ranks get one element more.
std::vector<size_t> even_counts(size_t total, int world);

// Which ranks a communicator joins, and who they are in the run: its rank i is
// the run's rank `ranks[i]`. Every run has group 0, the whole world; a mesh's
// axis groups are numbered after it (core/mesh.h). Spans and error messages
// name the run's ranks and the group, so that two groups' collectives at once
// are told apart.
struct CommGroup {
  int id = 0;
  std::string name;        // for messages: "tp group 2 (ranks 4, 5)"; empty for the world
  std::vector<int> ranks;  // empty: the world, rank i is rank i
  int global(int local) const {
    return ranks.empty() || local < 0 ? local : ranks[static_cast<size_t>(local)];
  }
};

class Comm {
 public:
  explicit Comm(CommGroup group = {}) : group_(std::move(group)) {}
  virtual ~Comm() = default;
  // The group this communicator joins; rank() and world() are within it.
  const CommGroup& group() const { return group_; }
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual std::string backend_name() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  virtual CommStats stats() const = 0;

  // Asynchronous forms. Buffers must stay alive until the Work is waited on.
  // Collectives run in issue order on every rank (like a stream), so all ranks
  // must issue them in the same order.
  virtual Work all_reduce_async(void* buf, size_t count, DType dt, CommMeta meta = {}) = 0;
  // `in_full` (sum of counts elements) is used as workspace and is clobbered;
  // `out_chunk` receives this rank's counts[rank] reduced elements.
  virtual Work reduce_scatter_async(void* in_full, void* out_chunk, std::vector<size_t> counts,
                                    DType dt, CommMeta meta = {}) = 0;
  // Each rank contributes counts[rank] elements; `out_full` receives all, in rank order.
  virtual Work all_gather_async(const void* in_chunk, void* out_full, std::vector<size_t> counts,
                                DType dt, CommMeta meta = {}) = 0;
  virtual Work broadcast_async(void* buf, size_t count, DType dt, int root, CommMeta meta = {}) = 0;
  // Sum onto `root`; other ranks' buffers are left as they were.
  virtual Work reduce_async(void* buf, size_t count, DType dt, int root, CommMeta meta = {}) = 0;
  // Point-to-point: a send matches the recv with the same (src, dst, tag), in order.
  virtual Work send_async(const void* buf, size_t bytes, int dst, int tag, CommMeta meta = {}) = 0;
  virtual Work recv_async(void* buf, size_t bytes, int src, int tag, CommMeta meta = {}) = 0;
  virtual Work barrier_async() = 0;
  // Closes the connections to every peer now (their pending ops fail at
  // once) without freeing anything: for a failed rank of a process that is
  // about to end, whose buffers the transport may still touch.
  virtual void close_connections() {}

  // Blocking forms.
  void all_reduce(void* buf, size_t count, DType dt, CommMeta meta = {}) {
    all_reduce_async(buf, count, dt, meta).wait();
  }
  void reduce_scatter(void* in_full, void* out_chunk, std::vector<size_t> counts, DType dt,
                      CommMeta meta = {}) {
    reduce_scatter_async(in_full, out_chunk, std::move(counts), dt, meta).wait();
  }
  void all_gather(const void* in_chunk, void* out_full, std::vector<size_t> counts, DType dt,
                  CommMeta meta = {}) {
    all_gather_async(in_chunk, out_full, std::move(counts), dt, meta).wait();
  }
  void broadcast(void* buf, size_t count, DType dt, int root, CommMeta meta = {}) {
    broadcast_async(buf, count, dt, root, meta).wait();
  }
  void reduce(void* buf, size_t count, DType dt, int root, CommMeta meta = {}) {
    reduce_async(buf, count, dt, root, meta).wait();
  }
  void send(const void* buf, size_t bytes, int dst, int tag, CommMeta meta = {}) {
    send_async(buf, bytes, dst, tag, meta).wait();
  }
  void recv(void* buf, size_t bytes, int src, int tag, CommMeta meta = {}) {
    recv_async(buf, bytes, src, tag, meta).wait();
  }
  void barrier() { barrier_async().wait(); }

 private:
  CommGroup group_;
};

}  // namespace shardlab

namespace gloo::rendezvous {
class Store;  // Gloo's key-value store interface (file, redis, ours over TCP: core/launch/rdzv.h)
}

namespace shardlab {

// Everything the ranks of one Gloo group in this process share: the rendezvous
// store, the TCP device (one event loop for all ranks), and the failure board.
struct GlooGroupOptions {
  std::chrono::milliseconds timeout{30000};
  // The address the TCP device listens on: loopback unless a multi-host run
  // names the interface's address.
  std::string bind_host = "127.0.0.1";
  // The run's failure board, which every rank and every group of the run (NCCL's,
  // a process's control link) reports to and reads; null: the group keeps its
  // own (a group on its own, as in a benchmark).
  FailureBoard* failures = nullptr;
};
class GlooGroup {
 public:
  // Ranks as threads of this process: rendezvous through an in-memory store.
  explicit GlooGroup(int world, GlooGroupOptions options = {});
  // One rank per process: rendezvous through a store every process reaches,
  // under `prefix` (several groups of one run share the store: "train", "control").
  GlooGroup(int world, GlooGroupOptions options, gloo::rendezvous::Store& store,
            const std::string& prefix);
  ~GlooGroup();
  int world() const { return world_; }
  // The board this group reports to: the run's (GlooGroupOptions::failures) or its own.
  FailureBoard& failures() { return failures_; }
  // Connects rank `rank` (blocks until every rank has joined, or times out).
  // `recorder` and `alloc` may be null; comm spans and scratch buffers go there.
  // `group` says which of the run's ranks this group's are (a mesh axis's group);
  // empty: the world.
  std::unique_ptr<Comm> connect(int rank, Recorder* recorder, Allocator* alloc,
                                const CommGroup& group = {});

  struct Impl;

 private:
  int world_;
  GlooGroupOptions options_;
  FailureBoard own_failures_;
  FailureBoard& failures_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardlab
