// The compare view without ImGui: configurations (their list syntax, and how each
// is built from the run bar's settings with only the options its strategy uses),
// the table's rows and CSV, and memory over time aligned by training step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "app/gui/logic/i18n.h"
#include "app/gui/logic/run_data.h"
#include "core/run/runner.h"
#include "core/run_options.h"

namespace shardlab::gui {

// As many configurations as the compare panel shows side by side.
inline constexpr int kMaxCompare = 6;

// One configuration of a comparison: what may differ between configurations.
// The model, batch, steps, optimizer, seed and device are the run bar's.
struct CompareSlot {
  std::string strategy = "ddp";  // i18n: not shown (a strategy name)
  int world = 2;
  // The strategy options (core/run_options.h) the configuration sets, those with
  // a compare key; only the ones its strategy reads count (config_for), and a
  // strategy chosen later that reads one takes it over.
  RunConfig options{};
  // Same strategy, world and value of every option a compare item can set.
  bool operator==(const CompareSlot& o) const;
};

// `strategy` at `world` (0: the base's world; `single` is always 1) with the
// base's value of every option that strategy uses and the defaults elsewhere.
CompareSlot slot_from(const RunConfig& base, const std::string& strategy, int world = 0);
// The base's common settings (model, batch, steps, optimizer, seed, device ...)
// with the slot's strategy, world and the options that strategy uses; every
// other option keeps RunConfig's default, so a ddp configuration never carries
// a pipeline's --micro-batches.
RunConfig config_for(const CompareSlot& slot, const RunConfig& base);

// The list syntax, one item per configuration:  STRATEGY[:W][/OPTION]...
// options, one per row of core/run_options.h with a compare key: m=N
// (micro-batches), stages=N, bf16 | fp16 | fp32, recompute, no-prefetch,
// no-overlap, bucket-mb=X, fsdp-unit=N, no-reshard, offload (a flag's opposite,
// "prefetch", "no-offload", puts its default back), offload-params, and
// offload=nvme:DIR, written last: its value runs to the end of the item.
// E.g. "naive-mp:4,gpipe:4/m=8,1f1b:4/m=8" or "ddp:4,zero3:4/no-prefetch,fsdp:4/bf16".
std::string slot_text(const CompareSlot& s);  // the item that gives back `s`
// Throws ConfigError naming the item: bad syntax, an unknown strategy or option,
// an option the strategy does not use, or settings validate() refuses.
CompareSlot parse_compare_item(const std::string& item, const RunConfig& base);
std::vector<CompareSlot> parse_compare_slots(const std::string& list, const RunConfig& base);
std::vector<RunConfig> parse_compare_list(const std::string& list, const RunConfig& base);
// What the selector starts with when no list is given (at most kMaxCompare,
// each valid): the base's own configuration, then a teaching order at the
// base's world — for a pipeline base naive-mp, gpipe, 1f1b, ddp, zero3, fsdp;
// otherwise ddp, zero1, zero3, fsdp, gpipe, 1f1b, zero2, dp, naive-mp, single.
// Pipelines keep the base's --micro-batches when it is above 1, else 2 per stage.
std::vector<CompareSlot> default_compare_slots(const RunConfig& base);
std::vector<RunConfig> default_compare_configs(const RunConfig& base);

// "gpipe ×4 M=8 recompute", "ddp ×2", "zero3 ×4 no-prefetch bf16", "single ×1 flash
// attention" (the option words in `tr`'s language; the CSV's configuration column is English).
std::string config_label(const RunConfig& c, const Tr& tr = Tr{});
// The same, plus " processes" for a finished run whose ranks were processes
// (a lesson's `processes = true`: it measured clock offsets), so threads and
// processes of one configuration tell apart.
std::string run_label(const RunConfig& c, const RunResult* r, const Tr& tr = Tr{});

struct CompareRow {
  std::string label;  // config_label
  std::string strategy;
  int world = 0;
  int micro_batches = 0;  // 0 where the strategy has none
  int stages = 0;         // 0 where it is not a pipeline
  std::string precision;
  double median_step_ms = 0;
  std::vector<int64_t> peak_bytes;  // per rank, device pool, peak of the total
  double sent_bytes_per_step = 0;   // the busiest rank's
  // Idle share (every strategy): per rank, the part of each step in which its
  // compute lane runs nothing (core/predict/pipeline_analysis.h bubble_share_per_rank),
  // averaged over steps 1.. and then over ranks.
  std::vector<double> idle_per_rank;
  double idle_share = 0;
  // Pipelines only: that idle time is the bubble; beside it the textbook (P−1)/(M+P−1).
  bool pipeline = false;
  double bubble_formula = 0;
  double final_loss = 0;
  // As on one dedicated device per rank joined by kCompareLink (core/predict):
  // what the step would take without ranks sharing cores, mean bubble and
  // exposed-communication shares over the ranks. `projection_error` says why
  // there is none (a run made with --no-record, an old recording).
  bool projected = false;
  double projected_step_ms = 0;
  double projected_bubble = 0;
  double projected_exposed = 0;
  // Other rows of the same work (same_work: they differ only in when they
  // communicate) whose op costs were pooled with this row's.
  int projected_pooled = 0;
  std::string projection_error;
  // How far the final weights ended from those of a `single` row of the same
  // training (weight_diff_to), -1 where no such row is in the table.
  double weight_diff_to_single = -1;
};

// Max |w - w_single| over the trained parameters of two finished runs of the
// same training (model, seed, batch, steps, optimizer): how far `r` ended
// from the one-device run. BatchNorm's running statistics are left out, as in
// the weight_diff_to_single metric (a pipeline updates them once per
// micro-batch by design). -1 where the runs train differently or either lacks
// final weights (a run opened from a trace). Precisions may differ: the
// distance then includes the 2-byte type's.
double weight_diff_to(const RunResult& r, const RunResult& single);

// The link the compare table projects onto: one node of H100s.
inline constexpr const char* kCompareLink = "nvlink-h100";  // i18n: not shown (a link name)

CompareRow compare_row(const RunResult& r);
// The row's "as on N devices" columns, projected with op costs pooled with
// `pool` (runs of the same work); an error is kept in projection_error.
void set_projection(CompareRow& row, const RunResult& r, const std::vector<const RunResult*>& pool);
// Columns: strategy, world, median_step_ms, peak_mem_bytes_rank<i>..., sent_bytes_per_step,
// idle_share, bubble_share and bubble_formula (both empty for non-pipelines),
// final_loss, configuration (the label), micro_batches, stages, precision, then the
// projection: projected_step_ms, projected_bubble_share, projected_exposed_share (empty
// when there is none), and weight_diff_to_single (empty without a single row).
std::string compare_csv(const std::vector<CompareRow>& rows);
// The idle share's definition: in full (the column's tooltip), and in one line
// (under the table).
const char* idle_share_definition(const Tr& tr = Tr{});
const char* idle_share_short_definition(const Tr& tr = Tr{});

// Memory over time on one axis for several runs, aligned by training step:
// x = step index + the fraction of that step elapsed, so step k starts at x = k
// in every run however long its steps take.
//
// Where each step begins, and after the last step where it ends: step s covers
// [bounds[s], bounds[s + 1]). Empty when no step has been recorded.
std::vector<int64_t> step_bounds(const RunData& d);
// Time -> step position; clamped to [0, steps] outside the steps.
double step_position(const std::vector<int64_t>& bounds, int64_t t);

inline constexpr int kMemorySum = -2;      // every rank's bytes added up
inline constexpr int kMemoryBusiest = -1;  // the rank with the highest peak
int busiest_rank(const RunData& d);        // device pool, -1 when there are no ranks

struct MemoryPoint {
  double x = 0;       // step position
  int64_t bytes = 0;  // device bytes in use from here to the next point
};
// Device bytes (all categories) of `rank` (or kMemoryBusiest / kMemorySum) as
// a step function over steps [first_step, last_step], measured from the
// allocator events: the state in force when first_step begins, then one point
// per change. Empty when the rank or the steps do not exist.
std::vector<MemoryPoint> memory_by_step(const RunData& d, int rank, int first_step, int last_step);
// The same with step_bounds(d) computed once by the caller (it reads every span).
std::vector<MemoryPoint> memory_by_step(const RunData& d, const std::vector<int64_t>& bounds,
                                        int rank, int first_step, int last_step);
// The bytes in force at step position x (the last point at or before x).
int64_t bytes_at_position(const std::vector<MemoryPoint>& curve, double x);

}  // namespace shardlab::gui
