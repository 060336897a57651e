// The short label a span carries in the app's timeline and in the traces
// Shardlab writes ("F3 L2", "AG L0", "send F3 →r1"): one wording, so a trace
// opened in Perfetto reads like the app.
#pragma once

#include <functional>
#include <string>

#include "core/record/recorder.h"

namespace shardlab {

// What a pipeline calls a micro-batch's work: "F3" for micro-batch 3's forward,
// "B3" for its backward, and the same for what moves between stages: the
// activations a stage sends on (to a later rank) are F3's, the gradients it
// sends back (to an earlier rank) are B3's. Empty without a micro-batch.
//
// Whether a message is an activation or a gradient is read off its peer (a
// later rank: an activation) unless `holds` is given: whether a rank holds a
// model layer. A message's layer is the boundary it crosses, the last layer
// before it: an activation's sender holds it, a gradient's receiver does.
// Interleaved chunks need `holds`: the last rank's activations go on to rank 0.
using HoldsLayer = std::function<bool(int rank, int layer)>;
std::string micro_batch_tag(const Span& s, const HoldsLayer& holds = {});

// The kind in a word or two of English: F, B, loss, opt, AR, RS, AG, BC, RD,
// send, recv, bar, H2D, D2H, SC, GA, data, other.
const char* kind_abbrev(SpanKind k);

// "F3" for a micro-batch's forward, "F L2" for a layer's, "AR L4" for a
// collective, "send F3 →r1" / "recv F3 ←r0" for pipeline messages; `with_layer`
// adds the layer to a micro-batch's compute ("F3 L2"). `word` names the kind
// (kind_abbrev; the app passes its translation).
std::string span_title(const Span& s, bool with_layer,
                       const std::function<std::string(SpanKind)>& word = kind_abbrev,
                       const HoldsLayer& holds = {});

}  // namespace shardlab
