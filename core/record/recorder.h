// Per-rank record of a run: timed spans (compute and communication) and
// allocation events. Appended by the rank's own threads; the UI and exporters
// read snapshots while the run goes on.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/clock.h"

namespace shardlab {

// disk: a rank's transfers to and from its offload file (--offload nvme:DIR).
enum class Lane : uint8_t { compute, comm, disk };
inline constexpr int kNumLanes = 3;

enum class SpanKind : uint8_t {
  forward,
  backward,
  weight,  // a zero-bubble W: the weight gradients a split backward left for later
  loss,
  optimizer,
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  reduce,
  send,
  recv,
  barrier,
  copy_h2d,
  copy_d2h,
  scatter,     // dp: device 0 hands each device its slice (batch rows, output gradients)
  gather,      // dp: each device's outputs collected onto device 0
  data,        // making a batch (a data loader's work; a projection takes it as prefetched)
  disk_read,   // offloaded model states read from the rank's file (the disk lane)
  disk_write,  // ... and written back
  other,
};
inline constexpr int kNumSpanKinds = static_cast<int>(SpanKind::other) + 1;

// What each kind is, in one table (recorder.cpp): every reader of a kind's
// name, abbreviation or nature asks here instead of switching on it.
struct SpanKindRow {
  SpanKind kind;
  const char* name;    // in files and traces: "all_reduce"
  const char* label;   // for a person, in English: "all-reduce", "copy host→device"
  const char* abbrev;  // on a narrow block or a trace slice: "AR"
  bool collective;     // every rank of the group takes part (a ring or tree of them)
};
const SpanKindRow& span_kind_row(SpanKind kind);
const char* to_string(SpanKind kind);  // span_kind_row(kind).name
inline bool is_collective(SpanKind kind) {
  return span_kind_row(kind).collective;
}
const char* to_string(Lane lane);

struct Span {
  int64_t t_begin_ns = 0;
  int64_t t_end_ns = 0;
  int rank = 0;
  Lane lane = Lane::compute;
  SpanKind kind = SpanKind::other;
  int layer = -1;        // model layer, -1 when not about one layer
  int micro_batch = -1;  // -1 when the strategy has no micro-batches
  int step = -1;         // training step; filled from the recorder's current step
  int64_t bytes = 0;     // payload of a communication or copy
  int peer = -1;         // the other rank of a send/recv (the run's rank, not the group's)
  int group = 0;         // the communicator's group (CommGroup::id): 0, the world
  uint64_t flow_id = 0;  // links a send to its recv (same id on both), 0 = none
  // The recording thread's CPU clock (thread_cpu_ns) at the span's begin and
  // end, -1 when not measured (device-timed spans, older files). For a compute
  // span, cpu_end_ns - cpu_begin_ns is its cost on a core of its own.
  int64_t cpu_begin_ns = -1;
  int64_t cpu_end_ns = -1;
  // A communication op issued through a Comm: its id on this rank, which its
  // issue and wait marks name (0 = not an op of a Comm).
  uint64_t op = 0;
  // A data span whose batch the rank's data loader made ahead, beside the
  // step (core/model/data_loader.h): the span is the copy in, not the making.
  bool made_ahead = false;
  // A parameter server's worker (ps): how many updates behind this span's
  // step the parameters it computed with were (0: fresh); -1 elsewhere.
  int staleness = -1;
};

// The bytes of `kind` spans (a recv, a disk_read, ...) within the training
// steps (not setup's), per step: over `steps`, at least 1.
double bytes_per_step(const std::vector<Span>& spans, int steps, SpanKind kind);

// Points in a rank's program that a span does not show, each stamped with the
// wall clock and the program thread's CPU clock. With them, a run can be
// replayed on other hardware (core/projection.h): where each op was issued,
// where the program waited for it, and where each step began and ended.
enum class MarkKind : uint8_t {
  step,   // a training step: `id` is the step, [t_begin, t_end] its extent on this rank
  issue,  // a Comm op was issued (`id` = Span::op); t_begin == t_end
  wait,   // the program waited on op `id` from t_begin until it completed, t_end
  sync,   // a barrier of shared memory (dp's phases): every rank's n-th sync meets
};
inline constexpr int kNumMarkKinds = static_cast<int>(MarkKind::sync) + 1;
const char* to_string(MarkKind kind);

struct Mark {
  MarkKind kind = MarkKind::issue;
  uint64_t id = 0;
  int64_t t_begin_ns = 0;
  int64_t t_end_ns = 0;
  int64_t cpu_begin_ns = -1;  // the marking thread's CPU clock; -1 unknown
  int64_t cpu_end_ns = -1;
};

enum class MemCategory : uint8_t {
  params,
  grads,
  optimizer_state,
  activations,
  comm_buffers,
  temporary
};
inline constexpr int kNumMemCategories = 6;
const char* to_string(MemCategory c);

// Host memory is a separate pool so CPU offload shows as a split even on a CPU device.
// disk: bytes a rank keeps in its offload file (--offload nvme:DIR), not memory.
enum class Pool : uint8_t { device, host, disk };
inline constexpr int kNumPools = 3;
const char* to_string(Pool p);

struct AllocEvent {
  int64_t t_ns = 0;
  int64_t delta_bytes = 0;  // > 0 allocation, < 0 free
  uint64_t buffer_id = 0;   // pairs an allocation with its free
  MemCategory category = MemCategory::temporary;
  Pool pool = Pool::device;
  std::string name;  // e.g. "layers.3.weight", "layers.3.weight[shard 1/4]"
};

// Times compute spans on a device whose work runs after the host issues it (a
// GPU stream): begin() marks the stream, end() hands over the span, whose times
// the clock fills in when the device has run it. Null on the CPU.
class DeviceClock {
 public:
  virtual ~DeviceClock() = default;
  virtual int begin() = 0;
  virtual void end(int token, Span span) = 0;
};

class Recorder {
 public:
  explicit Recorder(int rank, bool enabled = true) : rank_(rank), enabled_(enabled) {}
  // A recorder that keeps nothing but how many records it was given: a meta
  // run's (core/predict/meta_memory.h), which predicts what a real recorder
  // would grow by a step without holding thousands of records per rank.
  struct CountOnly {};
  Recorder(int rank, CountOnly) : rank_(rank), enabled_(true), count_only_(true) {}

