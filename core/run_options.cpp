// The strategy options' table (see run_options.h) and the readers every view
// shares: each works for any row by its kind, none names an option.
#include "core/run_options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace shardlab {

namespace {

// Numbers as the user would type them, 0.5 and not 0.500000, yet exact: a
// value that %g would round reads back from all its digits.
std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::vector<OptionRow> make_rows() {
  std::vector<OptionRow> r;
  // clang-format off
  r.push_back({.id = StrategyOption::micro_batches, .flag = "--micro-batches",
               .json_key = "micro_batches", .compare_key = "m", .kind = OptionKind::integer,
               .integer = &RunConfig::micro_batches, .lo = 1, .hi = 1 << 20,
               .valid = "1 to --batch, dividing it", .missing = "micro-batches",
               .label = "Micro-batches", .tip = "micro-batches per batch",
               .place = OptionPlace::main_bar, .short_label = "M", .label_word = "M=%s",
               .label_always = true, .metavar = "M",
               .help = "micro-batches per global batch (default 1)"});
  // Not in a compare item or label: --stages is one per rank in this build, so a
  // configuration's world says it.
  r.push_back({.id = StrategyOption::stages, .flag = "--stages", .json_key = "stages",
               .compare_key = "stages", .kind = OptionKind::integer,
               .integer = &RunConfig::stages, .lo = 1, .hi = 64,
               .valid = "one stage per rank of --world, or leave it out",
               .missing = "pipeline stages",
               .label = "Stages", .tip = "pipeline stages (0 = one per rank)",
               .place = OptionPlace::main_bar, .default_note = "(one per rank)", .metavar = "P",
               .help = "pipeline stages (default: one per rank)"});
  r.push_back({.id = StrategyOption::partition, .flag = "--partition", .json_key = "partition",
               .compare_key = nullptr, .kind = OptionKind::int_list,
               .list = &RunConfig::partition,
               .valid = "layers per stage, e.g. 3,2,2,1, or cost",
               .missing = "pipeline stages to partition",
               .label = "Partition", .tip = "layers per stage, e.g. 3,2,2,1",
               .label_word = "[%s]", .metavar = "A,B,..",
               .help = "layers per stage (default: balanced by parameter count);\n"
                       "'cost': balanced by each layer's forward + backward time, measured on one\n"
                       "micro-batch before the run (gpt: embedding, blocks and head differ)"});
  // The file's path, as typed: validate() and every rank read it (a recording
  // keeps the order each stage really ran, so it outlives the file).
  r.push_back({.id = StrategyOption::schedule, .flag = "--schedule", .json_key = "schedule",
               .compare_key = nullptr, .kind = OptionKind::text, .text = &RunConfig::schedule,
               .valid = "a schedule file, one line of F/B/W actions per rank "
                        "('shardlab schedule 1f1b' prints one to start from)",
               .missing = "pipeline schedule to replace",
               .label = "Schedule", .tip = "a schedule file: one line of F/B/W actions per rank",
               .label_word = "schedule %s", .metavar = "FILE",
               .help = "run the order this file writes instead of the strategy's own (one line\n"
                       "per rank, e.g. 'rank 0: F0 F1 B0 W0 B1 W1'); validated before any rank\n"
                       "starts ('shardlab schedule FILE' checks and draws it)",
               .only_when_set = true});
  r.push_back({.id = StrategyOption::virtual_stages, .flag = "--virtual-stages",
               .json_key = "virtual_stages", .compare_key = "v", .kind = OptionKind::integer,
               .integer = &RunConfig::virtual_stages, .lo = 2, .hi = 64,
               .valid = "2 or more model chunks per rank, at most layers / stages",
               .missing = "model chunks to interleave",
               .label = "Chunks per rank", .tip = "model chunks per rank (V), dealt round-robin",
               .place = OptionPlace::main_bar, .default_note = "(2)", .short_label = "V",
               .label_word = "V=%s", .metavar = "V",
               .help = "model chunks per rank (default 2): the model cut into stages x V\n"
                       "chunks, chunk c of rank r holding chunk c*P+r (Megatron's interleaving)",
               .only_when_set = true});
  r.push_back({.id = StrategyOption::mesh, .flag = "--mesh", .json_key = "mesh",
               .compare_key = "mesh", .kind = OptionKind::text, .text = &RunConfig::mesh,
               .valid = "axes whose sizes multiply to --world, e.g. dp=2,pp=2",
               .missing = "device mesh",
               .label = "Mesh", .tip = "ranks on axes, e.g. dp=2,pp=2 or dp=2,tp=2",
               .short_label = "mesh", .label_word = "%s", .metavar = "AXES",
               .help = "the ranks on a device mesh, e.g. dp=2,pp=2,tp=2 (world 8): the stages on\n"
                       "pp, dp pipelines each training on 1/dp of the batch, each layer cut\n"
                       "across tp ranks (tensor parallelism; default: pp=world); ddp, zero1-3\n"
                       "and fsdp take dp and tp: the strategy over dp, each rank one tp slice;\n"
                       "without --world, the world is the axes' product",
               .only_when_set = true});
  r.push_back({.id = StrategyOption::mesh_order, .flag = "--mesh-order",
               .json_key = "mesh_order", .compare_key = nullptr, .kind = OptionKind::text,
               .text = &RunConfig::mesh_order,
               .valid = "dp, pp and tp, each once, outermost first, e.g. pp,dp,tp",
               .missing = "device mesh to order",
               .label = "Mesh order", .tip = "the mesh's axes, outermost first (default pp,dp,tp)",
               .metavar = "A,B,C",
               .help = "how --mesh lays ranks out, outermost axis first (default pp,dp,tp:\n"
                       "Megatron's, tensor parallel innermost)",
               .only_when_set = true});
  r.push_back({.id = StrategyOption::sequence_parallel, .flag = "--sequence-parallel",
               .json_key = "sequence_parallel", .compare_key = "sp", .kind = OptionKind::on_flag,
               .boolean = &RunConfig::sequence_parallel,
               .missing = "tensor-parallel layers to run sequence-parallel",
               .label = "sequence parallel",
               .tip = "gpt on a tp axis: tokens split between the tp regions",
               .short_label = "", .label_word = "sp",
               .help = "gpt on a mesh with tp: each tp rank holds 1/tp of the tokens around the\n"
                       "LayerNorms; reduce-scatter and all-gather instead of all-reduce",
               .only_when_set = true});
  r.push_back({.id = StrategyOption::dp_zero1, .flag = "--dp-zero1", .json_key = "dp_zero1",
               .compare_key = "zero1", .kind = OptionKind::on_flag,
               .boolean = &RunConfig::dp_zero1,
               .missing = "pipelines side by side (a mesh's dp axis) to shard the optimizer over",
               .label = "ZeRO-1 over dp",
               .tip = "each dp replica keeps the optimizer state of its own parameters only",
               .short_label = "", .label_word = "zero1",
               .help = "on a mesh with dp >= 2: ZeRO-1 over the dp axis, each replica keeping the\n"
                       "optimizer state of whole parameters balanced by size (as PyTorch's\n"
                       "ZeroRedundancyOptimizer); gradients reduced to their owner, updated\n"
                       "parameters broadcast from it",
               .only_when_set = true});
  r.push_back({.id = StrategyOption::precision, .flag = "--precision", .json_key = "precision",
               .compare_key = "precision", .kind = OptionKind::choice,
               .text = &RunConfig::precision, .choices = {"fp32", "bf16", "fp16"},
               .valid = "fp32, bf16 or fp16", .missing = "mixed precision",
               .label = "Precision", .tip = "bf16/fp16: mixed precision, fp32 master weights",
               .place = OptionPlace::main_bar, .short_label = "", .label_word = "%s", .metavar = "P",
               .help = "fp32 | bf16 | fp16 (mixed precision: fp32 master weights; default fp32;\n"
                       "the pipeline strategies run fp32 only)",
               .help_names_readers = false});
  r.push_back({.id = StrategyOption::recompute, .flag = "--recompute", .json_key = "recompute",
               .compare_key = "recompute", .kind = OptionKind::on_flag,
               .boolean = &RunConfig::recompute, .missing = "activation recomputation",
               .label = "recompute", .tip = "recompute forward in backward",
               .short_label = "", .label_word = "recompute",
               .help = "keep stage inputs only, recompute forward in backward"});
  r.push_back({.id = StrategyOption::no_prefetch, .flag = "--no-prefetch", .json_key = "prefetch",
               .compare_key = "no-prefetch", .kind = OptionKind::off_flag,
               .boolean = &RunConfig::prefetch, .missing = "all-gather to prefetch",
               .label = "prefetch", .tip = "start the next all-gather early (off: --no-prefetch)",
               .short_label = "", .label_word = "no-prefetch",
               .help = "do not start the next all-gather early"});
  r.push_back({.id = StrategyOption::no_overlap, .flag = "--no-overlap", .json_key = "overlap",
               .compare_key = "no-overlap", .kind = OptionKind::off_flag,
               .boolean = &RunConfig::overlap,
               .missing = "bucketed all-reduce to overlap with backward",
               .label = "overlap", .tip = "all-reduce buckets during backward (off: --no-overlap)",
               .short_label = "", .label_word = "no-overlap",
               .help = "all-reduce after backward instead of during it"});
  r.push_back({.id = StrategyOption::bucket_mb, .flag = "--bucket-mb", .json_key = "bucket_mb",
               .compare_key = "bucket-mb", .kind = OptionKind::number,
               .number = &RunConfig::bucket_mb,
               .valid = "a positive number of MiB up to 1048576, e.g. 25",
               .missing = "gradient buckets",
               .label = "Bucket MiB", .tip = "gradient bucket size in MiB",
               .short_label = "bucket MiB", .label_word = "bucket %s MiB", .metavar = "X",
               .help = "gradient bucket size in MiB (default 25)"});
  r.push_back({.id = StrategyOption::fsdp_unit, .flag = "--fsdp-unit", .json_key = "fsdp_unit",
               .compare_key = "fsdp-unit", .kind = OptionKind::integer,
               .integer = &RunConfig::fsdp_unit, .lo = 1, .hi = 1 << 20,
               .valid = "1 to the model's layers", .missing = "FSDP units",
               .label = "FSDP unit", .tip = "layers per FSDP unit",
               .short_label = "unit", .label_word = "unit %s", .metavar = "K",
               .help = "layers per unit (default 1)"});
  r.push_back({.id = StrategyOption::no_reshard, .flag = "--no-reshard",
               .json_key = "reshard_after_forward", .compare_key = "no-reshard",
               .kind = OptionKind::off_flag, .boolean = &RunConfig::reshard_after_forward,
               .missing = "reshard-after-forward switch",
               .label = "reshard", .tip = "free gathered params after forward (off: --no-reshard)",
               .short_label = "", .label_word = "no-reshard",
               .help = "keep gathered parameters from forward until backward"});
  r.push_back({.id = StrategyOption::offload, .flag = "--offload", .json_key = "offload",
               .compare_key = "offload", .kind = OptionKind::on_flag,
               .boolean = &RunConfig::offload, .valid = "cpu, or nvme:DIR with DIR a directory",
               .missing = "offload",
               .label = "offload", .tip = "model states in host memory",
               .short_label = "", .label_word = "offload", .metavar = "[nvme:DIR]",
               .help = "fsdp: params, grads and optimizer state live in host memory;\n"
                       "nvme:DIR (fsdp, zero3): the optimizer state in a file under DIR",
               .help_names_readers = false, .flag_value = &RunConfig::offload_to,
               .flag_value_key = "offload_to", .flag_value_starts = {"cpu", "nvme:"}});
  r.push_back({.id = StrategyOption::offload_params, .flag = "--offload-params",
               .json_key = "offload_params", .compare_key = "offload-params",
               .kind = OptionKind::on_flag, .boolean = &RunConfig::offload_params,
               .valid = "with --offload nvme:DIR", .missing = "parameters to offload to NVMe",
               .label = "offload params", .tip = "parameter shards in the offload file too",
               .short_label = "", .label_word = "offload-params",
               .help = "with --offload nvme:DIR: the parameter shards in the file too, read\n"
                       "before each all-gather and for the update (ZeRO-Infinity's offload_param)",
               .only_when_set = true});
  r.push_back({.id = StrategyOption::servers, .flag = "--servers", .json_key = "servers",
               .compare_key = "servers", .kind = OptionKind::integer,
               .integer = &RunConfig::servers, .lo = 1, .hi = 63,
               .valid = "1 to --world minus 1, leaving at least one worker",
               .missing = "parameter servers",
               .label = "Servers", .tip = "ranks that hold the parameters (the first ones)",
               .place = OptionPlace::main_bar, .short_label = "S",
               .label_word = "S=%s", .metavar = "S",
               .help = "server ranks (default 1), the first ones: each owns 1/S of the\n"
                       "parameters and their optimizer state; the other ranks are workers",
               .only_when_set = true});
  r.push_back({.id = StrategyOption::staleness, .flag = "--staleness", .json_key = "staleness",
               .compare_key = "k", .kind = OptionKind::integer,
               .integer = &RunConfig::staleness, .lo = 0, .hi = 1000,
               .valid = "0 (synchronous) to 1000 updates a worker may be behind",
               .missing = "asynchronous updates",
               .label = "Staleness", .tip = "updates a worker's parameters may lag (0: synchronous)",
               .place = OptionPlace::main_bar, .short_label = "K", .label_word = "K=%s",
               .metavar = "K",
               .help = "asynchronous training: a worker may compute step t with the parameters\n"
                       "of update t-K, the freshest that have arrived (default 0: synchronous,\n"
                       "the same weights as single)",
               .only_when_set = true});
  // clang-format on
  for (size_t i = 0; i < r.size(); ++i)
    if (r[i].id != kStrategyOptions[i])
      throw std::logic_error(std::string("option table out of kStrategyOptions order at ") +
                             r[i].flag);
  // The enum indexes the table.
  for (size_t i = 0; i < r.size(); ++i)
    if (static_cast<size_t>(r[i].id) != i)
      throw std::logic_error(std::string("option table out of enum order at ") + r[i].flag);
  return r;
}

}  // namespace

