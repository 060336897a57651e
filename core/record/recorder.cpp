// Recorder storage: a mutex per rank keeps appends from the rank's compute and
// comm threads and snapshot reads from a viewer consistent.
#include "core/record/recorder.h"

namespace shardlab {

const char* to_string(SpanKind kind) {
  switch (kind) {
    case SpanKind::forward:
      return "forward";
    case SpanKind::backward:
      return "backward";
    case SpanKind::loss:
      return "loss";
    case SpanKind::optimizer:
      return "optimizer";
    case SpanKind::all_reduce:
      return "all_reduce";
    case SpanKind::reduce_scatter:
      return "reduce_scatter";
    case SpanKind::all_gather:
      return "all_gather";
    case SpanKind::broadcast:
      return "broadcast";
    case SpanKind::reduce:
      return "reduce";
    case SpanKind::send:
      return "send";
    case SpanKind::recv:
      return "recv";
    case SpanKind::barrier:
      return "barrier";
    case SpanKind::copy_h2d:
      return "copy_h2d";
    case SpanKind::copy_d2h:
      return "copy_d2h";
    case SpanKind::scatter:
      return "scatter";
    case SpanKind::gather:
      return "gather";
    case SpanKind::data:
      return "data";
    case SpanKind::other:
      return "other";
  }
  return "?";
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
  return lane == Lane::compute ? "compute" : "comm";
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
  return p == Pool::device ? "device" : "host";
}

void Recorder::add_span(Span span) {
  if (!enabled_) return;
  span.rank = rank_;
  if (span.step < 0) span.step = step();
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

}  // namespace shardlab
