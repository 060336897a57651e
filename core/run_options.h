// The strategy options as one table: each row says how its option is typed on
// the command line and in a --compare item, where RunConfig keeps it, its key in
// recordings, its default and how the views show it. The command line, the
// recordings, validation, the run bar and the compare view all read the rows:
// adding an option is one row here (and its readers in strategies' `reads`).
#pragma once
#include <string>
#include <vector>

#include "core/config.h"

namespace shardlab {

// The RunConfig settings only some strategies read (everything else, from
// --model to --timeout-ms, every strategy reads). validate() refuses one set
// to anything but RunConfig's default for a strategy that does not read it:
// an option that would be silently ignored teaches the wrong thing.
enum class StrategyOption {
  micro_batches,
  stages,
  partition,
  schedule,
  virtual_stages,
  mesh,
  mesh_order,
  sequence_parallel,
  dp_zero1,
  precision,  // anything but fp32
  recompute,
  no_prefetch,
  no_overlap,
  bucket_mb,
  fsdp_unit,
  no_reshard,
  offload,
  offload_params,
  servers,
  staleness,
};
// In the order the views list them: a pipeline's first, then precision, then
// the data-parallel family's.
inline constexpr StrategyOption kStrategyOptions[] = {
    StrategyOption::micro_batches,  StrategyOption::stages,
    StrategyOption::partition,      StrategyOption::schedule,
    StrategyOption::virtual_stages, StrategyOption::mesh,
    StrategyOption::mesh_order,     StrategyOption::sequence_parallel,
    StrategyOption::dp_zero1,       StrategyOption::precision,
    StrategyOption::recompute,      StrategyOption::no_prefetch,
    StrategyOption::no_overlap,     StrategyOption::bucket_mb,
    StrategyOption::fsdp_unit,      StrategyOption::no_reshard,
    StrategyOption::offload,        StrategyOption::offload_params,
    StrategyOption::servers,        StrategyOption::staleness};

// How an option is typed, and so how every reader parses, prints and shows it.
enum class OptionKind {
  integer,   // --micro-batches 8; m=8 in a compare item
  number,    // --bucket-mb 4; bucket-mb=4
  on_flag,   // --offload: false unless given; offload / no-offload
  off_flag,  // --no-overlap: true unless given; overlap / no-overlap
  choice,    // --precision bf16; a bare bf16 (or precision=bf16)
  int_list,  // --partition 3,2,2,1; not in compare items, whose ',' separates items
  text,      // --mesh dp=2,pp=2: free text validate() checks; not in compare items either
};

// Where in the run bar an option's widget sits.
enum class OptionPlace {
  main_bar,  // beside model, strategy and world: options that change what a step is
  options,   // the Options row, shown on demand
};

struct OptionRow {
  StrategyOption id;
  const char* flag;         // the command line's, with its dashes: "--micro-batches"
  const char* json_key;     // in recordings: "micro_batches"; a flag keeps its member's sense
  const char* compare_key;  // in a --compare item ("m" for m=8; a flag's own word); nullptr: none
  OptionKind kind;
  // Members of RunConfig: the one the kind uses.
  int RunConfig::*integer = nullptr;
  double RunConfig::*number = nullptr;
  bool RunConfig::*boolean = nullptr;
  std::string RunConfig::*text = nullptr;
  std::vector<int> RunConfig::*list = nullptr;
  std::vector<std::string> choices{};  // a choice's values, the default first
  int lo = 0, hi = 0;                  // integers typed in a compare item: lo to hi
  // For errors: the values that are valid ("1 to --batch, dividing it"), and
  // what a strategy that does not read the option lacks ("zero3 has no micro-batches").
  const char* valid = "";
  const char* missing = "";
  // The views, in English (their Chinese in app/gui/logic/strings_zh*.cpp, tested):
  // the widget's label (a checkbox's: the positive word, "overlap"), its tooltip,
  // and where in the run bar it sits.
  const char* label = "";
  const char* tip = "";
  OptionPlace place = OptionPlace::options;
  // Shown beside the run bar's widget while the value is a default that cannot
  // be typed (stages 0: "(one per rank)"); nullptr: nothing.
  const char* default_note = nullptr;
  // The compare view: the label beside a value's field in a configuration
  // ("M"; nullptr: no widget there), and the word a configuration's label shows
  // when set, %s its value ("M=%s", "bucket %s MiB"; nullptr: not shown), or
  // always, where the value is part of what the configuration is (M).
  const char* short_label = nullptr;
  const char* label_word = nullptr;
  bool label_always = false;
  // `shardlab run --help`: the value's placeholder after the flag ("M"; nullptr
  // for a flag), and what the option does, continuation lines after '\n'. The
  // strategies reading it are named before it ("gpipe/1f1b: ...") from the
  // registry, unless `help_names_readers` is false (an option most strategies read).
  const char* metavar = nullptr;
  const char* help = "";
  bool help_names_readers = true;
  // Written to recordings and configurations only when set (an option newer
  // than files already saved, which lack its key and read back its default).
  bool only_when_set = false;
  // An on_flag that may take one value after it (--offload nvme:DIR): where
  // it is kept ("" when the flag is bare), its key in recordings (written only
  // when set), and the words that start one; another word after the flag is
  // not its value.
  std::string RunConfig::*flag_value = nullptr;
  const char* flag_value_key = nullptr;
  std::vector<std::string> flag_value_starts{};
};

// The directory of --offload nvme:DIR; "" for CPU offload or none.
std::string nvme_offload_dir(const RunConfig& cfg);
// Checks an --offload value: "cpu" (stored as "") or "nvme:DIR" with a
// directory; returns what RunConfig keeps. Throws ConfigError naming the value.
std::string parse_offload_value(const std::string& value);

// Every row, in kStrategyOptions order.
const std::vector<OptionRow>& option_rows();
const OptionRow& option_row(StrategyOption o);
// The row whose flag (with or without its dashes) or json key is `name`; nullptr if none.
const OptionRow* find_option(const std::string& name);

const char* flag_name(StrategyOption o);  // "--micro-batches", "--no-overlap"
// Whether cfg sets o to anything but RunConfig's default.
bool option_set(const RunConfig& cfg, StrategyOption o);
// Whether a and b hold the same value of o.
bool option_equal(const RunConfig& a, const RunConfig& b, StrategyOption o);
// Copies o's value from `from` into `to`.
void copy_option(const RunConfig& from, RunConfig& to, StrategyOption o);
// Puts o back to RunConfig's default.
void reset_option(RunConfig& cfg, StrategyOption o);
// cfg's value of o as the user would type it after the flag ("8", "3,2,2,1",
// "bf16"); "" for a flag, whose presence is the whole setting.
std::string option_value_text(const RunConfig& cfg, StrategyOption o);
// cfg's value of o as the user would type it: "--micro-batches 8", "--offload".
// For a flag at its default, the flag's opposite word is not a command-line
// option: the text is the flag (a setting that is not set has no text).
std::string option_text(const RunConfig& cfg, StrategyOption o);
// The option as a --compare item's part, "/m=8", "/bf16", "/no-overlap",
// "/offload=nvme:/mnt/nvme" (a flag's value, last in its item); "" at its
// default or for an option that has no compare key.
std::string option_compare_text(const RunConfig& cfg, StrategyOption o);
// Sets o from a value typed after its flag (not for flags): false when the text
// is no value of the option's type (validate() checks the ranges).
bool parse_option_value(RunConfig& cfg, StrategyOption o, const std::string& text);
// "1,2,3" as integers; throws ConfigError naming `what` and the text otherwise.
std::vector<int> parse_int_list(const std::string& text, const std::string& what);

}  // namespace shardlab
