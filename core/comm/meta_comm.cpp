// The meta communicator (see meta_comm.h). Each call mirrors one GlooComm call
// in core/comm/gloo/gloo_comm.cpp: the same checks, the same scratch, the same count of
// bytes sent (comm_common.h's definitions), and a Work that is already done.
#include "core/comm/meta_comm.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/comm/comm_common.h"
#include "core/comm/work_state.h"

namespace shardlab {

namespace {

// Gloo's Scratch: one block per use, grown when a larger one is asked for and
// kept until the comm goes (the old block is freed after the new one is made).
class MetaScratch {
 public:
  // Returns what the op holds until it is waited on: on the guarded CPU, the
  // device block Gloo makes and drops for the host one. Gloo does that on its
  // worker thread, at some moment between issue and completion, so the meta
  // comm holds it for that whole time: the rank's peak then covers any moment.
  Tensor ensure(Allocator* alloc, const char* name, size_t bytes, ScratchPlacement where) {
    if (bytes <= capacity_ || !alloc) return {};
    const size_t numel = (bytes + 3) / 4;
    const Pool first = where == ScratchPlacement::host ? Pool::host : Pool::device;
    Tensor made = alloc->alloc(name, MemCategory::comm_buffers, numel, DType::f32, first);
    if (where == ScratchPlacement::device_then_host) {
      tensor_ = alloc->alloc(name, MemCategory::comm_buffers, numel, DType::f32, Pool::host);
    } else {
      tensor_ = std::move(made);
    }
    capacity_ = tensor_.bytes();
    return made;
  }

 private:
  Tensor tensor_;
  size_t capacity_ = 0;
};

class MetaComm final : public Comm {
 public:
  MetaComm(int rank, int world, Allocator* alloc, ScratchPlacement scratch, Recorder* recorder,
           OpLog* log, const CommGroup& group)
      : Comm(group),
        rank_(rank),
        world_(world),
        alloc_(alloc),
        scratch_(scratch),
        recorder_(recorder),
        log_(log) {}

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend_name() const override { return "meta"; }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(30000); }
  CommStats stats() const override { return counters_.stats(); }

  Work all_reduce_async(void*, size_t count, DType dt, CommMeta meta) override {
    const int64_t bytes = static_cast<int64_t>(count * dtype_size(dt));
    return done({SpanKind::all_reduce, bytes, meta}, all_reduce_sent(world_, bytes));
  }

  Work reduce_scatter_async(void*, void*, std::vector<size_t> counts, DType dt,
                            CommMeta meta) override {
    check_counts(rank_, world_, "reduce_scatter", counts);
    const size_t es = dtype_size(dt);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    Tensor held;
    if (world_ > 1 && total > 0) {
      // The ring receives one chunk at a time into scratch of the largest chunk.
      const size_t max_chunk = *std::max_element(counts.begin(), counts.end());
      held = rs_scratch_.ensure(alloc_, "comm.reduce_scatter.scratch", max_chunk * es, scratch_);
    }
    return done({SpanKind::reduce_scatter, static_cast<int64_t>(total * es), meta},
                reduce_scatter_sent(rank_, world_, counts, es), std::move(held));
  }

  Work all_gather_async(const void*, void*, std::vector<size_t> counts, DType dt,
                        CommMeta meta) override {
    check_counts(rank_, world_, "all_gather", counts);
    std::vector<size_t> byte_counts(counts.size());
    size_t total = 0;
    for (size_t i = 0; i < counts.size(); ++i) total += byte_counts[i] = counts[i] * dtype_size(dt);
    return done({SpanKind::all_gather, static_cast<int64_t>(total), meta},
                all_gather_sent(rank_, world_, byte_counts));
  }

  Work broadcast_async(void*, size_t count, DType dt, int root, CommMeta meta) override {
    const int64_t bytes = static_cast<int64_t>(count * dtype_size(dt));
    const OpInfo op{SpanKind::broadcast, bytes, meta};
    check_rank(rank_, world_, op, root, "root");
    return done(op, broadcast_sent(rank_, root, world_, bytes));
  }

