// Pipeline numbers measured from a finished run, beside their formulas: the
// bubble (idle share of the compute lane) per rank, the peak activation memory
// per stage against the micro-batches expected in flight, and the schedule
// order (F/B per micro-batch) each stage really ran.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/parallel/run_result.h"
#include "core/record/recorder.h"

namespace shardlab {

// Measured bubble share per rank, for any strategy. For step s, the window is
// the whole step across the group: from the first compute-lane span any rank
// begins in s to the last one any rank ends (a pipeline flush ends only when
// every stage is done, so that is the step time the formula divides by).
// A rank's bubble in step s = 1 − (its compute-lane busy time inside the window)
// / window, busy time being the union of its compute-lane spans (forward,
// backward, loss, optimizer, data…). Averaged over steps 1.., leaving out
// step 0 (first-touch allocations, cold caches) unless it is the only step.
// Work a strategy does not record as a span counts as idle. One value per
// rank; 0 for a rank without recorded compute spans (e.g. --no-record).
std::vector<double> bubble_share_per_rank(const RunResult& r);

// The textbook bubble of a flushed pipeline with equal stages: (P−1)/(M+P−1).
double bubble_formula(int stages, int micro_batches);
// The bubble of the run's own schedule on equal stages, as the papers count
// it: unit costs (F 1, B 2; a split backward's B 1 and W 1), the busiest
// stage's idle share of the step. (P−1)/(M+P−1) for gpipe and 1f1b, (P−1)/P
// for naive-mp, (P−1)/(3M+P−1) for zb-h1 (StrategyInfo::bubble_formula
// writes each); a --schedule file's own; bubble_formula(P, M) for a pipeline
// without a schedule.
double schedule_bubble_formula(const RunResult& r);

// Micro-batches per batch the run's schedule really uses: --micro-batches for a
// strategy that reads it, 1 for one that runs the whole batch at once (naive-mp).
int micro_batches_run(const RunConfig& cfg);

// Micro-batches whose activations a stage holds at once: M for gpipe, P − rank
// for 1f1b (at most M), 1 for naive-mp. With --recompute these are stage
// inputs only, plus one micro-batch's layer activations while it is recomputed.
int expected_in_flight(const RunConfig& cfg, int rank);

// Activation bytes one micro-batch keeps on a stage (interleaved: on its first
// chunk) until its backward: its
// input, and each layer's output and pre-GELU values (rows × D floats each);
// under +bn also each BatchNorm's xhat (rows × D) and invstd (D floats).
int64_t micro_batch_activation_bytes(const RunConfig& cfg, int rank);
// Bytes of one micro-batch's stage input.
int64_t stage_input_bytes(const RunConfig& cfg, int rank);
// The peak activation bytes this implementation should reach on a stage,
// walking the rank's line: each micro-batch (chunk) keeps its activations from
// its F to its B (its W when split, what B alone leaves), and an input whose
// receive is posted early (plan_receives) from then; with --recompute only the
// stage inputs, plus the larger of one micro-batch's recomputed activations and
// the transient of a forward that frees as it goes.
int64_t predicted_peak_activation_bytes(const RunConfig& cfg, int rank);

struct StageReport {
  int rank = 0;                         // the first pipeline's rank of this stage
  int stage = 0;                        // its place in the pipeline (= rank, but on a mesh)
  int first_layer = 0, last_layer = 0;  // [first, last) of its first chunk
  std::string layers;                   // every chunk's: "0-1", interleaved "0-1,4-5"
  double bubble_measured = 0;
  double bubble_formula = 0;
  int64_t peak_activation_bytes = 0;  // measured by the rank's allocator
  int64_t predicted_peak_activation_bytes = 0;
  int64_t micro_batch_activation_bytes = 0;
  int in_flight_expected = 0;
};
// One row per stage; empty for a run that is not a pipeline strategy.
std::vector<StageReport> pipeline_stage_reports(const RunResult& r);

// The order a stage ran its micro-batches in step `step`, from its compute
// spans: "F3" when the forward of micro-batch 3 starts on its first layer,
// "R3" when it runs again there (recompute), "B3" when the backward starts on
// its last layer. Times are not compared, only the order.
std::vector<std::string> schedule_order(const Recorder::Snapshot& snap, int step, int first_layer,
                                        int last_layer);

}  // namespace shardlab
