// Memory stacks and samples (see memory_logic.h).
#include "app/gui/logic/memory_logic.h"
#include "app/gui/logic/format.h"
#include "core/parallel/strategy.h"

#include <algorithm>
#include <mutex>

#include "app/lesson/lesson.h"
#include "core/model/model.h"
#include "core/parallel/model_state.h"
#include "core/parallel/pipeline.h"
#include "core/predict/memory_estimate.h"
#include "core/predict/mesh_estimate.h"

namespace shardlab::gui {

int64_t total(const CategoryBytes& b) {
  int64_t t = 0;
  for (int64_t v : b) t += v;
  return t;
}

namespace {
// Index of the last sample at or before t, or -1.
long last_at_or_before(const std::vector<CategorySample>& s, double t) {
  const auto it = std::upper_bound(s.begin(), s.end(), t,
                                   [](double v, const CategorySample& c) { return v < c.t_ns; });
  return static_cast<long>(it - s.begin()) - 1;
}
}  // namespace

void memory_columns(const std::vector<CategorySample>& series, const Viewport& vp, float col_px,
                    std::vector<StackColumn>& out) {
  if (series.empty() || col_px <= 0) return;
  const int n = std::max(1, static_cast<int>(vp.width / col_px));
  long k = last_at_or_before(series, vp.t_begin);
  for (int c = 0; c < n; ++c) {
    const float x0 = vp.x0 + c * col_px, x1 = std::min(vp.x0 + vp.width, x0 + col_px);
    const double tb = vp.t_of(x1);
    StackColumn col{x0, x1, {}};
    int64_t best = -1;
    if (k >= 0) {
      col.bytes = series[k].bytes;  // carried in from the left
      best = total(col.bytes);
    }
    // Every sample that lands in this column competes for the peak.
    while (k + 1 < static_cast<long>(series.size()) && series[k + 1].t_ns < tb) {
      ++k;
      const int64_t t = total(series[k].bytes);
      if (t > best) {
        best = t;
        col.bytes = series[k].bytes;
      }
    }
    if (series.front().t_ns >= tb) continue;  // nothing allocated yet
    out.push_back(col);
  }
}

CategoryBytes bytes_at(const std::vector<CategorySample>& series, int64_t t) {
  const long k = last_at_or_before(series, static_cast<double>(t));
  return k >= 0 ? series[k].bytes : CategoryBytes{};
}

Peak peak_of(const std::vector<CategorySample>& series) {
  Peak p;
  int64_t best = -1;
  for (const CategorySample& s : series)
    if (total(s.bytes) > best) {
      best = total(s.bytes);
      p.t = s.t_ns;
      p.bytes = s.bytes;
    }
  return p;
}

// A value worked out once per configuration: everything that decides it is
// on the command line that reproduces the run. Null when working it out threw
// (settings a run would refuse, a device this machine lacks).
template <typename T>
class PerConfiguration {
 public:
  template <typename Make>
  std::shared_ptr<const T> get(const RunConfig& cfg, Make make) {
    const std::string key = lesson::command_line(cfg);
    std::lock_guard<std::mutex> lock(mu_);
    if (key != key_) {
      key_ = key;
      value_.reset();
      try {
        value_ = std::make_shared<const T>(make(cfg));
      } catch (const std::exception&) {
        // No prediction.
      }
    }
    return value_;
  }