  Work reduce_async(void*, size_t count, DType dt, int root, CommMeta meta) override {
    const int64_t bytes = static_cast<int64_t>(count * dtype_size(dt));
    const OpInfo op{SpanKind::reduce, bytes, meta};
    check_rank(rank_, world_, op, root, "root");
    // Non-root ranks give Gloo a scratch output, so that their buffers stay as they were.
    Tensor held;
    if (world_ > 1 && count > 0 && rank_ != root)
      held =
          reduce_scratch_.ensure(alloc_, "comm.reduce.scratch", count * dtype_size(dt), scratch_);
    return done(op, reduce_sent(rank_, root, world_, bytes), std::move(held));
  }

  Work send_async(const void*, size_t bytes, int dst, int tag, CommMeta meta) override {
    OpInfo op{SpanKind::send, static_cast<int64_t>(bytes), meta, dst, tag};
    check_p2p(rank_, world_, op);
    return done(op, op.bytes);
  }

  Work recv_async(void*, size_t bytes, int src, int tag, CommMeta meta) override {
    OpInfo op{SpanKind::recv, static_cast<int64_t>(bytes), meta, src, tag};
    check_p2p(rank_, world_, op);
    return done(op, 0);
  }

  Work barrier_async() override { return done({SpanKind::barrier, 0, {}}, 0); }

 private:
  // The payload is counted at issue. The op completes when waited on, never
  // before: a strategy that frees a buffer once its op is done() (ddp's and
  // ZeRO's reduce-scatter queue) then holds it as long as it ever can, the
  // slowest link's case, so the meta peak bounds every real run's from above.
  // `held` is freed at completion. With a recorder, the op is recorded as
  // GlooComm records it: its issue, its first wait and its span (zero long).
  Work done(const OpInfo& op, int64_t sent, Tensor held = {}) {
    counters_.add_sent(sent);
    counters_.add_op();
    auto keep = std::make_shared<Tensor>(std::move(held));
    Recorder* rec = recorder_;
    OpLog* log = log_;
    const int rank = rank_;
    CommGroup group = this->group();  // a copy: a Work may be waited on after its comm is gone
    MetaOp entry;
    entry.what = MetaOp::What::issue;
    entry.kind = op.kind;
    entry.step = rec ? rec->step() : -1;
    entry.layer = op.meta.layer;
    entry.micro_batch = op.meta.micro_batch;
    entry.bytes = op.bytes;
    entry.peer = this->group().global(op.peer);  // the run's rank
    entry.id = op.id;
    if (log) log->add(entry);
    auto state = std::make_shared<Work::State>();
    state->complete = [keep, rec, log, rank, group, op, entry]() mutable {
      keep->reset();
      if (log) {
        entry.what = MetaOp::What::wait;
        entry.step = rec ? rec->step() : -1;
        log->add(entry);
      }
      if (rec) {
        Span span = comm_span(group, rank, op);
        span.t_begin_ns = span.t_end_ns = now_ns();
        rec->add_span(span);
      }
      return std::string();
    };
    track_issue(recorder_, op, *state);
    return Work(state);
  }

  const int rank_, world_;
  Allocator* const alloc_;
  const ScratchPlacement scratch_;
  Recorder* const recorder_;
  OpLog* const log_;
  CommCounters counters_;
  MetaScratch rs_scratch_;
  MetaScratch reduce_scratch_;
};

}  // namespace

std::unique_ptr<Comm> make_meta_comm(int rank, int world, Allocator* alloc,
                                     ScratchPlacement scratch, Recorder* recorder, OpLog* log,
                                     const CommGroup& group) {
  return std::make_unique<MetaComm>(rank, world, alloc, scratch, recorder, log, group);
}

}  // namespace shardlab
