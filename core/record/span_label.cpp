// Span labels shared by the app and the traces (see span_label.h).
#include "core/record/span_label.h"

namespace shardlab {

std::string micro_batch_tag(const Span& s, const HoldsLayer& holds) {
  if (s.micro_batch < 0) return {};
  const std::string n = std::to_string(s.micro_batch);
  if (holds && s.peer >= 0 && s.layer >= 0 &&
      (s.kind == SpanKind::send || s.kind == SpanKind::recv))
    return ((s.kind == SpanKind::send) == holds(s.rank, s.layer) ? "F" : "B") + n;
  switch (s.kind) {
    case SpanKind::forward:
    case SpanKind::loss:
    case SpanKind::data:
    case SpanKind::other:
      return "F" + n;
    case SpanKind::backward:
      return "B" + n;
    case SpanKind::weight:
      return "W" + n;
    case SpanKind::send:  // stages are ranks in order: activations go up, gradients down
      return s.peer < 0 ? "#" + n : (s.peer > s.rank ? "F" : "B") + n;
    case SpanKind::recv:
      return s.peer < 0 ? "#" + n : (s.peer < s.rank ? "F" : "B") + n;
    default:
      return "#" + n;
  }
}

const char* kind_abbrev(SpanKind k) {
  return span_kind_row(k).abbrev;
}

std::string span_title(const Span& s, bool with_layer,
                       const std::function<std::string(SpanKind)>& word, const HoldsLayer& holds) {
  const std::string tag = micro_batch_tag(s, holds);
  const bool compute =
      s.kind == SpanKind::forward || s.kind == SpanKind::backward || s.kind == SpanKind::weight;
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
