// Where a rank's time went in one step, instant by instant: computing, moving
// bytes (hidden behind compute or exposed), or idle. A comm span is not all
// communication: a rank that posted a recv before its neighbour had anything to
// send, or entered a collective before the others, is waiting, and that wait is
// the pipeline bubble (or plain waiting) a lesson wants named.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "app/gui/logic/i18n.h"
#include "app/gui/logic/run_data.h"

namespace shardlab::gui {

using Interval = std::pair<int64_t, int64_t>;  // [begin, end) in ns

// A comm span whose first part is a wait: [span's begin, ready) the rank waits
// for a peer; from `ready` to the span's end its bytes move.
struct CommWait {
  uint32_t span = 0;  // index into the rank's comm lane
  int64_t ready = 0;
  int peer = -1;  // the rank waited for: the sender of a recv, the last entrant of a collective
};

struct RankUse {
  int64_t computing = 0;                 // union of its compute spans
  int64_t hidden = 0;                    // moving bytes while computing
  int64_t exposed = 0;                   // moving bytes while not computing
  int64_t idle = 0;                      // neither
  std::vector<Interval> idle_intervals;  // in order
  std::vector<CommWait> waits;           // comm spans meeting the window, in lane order
  // The wait of comm span `index`, or null when it moves bytes from its start.
  const CommWait* wait_of(uint32_t index) const;
};

// How every rank used the time window [begin, end): all training-step spans
// (not set-up or tear-down) that meet it,
// clipped to it, whatever step they belong to (a rank still finishing one step
// while another starts the next is busy, not idle).
struct WindowUse {
  int64_t begin = 0, end = 0;
  std::vector<RankUse> ranks;  // one per rank
  int64_t duration() const { return end - begin; }
};

// Matching, for the part of a comm span that is waiting: a recv waits until its
// send begins (same flow_id); a send waits until its recv is posted (a
// rendezvous protocol cannot move bytes into a buffer nobody posted); the n-th
// collective of a kind a rank runs in a step is the n-th of that kind on every
// rank that runs that kind in the step (ranks issue collectives in the same
// order), and waits until the last of them entered. Where the partner is not
// recorded (yet), the span counts as moving bytes.
WindowUse window_use(const RunData& d, int64_t begin, int64_t end);

// A training step's window: from the first compute span any rank begins in it
// (the work starts with compute; a recv a stage posted early for it is waiting
// already) to the last span of the step any rank ends. {0, 0} when the step
// has no spans yet.
std::pair<int64_t, int64_t> step_window(const RunData& d, int step);

// window_use over step_window(step).
WindowUse step_use(const RunData& d, int step);

// One rank's idle time over several windows (the timeline classifies each step
// in view; consecutive steps' windows overlap where one rank starts the next
// step while another finishes this one): the union, in order, so an idle
// stretch is drawn and named once.
std::vector<Interval> merged_idle(const std::vector<WindowUse>& uses, int rank);

// What idle time is called for this strategy: "bubble" for the pipelines, where
// it is the textbook bubble, "waiting" elsewhere; in `tr`'s language.
const char* idle_name(const std::string& strategy, const Tr& tr = Tr{});

}  // namespace shardlab::gui