const std::vector<OptionRow>& option_rows() {
  static const std::vector<OptionRow> rows = make_rows();
  return rows;
}

const OptionRow& option_row(StrategyOption o) {
  return option_rows().at(static_cast<size_t>(o));
}

const OptionRow* find_option(const std::string& name) {
  for (const OptionRow& r : option_rows())
    if (name == r.flag || name == r.flag + 2 || name == r.json_key) return &r;
  return nullptr;
}

const char* flag_name(StrategyOption o) {
  return option_row(o).flag;
}

bool option_equal(const RunConfig& a, const RunConfig& b, StrategyOption o) {
  const OptionRow& r = option_row(o);
  switch (r.kind) {
    case OptionKind::integer:
      return a.*r.integer == b.*r.integer;
    case OptionKind::number:
      return a.*r.number == b.*r.number;
    case OptionKind::on_flag:
    case OptionKind::off_flag:
      return a.*r.boolean == b.*r.boolean && (!r.flag_value || a.*r.flag_value == b.*r.flag_value);
    case OptionKind::choice:
    case OptionKind::text:
      return a.*r.text == b.*r.text;
    case OptionKind::int_list:
      return a.*r.list == b.*r.list;
  }
  return true;
}

bool option_set(const RunConfig& c, StrategyOption o) {
  return !option_equal(c, RunConfig{}, o);
}

