// A pipeline schedule as data: each rank's actions in order (F, B, W on a
// micro-batch and a model chunk), their text form, the named schedules (naive,
// gpipe, 1f1b, interleaved, zb-h1) written in it, and the validator that
// refuses a schedule that cannot run before any rank starts.
//
// The text form, one line per rank (stage), in the spirit of PyTorch's
// pipeline action IR:
//
//   # 1f1b, 2 stages, 4 micro-batches
//   rank 0: F0 F1 B0 F2 B1 F3 B2 B3
//   rank 1: F0 B0 F1 B1 F2 B2 F3 B3
//
// F<m> runs micro-batch m's forward, B<m> its backward, W<m> its weight
// gradient: a B whose W the rank also runs computes only the input gradient
// (the zero-bubble split), otherwise both. F<m>.<c> names model chunk c of
// an interleaved schedule: with V chunks per rank, chunk c of rank r is model
// stage c·P + r (Megatron's round-robin). Sends and receives are implied: a
// forward's output goes to the next model stage, a backward's input gradient
// to the previous one. Activations are freed implicitly, after the B (or the
// W when the backward is split), so a schedule cannot free one still needed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardlab {

enum class ActionKind { forward, backward, weight };

struct Action {
  ActionKind kind = ActionKind::forward;
  int micro_batch = 0;
  int chunk = 0;
  bool operator==(const Action& o) const {
    return kind == o.kind && micro_batch == o.micro_batch && chunk == o.chunk;
  }
};

struct Schedule {
  int stages = 0;         // P: ranks in the pipeline, one line each
  int micro_batches = 0;  // M
  int chunks = 1;         // V: model chunks per rank (interleaved: 2 or more)
  std::vector<std::vector<Action>> ranks;
};

// "F3", "B0", "W2", "F1.1" (a chunk after the dot when the schedule has more than one).
std::string to_string(const Action& a, int chunks);
// One line per rank, "rank R: …", after a comment line `title` (none when empty).
std::string format_schedule(const Schedule& s, const std::string& title = "");

// Reads the text form. P is its number of rank lines, M and V the largest
// micro-batch and chunk named plus one. Throws ConfigError (one line, naming
// `origin`, the line and the token) for text that is not a schedule.
Schedule parse_schedule(const std::string& text, const std::string& origin);

// Throws ConfigError (one line naming the rank and the action) unless `s` runs
// on P stages, M micro-batches and V chunks per rank: one line per rank, every
// F and B of every micro-batch and chunk exactly once per rank, at most one W
// (after its B), each B after its F, and an order in which no rank waits
// forever for another (no deadlock).
void validate_schedule(const Schedule& s, int stages, int micro_batches, int chunks);

// A message between two stages of a pipeline, as its receiver names it.
struct Receive {
  bool gradient = false;  // a backward's input gradient; else a forward's output
  int micro_batch = 0;
  int chunk = 0;  // the receiver's model chunk it is for
  int from = 0;   // the sending rank
  bool operator==(const Receive& o) const {
    return gradient == o.gradient && micro_batch == o.micro_batch && chunk == o.chunk &&
           from == o.from;
  }
};

// When each rank posts its receives, for the executor (PipelineStage::run) and
// for the memory it predicts (a posted receive's buffer is allocated).
//
// Why a plan: a send completes only once its receiver has posted the receive,
// and a rank waits for its last action's sends before its next action (so
// that their buffers go back to the allocator and their spans end where the
// data was taken). An order that runs with free transfers (validate_schedule)
// can then still hang: rank 0 waits for rank 1 to take its F2, while rank 1
// waits for rank 0 to take its B1. The usual early posts (the next B's
// gradient; the next F's input during a run of forwards; with chunks, the
// next F's and B's and the action's own, before its sends are waited for)
// cover the named schedules; for any other order, this plan adds, where a
// run would hang, the receive the waiting sender needs, posted early by its
// receiver: every order validate_schedule accepts then runs.
struct ReceivePlan {
  // order[r][p]: what rank p sends rank r in a step, in p's order. Receives
  // from p are posted in that order: posting one posts every earlier one.
  std::vector<std::vector<std::vector<Receive>>> order;
  // early[r][i]: receives rank r posts before action i waits for the sends of
  // action i − 1 (the action's own input is posted, when not yet, after).
  std::vector<std::vector<std::vector<Receive>>> early;
  // posted[r][i]: every receive newly posted by the time action i computes
  // (early, its own, and those before them from the same rank).
  std::vector<std::vector<std::vector<Receive>>> posted;
  // The early posts beyond the usual ones, that keep this order from hanging:
  // rank `rank` posts `message` before its action `action` (0-based).
  struct Mend {
    int rank = 0;
    size_t action = 0;
    Receive message;
  };
  std::vector<Mend> mended;
};
// Runs validate_schedule first.
ReceivePlan plan_receives(const Schedule& s);

// The names of the schedules below ("naive-mp", "gpipe", "1f1b",
// "interleaved", "zb-h1").
std::vector<std::string> schedule_names();
// A named schedule for P stages, M micro-batches and V chunks per rank
// (interleaved only; the others take V = 1). Throws ConfigError for an
// unknown name or sizes it cannot take (interleaved: M a multiple of P).
Schedule named_schedule(const std::string& name, int stages, int micro_batches, int chunks = 1);

// One rank's actions in step `step`, read off its spans (any lanes, any
// order): its forward and backward compute spans, a micro-batch's spans in a
// row (its layers) being one action, from the first's begin to the last's end.
// `chunk_of_layer` (chunk_of_layers in pipeline.h) names each layer's model
// chunk on this rank; empty: every layer is chunk 0.
struct Span;
struct TimedAction {
  Action action;
  int64_t begin = 0, end = 0;
};
std::vector<TimedAction> actions_in_spans(const std::vector<Span>& spans, int step,
                                          const std::vector<int>& chunk_of_layer = {});

// The order a pipeline run's stages really ran in step `step`, read off its
// recording: each rank's forward and backward spans of the first pipeline
// (its layers' spans of one micro-batch, in a row, are one action), with the
// run's P and M. Throws ConfigError for a run without a recording or steps.
struct RunResult;
Schedule recorded_schedule(const RunResult& run, int step);

// The schedule run on dedicated devices with unit costs (F 1, B 1 and W 1 when
// the backward is split, a whole B 2) and free transfers: the order's own
// bubble, the way the papers draw their figures.
struct UnitTiming {
  double makespan = 0;          // the step, in F units
  std::vector<double> busy;     // per rank
  std::vector<int> peak_alive;  // per rank: most micro-batch chunks between F and their last B or W
  std::vector<int> peak_unbacked;  // per rank: most between F and B (a split B's input gradient)
  // Idle ÷ computing on the busiest rank: (P−1)/M for 1f1b and gpipe.
  double bubble_over_compute() const;
  // Idle ÷ the step on rank `r`: (P−1)/(M+P−1) for 1f1b and gpipe.
  double bubble_share(int r) const;
};
// Runs validate_schedule first.
UnitTiming unit_timing(const Schedule& s);

// The named schedule a schedule is measured against, by its shape: chunks →
// interleaved's (P−1)/(V·M), a split backward → zb-h1's (P−1)/(3M), else
// 1f1b's and gpipe's (P−1)/M; idle ÷ compute, the papers' measure.
struct NearestFormula {
  std::string text;  // "zb-h1's (P-1)/(3M)"
  double value = 0;
};
NearestFormula nearest_formula(const Schedule& s);

}  // namespace shardlab
