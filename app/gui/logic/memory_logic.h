// What the memory panel draws: bytes by category over time as stacked columns
// (peak-preserving when zoomed out), the state at the playhead, the peak, and
// the hook for predicted model-state bytes.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/gui/logic/i18n.h"
#include "app/gui/logic/timeline_logic.h"
#include "core/predict/memory_estimate.h"
#include "core/record/memory_timeline.h"

namespace shardlab::gui {

using CategoryBytes = std::array<int64_t, kNumMemCategories>;
int64_t total(const CategoryBytes& b);

struct StackColumn {
  float x0 = 0, x1 = 0;
  CategoryBytes bytes{};  // the highest-total state inside the column
};

// One column per `col_px` pixels of the viewport. A column shows the state
// with the largest total inside it (or the state carried into it), so a short
// peak never disappears when zoomed out.
void memory_columns(const std::vector<CategorySample>& series, const Viewport& vp, float col_px,
                    std::vector<StackColumn>& out);

// The state in force at time t (after every event at or before t).
CategoryBytes bytes_at(const std::vector<CategorySample>& series, int64_t t);

struct Peak {
  int64_t t = 0;
  CategoryBytes bytes{};  // the breakdown at the moment of the peak total
};
Peak peak_of(const std::vector<CategorySample>& series);

// Predicted model-state bytes (params + grads + optimizer state) of `rank`,
// where core/parallel/model_state.h has a formula for the strategy, or (a gpt
// on a pipeline or mesh) Megatron's accounting of its stage; nullopt otherwise.
struct Predicted {
  int64_t model_state_bytes = 0;  // in memory
  std::string formula;            // "16Ψ", "4Ψ + 12Ψ/N", ...: ZeRO's, every home together
  bool on_host = false;           // offload: the states live in the host pool
  // --offload nvme:DIR: the part of `formula` whose home is the disk ("8Ψ/N"),
  // left out of model_state_bytes; "" without.
  std::string disk_formula;
};
std::optional<Predicted> predicted_model_state(const RunConfig& cfg, int rank);
// Its formula as the memory view shows it: "16Ψ/N", or "16Ψ/N − 8Ψ/N on disk".
std::string predicted_formula_text(const Predicted& p, const Tr& tr);

// On a mesh: what each axis divides of `rank`'s model states, axis by axis
// (bytes per parameter × parameters, as the ZeRO paper counts them): the whole
// model, then tp's slice of every layer, then pp's stage of that slice, then
// what ZeRO over dp keeps of it (a pipeline's dp replicas keep all of it:
// dp divides the batch). Axes of size 1 are left out; nullopt without a mesh.
struct AxisStep {
  MeshAxis axis = MeshAxis::dp;
  int size = 1;
  double bytes = 0;  // the rank's model states once this axis has divided them
};
struct AxisSavings {
  double whole = 0;  // the whole model's model states
  std::vector<AxisStep> steps;
};
std::optional<AxisSavings> axis_savings(const RunConfig& cfg, int rank);
// "model states of rank 0, axis by axis: whole model 2.29 MiB → tp=2 1.20 MiB → …".
std::string axis_savings_line(const AxisSavings& a, int rank, const Tr& tr = Tr{});

// The meta run's prediction of cfg's memory, as the check before every run
// makes it (core/predict/memory_estimate.h: the strategy's own code on devices
// that hold no memory); null where it cannot be made here (a GPU recording
// opened without a GPU). The last configuration's is kept: the views ask every frame.
std::shared_ptr<const MemoryEstimate> meta_prediction(const RunConfig& cfg);
// Its prediction of `rank`'s whole peak in one pool (host or device); nullopt without one.
std::optional<int64_t> meta_predicted_peak(const MemoryEstimate* e, int rank, bool host);

// gpt: what one transformer block keeps for backward, per Korthikanti et al.
// 2022 without dropout (core/parallel/model_state.h), for the rows one forward sees
// (the batch, a rank's slice, a pipeline's micro-batch), as short lines for
// the panel's side of `rank`: "2 blocks × 578.0 KiB", "2·sbh(32+2as/h)+LN",
// "Korthikanti, no dropout", "b=4 sequences" (--attention flash: "2·sbh·32+LN+lse",
// no a·s² term, the logsumexp instead). A pipeline stage counts only its
// own blocks; one with none (the embedding's, the head's) gets one line.
// The words in `tr`'s language.
std::vector<std::string> block_activation_lines(const RunConfig& cfg, int rank,
                                                const Tr& tr = Tr{});

}  // namespace shardlab::gui
