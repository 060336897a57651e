// The compare view's logic without a window: configurations with their own
// micro-batches and options (the --compare list syntax and its errors), rows
// that arrive one by one, idle share vs pipeline bubble, the CSV, and memory
// over time aligned by training step.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <thread>

#include "app/gui/logic/compare_logic.h"
#include "app/gui/logic/run_data.h"
#include "app/gui/logic/run_session.h"
#include "core/parallel/strategy.h"
#include "core/predict/pipeline_analysis.h"
#include "core/run_options.h"
#include "tests/test_util.h"

using namespace shardlab;
using namespace shardlab::gui;

namespace {

RunConfig small_base() {
  RunConfig base;
  base.model = "mlp:4x32";
  base.batch = 16;
  base.steps = 3;
  base.world = 2;
  return base;
}

std::string error_of(const std::string& list, const RunConfig& base) {
  try {
    parse_compare_slots(list, base);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Runs a batch to the end and returns what the UI would hold.
std::vector<CompareEntry> run_all(const std::vector<RunConfig>& cfgs) {
  CompareSession s;
  std::vector<CompareEntry> entries;
  s.start(cfgs);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (s.busy() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  s.poll(entries);
  return entries;
}

Span compute_span(int64_t b, int64_t e, int step) {
  Span s;
  s.t_begin_ns = b;
  s.t_end_ns = e;
  s.kind = SpanKind::forward;
  s.lane = Lane::compute;
  s.step = step;
  return s;
}

AllocEvent alloc(int64_t t, uint64_t id, int64_t delta) {
  AllocEvent e;
  e.t_ns = t;
  e.buffer_id = id;
  e.delta_bytes = delta;
  e.category = MemCategory::activations;
  return e;
}

// A run of `steps` steps of `step_ns` each, one rank per entry of `bytes`: each
// rank holds `bytes[r]` from the middle of every step to three quarters of it.
RunData stepped_run(int64_t step_ns, int steps, const std::vector<int64_t>& bytes) {
  RunData d;
  RunConfig cfg;
  cfg.model = "mlp:4x16";
  const int world = static_cast<int>(bytes.size());
  cfg.world = world;
  reset_run_data(d, cfg, world, 0);
  for (int r = 0; r < world; ++r) {
    std::vector<Span> spans;
    std::vector<AllocEvent> allocs;
    allocs.push_back(alloc(0, 1, 1000));  // setup: stays for the whole run
    for (int s = 0; s < steps; ++s) {
      const int64_t b = 100 + s * step_ns;
      spans.push_back(compute_span(b, b + step_ns, s));
      allocs.push_back(alloc(b + step_ns / 2, 10 + s, bytes[r]));
      allocs.push_back(alloc(b + step_ns * 3 / 4, 10 + s, -bytes[r]));
    }
    append(d, r, spans, allocs);
  }
  return d;
}

}  // namespace

TEST_CASE("compare list: each configuration has its own world, micro-batches and options",
          "[compare-view]") {
  RunConfig base;          // ddp ×2, mlp:8x256, batch 64: the app's defaults
  base.micro_batches = 8;  // as if the run bar said --micro-batches 8
  const std::vector<CompareSlot> slots =
      parse_compare_slots("naive-mp:4,gpipe:4/m=8,1f1b:4/m=4", base);
  REQUIRE(slots.size() == 3);
  // naive-mp has no micro-batches: the base's 8 is not carried over, so it stays valid.
  CHECK(config_for(slots[0], base).micro_batches == 1);
  CHECK(config_for(slots[1], base).micro_batches == 8);
  CHECK(config_for(slots[2], base).micro_batches == 4);
  for (const CompareSlot& s : slots) {
    CHECK(s.world == 4);
    CHECK_NOTHROW(validate(config_for(s, base)));
  }
  // An option left out comes from the base where the strategy reads it.
  CHECK(config_for(parse_compare_item("gpipe:4", base), base).micro_batches == 8);
  // A data-parallel configuration never carries pipeline or FSDP settings.
  base.recompute = true;
  base.fsdp_unit = 2;
  base.prefetch = false;
  base.precision = "bf16";
  const RunConfig ddp = config_for(parse_compare_item("ddp:4", base), base);
  CHECK(ddp.micro_batches == 1);
  CHECK(ddp.recompute == false);
  CHECK(ddp.fsdp_unit == 1);
  CHECK(ddp.prefetch == true);
  CHECK(ddp.precision == "bf16");  // ddp does read --precision
  const RunConfig z3 = config_for(parse_compare_item("zero3:4/no-prefetch/fp32", base), base);
  CHECK(z3.prefetch == false);
  CHECK(z3.precision == "fp32");
  CHECK(z3.micro_batches == 1);
  const RunConfig fsdp =
      config_for(parse_compare_item("fsdp:2/fsdp-unit=4/no-reshard", base), base);
  CHECK(fsdp.fsdp_unit == 4);
  CHECK(fsdp.reshard_after_forward == false);
  // `single` runs on one device whatever the base's world.
  CHECK(parse_compare_item("single", base).world == 1);
  // Labels say what differs.
  CHECK(config_label(config_for(slots[1], base)) ==
        "gpipe \xC3\x97"
        "4 M=8");
  CHECK(config_label(z3) ==
        "zero3 \xC3\x97"
        "4 no-prefetch");
  // In Chinese the option words are translated; strategy names and symbols stay.
  const Tr zh{lesson::Lang::zh};
  CHECK(config_label(z3, zh) ==
        "zero3 \xC3\x97"
        "4 不预取");
  CHECK(config_label(fsdp, zh).find("单元 4 不重新分片") != std::string::npos);
  CHECK(std::string(idle_share_short_definition(zh)).rfind("空闲占比：", 0) == 0);
}

TEST_CASE("compare list: the item text gives back the same configuration", "[compare-view]") {
  const RunConfig base;
  for (const char* item : {"ddp:2", "gpipe:4/m=8/recompute", "zero3:4/bf16/no-prefetch",
                           "fsdp:2/fp16/fsdp-unit=2/no-reshard/offload", "1f1b:2/m=4",
                           "ddp:4/no-overlap/bucket-mb=0.5", "naive-mp:4", "single:1"}) {
    const CompareSlot s = parse_compare_item(item, base);
    CHECK(slot_text(s) == item);
    CHECK(parse_compare_item(slot_text(s), base) == s);
  }
}

TEST_CASE("compare list: --offload nvme:DIR keeps its directory, last in the item",
          "[compare-view][nvme]") {
  const RunConfig base;
  for (const char* item : {"fsdp:2/offload-params/offload=nvme:/var/tmp",
                           "zero3:2/bf16/offload=nvme:/var/tmp", "fsdp:2/offload"}) {
    INFO(item);
    const CompareSlot s = parse_compare_item(item, base);
    CHECK(slot_text(s) == item);
    CHECK(parse_compare_item(slot_text(s), base) == s);
  }
  // Wherever it is typed, the value runs to the end of the item.
  const CompareSlot z = parse_compare_item("zero3:2/offload=nvme:/var/tmp", base);
  const RunConfig c = config_for(z, base);
  CHECK(c.offload);
  CHECK(nvme_offload_dir(c) == "/var/tmp");
  // Its label names the kind of offload, not the directory.
  CHECK(config_label(c) ==
        "zero3 \xC3\x97"
        "2 offload nvme");
  CHECK(
      config_label(
          config_for(parse_compare_item("fsdp:2/offload-params/offload=nvme:/var/tmp", base), base),
          Tr{lesson::Lang::zh}) ==
      "fsdp \xC3\x97"
      "2 卸载 nvme 卸载参数");
  CHECK(slot_text(parse_compare_item("fsdp:2/offload=cpu", base)) == "fsdp:2/offload");
  CHECK(error_of("fsdp:2/offload=disk", base)
            .find("--offload disk is invalid (valid: cpu, or nvme:DIR") != std::string::npos);
}

TEST_CASE("compare list: a mesh is an option of an item, its commas written '+'",
          "[compare-view][mesh]") {
  RunConfig base;
  base.model = "gpt:2x32x4";
  base.seq = 8;
  base.batch = 16;
  // Without ":W" the world is the mesh's product.
  const std::vector<CompareSlot> slots =
      parse_compare_slots("ddp:8,1f1b/m=4/mesh=dp=2+pp=2+tp=2,gpipe:4/mesh=tp=2+pp=2", base);
  REQUIRE(slots.size() == 3);
  CHECK(slots[1].world == 8);
  const RunConfig mesh = config_for(slots[1], base);
  CHECK(mesh.mesh == "dp=2,pp=2,tp=2");
  CHECK(mesh.micro_batches == 4);
  CHECK_NOTHROW(validate(mesh));
  CHECK(config_for(slots[2], base).mesh == "tp=2,pp=2");
  CHECK(config_for(slots[0], base).mesh.empty());  // none given
  for (const CompareSlot& s : slots) CHECK(parse_compare_item(slot_text(s), base) == s);
  CHECK(slot_text(slots[1]) == "1f1b:8/m=4/mesh=dp=2+pp=2+tp=2");
  // A data-parallel strategy on dp and tp, its world the mesh's.
  const std::vector<CompareSlot> two_d = parse_compare_slots("zero3/mesh=dp=2+tp=2", base);
  REQUIRE(two_d.size() == 1);
  CHECK(two_d[0].world == 4);
  CHECK(config_for(two_d[0], base).mesh == "dp=2,tp=2");
  CHECK_NOTHROW(validate(config_for(two_d[0], base)));
  // The table's bubble formula counts the mesh's pp stages, not its world.
  RunConfig run = mesh;
  run.steps = 2;
  const CompareRow row = compare_row(run_training(run));
  CHECK(row.stages == 2);
  CHECK(row.bubble_formula == Approx(1.0 / 5));  // (P−1)/(M+P−1), P = 2, M = 4
  // A bad mesh, or one that is not the world it is given, in one line.
  for (const auto& [list, says] :
       {std::pair{"gpipe/mesh=dp=2+xx=2", "'xx=2' is not an axis=size"},
        std::pair{"gpipe:4/mesh=dp=2+pp=4", "has 8 ranks but --world is 4"},
        std::pair{"dp:4/mesh=dp=4", "'mesh=dp=4' does not apply to dp"}}) {
    INFO(list);
    const std::string e = error_of(list, base);
    CHECK(e.find(says) != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
  }
}

TEST_CASE("compare list: one-line errors that name the bad item", "[compare-view]") {
  const RunConfig base;  // batch 64, mlp:8x256
  const struct {
    const char* list;
    const char* says;
  } cases[] = {
      {"gpipx:4", "--compare item 'gpipx:4': unknown strategy 'gpipx' (valid: "},
      {"ddp:0", "--compare item 'ddp:0': world '0' is invalid (valid: 1 to 64"},
      {"ddp:two", "world 'two' is invalid"},
      {"ddp:2/m=8", "--compare item 'ddp:2/m=8': 'm=8' does not apply to ddp"},
      {"naive-mp:4/m=8", "'m=8' does not apply to naive-mp (micro-batches (m=N) is for: "},
      {"gpipe:4/bf16", "'bf16' does not apply to gpipe"},
      {"zero1:2/no-prefetch", "'no-prefetch' does not apply to zero1 (no-prefetch is for: "},
      {"gpipe:4/zap", "--compare item 'gpipe:4/zap': unknown option 'zap' (valid: m=N"},
      {"gpipe:4/m=x", "'m=x' is invalid (valid: 1 to --batch, dividing it)"},
      {"gpipe:4/m=4/m=8", "'m=8' sets micro-batches (m=N) a second time"},
      {"gpipe:4/m=7",
       "--compare item 'gpipe:4/m=7': --batch 64 is not divisible by --micro-batches 7"},
      {"single:2", "--compare item 'single:2': --world 2 is invalid for strategy single"},
      {"gpipe:16", "--compare item 'gpipe:16': --world 16 (one stage per rank) is more stages"},
      {"ddp,,gpipe:2", "--compare has an empty item"},
      {"ddp,", "--compare has an empty item"},
      {"ddp,ddp,ddp,ddp,ddp,ddp,ddp", "names 7 configurations (valid: 1 to 6"},
  };
  for (const auto& c : cases) {
    INFO(c.list);
    const std::string e = error_of(c.list, base);
    CHECK(e.find(c.says) != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
  }
  CHECK(error_of("naive-mp:4, gpipe:4/m=8 ,1f1b:4/m=8", base).empty());  // spaces are fine
  CHECK(parse_compare_list("ddp,ddp,ddp,ddp,ddp,ddp", base).size() == 6);
}

TEST_CASE("compare default: what the selector shows, at most six, each valid", "[compare-view]") {
  RunConfig base;  // ddp ×2
  const std::vector<CompareSlot> slots = default_compare_slots(base);
  REQUIRE(!slots.empty());
  CHECK(static_cast<int>(slots.size()) <= kMaxCompare);
  CHECK(slots[0] == slot_from(base, "ddp"));  // the run's own configuration first
  const std::vector<RunConfig> cfgs = default_compare_configs(base);
  REQUIRE(cfgs.size() == slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    CHECK(config_label(cfgs[i]) == config_label(config_for(slots[i], base)));
    CHECK_NOTHROW(validate(cfgs[i]));
    CHECK(cfgs[i].world == 2);
    // Pipelines get micro-batches of their own; nobody else carries any.
    if (cfgs[i].strategy == "gpipe" || cfgs[i].strategy == "1f1b")
      CHECK(cfgs[i].micro_batches == 4);
    else
      CHECK(cfgs[i].micro_batches == 1);
  }
  // A pipeline run compares pipelines first, with its own micro-batches.
  base.strategy = "gpipe";
  base.world = 4;
  base.micro_batches = 8;
  const std::vector<RunConfig> pipes = default_compare_configs(base);
  REQUIRE(pipes.size() >= 3);
  CHECK(config_label(pipes[0]) ==
        "gpipe \xC3\x97"
        "4 M=8");
  CHECK(pipes[1].strategy == "naive-mp");
  CHECK(pipes[1].micro_batches == 1);
  CHECK(pipes[2].strategy == "1f1b");
  CHECK(pipes[2].micro_batches == 8);
}

TEST_CASE("compare runs naive-mp M=1 beside gpipe and 1f1b M=8, with a bubble only for pipelines",
          "[compare-view]") {
  RunConfig base = small_base();
  base.micro_batches = 8;
  std::vector<RunConfig> cfgs = parse_compare_list("naive-mp:4,gpipe:4/m=8,1f1b:4", base);
  cfgs.push_back(config_for(parse_compare_item("ddp:2", base), base));
  cfgs.push_back(config_for(parse_compare_item("single", base), base));
  const std::vector<CompareEntry> entries = run_all(cfgs);
  REQUIRE(entries.size() == 5);
  for (const CompareEntry& e : entries) {
    INFO(config_label(e.cfg) << ": " << e.error);
    REQUIRE(e.done);
    REQUIRE(e.error.empty());
    REQUIRE(e.result);
    CHECK(e.row.idle_per_rank.size() == static_cast<size_t>(e.cfg.world));
    CHECK(e.row.idle_share >= 0);
    CHECK(e.row.idle_share <= 1);
    CHECK(e.bounds.size() == static_cast<size_t>(e.cfg.steps) + 1);
  }
  // Every configuration trains the same model on the same data.
  for (const CompareEntry& e : entries)
    CHECK(e.row.final_loss == Approx(entries[0].row.final_loss));
  const CompareRow& naive = entries[0].row;
  const CompareRow& gpipe = entries[1].row;
  const CompareRow& ofob = entries[2].row;
  CHECK(naive.pipeline);
  CHECK(naive.micro_batches == 1);
  CHECK(naive.stages == 4);
  CHECK(naive.bubble_formula == Approx(3.0 / 4.0));
  CHECK(gpipe.micro_batches == 8);
  CHECK(gpipe.bubble_formula == Approx(3.0 / 11.0));
  CHECK(ofob.micro_batches == 8);
  CHECK(ofob.label ==
        "1f1b \xC3\x97"
        "4 M=8");
  const CompareRow& ddp = entries[3].row;
  const CompareRow& single = entries[4].row;
  CHECK_FALSE(ddp.pipeline);
  CHECK(ddp.bubble_formula == 0);
  CHECK(ddp.micro_batches == 0);
  CHECK_FALSE(single.pipeline);
  // One device computing alone waits for no peer: it is less idle than naive-mp's
  // stages, each of which works a quarter of the step. (An absolute bound failed
  // under ctest -j2: a descheduled thread's gaps between spans count as idle.)
  CHECK(single.idle_share < naive.idle_share);
  CHECK(naive.idle_share > 0.5);

  const std::string csv = compare_csv({naive, gpipe, ddp});
  CHECK(csv.rfind("strategy,world,median_step_ms,peak_mem_bytes_rank0,peak_mem_bytes_rank1,"
                  "peak_mem_bytes_rank2,peak_mem_bytes_rank3,sent_bytes_per_step,idle_share,"
                  "bubble_share,bubble_formula,final_loss,configuration,micro_batches,stages,"
                  "precision,projected_step_ms,projected_bubble_share,projected_exposed_share,"
                  "weight_diff_to_single\n",
                  0) == 0);
  // The pipeline rows carry their bubble and formula; ddp leaves both empty.
  CHECK(csv.find(",0.7500,") != std::string::npos);
  CHECK(csv.find(",0.2727,") != std::string::npos);
  CHECK(csv.find(",\"gpipe \xC3\x97"
                 "4 M=8\",8,4,fp32,") != std::string::npos);
  CHECK(csv.find(",\"ddp \xC3\x97"
                 "2\",,,fp32,") != std::string::npos);
  // Every row is projected onto dedicated devices, beside what was measured.
  CHECK(gpipe.projected);
  CHECK(ddp.projected);
  CHECK(gpipe.projected_step_ms > 0);
  CHECK(gpipe.projected_bubble > 0);
  // After ddp's idle share: two empty fields (bubble, formula), then its loss.
  char fields[96];
  std::snprintf(fields, sizeof fields, ",%.4f,,,%.6g,\"ddp", ddp.idle_share, ddp.final_loss);
  CHECK(csv.find(fields) != std::string::npos);
  std::snprintf(fields, sizeof fields, ",%.4f,%.4f,%.4f,", gpipe.idle_share, gpipe.idle_share,
                gpipe.bubble_formula);
  CHECK(csv.find(fields) != std::string::npos);
}

TEST_CASE("compare rows arrive one by one: a finished run shows while the next runs",
          "[compare-view]") {
  RunConfig quick = small_base();
  quick.steps = 1;
  RunConfig slow = quick;
  slow.steps = 100000;  // cancelled long before the end
  CompareSession s;
  std::vector<CompareEntry> entries;
  s.start({quick, slow, quick});
  bool seen_first_alone = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) {
    s.poll(entries);
    if (!entries.empty() && entries[0].done) {
      seen_first_alone = !entries[1].done && !entries[2].done && s.busy();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK(seen_first_alone);
  REQUIRE(entries.size() == 3);
  CHECK(entries[0].error.empty());
  CHECK(entries[0].data.span_count() > 0);
  CHECK(entries[0].row.peak_bytes.size() == 2);
  // The second is running (steps counting up) and the third waits its turn.
  const auto until2 = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (s.running_steps_done() < 2 && std::chrono::steady_clock::now() < until2)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  CHECK(s.running_index() == 1);
  CHECK(s.running_steps_done() >= 2);
  s.cancel();
  s.poll(entries);
  CHECK_FALSE(s.busy());
  INFO("entry 1 error: " << entries[1].error);
  CHECK_FALSE(entries[1].done);
  CHECK_FALSE(entries[2].done);
}

TEST_CASE("memory over time: runs with different step lengths line up by step", "[compare-view]") {
  const RunData fast = stepped_run(1000, 4, {500, 700});
  const RunData slow = stepped_run(3000, 4, {300, 900});
  const std::vector<int64_t> bf = step_bounds(fast), bs = step_bounds(slow);
  REQUIRE(bf == std::vector<int64_t>{100, 1100, 2100, 3100, 4100});
  REQUIRE(bs.size() == 5);
  CHECK(step_position(bf, 1600) == Approx(1.5));
  CHECK(step_position(bs, 100 + 3000 + 1500) == Approx(1.5));
  CHECK(step_position(bf, 0) == 0);      // before step 0
  CHECK(step_position(bf, 99999) == 4);  // after the last step

  // The busiest rank is rank 1 in both; its activations come at x = k + 0.5 and
  // go at k + 0.75 in both runs, whatever the step's length.
  CHECK(busiest_rank(fast) == 1);
  for (const RunData* d : {&fast, &slow}) {
    const std::vector<MemoryPoint> c = memory_by_step(*d, kMemoryBusiest, 1, 2);
    REQUIRE(c.size() == 6);
    CHECK(c[0].x == 1);
    CHECK(c[0].bytes == 1000);  // what setup left, in force when step 1 begins
    CHECK(c[1].x == Approx(1.5));
    CHECK(c[2].x == Approx(1.75));
    CHECK(c[2].bytes == 1000);
    CHECK(c[3].x == Approx(2.5));
    CHECK(c[5].x == 3);  // the end of the last step shown
    CHECK(bytes_at_position(c, 1.6) == c[1].bytes);
    CHECK(bytes_at_position(c, 2.9) == 1000);
  }
  CHECK(memory_by_step(fast, kMemoryBusiest, 1, 2)[1].bytes == 1700);
  CHECK(memory_by_step(slow, kMemoryBusiest, 1, 2)[1].bytes == 1900);
  // A chosen rank, and all ranks added up.
  CHECK(memory_by_step(fast, 0, 0, 0)[1].bytes == 1500);
  const std::vector<MemoryPoint> sum = memory_by_step(fast, kMemorySum, 0, 0);
  REQUIRE(sum.size() == 4);
  CHECK(sum[0].bytes == 2000);
  CHECK(sum[1].bytes == 3200);
  CHECK(sum[2].bytes == 2000);
  // Ranks or steps that do not exist give nothing rather than a wrong curve.
  CHECK(memory_by_step(fast, 5, 0, 1).empty());
  CHECK(memory_by_step(fast, 0, 7, 8).empty());
  CHECK(memory_by_step(fast, 0, 2, 99).back().x == 4);  // clamped to the last step
}

TEST_CASE("memory over time from a real run follows the allocator", "[compare-view]") {
  RunConfig base = small_base();
  const std::vector<CompareEntry> e = run_all(parse_compare_list("ddp:2,zero3:2", base));
  REQUIRE(e.size() == 2);
  for (const CompareEntry& x : e) {
    REQUIRE(x.result);
    const std::vector<MemoryPoint> c = memory_by_step(x.data, x.bounds, kMemoryBusiest, 0, 2);
    REQUIRE(c.size() > 2);
    CHECK(c.front().x == 0);
    CHECK(c.back().x == 3);
    int64_t peak = 0;
    for (size_t i = 1; i < c.size(); ++i) CHECK(c[i].x >= c[i - 1].x);
    for (const MemoryPoint& p : c) peak = std::max(peak, p.bytes);
    // The steps hold the run's peak (setup allocates less than a step uses).
    int64_t run_peak = 0;
    for (int64_t p : x.row.peak_bytes) run_peak = std::max(run_peak, p);
    CHECK(peak == run_peak);
  }
  // ZeRO-3 shards what DDP replicates: its busiest rank holds less.
  const auto peak_of_curve = [](const CompareEntry& x) {
    int64_t p = 0;
    for (const MemoryPoint& m : memory_by_step(x.data, x.bounds, kMemoryBusiest, 0, 2))
      p = std::max(p, m.bytes);
    return p;
  };
  CHECK(peak_of_curve(e[1]) < peak_of_curve(e[0]));
}

TEST_CASE("gui --compare: a bad item ends in one line and exit code 2, before any window",
          "[compare-view]") {
  const test::CliResult bad = test::run_cli("gui --view compare --compare naive-mp:4,ddp:2/m=8");
  CHECK(bad.code == 2);
  CHECK(bad.out ==
        "error: --compare item 'ddp:2/m=8': 'm=8' does not apply to ddp (micro-batches (m=N) is "
        "for: " +
            strategies_reading(StrategyOption::micro_batches) + ")\n");
  const test::CliResult show = test::run_cli("gui --compare-show bars");
  CHECK(show.code == 2);
  CHECK(show.out.find("--compare-show 'bars' is invalid (valid: timelines, memory, peaks)") !=
        std::string::npos);
  const test::CliResult help = test::run_cli("gui --help");
  CHECK(help.code == 0);
  CHECK(help.out.find("naive-mp:4,gpipe:4/m=8,1f1b:4/m=8") != std::string::npos);
}

TEST_CASE("compare: final weights against a single row of the same training", "[compare-view]") {
  // ddp ends with single's weights up to float32 reduction order; gpipe with
  // BatchNorm over 4 micro-batches trains something else; a run of another
  // seed is not the same training and gets no figure.
  RunConfig single;
  single.model = "mlp:3x32+bn";
  single.strategy = "single";
  single.world = 1;
  single.batch = 16;
  single.steps = 3;
  RunConfig ddp = single;
  ddp.model = "mlp:3x32";
  RunConfig plain = ddp;
  plain.strategy = "single";
  ddp.strategy = "ddp";
  ddp.world = 2;
  RunConfig gpipe = single;
  gpipe.strategy = "gpipe";
  gpipe.world = 3;
  gpipe.micro_batches = 4;
  RunConfig gpipe1 = gpipe;
  gpipe1.micro_batches = 1;
  RunConfig other_seed = ddp;
  other_seed.seed = 9;
  std::vector<CompareEntry> entries(6);
  const RunConfig cfgs[] = {single, gpipe, gpipe1, plain, ddp, other_seed};
  for (size_t i = 0; i < entries.size(); ++i)
    fill_compare_entry(entries[i], std::make_unique<RunResult>(run_training(cfgs[i])));
  fill_cross_row_columns(entries);
  CHECK(entries[0].row.weight_diff_to_single == 0);
  CHECK(entries[1].row.weight_diff_to_single > 1e-4);  // M = 4: per-micro-batch statistics
  CHECK(entries[2].row.weight_diff_to_single < 1e-5);  // M = 1: the whole batch
  CHECK(entries[3].row.weight_diff_to_single == 0);    // the first single of its own model
  CHECK(entries[4].row.weight_diff_to_single < 1e-5);  // ddp: reduction order
  CHECK(entries[5].row.weight_diff_to_single == -1);   // another seed: not the same training
  std::vector<CompareRow> rows;
  for (const CompareEntry& e : entries) rows.push_back(e.row);
  const std::string csv = compare_csv(rows);
  CHECK(csv.find(",weight_diff_to_single\n") != std::string::npos);
  CHECK(csv.find(",0\n") != std::string::npos);  // the single rows
}

TEST_CASE("compare: rows of the same work share one cost table, other rows keep their own",
          "[compare-view]") {
  // Overlap on and off compute the same ops: their "as on N" columns come from
  // one pooled table of op costs, so they differ by the schedule, not by this
  // machine's speed in each run. zero1 computes other ops (its optimizer runs
  // on a shard): it keeps its own. A row still running pools nothing yet.
  RunConfig on;
  on.model = "mlp:3x32";
  on.strategy = "ddp";
  on.world = 2;
  on.batch = 16;
  on.steps = 3;
  RunConfig off = on;
  off.overlap = false;
  RunConfig zero1 = on;
  zero1.strategy = "zero1";
  std::vector<CompareEntry> entries(3);
  fill_compare_entry(entries[0], std::make_unique<RunResult>(run_training(on)));
  fill_compare_entry(entries[2], std::make_unique<RunResult>(run_training(zero1)));
  fill_cross_row_columns(entries);  // the second row has not finished
  CHECK(entries[0].row.projected);
  CHECK(entries[0].row.projected_pooled == 0);
  fill_compare_entry(entries[1], std::make_unique<RunResult>(run_training(off)));
  fill_cross_row_columns(entries);
  for (const CompareEntry& e : entries) {
    INFO(e.cfg.strategy << (e.cfg.overlap ? "" : " --no-overlap") << ": "
                        << e.row.projection_error);
    CHECK(e.row.projected);
  }
  CHECK(entries[0].row.projected_pooled == 1);
  CHECK(entries[1].row.projected_pooled == 1);
  CHECK(entries[2].row.projected_pooled == 0);
}
