// Span labels shared by the app and the traces (see span_label.h).
#include "core/record/span_label.h"

namespace shardlab {

std::string micro_batch_tag(const Span& s) {
  if (s.micro_batch < 0) return {};
  const std::string n = std::to_string(s.micro_batch);
  switch (s.kind) {
    case SpanKind::forward:
    case SpanKind::loss:
    case SpanKind::data:
    case SpanKind::other:
      return "F" + n;
    case SpanKind::backward:
      return "B" + n;
    case SpanKind::send:  // stages are ranks in order: activations go up, gradients down
      return s.peer < 0 ? "#" + n : (s.peer > s.rank ? "F" : "B") + n;
    case SpanKind::recv:
      return s.peer < 0 ? "#" + n : (s.peer < s.rank ? "F" : "B") + n;
    default:
      return "#" + n;
  }
}

const char* kind_abbrev(SpanKind k) {
  switch (k) {
    case SpanKind::forward:
      return "F";
    case SpanKind::backward:
      return "B";
    case SpanKind::loss:
      return "loss";
    case SpanKind::optimizer:
      return "opt";
    case SpanKind::all_reduce:
      return "AR";
    case SpanKind::reduce_scatter:
      return "RS";
    case SpanKind::all_gather:
      return "AG";
    case SpanKind::broadcast:
      return "BC";
    case SpanKind::reduce:
      return "RD";
    case SpanKind::send:
      return "send";
    case SpanKind::recv:
      return "recv";
    case SpanKind::barrier:
      return "bar";
    case SpanKind::copy_h2d:
      return "H2D";
    case SpanKind::copy_d2h:
      return "D2H";
    case SpanKind::scatter:
      return "SC";
    case SpanKind::gather:
      return "GA";
    case SpanKind::data:
      return "data";
    case SpanKind::other:
      return "other";
  }
  return to_string(k);
}

std::string span_title(const Span& s, bool with_layer,
                       const std::function<std::string(SpanKind)>& word) {
  const std::string tag = micro_batch_tag(s);
  const bool compute = s.kind == SpanKind::forward || s.kind == SpanKind::backward;
  std::string out;
  if (compute && !tag.empty()) {
    out = tag;  // "F3": micro-batch 3
    if (with_layer && s.layer >= 0) out += " L" + std::to_string(s.layer);
    return out;
  }
  out = word(s.kind);
  if (!tag.empty())
    out += " " + tag;
  else if (s.layer >= 0)
    out += " L" + std::to_string(s.layer);
  if (s.peer >= 0 && s.kind == SpanKind::send) out += " \xE2\x86\x92r" + std::to_string(s.peer);
  if (s.peer >= 0 && s.kind == SpanKind::recv) out += " \xE2\x86\x90r" + std::to_string(s.peer);
  return out;
}

}  // namespace shardlab
