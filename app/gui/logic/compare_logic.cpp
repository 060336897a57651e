// Compare configurations, rows and memory curves (see compare_logic.h).
#include "app/gui/logic/compare_logic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "app/gui/logic/memory_logic.h"
#include "core/pipeline_analysis.h"
#include "core/predict/projection.h"
#include "core/strategy.h"

namespace shardlab::gui {

namespace {

// The options' names in the --compare list syntax, for its errors (English, as
// the command line's).
const char* option_name(SlotOption o) {
  switch (o) {
    case SlotOption::micro_batches:
      return "micro-batches (m=N)";  // i18n: not shown
    case SlotOption::stages:
      return "stages=N";  // i18n: not shown
    case SlotOption::precision:
      return "precision (bf16, fp16)";  // i18n: not shown
    case SlotOption::recompute:
      return "recompute";  // i18n: not shown
    case SlotOption::prefetch:
      return "no-prefetch";  // i18n: not shown
    case SlotOption::overlap:
      return "no-overlap";  // i18n: not shown
    case SlotOption::bucket_mb:
      return "bucket-mb=X";  // i18n: not shown
    case SlotOption::fsdp_unit:
      return "fsdp-unit=K";  // i18n: not shown
    case SlotOption::reshard:
      return "no-reshard";  // i18n: not shown
    case SlotOption::offload:
      return "offload";  // i18n: not shown
  }
  return "?";
}

// i18n: not shown (the command line's errors)
const char* kValidOptions =
    "m=N, stages=N, bf16, fp16, fp32, recompute, no-prefetch, no-overlap, bucket-mb=X, "
    "fsdp-unit=K, no-reshard, offload";
const char* kListExample = "e.g. naive-mp:4,gpipe:4/m=8,1f1b:4/m=8";  // i18n: not shown

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

bool parse_int(const std::string& s, long lo, long hi, int& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (*end != '\0' || v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

int stages_of(const CompareSlot& s) {
  return s.stages > 0 ? s.stages : s.world;
}

}  // namespace

bool strategy_uses(const std::string& strategy, SlotOption o) {
  // The strategy's registration says what it reads (core/strategy.h): one source
  // of truth for validation, the run bar and these slots.
  const StrategyInfo* info = find_strategy(strategy);
  if (!info) return false;
  switch (o) {
    case SlotOption::micro_batches:
      return info->reads_option(StrategyOption::micro_batches);
    case SlotOption::recompute:
      return info->reads_option(StrategyOption::recompute);
    case SlotOption::stages:
      return info->reads_option(StrategyOption::stages);
    case SlotOption::precision:
      return info->reads_option(StrategyOption::precision);
    case SlotOption::prefetch:
      return info->reads_option(StrategyOption::no_prefetch);
    case SlotOption::overlap:
      return info->reads_option(StrategyOption::no_overlap);
    case SlotOption::bucket_mb:
      return info->reads_option(StrategyOption::bucket_mb);
    case SlotOption::fsdp_unit:
      return info->reads_option(StrategyOption::fsdp_unit);
    case SlotOption::reshard:
      return info->reads_option(StrategyOption::no_reshard);
    case SlotOption::offload:
      return info->reads_option(StrategyOption::offload);
  }
  return false;
}

std::string strategies_using(SlotOption o) {
  std::string s;
  for (const StrategyInfo& i : all_strategies())
    if (strategy_uses(i.name, o)) s += (s.empty() ? "" : ", ") + i.name;
  return s;
}

CompareSlot slot_from(const RunConfig& base, const std::string& strategy, int world) {
  const RunConfig d;
  const auto pick = [&](SlotOption o, auto base_value, auto default_value) {
    return strategy_uses(strategy, o) ? base_value : default_value;
  };
  CompareSlot s;
  s.strategy = strategy;
  const StrategyInfo* info = find_strategy(strategy);
  const int asked = world > 0 ? world : base.world;
  s.world = info ? info->world_for(asked) : asked;
  s.micro_batches = pick(SlotOption::micro_batches, base.micro_batches, d.micro_batches);
  // --stages is one per rank in this build; a base's count only fits its own world.
  s.stages =
      strategy_uses(strategy, SlotOption::stages) && base.stages == s.world ? base.stages : 0;
  s.precision = pick(SlotOption::precision, base.precision, d.precision);
  s.recompute = pick(SlotOption::recompute, base.recompute, d.recompute);
  s.prefetch = pick(SlotOption::prefetch, base.prefetch, d.prefetch);
  s.overlap = pick(SlotOption::overlap, base.overlap, d.overlap);
  s.bucket_mb = pick(SlotOption::bucket_mb, base.bucket_mb, d.bucket_mb);
  s.fsdp_unit = pick(SlotOption::fsdp_unit, base.fsdp_unit, d.fsdp_unit);
  s.reshard = pick(SlotOption::reshard, base.reshard_after_forward, d.reshard_after_forward);
  s.offload = pick(SlotOption::offload, base.offload, d.offload);
  return s;
}

RunConfig config_for(const CompareSlot& slot, const RunConfig& base) {
  const RunConfig d;
  RunConfig c = base;
  c.strategy = slot.strategy;
  c.world = slot.world;
  const auto set = [&](SlotOption o, auto& field, auto slot_value, auto default_value) {
    field = strategy_uses(slot.strategy, o) ? slot_value : default_value;
  };
  set(SlotOption::micro_batches, c.micro_batches, slot.micro_batches, d.micro_batches);
  set(SlotOption::stages, c.stages, slot.stages, d.stages);
  set(SlotOption::precision, c.precision, slot.precision, d.precision);
  set(SlotOption::recompute, c.recompute, slot.recompute, d.recompute);
  set(SlotOption::prefetch, c.prefetch, slot.prefetch, d.prefetch);
  set(SlotOption::overlap, c.overlap, slot.overlap, d.overlap);
  set(SlotOption::bucket_mb, c.bucket_mb, slot.bucket_mb, d.bucket_mb);
  set(SlotOption::fsdp_unit, c.fsdp_unit, slot.fsdp_unit, d.fsdp_unit);
  set(SlotOption::reshard, c.reshard_after_forward, slot.reshard, d.reshard_after_forward);
  set(SlotOption::offload, c.offload, slot.offload, d.offload);
  // The run bar's --partition applies to the pipelines with as many stages as it has entries.
  if (!is_pipeline_strategy(slot.strategy) ||
      static_cast<int>(base.partition.size()) != stages_of(slot))
    c.partition.clear();
  return c;
}

// The list syntax: command-line words, the same in every language.
std::string slot_text(const CompareSlot& s) {
  const CompareSlot d;
  std::string t = s.strategy + ":" + std::to_string(s.world);
  const auto uses = [&](SlotOption o) { return strategy_uses(s.strategy, o); };
  if (uses(SlotOption::micro_batches) && s.micro_batches != 1)
    t += "/m=" + std::to_string(s.micro_batches);
  if (uses(SlotOption::stages) && s.stages != 0)
    t += "/stages=" + std::to_string(s.stages);  // i18n: not shown
  if (uses(SlotOption::precision) && s.precision != d.precision) t += "/" + s.precision;
  if (uses(SlotOption::recompute) && s.recompute) t += "/recompute";   // i18n: not shown
  if (uses(SlotOption::prefetch) && !s.prefetch) t += "/no-prefetch";  // i18n: not shown
  if (uses(SlotOption::overlap) && !s.overlap) t += "/no-overlap";     // i18n: not shown
  if (uses(SlotOption::bucket_mb) && s.bucket_mb != d.bucket_mb)
    t += "/bucket-mb=" + number(s.bucket_mb);  // i18n: not shown
  if (uses(SlotOption::fsdp_unit) && s.fsdp_unit != d.fsdp_unit)
    t += "/fsdp-unit=" + std::to_string(s.fsdp_unit);               // i18n: not shown
  if (uses(SlotOption::reshard) && !s.reshard) t += "/no-reshard";  // i18n: not shown
  if (uses(SlotOption::offload) && s.offload) t += "/offload";      // i18n: not shown
  return t;
}

CompareSlot parse_compare_item(const std::string& raw, const RunConfig& base) {
  const std::string item = trim(raw);
  const std::string where = "--compare item '" + item + "': ";  // i18n: not shown (errors)
  if (item.empty())
    throw ConfigError(
        std::string("--compare has an empty item (valid: STRATEGY[:W][/OPTION]..., ") +
        kListExample + ")");
  std::vector<std::string> parts;
  {
    std::stringstream ss(item);
    std::string p;
    while (std::getline(ss, p, '/')) parts.push_back(trim(p));
    if (item.back() == '/') parts.push_back("");
  }
  const std::string head = parts[0];
  const size_t colon = head.find(':');
  const std::string strategy = head.substr(0, colon);
  if (!find_strategy(strategy))
    throw ConfigError(where + "unknown strategy '" + strategy + "' (valid: " + strategy_names() +
                      ")");
  int world = 0;
  if (colon != std::string::npos) {
    const std::string w = head.substr(colon + 1);
    if (!parse_int(w, 1, 64, world))
      throw ConfigError(where + "world '" + w + "' is invalid (valid: 1 to 64, e.g. " + strategy +
                        ":4)");
  }
  CompareSlot s = slot_from(base, strategy, world);
  if (world > 0) s.world = world;  // `single:2` is refused by validate() below, not rewritten

  std::set<SlotOption> seen;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    const size_t eq = p.find('=');
    const std::string key = p.substr(0, eq),
                      value = eq == std::string::npos ? "" : p.substr(eq + 1);
    const bool has_value = eq != std::string::npos;
    SlotOption o = SlotOption::micro_batches;
    bool ok = true;
    if ((key == "m" || key == "micro-batches") && has_value) {
      o = SlotOption::micro_batches;
      ok = parse_int(value, 1, 1 << 20, s.micro_batches);
    } else if (key == "stages" && has_value) {
      o = SlotOption::stages;
      // As --stages: 0 would read as "not given", so it is no stage count.
      ok = parse_int(value, 1, 64, s.stages);
    } else if ((key == "bf16" || key == "fp16" || key == "fp32") && !has_value) {
      o = SlotOption::precision;
      s.precision = key;
    } else if (key == "precision" && has_value) {
      o = SlotOption::precision;
      ok = value == "bf16" || value == "fp16" || value == "fp32";
      s.precision = value;
    } else if ((key == "recompute" || key == "no-recompute") && !has_value) {
      o = SlotOption::recompute;
      s.recompute = key == "recompute";
    } else if ((key == "prefetch" || key == "no-prefetch") && !has_value) {
      o = SlotOption::prefetch;
      s.prefetch = key == "prefetch";
    } else if ((key == "overlap" || key == "no-overlap") && !has_value) {
      o = SlotOption::overlap;
      s.overlap = key == "overlap";
    } else if ((key == "reshard" || key == "no-reshard") && !has_value) {
      o = SlotOption::reshard;
      s.reshard = key == "reshard";
    } else if ((key == "offload" || key == "no-offload") && !has_value) {
      o = SlotOption::offload;
      s.offload = key == "offload";
    } else if (key == "bucket-mb" && has_value) {
      o = SlotOption::bucket_mb;
      char* end = nullptr;
      s.bucket_mb = std::strtod(value.c_str(), &end);
      ok = !value.empty() && *end == '\0' && s.bucket_mb > 0 && std::isfinite(s.bucket_mb);
    } else if ((key == "fsdp-unit" || key == "unit") && has_value) {
      o = SlotOption::fsdp_unit;
      ok = parse_int(value, 1, 1 << 20, s.fsdp_unit);
    } else {
      throw ConfigError(where + "unknown option '" + p + "' (valid: " + kValidOptions + ")");
    }
    if (!ok) {
      // i18n: not shown (the command line's error)
      const std::string stages = "stages=" + std::to_string(stages_of(s)) + ", one per rank";
      throw ConfigError(where + "'" + p + "' is invalid (valid: " +
                        (o == SlotOption::precision ? std::string("bf16, fp16 or fp32")
                         : o == SlotOption::stages  ? stages
                         : o == SlotOption::bucket_mb
                             ? std::string("a positive number of MiB, e.g. bucket-mb=4")
                             : std::string("a whole number, e.g. m=8")) +
                        ")");
    }
    if (!strategy_uses(strategy, o))
      throw ConfigError(where + "'" + p + "' does not apply to " + strategy + " (" +
                        option_name(o) + " is for: " + strategies_using(o) + ")");
    if (!seen.insert(o).second)
      throw ConfigError(where + "'" + p + "' sets " + option_name(o) + " a second time");
  }
  try {
    validate(config_for(s, base));
  } catch (const ConfigError& e) {
    throw ConfigError(where + e.what());
  }
  return s;
}

std::vector<CompareSlot> parse_compare_slots(const std::string& list, const RunConfig& base) {
  std::vector<std::string> items;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) items.push_back(item);
  if (!list.empty() && list.back() == ',') items.push_back("");
  if (items.empty() || static_cast<int>(items.size()) > kMaxCompare)
    throw ConfigError("--compare '" + list + "' names " + std::to_string(items.size()) +
                      " configurations (valid: 1 to " + std::to_string(kMaxCompare) + ", " +
                      kListExample + ")");
  std::vector<CompareSlot> out;
  for (const std::string& i : items) out.push_back(parse_compare_item(i, base));
  return out;
}

std::vector<RunConfig> parse_compare_list(const std::string& list, const RunConfig& base) {
  std::vector<RunConfig> out;
  for (const CompareSlot& s : parse_compare_slots(list, base)) out.push_back(config_for(s, base));
  return out;
}

std::vector<CompareSlot> default_compare_slots(const RunConfig& base) {
  std::vector<CompareSlot> out;
  const auto add = [&](const CompareSlot& s) {
    if (static_cast<int>(out.size()) >= kMaxCompare) return;
    if (std::find(out.begin(), out.end(), s) != out.end()) return;
    try {
      validate(config_for(s, base));
      out.push_back(s);
    } catch (const ConfigError&) {
      // A configuration these settings cannot run is simply not proposed.
    }
  };
  if (find_strategy(base.strategy)) add(slot_from(base, base.strategy));
  const bool pipe = is_pipeline_strategy(base.strategy);
  const std::vector<std::string> order =
      // i18n: not shown (strategy names)
      pipe ? std::vector<std::string>{"naive-mp", "gpipe", "1f1b", "ddp", "zero3", "fsdp"}
           // i18n: not shown (strategy names)
           : std::vector<std::string>{"ddp",  "zero1", "zero3",    "fsdp",   "gpipe",
                                      "1f1b", "zero2", "naive-mp", "single", "dp"};
  for (const std::string& name : order) {
    if (!find_strategy(name)) continue;
    CompareSlot s = slot_from(base, name, base.world);
    // Without micro-batches of its own a pipeline would be naive-mp under another name.
    if (strategy_uses(name, SlotOption::micro_batches) && base.micro_batches == 1) {
      const int m = 2 * stages_of(s);
      if (m > 0 && base.batch % m == 0) s.micro_batches = m;
    }
    add(s);
  }
  return out;
}

std::vector<RunConfig> default_compare_configs(const RunConfig& base) {
  std::vector<RunConfig> out;
  for (const CompareSlot& s : default_compare_slots(base)) out.push_back(config_for(s, base));
  return out;
}

std::string config_label(const RunConfig& c, const Tr& tr) {
  const RunConfig d;
  std::string t = c.strategy + " \xC3\x97" + std::to_string(c.world);  // "ddp ×2"
  const auto uses = [&](SlotOption o) { return strategy_uses(c.strategy, o); };
  if (uses(SlotOption::micro_batches)) t += " M=" + std::to_string(c.micro_batches);
  if (uses(SlotOption::stages) && c.stages != 0 && c.stages != c.world)
    t += " P=" + std::to_string(c.stages);
  if (is_pipeline_strategy(c.strategy) && !c.partition.empty()) {
    t += " [";
    for (size_t i = 0; i < c.partition.size(); ++i) {
      if (i) t += ',';
      t += std::to_string(c.partition[i]);
    }
    t += "]";
  }
  if (uses(SlotOption::precision) && c.precision != d.precision) t += " " + c.precision;
  const auto add = [&](const std::string& word) { t += " " + word; };
  if (uses(SlotOption::recompute) && c.recompute) add(tr("recompute"));
  if (uses(SlotOption::prefetch) && !c.prefetch) add(tr("no-prefetch"));
  if (uses(SlotOption::overlap) && !c.overlap) add(tr("no-overlap"));
  if (uses(SlotOption::bucket_mb) && c.bucket_mb != d.bucket_mb)
    add(strf(tr("bucket %s MiB"), number(c.bucket_mb).c_str()));
  if (uses(SlotOption::fsdp_unit) && c.fsdp_unit != d.fsdp_unit)
    add(strf(tr("unit %d"), c.fsdp_unit));
  if (uses(SlotOption::reshard) && !c.reshard_after_forward) add(tr("no-reshard"));
  if (uses(SlotOption::offload) && c.offload) add(tr("offload"));
  // A model option, not a strategy's: named where it is not the CPU's naive default.
  if (c.attention == "flash") add(tr("flash attention"));
  return t;
}

const char* idle_share_definition(const Tr& tr) {
  return tr(
      "idle share: for each step, the window from the first compute span any rank begins to "
      "the last one any rank ends; a rank's idle share is the part of that window in which "
      "its compute lane runs nothing (waiting for communication or for other ranks), "
      "averaged over steps 1.. and then over ranks. In a pipeline that idle time is the "
      "bubble, shown beside the textbook (P-1)/(M+P-1).");
}

const char* idle_share_short_definition(const Tr& tr) {
  return tr(
      "idle share: the part of each step (first to last compute span over all ranks) in which "
      "a rank's compute lane runs nothing; mean over steps 1.. and ranks. In a pipeline it is "
      "the bubble.");
}

std::string run_label(const RunConfig& c, const RunResult* r, const Tr& tr) {
  const std::string label = config_label(c, tr);
  return r && !r->clock_offset_ns.empty() ? strf(tr("%s processes"), label.c_str()) : label;
}

double weight_diff_to(const RunResult& r, const RunResult& single) {
  const RunConfig &a = r.cfg, &b = single.cfg;
  const OptimizerConfig &oa = a.optimizer, &ob = b.optimizer;
  const bool same = a.model == b.model && a.seq == b.seq && a.data == b.data && a.seed == b.seed &&
                    a.batch == b.batch && a.steps == b.steps && oa.kind == ob.kind &&
                    oa.lr == ob.lr && oa.beta1 == ob.beta1 && oa.beta2 == ob.beta2 &&
                    oa.eps == ob.eps && oa.weight_decay == ob.weight_decay;
  if (!same || r.final_params.empty() || r.final_params.size() != single.final_params.size())
    return -1;
  const size_t params = std::min(make_layout(a).total(), r.final_params.size());
  double d = 0;
  for (size_t i = 0; i < params; ++i)
    d = std::max(d, std::abs(static_cast<double>(r.final_params[i]) -
                             static_cast<double>(single.final_params[i])));
  return d;
}

CompareRow compare_row(const RunResult& r) {
  CompareRow row;
  row.label = run_label(r.cfg, &r);
  row.strategy = r.cfg.strategy;
  row.world = r.cfg.world;
  row.precision = r.cfg.precision;
  row.median_step_ms = r.median_step_ms;
  for (const RankReport& rr : r.ranks) {
    row.peak_bytes.push_back(rr.memory.device.peak_total);
    row.sent_bytes_per_step = std::max(row.sent_bytes_per_step, rr.bytes_sent_per_step);
  }
  row.idle_per_rank = bubble_share_per_rank(r);
  double sum = 0;
  for (double v : row.idle_per_rank) sum += v;
  row.idle_share = row.idle_per_rank.empty() ? 0.0 : sum / row.idle_per_rank.size();
  row.pipeline = is_pipeline_strategy(r.cfg.strategy);
  if (row.pipeline) {
    row.stages = r.cfg.stages > 0 ? r.cfg.stages : r.cfg.world;
    row.micro_batches =
        strategy_uses(r.cfg.strategy, SlotOption::micro_batches) ? r.cfg.micro_batches : 1;
    row.bubble_formula = bubble_formula(row.stages, row.micro_batches);
  }
  row.final_loss = r.losses.empty() ? 0.0 : r.losses.back();
  set_projection(row, r, {});
  return row;
}

void set_projection(CompareRow& row, const RunResult& r,
                    const std::vector<const RunResult*>& pool) {
  row.projected = false;
  row.projected_step_ms = row.projected_bubble = row.projected_exposed = 0;
  row.projected_pooled = 0;
  row.projection_error.clear();
  try {
    ProjectionOptions o;
    o.devices = r.cfg.world;
    o.link = parse_link(kCompareLink);
    o.pool_costs_with = pool;
    const Projection p = project(r, o);
    row.projected = true;
    row.projected_step_ms = p.median_step_ms;
    row.projected_pooled = p.pooled_runs;
    for (int k = 0; k < r.cfg.world; ++k) {
      row.projected_bubble += p.bubble_share(k) / r.cfg.world;
      row.projected_exposed += p.exposed_share(k) / r.cfg.world;
    }
  } catch (const std::exception& e) {
    row.projection_error = e.what();
  }
}

std::string compare_csv(const std::vector<CompareRow>& rows) {
  size_t max_ranks = 0;
  for (const CompareRow& r : rows) max_ranks = std::max(max_ranks, r.peak_bytes.size());
  std::ostringstream os;
  // The CSV's header: column names for scripts, the same in every language.
  os << "strategy,world,median_step_ms";                                     // i18n: not shown
  for (size_t i = 0; i < max_ranks; ++i) os << ",peak_mem_bytes_rank" << i;  // i18n: not shown
  // i18n: not shown
  os << ",sent_bytes_per_step,idle_share,bubble_share,bubble_formula,final_loss,configuration,"
        "micro_batches,stages,precision,projected_step_ms,projected_bubble_share,"
        "projected_exposed_share,weight_diff_to_single\n";
  char buf[64];
  for (const CompareRow& r : rows) {
    os << r.strategy << ',' << r.world;
    std::snprintf(buf, sizeof buf, ",%.4f", r.median_step_ms);
    os << buf;
    for (size_t i = 0; i < max_ranks; ++i) {
      os << ',';
      if (i < r.peak_bytes.size()) os << r.peak_bytes[i];
    }
    std::snprintf(buf, sizeof buf, ",%.0f,%.4f,", r.sent_bytes_per_step, r.idle_share);
    os << buf;
    if (r.pipeline) {
      std::snprintf(buf, sizeof buf, "%.4f,%.4f", r.idle_share, r.bubble_formula);
      os << buf;
    } else {
      os << ',';
    }
    std::snprintf(buf, sizeof buf, ",%.6g,", r.final_loss);
    os << buf;
    // The label has spaces and, with a partition, commas: always quoted.
    std::string label;
    for (char ch : r.label) label += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    os << '"' << label << "\",";
    if (r.micro_batches > 0) os << r.micro_batches;
    os << ',';
    if (r.stages > 0) os << r.stages;
    os << ',' << r.precision;
    if (r.projected) {
      std::snprintf(buf, sizeof buf, ",%.4f,%.4f,%.4f", r.projected_step_ms, r.projected_bubble,
                    r.projected_exposed);
      os << buf;
    } else {
      os << ",,,";
    }
    os << ',';
    if (r.weight_diff_to_single >= 0) {
      std::snprintf(buf, sizeof buf, "%.3g", r.weight_diff_to_single);
      os << buf;
    }
    os << '\n';
  }
  return os.str();
}

std::vector<int64_t> step_bounds(const RunData& d) {
  std::vector<int64_t> b;
  for (int64_t t : d.step_begin) {
    // A step not seen yet, or out of order, ends the usable range.
    if (t < 0 || (!b.empty() && t <= b.back())) break;
    b.push_back(t);
  }
  if (b.empty()) return b;
  const int last = static_cast<int>(b.size()) - 1;
  int64_t end = b.back();
  for (const RankData& r : d.ranks)
    for (const LaneData& lane : r.lanes)
      for (const Span& s : lane.spans)
        if (s.step == last) end = std::max(end, s.t_end_ns);
  if (end <= b.back()) end = b.back() + 1;
  b.push_back(end);
  return b;
}

double step_position(const std::vector<int64_t>& bounds, int64_t t) {
  if (bounds.size() < 2) return 0;
  const double n = static_cast<double>(bounds.size() - 1);
  if (t <= bounds.front()) return 0;
  if (t >= bounds.back()) return n;
  const size_t k =
      static_cast<size_t>(std::upper_bound(bounds.begin(), bounds.end(), t) - bounds.begin()) - 1;
  return static_cast<double>(k) +
         static_cast<double>(t - bounds[k]) / static_cast<double>(bounds[k + 1] - bounds[k]);
}

int busiest_rank(const RunData& d) {
  int best = -1;
  int64_t best_bytes = -1;
  for (size_t r = 0; r < d.ranks.size(); ++r) {
    const int64_t p = total(peak_of(d.ranks[r].device_series).bytes);
    if (p > best_bytes) {
      best_bytes = p;
      best = static_cast<int>(r);
    }
  }
  return best;
}

std::vector<MemoryPoint> memory_by_step(const RunData& d, int rank, int first_step, int last_step) {
  return memory_by_step(d, step_bounds(d), rank, first_step, last_step);
}

std::vector<MemoryPoint> memory_by_step(const RunData& d, const std::vector<int64_t>& bounds,
                                        int rank, int first_step, int last_step) {
  std::vector<MemoryPoint> out;
  const int n = static_cast<int>(bounds.size()) - 1;
  if (n < 1 || first_step < 0 || first_step > last_step || first_step >= n) return out;
  last_step = std::min(last_step, n - 1);
  if (rank == kMemoryBusiest) rank = busiest_rank(d);
  if (rank != kMemorySum && (rank < 0 || rank >= static_cast<int>(d.ranks.size()))) return out;

  // (time, total bytes after the event) of the chosen rank, or of all ranks added up.
  std::vector<std::pair<int64_t, int64_t>> series;
  if (rank == kMemorySum) {
    std::vector<std::pair<int64_t, std::pair<int, int64_t>>> events;  // t, (rank, total)
    for (size_t r = 0; r < d.ranks.size(); ++r)
      for (const CategorySample& s : d.ranks[r].device_series)
        events.push_back({s.t_ns, {static_cast<int>(r), total(s.bytes)}});
    std::stable_sort(events.begin(), events.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<int64_t> now(d.ranks.size(), 0);
    int64_t sum = 0;
    for (const auto& [t, e] : events) {
      sum += e.second - now[e.first];
      now[e.first] = e.second;
      series.push_back({t, sum});
    }
  } else {
    for (const CategorySample& s : d.ranks[rank].device_series)
      series.push_back({s.t_ns, total(s.bytes)});
  }

  const int64_t t_lo = bounds[first_step], t_hi = bounds[last_step + 1];
  // The state in force when first_step begins (what setup and earlier steps left).
  int64_t carried = 0;
  size_t i = 0;
  for (; i < series.size() && series[i].first <= t_lo; ++i) carried = series[i].second;
  out.push_back({static_cast<double>(first_step), carried});
  for (; i < series.size() && series[i].first < t_hi; ++i) {
    const double x = step_position(bounds, series[i].first);
    // Events at one instant: only the state after the last of them is ever in force.
    if (out.back().x == x)
      out.back().bytes = series[i].second;
    else
      out.push_back({x, series[i].second});
  }
  // Where the curve ends, carrying its last value.
  out.push_back({static_cast<double>(last_step + 1), out.back().bytes});
  return out;
}

int64_t bytes_at_position(const std::vector<MemoryPoint>& curve, double x) {
  const auto it = std::upper_bound(curve.begin(), curve.end(), x,
                                   [](double v, const MemoryPoint& p) { return v < p.x; });
  return it == curve.begin() ? 0 : std::prev(it)->bytes;
}

}  // namespace shardlab::gui
