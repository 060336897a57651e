// Recorder storage: a mutex per rank keeps appends from the rank's compute and
// comm threads and snapshot reads from a viewer consistent.
#include "core/record/recorder.h"

#include <algorithm>

namespace shardlab {

namespace {

// In SpanKind's order (checked below, and by a test).
constexpr SpanKindRow kSpanKinds[kNumSpanKinds] = {
    {SpanKind::forward, "forward", "forward", "F", false},
    {SpanKind::backward, "backward", "backward", "B", false},
    {SpanKind::weight, "weight_grad", "weight gradient (W)", "W", false},
    {SpanKind::loss, "loss", "loss", "loss", false},
    {SpanKind::optimizer, "optimizer", "optimizer", "opt", false},
    {SpanKind::all_reduce, "all_reduce", "all-reduce", "AR", true},
    {SpanKind::reduce_scatter, "reduce_scatter", "reduce-scatter", "RS", true},
    {SpanKind::all_gather, "all_gather", "all-gather", "AG", true},
    {SpanKind::broadcast, "broadcast", "broadcast", "BC", true},
    {SpanKind::reduce, "reduce", "reduce", "RD", true},
    {SpanKind::send, "send", "send", "send", false},
    {SpanKind::recv, "recv", "recv", "recv", false},
    {SpanKind::barrier, "barrier", "barrier", "bar", true},
    {SpanKind::copy_h2d, "copy_h2d",
     "copy host\xE2\x86\x92"
     "device",
     "H2D", false},
    {SpanKind::copy_d2h, "copy_d2h",
     "copy device\xE2\x86\x92"
     "host",
     "D2H", false},
    {SpanKind::scatter, "scatter", "scatter", "SC", false},
    {SpanKind::gather, "gather", "gather", "GA", false},
    {SpanKind::data, "data", "data", "data", false},
    {SpanKind::disk_read, "disk_read", "read from disk", "read", false},
    {SpanKind::disk_write, "disk_write", "write to disk", "write", false},
    {SpanKind::other, "other", "other", "other", false},
};

constexpr bool rows_in_order() {
  for (int i = 0; i < kNumSpanKinds; ++i)
    if (static_cast<int>(kSpanKinds[i].kind) != i) return false;
  return true;
}
static_assert(rows_in_order(), "kSpanKinds must list every SpanKind in its order");

}  // namespace

const SpanKindRow& span_kind_row(SpanKind kind) {
  const int i = static_cast<int>(kind);
  return i >= 0 && i < kNumSpanKinds ? kSpanKinds[i] : kSpanKinds[kNumSpanKinds - 1];
}

const char* to_string(SpanKind kind) {
  const int i = static_cast<int>(kind);
  return i >= 0 && i < kNumSpanKinds ? kSpanKinds[i].name : "?";
}

const char* to_string(MarkKind kind) {
  switch (kind) {
    case MarkKind::step:
      return "step";
    case MarkKind::issue:
      return "issue";
    case MarkKind::wait:
      return "wait";
    case MarkKind::sync:
      return "sync";
  }
  return "?";
}

const char* to_string(Lane lane) {
  switch (lane) {
    case Lane::compute:
      return "compute";
    case Lane::comm:
      return "comm";
    case Lane::disk:
      return "disk";
  }
  return "?";
}

const char* to_string(MemCategory c) {
  switch (c) {
    case MemCategory::params:
      return "params";
    case MemCategory::grads:
      return "grads";
    case MemCategory::optimizer_state:
      return "optimizer_state";
    case MemCategory::activations:
      return "activations";
    case MemCategory::comm_buffers:
      return "comm_buffers";
    case MemCategory::temporary:
      return "temporary";
  }
  return "?";
}

const char* to_string(Pool p) {
  switch (p) {
    case Pool::device:
      return "device";
    case Pool::host:
      return "host";
    case Pool::disk:
      return "disk";
  }
  return "?";
}

void Recorder::add_span(Span span) {
  if (!enabled_) return;
  span.rank = rank_;
  if (span.step < 0) span.step = step();
  if (span.staleness < 0) span.staleness = staleness();
  std::lock_guard<std::mutex> lock(mu_);
  if (count_only_)
    ++counted_.spans;
  else
    spans_.push_back(span);
}

void Recorder::add_alloc(AllocEvent event) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (count_only_)
    ++counted_.allocs;
  else
    allocs_.push_back(std::move(event));
}

void Recorder::add_mark(const Mark& mark) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (count_only_)
    ++counted_.marks;
  else
    marks_.push_back(mark);
}

Recorder::Snapshot Recorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Snapshot{spans_, allocs_, marks_};
}

Recorder::Counts Recorder::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (count_only_) return counted_;
  return {static_cast<int64_t>(spans_.size()), static_cast<int64_t>(allocs_.size()),
          static_cast<int64_t>(marks_.size())};
}

size_t Recorder::span_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_.size();
}

void Recorder::spans_since(size_t from, std::vector<Span>& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = from; i < spans_.size(); ++i) out.push_back(spans_[i]);
}

void Recorder::allocs_since(size_t from, std::vector<AllocEvent>& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = from; i < allocs_.size(); ++i) out.push_back(allocs_[i]);
}

double bytes_per_step(const std::vector<Span>& spans, int steps, SpanKind kind) {
  int64_t bytes = 0;
  for (const Span& s : spans)
    if (s.kind == kind && s.step >= 0) bytes += s.bytes;
  return static_cast<double>(bytes) / std::max(1, steps);
}

}  // namespace shardlab