  int rank() const { return rank_; }
  bool enabled() const { return enabled_; }

  // Spans get this step unless they carry their own.
  void set_step(int step) { step_.store(step, std::memory_order_relaxed); }
  int step() const { return step_.load(std::memory_order_relaxed); }
  // Spans get this staleness unless they carry their own (-1: none).
  void set_staleness(int k) { staleness_.store(k, std::memory_order_relaxed); }
  int staleness() const { return staleness_.load(std::memory_order_relaxed); }

  void add_span(Span span);
  void add_alloc(AllocEvent event);
  void add_mark(const Mark& mark);

  // Set by a GPU backend for the rank's lifetime; compute spans then take their
  // times from the device (see ScopedSpan).
  void set_device_clock(DeviceClock* clock) { clock_ = clock; }
  DeviceClock* device_clock() const { return clock_; }

  struct Snapshot {
    std::vector<Span> spans;
    std::vector<AllocEvent> allocs;
    std::vector<Mark> marks;
  };
  Snapshot snapshot() const;
  // Incremental reads for a viewer that already holds the first `from` items.
  // Records given so far (kept, or counted by a CountOnly recorder).
  struct Counts {
    int64_t spans = 0, allocs = 0, marks = 0;
  };
  Counts counts() const;
  size_t span_count() const;
  void spans_since(size_t from, std::vector<Span>& out) const;
  void allocs_since(size_t from, std::vector<AllocEvent>& out) const;

 private:
  const int rank_;
  const bool enabled_;
  const bool count_only_ = false;
  std::atomic<int> step_{-1};
  std::atomic<int> staleness_{-1};
  DeviceClock* clock_ = nullptr;
  mutable std::mutex mu_;
  std::vector<Span> spans_;
  std::vector<AllocEvent> allocs_;
  std::vector<Mark> marks_;
  Counts counted_;  // a CountOnly recorder's
};

// Records a span from construction to destruction (or to end()). A compute
// span on a device with a DeviceClock is timed by the device, not the host:
// on a GPU the host only queues the kernels, and the queueing time is not
// what a learner wants to see.
// Marks the extent of something on the calling thread (a step, a wait): wall
// and CPU clocks at construction and at done().
class ScopedMark {
 public:
  ScopedMark(Recorder* rec, MarkKind kind, uint64_t id)
      : rec_(rec && rec->enabled() ? rec : nullptr) {
    if (!rec_) return;
    mark_.kind = kind;
    mark_.id = id;
    mark_.t_begin_ns = now_ns();
    mark_.cpu_begin_ns = thread_cpu_ns();
  }
  ScopedMark(const ScopedMark&) = delete;
  ScopedMark& operator=(const ScopedMark&) = delete;
  ~ScopedMark() { done(); }
  void done() {
    if (!rec_) return;
    mark_.t_end_ns = now_ns();
    mark_.cpu_end_ns = thread_cpu_ns();
    rec_->add_mark(mark_);
    rec_ = nullptr;
  }
  // Forgets the mark (its extent ended in an error, not where the program went on).
  void cancel() { rec_ = nullptr; }

 private:
  Recorder* rec_;
  Mark mark_;
};

class ScopedSpan {
 public:
  ScopedSpan(Recorder* rec, Lane lane, SpanKind kind, int layer = -1, int micro_batch = -1,
             int64_t bytes = 0)
      : rec_(rec) {
    if (rec_ && rec_->enabled() && lane == Lane::compute && rec_->device_clock())
      token_ = rec_->device_clock()->begin();
    span_.t_begin_ns = now_ns();
    if (token_ < 0 && rec_ && rec_->enabled()) span_.cpu_begin_ns = thread_cpu_ns();
    span_.lane = lane;
    span_.kind = kind;
    span_.layer = layer;
    span_.micro_batch = micro_batch;
    span_.bytes = bytes;
  }
  ~ScopedSpan() { end(); }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;
  void set_made_ahead(bool ahead) { span_.made_ahead = ahead; }
  void end() {
    if (!rec_) return;
    span_.t_end_ns = now_ns();
    if (span_.cpu_begin_ns >= 0) span_.cpu_end_ns = thread_cpu_ns();
    if (token_ >= 0) {
      if (span_.step < 0) span_.step = rec_->step();  // resolved after the step moves on
      if (span_.staleness < 0) span_.staleness = rec_->staleness();
      rec_->device_clock()->end(token_, span_);
    } else {
      rec_->add_span(span_);
    }
    rec_ = nullptr;
  }

 private:
  Recorder* rec_;
  int token_ = -1;
  Span span_;
};

}  // namespace shardlab