void copy_option(const RunConfig& from, RunConfig& to, StrategyOption o) {
  const OptionRow& r = option_row(o);
  switch (r.kind) {
    case OptionKind::integer:
      to.*r.integer = from.*r.integer;
      break;
    case OptionKind::number:
      to.*r.number = from.*r.number;
      break;
    case OptionKind::on_flag:
    case OptionKind::off_flag:
      to.*r.boolean = from.*r.boolean;
      if (r.flag_value) to.*r.flag_value = from.*r.flag_value;
      break;
    case OptionKind::choice:
    case OptionKind::text:
      to.*r.text = from.*r.text;
      break;
    case OptionKind::int_list:
      to.*r.list = from.*r.list;
      break;
  }
}

void reset_option(RunConfig& c, StrategyOption o) {
  copy_option(RunConfig{}, c, o);
}

std::string option_value_text(const RunConfig& c, StrategyOption o) {
  const OptionRow& r = option_row(o);
  switch (r.kind) {
    case OptionKind::integer:
      return std::to_string(c.*r.integer);
    case OptionKind::number:
      return number_text(c.*r.number);
    case OptionKind::on_flag:
    case OptionKind::off_flag:
      return r.flag_value && c.*r.boolean ? c.*r.flag_value : "";
    case OptionKind::choice:
    case OptionKind::text:
      return c.*r.text;
    case OptionKind::int_list: {
      std::string list;
      for (int n : c.*r.list) list += (list.empty() ? "" : ",") + std::to_string(n);
      return list;
    }
  }
  return "";
}

