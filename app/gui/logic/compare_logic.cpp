// Compare configurations, rows and memory curves (see compare_logic.h).
#include "app/gui/logic/compare_logic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "app/gui/logic/memory_logic.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/strategy.h"
#include "core/predict/pipeline_analysis.h"
#include "core/predict/projection.h"
#include "core/run_options.h"

namespace shardlab::gui {

namespace {

// Whether `strategy` reads o (its registration says: one source of truth for
// validation, the run bar and these configurations).
bool uses(const std::string& strategy, StrategyOption o) {
  const StrategyInfo* info = find_strategy(strategy);
  return info && info->reads_option(o);
}

// An option's name in the --compare list syntax, for its errors (English, as the
// command line's): "micro-batches (m=N)", "bucket-mb=X", "no-prefetch".
std::string option_name(const OptionRow& r) {
  const std::string flag = r.flag + 2, key = r.compare_key;
  switch (r.kind) {
    case OptionKind::integer:
    case OptionKind::number: {
      const std::string typed = key + (r.kind == OptionKind::integer ? "=N" : "=X");
      return key == flag ? typed : flag + " (" + typed + ")";
    }
    case OptionKind::choice: {
      std::string values;
      for (const std::string& v : r.choices) values += (values.empty() ? "" : ", ") + v;
      return flag + " (" + values + ")";
    }
    default:
      return key;
  }
}

// Every option a compare item may set, as typed: "m=N, stages=N, fp32, bf16, ...,
// mesh=AXES".
std::string valid_options() {
  std::string out;
  for (const OptionRow& r : option_rows()) {
    if (!r.compare_key) continue;
    std::string item;
    if (r.kind == OptionKind::integer) item = std::string(r.compare_key) + "=N";
    if (r.kind == OptionKind::number) item = std::string(r.compare_key) + "=X";
    if (r.kind == OptionKind::text) item = std::string(r.compare_key) + "=AXES";  // i18n: not shown
    if (r.kind == OptionKind::on_flag || r.kind == OptionKind::off_flag) item = r.compare_key;
    if (r.kind == OptionKind::choice)
      for (const std::string& v : r.choices) item += (item.empty() ? "" : ", ") + v;
    out += (out.empty() ? "" : ", ") + item;
  }
  return out;
}

// A flag's two words in a compare item: the one that sets it ("no-overlap",
// "offload") and its opposite, which puts the default back ("overlap", "no-offload").
std::string opposite_word(const OptionRow& r) {
  const std::string key = r.compare_key;
  const std::string no = "no-";  // i18n: not shown (a command-line word)
  return r.kind == OptionKind::off_flag ? key.substr(no.size()) : no + key;
}

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

// A pipeline's stages: its mesh's pp axis, else --stages, else one per rank.
int stages_of(const CompareSlot& s) {
  if (!s.options.mesh.empty()) {
    try {
      return parse_mesh(s.options.mesh, s.options.mesh_order).size(MeshAxis::pp);
    } catch (const ConfigError&) {
      // validate() names the bad mesh
    }
  }
  return s.options.stages > 0 ? s.options.stages : s.world;
}

}  // namespace

bool CompareSlot::operator==(const CompareSlot& o) const {
  if (strategy != o.strategy || world != o.world) return false;
  for (const OptionRow& r : option_rows())
    if (r.compare_key && !option_equal(options, o.options, r.id)) return false;
  return true;
}

CompareSlot slot_from(const RunConfig& base, const std::string& strategy, int world) {
  CompareSlot s;
  s.strategy = strategy;
  const StrategyInfo* info = find_strategy(strategy);
  const int asked = world > 0 ? world : base.world;
  s.world = info ? info->world_for(asked) : asked;
  for (const OptionRow& r : option_rows())
    if (r.compare_key && uses(strategy, r.id)) copy_option(base, s.options, r.id);
  // --stages is one per rank in this build; a base's count only fits its own world.
  if (s.options.stages != s.world) s.options.stages = 0;
  return s;
}

RunConfig config_for(const CompareSlot& slot, const RunConfig& base) {
  RunConfig c = base;
  c.strategy = slot.strategy;
  c.world = slot.world;
  // The slot's value of every option it can set and its strategy reads, the
  // default of every option its strategy does not read; the others (partition) the base's.
  for (const OptionRow& r : option_rows()) {
    if (!uses(slot.strategy, r.id))
      reset_option(c, r.id);
    else if (r.compare_key)
      copy_option(slot.options, c, r.id);
  }
  // The run bar's --partition applies to the pipelines with as many stages as it has entries.
  if (static_cast<int>(c.partition.size()) != stages_of(slot)) c.partition.clear();
  return c;
}

// The list syntax: command-line words, the same in every language.
std::string slot_text(const CompareSlot& s) {
  std::string t = s.strategy + ":" + std::to_string(s.world), last;
  // A flag's value (a directory, '/'s and all) runs to the end of the item: last.
  for (const OptionRow& r : option_rows())
    if (uses(s.strategy, r.id))
      (r.flag_value && !(s.options.*r.flag_value).empty() ? last : t) +=
          option_compare_text(s.options, r.id);
  return t + last;
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
    // A flag's value runs to the end of the item: /offload=nvme:/mnt/nvme.
    for (size_t i = 1; i < parts.size(); ++i) {
      const size_t eq = parts[i].find('=');
      const OptionRow* r = eq == std::string::npos ? nullptr : find_option(parts[i].substr(0, eq));
      if (!r || !r->flag_value) continue;
      for (size_t k = i + 1; k < parts.size(); ++k) parts[i] += "/" + parts[k];
      parts.resize(i + 1);
    }
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

  std::set<StrategyOption> seen;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    const size_t eq = p.find('=');
    const std::string key = p.substr(0, eq),
                      value = eq == std::string::npos ? "" : p.substr(eq + 1);
    const bool has_value = eq != std::string::npos;
    // The row this part sets: by its compare key or its flag's name, a flag by
    // either of its words, a choice by a bare value.
    const OptionRow* row = nullptr;
    bool ok = true;
    for (const OptionRow& r : option_rows()) {
      if (!r.compare_key) continue;
      const bool named = key == r.compare_key || key == r.flag + 2;
      if (r.flag_value && key == r.compare_key && has_value) {
        // --offload's value: checked here as on the command line.
        try {
          s.options.*r.flag_value = parse_offload_value(value);
        } catch (const ConfigError& e) {
          throw ConfigError(where + e.what());
        }
        s.options.*r.boolean = true;
      } else if (r.kind == OptionKind::on_flag || r.kind == OptionKind::off_flag) {
        if (has_value || (key != r.compare_key && key != opposite_word(r))) continue;
        s.options.*r.boolean = (key == r.compare_key) == (r.kind == OptionKind::on_flag);
        if (r.flag_value) s.options.*r.flag_value = "";  // the bare flag: --offload cpu
      } else if (r.kind == OptionKind::choice && !has_value &&
                 std::find(r.choices.begin(), r.choices.end(), key) != r.choices.end()) {
        s.options.*r.text = key;
      } else if (named && has_value) {
        std::string v = value;  // a mesh's commas are '+' in a list of items
        if (r.kind == OptionKind::text) std::replace(v.begin(), v.end(), '+', ',');
        ok = parse_option_value(s.options, r.id, v);
        if (ok && r.kind == OptionKind::integer)  // as typed: 0 stages reads as "not given"
          ok = s.options.*r.integer >= r.lo && s.options.*r.integer <= r.hi;
        if (ok && r.kind == OptionKind::number) ok = s.options.*r.number > 0;
      } else {
        continue;
      }
      row = &r;
      break;
    }
    if (!row)
      throw ConfigError(where + "unknown option '" + p + "' (valid: " + valid_options() + ")");
    if (!ok) throw ConfigError(where + "'" + p + "' is invalid (valid: " + row->valid + ")");
    if (!uses(strategy, row->id))
      throw ConfigError(where + "'" + p + "' does not apply to " + strategy + " (" +
                        option_name(*row) + " is for: " + strategies_reading(row->id) + ")");
    if (!seen.insert(row->id).second)
      throw ConfigError(where + "'" + p + "' sets " + option_name(*row) + " a second time");
  }
  // A mesh without ":W" names its world: the axes' product (a bad mesh is left
  // for validate() to name).
  if (world == 0 && !s.options.mesh.empty()) {
    try {
      s.world = parse_mesh(s.options.mesh).world();
    } catch (const ConfigError&) {
    }
  }
  try {
    validate(config_for(s, base));
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    // The mesh's own words say "commas": in a list of items they are '+'.
    const char* hint =
        "; in a --compare item write its commas as '+': dp=2+pp=2";  // i18n: not shown
    const char* flag = "--mesh ";                                    // i18n: not shown (errors)
    const bool mesh = !s.options.mesh.empty() && what.rfind(flag, 0) == 0;
    throw ConfigError(where + what + (mesh ? hint : ""));
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
    if (uses(name, StrategyOption::micro_batches) && base.micro_batches == 1) {
      const int m = 2 * stages_of(s);
      if (m > 0 && base.batch % m == 0) s.options.micro_batches = m;
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
  std::string t = c.strategy + " \xC3\x97" + std::to_string(c.world);  // "ddp ×2"
  // Each option its strategy reads and the configuration sets, as its row's
  // word (in `tr`'s language): "M=8", "bf16", "no-prefetch", "bucket 4 MiB".
  for (const OptionRow& r : option_rows()) {
    if (!r.label_word || !uses(c.strategy, r.id)) continue;
    if (!r.label_always && !option_set(c, r.id)) continue;
    t += " " + strf(tr(r.label_word), option_value_text(c, r.id).c_str());
    // A flag's value by its kind, not its directory: "offload nvme".
    if (r.flag_value && !(c.*r.flag_value).empty())
      t += " " + (c.*r.flag_value).substr(0, (c.*r.flag_value).find(':'));
  }
  // A model option, not a strategy's: named where it is not the CPU's naive default.
  if (c.attention == "flash") t += std::string(" ") + tr("flash attention");
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
    row.stages = pipeline_stages(r.cfg);  // a mesh's pp axis, not its world
    row.micro_batches =
        uses(r.cfg.strategy, StrategyOption::micro_batches) ? r.cfg.micro_batches : 1;
    row.bubble_formula = schedule_bubble_formula(r);
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