 private:
  std::mutex mu_;
  std::string key_;
  std::shared_ptr<const T> value_;
};

// The formulas live with the strategies' accounting (core/parallel/model_state.h); the
// GUI carries no copy of them, so the marker can never disagree with
// `shardlab estimate`.
std::optional<Predicted> predicted_model_state(const RunConfig& cfg, int rank) {
  try {
    // A gpt on a pipeline or a mesh: Megatron's accounting of the rank's
    // stage (core/predict/mesh_estimate.h), worked out once per configuration.
    const bool gpt = cfg.model.rfind("gpt:", 0) == 0;  // i18n: not shown
    if (is_pipeline_strategy(cfg.strategy) && gpt) {
      static PerConfiguration<MeshEstimate> cache;
      const std::shared_ptr<const MeshEstimate> e = cache.get(cfg, estimate_mesh);
      if (!e || rank < 0 || rank >= cfg.world) return std::nullopt;
      const MeshStageEstimate& g = e->stages.at(static_cast<size_t>(pipeline_stage_of(cfg, rank)));
      return Predicted{static_cast<int64_t>(g.model_states.total() + 0.5), g.model_states.formula,
                       false, ""};
    }
    if (!has_model_state_prediction(cfg.strategy)) return std::nullopt;
    const double params = static_cast<double>(make_layout(cfg).total());
    const ModelStateBytes b = predict_model_state(model_state_input(cfg, params), rank);
    // --offload nvme:DIR: what stays in memory is the rest; the formula says what went.
    return Predicted{static_cast<int64_t>(b.total() - b.on_disk + 0.5), b.formula, b.on_host,
                     b.disk_formula};
  } catch (const std::exception&) {
    return std::nullopt;  // settings the formula does not cover
  }
}

std::string predicted_formula_text(const Predicted& p, const Tr& tr) {
  if (p.disk_formula.empty()) return p.formula;
  return strf(tr("%s − %s on disk"), p.formula.c_str(), p.disk_formula.c_str());
}

std::shared_ptr<const MemoryEstimate> meta_prediction(const RunConfig& cfg) {
  static PerConfiguration<MemoryEstimate> cache;
  return cache.get(cfg, [](const RunConfig& c) { return estimate_memory(c); });
}

std::optional<AxisSavings> axis_savings(const RunConfig& cfg, int rank) {
  if (cfg.mesh.empty() || rank < 0 || rank >= cfg.world) return std::nullopt;
  try {
    const Mesh mesh = run_mesh(cfg);
    const BytesPerParam b = bytes_per_param(cfg.precision, cfg.optimizer.kind);
    const double per_param = b.params + b.grads + b.optimizer;
    const ModelLayout whole = make_layout(cfg);
    AxisSavings out;
    out.whole = per_param * static_cast<double>(whole.total());
    const int tp = mesh.size(MeshAxis::tp), pp = mesh.size(MeshAxis::pp);
    const ModelLayout slice =
        tp > 1 ? ModelLayout(whole.spec(), TensorSlice{tp, mesh.coord(rank, MeshAxis::tp)}) : whole;
    double params = static_cast<double>(slice.total());
    if (tp > 1) out.steps.push_back({MeshAxis::tp, tp, per_param * params});
    if (pp > 1) {
      // The rank's layers: one stage's, or (interleaved) its chunks'.
      const std::vector<int> chunk = chunk_of_layers(cfg, rank);
      params = 0;
      for (int l = 0; l < static_cast<int>(chunk.size()); ++l)
        if (chunk[l] >= 0)
          params += static_cast<double>(slice.layer_begin(l + 1) - slice.layer_begin(l));
      out.steps.push_back({MeshAxis::pp, pp, per_param * params});
    }
    if (const int dp = mesh.size(MeshAxis::dp); dp > 1) {
      // What the strategy's accounting says the rank keeps (ZeRO over dp, or a
      // pipeline's whole stage).
      const std::optional<Predicted> kept = predicted_model_state(cfg, rank);
      out.steps.push_back(
          {MeshAxis::dp, dp,
           kept ? static_cast<double>(kept->model_state_bytes) : per_param * params});
    }
    return out;
  } catch (const std::exception&) {
    return std::nullopt;  // settings a run would refuse
  }
}

std::string axis_savings_line(const AxisSavings& a, int rank, const Tr& tr) {
  std::string line = strf(tr("model states of rank %d, axis by axis: whole model %s"), rank,
                          format_bytes(a.whole).c_str());
  double before = a.whole;
  for (const AxisStep& s : a.steps) {
    // i18n: symbols, as in Chinese
    line +=
        strf(" \xE2\x86\x92 %s=%d %s", to_string(s.axis), s.size, format_bytes(s.bytes).c_str());
    if (s.axis == MeshAxis::dp && s.bytes == before)
      line += tr(" (dp divides the batch, not the states)");
    before = s.bytes;
  }
  return line;
}

std::optional<int64_t> meta_predicted_peak(const MemoryEstimate* e, int rank, bool host) {
  if (!e || rank < 0 || rank >= static_cast<int>(e->ranks.size())) return std::nullopt;
  return e->ranks[rank].at_report.pool(host ? Pool::host : Pool::device).peak_total;
}

std::vector<std::string> block_activation_lines(const RunConfig& cfg, int rank, const Tr& tr) {
  try {
    if (cfg.model.rfind("gpt:", 0) != 0) return {};  // i18n: not shown
    const ModelSpec spec = resolve_model(cfg);
    const StrategyInfo& info = strategy_info(cfg.strategy);
    const bool pipeline = info.has_stages();
    const int rows = info.rows_per_pass(cfg, rank);
    int blocks = spec.layers;
    if (pipeline) {
      const ModelLayout layout(spec);
      if (rank < 0 || rank >= cfg.world) return {};
      const std::vector<int> chunk = chunk_of_layers(cfg, rank);
      blocks = 0;
      for (int l = 0; l < static_cast<int>(chunk.size()); ++l)
        blocks += chunk[l] >= 0 && layout.layers()[l].kind == "block";
      if (blocks == 0) return {tr("no transformer block here")};
    }
    // Tensor (and sequence) parallelism: the slice's share (Korthikanti §4.2).
    const int tp = tensor_parallel_degree(cfg);
    const bool sp = tp > 1 && spec.sequence_parallel;
    const BlockActivations b =
        // i18n: not shown (a dtype)
        block_activations(spec.seq, rows, spec.dim, spec.heads, pipeline ? "fp32" : cfg.precision,
                          spec.flash_attention, tp, sp);
    const bool fp32 = b.formula.rfind("2 ×", 0) == 0;
    const bool flash = spec.flash_attention;
    const std::string t = std::to_string(tp);
    // i18n: not shown (formulas, the same in Chinese); flash keeps a logsumexp, no a·s² term
    const std::string terms =
        tp == 1 ? (flash ? std::string("sbh\xC2\xB7") + "32+LN+lse" : "sbh(32+2as/h)+LN")
        : sp    ? (flash ? "sbh\xC2\xB7"
                           "32/" +
                            t + "+LN+lse"
                         : "sbh(32+2as/h)/" + t + "+LN")
                : (flash ? "sbh(8+24/" + t + ")+LN+lse" : "sbh(8+24/" + t + "+2as/ht)+LN");
    return {strf(blocks == 1 ? tr("%d block \xC3\x97 %s") : tr("%d blocks \xC3\x97 %s"), blocks,
                 format_bytes(b.total()).c_str()),
            std::string(fp32 ? "2\xC2\xB7" : "") + terms,
            flash ? tr("Korthikanti, no dropout, flash") : tr("Korthikanti, no dropout"),
            strf(pipeline ? tr("b=%d per micro-batch") : tr("b=%d sequences"), rows)};
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace shardlab::gui