std::string option_text(const RunConfig& c, StrategyOption o) {
  const std::string value = option_value_text(c, o);
  return std::string(flag_name(o)) + (value.empty() ? "" : " " + value);
}

std::string option_compare_text(const RunConfig& c, StrategyOption o) {
  const OptionRow& r = option_row(o);
  if (!r.compare_key || !option_set(c, o)) return "";
  switch (r.kind) {
    case OptionKind::on_flag:
    case OptionKind::off_flag:
      // A flag's value runs to the end of the item, '/'s and all:
      // /offload=nvme:/mnt/nvme (the item puts it last: compare_logic.cpp).
      if (r.flag_value && !(c.*r.flag_value).empty())
        return std::string("/") + r.compare_key + "=" + c.*r.flag_value;
      return std::string("/") + r.compare_key;
    case OptionKind::choice:
      return "/" + c.*r.text;  // the value alone: /bf16
    case OptionKind::text: {
      // In a comma-separated list of items, a mesh's commas are '+':
      // /mesh=dp=2+pp=2+tp=2.
      std::string v = option_value_text(c, o);
      std::replace(v.begin(), v.end(), ',', '+');
      return std::string("/") + r.compare_key + "=" + v;
    }
    default:
      return std::string("/") + r.compare_key + "=" + option_value_text(c, o);
  }
}

bool parse_option_value(RunConfig& c, StrategyOption o, const std::string& text) {
  const OptionRow& r = option_row(o);
  switch (r.kind) {
    case OptionKind::integer: {
      char* end = nullptr;
      const long v = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || v < -(1L << 30) || v > (1L << 30)) return false;
      c.*r.integer = static_cast<int>(v);
      return true;
    }
    case OptionKind::number: {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !std::isfinite(v)) return false;
      c.*r.number = v;
      return true;
    }
    case OptionKind::choice:
      for (const std::string& v : r.choices)
        if (v == text) {
          c.*r.text = text;
          return true;
        }
      return false;
    case OptionKind::int_list:
      try {
        c.*r.list = parse_int_list(text, r.flag);
        return true;
      } catch (const ConfigError&) {
        return false;
      }
    case OptionKind::text:
      c.*r.text = text;  // validate() checks it
      return true;
    case OptionKind::on_flag:
    case OptionKind::off_flag:
      return false;
  }
  return false;
}

std::string nvme_offload_dir(const RunConfig& cfg) {
  return cfg.offload && cfg.offload_to.rfind("nvme:", 0) == 0 ? cfg.offload_to.substr(5) : "";
}

std::string parse_offload_value(const std::string& value) {
  if (value.empty() || value == "cpu") return "";
  if (value.rfind("nvme:", 0) == 0 && value.size() > 5) return value;
  throw ConfigError("--offload " + value + " is invalid (valid: cpu, or nvme:DIR with DIR a " +
                    "directory, e.g. --offload nvme:/mnt/nvme)");
}

std::vector<int> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < -1000000 || v > 1000000)
      throw ConfigError(what + " '" + text +
                        "' is not a comma-separated list of integers (valid: e.g. 3,2,2,1)");
    out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace shardlab
