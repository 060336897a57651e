// Lessons: every malformed file in tests/lessons_bad/ gets one error naming the
// file, the line and the key (never a crash); the Markdown and terminal
// rendering; the metric registry on real runs; the `shardlab lesson` commands.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "app/lesson/lesson.h"
#include "app/lesson/terminal.h"
#include "core/model/model.h"
#include "core/parallel/model_state.h"
#include "core/parallel/sharding.h"
#include "core/run/metrics.h"

using namespace shardlab;
using namespace shardlab::lesson;
using shardlab::test::run_cli;
namespace fs = std::filesystem;

namespace {

const std::string kTests = SHARDLAB_TEST_DIR;
const std::string kExample = kTests + "/lessons_good/01-example.toml";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The line marked "# <-" (1-based), or 1 when none is.
int marked_line(const std::string& content) {
  std::istringstream in(content);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find("# <-") != std::string::npos) return n;
  }
  return 1;
}

MetricRef ref(const std::string& name, char run = 'a') {
  MetricRef m;
  m.name = name;
  m.run = run;
  return m;
}

std::string plain(const std::vector<TextRun>& runs) {
  std::string s;
  for (const TextRun& r : runs) s += r.text;
  return s;
}

}  // namespace

TEST_CASE("every malformed lesson file gets file:line: key and a reason, never a crash",
          "[lessons]") {
  int files = 0;
  for (const auto& e : fs::directory_iterator(kTests + "/lessons_bad")) {
    const std::string path = e.path().string();
    const std::string name = e.path().filename().string();
    const std::string content = read_all(path);
    std::string key, message;
    int line = 1;
    if (name == "empty.toml") {
      key = "format";
      message = "missing";
    } else if (name == "binary_garbage.toml") {
      message = "NUL byte";
    } else {
      // First line: "# expect: KEY|MESSAGE".
      const std::string first = content.substr(0, content.find('\n'));
      REQUIRE(first.rfind("# expect: ", 0) == 0);
      const std::string spec = first.substr(10);
      key = spec.substr(0, spec.find('|'));
      message = spec.substr(spec.find('|') + 1);
      line = marked_line(content);
    }
    INFO(name);
    ++files;
    try {
      load_lesson(path);
      FAIL("loaded without an error");
    } catch (const LessonError& err) {
      const std::string what = err.what();
      INFO(what);
      CHECK(what.rfind(path + ":" + std::to_string(line) + ": ", 0) == 0);
      CHECK(err.line() == line);
      CHECK(err.file() == path);
      CHECK(what.find(key) != std::string::npos);
      CHECK(what.find(message) != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);  // one line
    } catch (const std::exception& other) {
      FAIL("not a LessonError: " << other.what());
    }
  }
  CHECK(files >= 50);
}

TEST_CASE("the example lesson parses into texts, runs, look, prediction and gates", "[lessons]") {
  const Lesson l = load_lesson(kExample);
  CHECK(l.id == "example");
  CHECK(l.format == 1);
  CHECK(l.title.zh == "示例：两个进程上的 ZeRO-3");
  REQUIRE(l.steps.size() == 2);
  const Step& s = l.steps[0];
  REQUIRE(s.run);
  CHECK(s.run->strategy == "zero3");
  CHECK(s.run->world == 2);
  CHECK(s.run->model == "mlp:2x32");
  REQUIRE(s.compare);
  CHECK(s.compare->strategy == "ddp");
  CHECK(s.compare->model == "mlp:2x32");  // the keys not given come from run
  CHECK(s.compare->batch == 8);
  // An option compare's strategy does not read is not inherited from run.
  CHECK_FALSE(s.run->prefetch);
  CHECK(s.compare->prefetch);

  // Markdown: a paragraph with emphasis and strong, three list items (one nested), code.
  const Markdown& en = s.text.en_blocks;
  REQUIRE(en.size() == 5);
  CHECK(en[0].kind == BlockKind::paragraph);
  bool em = false, strong = false;
  for (const TextRun& r : en[0].runs) {
    if (r.emphasis && r.text == "its shard") em = true;
    if (r.strong && r.text == "optimizer state") strong = true;
  }
  CHECK(em);
  CHECK(strong);
  CHECK(en[1].kind == BlockKind::list_item);
  CHECK(en[1].depth == 1);
  CHECK(en[1].runs[0].code);
  CHECK(en[1].runs[0].text == "params");
  CHECK(en[3].kind == BlockKind::list_item);
  CHECK(en[3].depth == 2);
  CHECK(plain(en[3].runs) == "padding aside");
  CHECK(s.text.zh_blocks.size() == 5);
  // A line break inside Chinese text is no space.
  CHECK(plain(s.text.zh_blocks[0].runs).find("优化器状态的一个分片") != std::string::npos);

  REQUIRE(s.look);
  CHECK(s.look->view == "cluster");
  REQUIRE(s.look->seek);
  CHECK(s.look->seek->kind == Seek::Kind::event);
  CHECK(s.look->seek->event == SpanKind::all_gather);
  CHECK(s.look->seek->layer == 0);
  REQUIRE(s.look->highlight);
  CHECK(s.look->highlight->kind == Highlight::Kind::rank);
  CHECK(s.look->highlight->rank == 1);
  REQUIRE(s.predict);
  CHECK(!s.predict->is_choice());
  CHECK(s.predict->metric.name == "model_state_bytes");
  CHECK(s.predict->unit == "B");
  CHECK(s.predict->tolerance == Approx(0.1));
  REQUIRE(s.gates.size() == 3);
  CHECK(s.gates[1].right);
  CHECK(s.gates[1].right->run == 'b');
  CHECK(s.gates[2].metric.kind == "all_gather");

  const Step& p = l.steps[1];
  REQUIRE(p.predict);
  REQUIRE(p.predict->choices.size() == 2);
  CHECK(p.predict->choices[0].op == "<");
  CHECK(p.predict->choices[0].value == 50);
  CHECK(p.predict->choices[1].label.zh == "更大");
  CHECK(p.look->seek->kind == Seek::Kind::peak_memory);
  CHECK(p.look->seek->rank == 1);
  CHECK(p.look->highlight->area == "bubble");
}

TEST_CASE("Markdown: blocks, runs, ordered lists, headings, code, refused constructs",
          "[lessons]") {
  const Markdown m = parse_markdown(
      "# Title\n\nA *b* **c** `d` &amp; e\n\n3. three\n4. four\n\n```\nx = 1\ny = 2\n```\n");
  REQUIRE(m.size() == 5);
  CHECK(m[0].kind == BlockKind::heading);
  CHECK(m[0].level == 1);
  CHECK(plain(m[1].runs) == "A b c d & e");
  CHECK(m[2].ordered);
  CHECK(m[2].number == 3);
  CHECK(m[3].number == 4);
  CHECK(m[4].kind == BlockKind::code);
  CHECK(m[4].runs[0].text == "x = 1\ny = 2");
  // Indented lines in a TOML string are text, not a code block.
  CHECK(parse_markdown("    indented text")[0].kind == BlockKind::paragraph);
  // English across a line break gets a space.
  CHECK(plain(parse_markdown("one\ntwo")[0].runs) == "one two");
  // Chinese across a line break gets none, nor does full-width punctuation
  // next to Latin text ("a2" at a line's end, "（这就是" on the next line).
  CHECK(plain(parse_markdown("中文\n继续")[0].runs) == "中文继续");
  CHECK(plain(parse_markdown("拿到 a2\n（全收集）")[0].runs) == "拿到 a2（全收集）");
  CHECK(plain(parse_markdown("全收集，\nall-gather")[0].runs) == "全收集，all-gather");
  CHECK_THROWS_WITH(parse_markdown("[a](b)"), Catch::Contains("links"));
  CHECK_THROWS_WITH(parse_markdown("> quote"), Catch::Contains("quotes"));
  CHECK_THROWS_WITH(parse_markdown("a\n\n---\n\nb"), Catch::Contains("rules"));
  CHECK_THROWS_WITH(parse_markdown("<div>x</div>"), Catch::Contains("HTML"));
}

TEST_CASE(
    "terminal rendering wraps to the width, bullets lists, drops emphasis marks in plain text",
    "[lessons]") {
  const Markdown m = parse_markdown(
      "The *quick* brown fox jumps over the **lazy** dog and keeps running far away.\n\n"
      "- first item that is long enough to wrap onto a second line here\n  - nested\n");
  const std::string out = render_terminal(m, 30, false, 2);
  std::istringstream in(out);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    INFO(line);
    CHECK(display_width(line) <= 30);
    if (!line.empty()) CHECK(line.rfind("  ", 0) == 0);
  }
  CHECK(lines >= 6);
  // Plain text: the words, without Markdown's asterisks.
  CHECK(out.find("The quick brown") != std::string::npos);
  CHECK(out.find("lazy") != std::string::npos);
  CHECK(out.find('*') == std::string::npos);
  CHECK(out.find("  • first") != std::string::npos);
  CHECK(out.find("    • nested") != std::string::npos);
  // ANSI: styles instead of marks.
  CHECK(render_terminal(m, 30, true).find("\033[3mquick\033[0m") != std::string::npos);
  // Chinese: two columns a character, breaks between characters, never before '，'.
  CHECK(display_width("中文") == 4);
  const std::string zh = render_terminal(
      parse_markdown("每个进程只保留参数，梯度和优化器状态的一个分片，然后在需要时收集。"), 20,
      false);
  std::istringstream zin(zh);
  while (std::getline(zin, line)) {
    INFO(line);
    CHECK(display_width(line) <= 20);
    CHECK(line.rfind("，", 0) != 0);
  }
  // A number grouped by thousands stays on one line ("Ψ = 27 936", never "27" / "936").
  CHECK(thousands_space("27 936 B", 2));
  CHECK_FALSE(thousands_space("rank 0 1", 6));
  CHECK_FALSE(thousands_space("8 × 4 096", 1));
  CHECK(formula_space("(M + P − 1)", 2));
  CHECK(formula_space("V = 719", 1));
  CHECK(formula_space("V = 719", 3));
  CHECK_FALSE(formula_space("a (b) c", 5));
  CHECK_FALSE(formula_space("(a very long aside that goes on and on)", 7));
  for (int width = 14; width <= 30; ++width) {
    const std::string wrapped = render_terminal(
        parse_markdown("The bubble share becomes (P − 1)/(M + P − 1) with M micro-batches."), width,
        false);
    INFO(wrapped);
    CHECK(wrapped.find("(M + P − 1)") != std::string::npos);
  }
  for (int width = 12; width <= 24; ++width) {
    const std::string wrapped = render_terminal(
        parse_markdown("Here the model holds Ψ = 27 936 parameters."), width, false);
    INFO(wrapped);
    CHECK(wrapped.find("27 936") != std::string::npos);
  }
}

TEST_CASE("every metric resolves, is documented, and FORMAT.md lists the same names", "[lessons]") {
  const std::set<std::string> units = {"B", "ms", "us", "%", "x", "count", ""};
  std::set<std::string> names;
  for (const MetricInfo& m : metric_registry()) {
    INFO(m.name);
    CHECK(find_metric(m.name) == &m);
    CHECK(!m.meaning.empty());
    CHECK(units.count(m.unit) == 1);
    CHECK(names.insert(m.name).second);
  }
  CHECK(find_metric("peak") == nullptr);
  // A time is printed with its unit (the clock offset was a bare number).
  CHECK(find_metric("clock_offset_us")->unit == "us");
  CHECK(format_value(12.5, "us") == "12.5 \xC2\xB5s");
  CHECK(format_value(5000, "us") == "5000 \xC2\xB5s");
  // The table in lessons/FORMAT.md ("| `name` [args] | unit | ...").
  const std::string doc = read_all(kTests + "/../lessons/FORMAT.md");
  std::set<std::string> documented;
  const std::regex row(R"(\n\| `([a-z_]+)`)");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), row); it != std::sregex_iterator();
       ++it)
    documented.insert((*it)[1]);
  CHECK(documented == names);
}

TEST_CASE("metrics on a real zero3 world-2 run: model states = allocator = 16Ψ/N within padding",
          "[lessons]") {
  RunConfig c;
  c.model = "mlp:3x25";  // 650 values a layer: world 2 divides it, so check padding is 0 here
  c.strategy = "zero3";
  c.world = 2;
  c.batch = 8;
  c.steps = 3;
  RunConfig d = c;
  d.strategy = "ddp";
  const RunResult a = run_training(c), b = run_training(d);
  MetricRuns runs(a, &b);
  const ModelLayout layout(ModelSpec::parse(c.model));
  const double psi = static_cast<double>(layout.total());

  MetricRef m = ref("model_state_bytes");
  for (int rank = 0; rank < 2; ++rank) {
    m.rank = rank;
    const MetricValue v = evaluate_metric(m, runs);
    const PoolStats& dev = a.ranks[rank].memory.device;
    const double allocator =
        static_cast<double>(dev.peak[static_cast<int>(MemCategory::params)] +
                            dev.peak[static_cast<int>(MemCategory::grads)] +
                            dev.peak[static_cast<int>(MemCategory::optimizer_state)]);
    CHECK(v.measured == allocator);
    REQUIRE(v.formula);
    CHECK(*v.formula == 16 * psi / 2);
    CHECK(v.formula_text == "16Ψ/N");
    const double pad = padding_per_rank(make_flat_groups(layout, 1, 2)) * 16;
    CHECK(std::abs(v.measured - *v.formula) <= pad + 1e-9);
    CHECK(v.unit == "B");
  }  // The meta run's prediction of each rank's whole peak, made as before the run.
  for (int rank = 0; rank < 2; ++rank) {
    MetricRef p = ref("predicted_peak_bytes"), e = ref("peak_prediction_error"),
              measured = ref("peak_bytes");
    p.rank = e.rank = measured.rank = rank;
    const double predicted = evaluate_metric(p, runs).measured;
    const double error = evaluate_metric(e, runs).measured;
    CHECK(predicted > 0);
    CHECK(error >= 0);
    CHECK(predicted == evaluate_metric(measured, runs).measured + error);
  }

  m = ref("bytes_per_param");
  CHECK(evaluate_metric(m, runs).measured == Approx(8).epsilon(0.01));
  m = ref("param_count");
  CHECK(evaluate_metric(m, runs).measured == psi);
  m = ref("world_size");
  CHECK(evaluate_metric(m, runs).measured == 2);
  m = ref("final_loss");
  CHECK(evaluate_metric(m, runs).measured == a.losses.back());
  m = ref("weight_diff_to_single");
  const MetricValue w = evaluate_metric(m, runs);
  CHECK(w.measured >= 0);
  CHECK(w.measured < 1e-5);
  m = ref("step_time_ratio");
  CHECK(evaluate_metric(m, runs).measured == Approx(a.median_step_ms / b.median_step_ms));
  m = ref("model_state_bytes", 'b');
  CHECK(*evaluate_metric(m, runs).formula == 16 * psi);
  m = ref("sent_bytes_per_step");
  const MetricValue sent = evaluate_metric(m, runs);
  CHECK(sent.measured == a.ranks[0].bytes_sent_per_step);
  REQUIRE(sent.formula);
  CHECK(sent.measured == Approx(*sent.formula).epsilon(0.05));
  m = ref("collective_count");
  m.kind = "all_gather";
  m.step = 1;
  CHECK(evaluate_metric(m, runs).measured >= 3);  // at least one per layer
  m.kind = "send";
  CHECK(evaluate_metric(m, runs).measured == 0);
  m = ref("peak_bytes");
  m.category = "optimizer_state";
  CHECK(evaluate_metric(m, runs).measured ==
        a.ranks[0].memory.device.peak[static_cast<int>(MemCategory::optimizer_state)]);
  m = ref("comm_hidden_share");
  const double hidden = evaluate_metric(m, runs).measured;
  CHECK(hidden >= 0);
  CHECK(hidden <= 100);
  m = ref("idle_share");
  const double idle = evaluate_metric(m, runs).measured;
  CHECK(idle > 0);
  CHECK(idle < 100);

  // Bad references: one line each, naming the argument.
  m = ref("model_state_bytes");
  m.rank = 2;
  CHECK_THROWS_WITH(evaluate_metric(m, runs), Catch::StartsWith("rank 2"));
  m = ref("activations_in_flight");
  CHECK_THROWS_WITH(evaluate_metric(m, runs), Catch::Contains("pipeline strategies only"));
  m = ref("nope");
  CHECK_THROWS_WITH(evaluate_metric(m, runs), Catch::Contains("is unknown"));
  MetricRuns only_a(a, nullptr);
  m = ref("step_time_ratio");
  CHECK_THROWS_WITH(evaluate_metric(m, only_a), Catch::Contains("compare run"));
}

TEST_CASE("pipeline metrics: bubble formula and activations in flight on gpipe", "[lessons]") {
  RunConfig c;
  c.model = "mlp:4x64";
  c.strategy = "gpipe";
  c.world = 2;
  c.batch = 16;
  c.steps = 2;
  c.micro_batches = 4;
  const RunResult r = run_training(c);
  MetricRuns runs(r, nullptr);
  MetricRef m = ref("bubble_share");
  const MetricValue v = evaluate_metric(m, runs);
  REQUIRE(v.formula);
  CHECK(*v.formula == Approx(100.0 * 1 / 5));
  CHECK(v.unit == "%");
  m = ref("activations_in_flight");
  const MetricValue f = evaluate_metric(m, runs);
  CHECK(*f.formula == 4);
  CHECK(f.measured == Approx(4).margin(0.5));
  m = ref("peak_activation_bytes");
  CHECK(evaluate_metric(m, runs).measured ==
        static_cast<double>(*evaluate_metric(m, runs).formula));
}

TEST_CASE("gpt metrics: single's reference has the run's --seq and --data", "[lessons]") {
  // Both change the parameters (wpe is [T,C], the text's characters are V): a
  // reference trained on the defaults could not be compared at all.
  const fs::path text = fs::temp_directory_path() / "shardlab-lessons-gpt.txt";
  std::ofstream(text)
      << "a small text, 数据并行 and 流水线并行, to train on; a small text again.\n";
  RunConfig c;
  c.model = "gpt:1x16x2";
  c.seq = 8;
  c.data = text.string();
  c.strategy = "zero3";
  c.world = 2;
  c.batch = 4;
  c.steps = 2;
  const RunResult r = run_training(c);
  MetricRuns runs(r, nullptr);
  const MetricValue w = evaluate_metric(ref("weight_diff_to_single"), runs);
  CHECK(w.measured >= 0);
  CHECK(w.measured < 1e-4);
  // 16 bytes a parameter exactly, where multiplying by 1/Ψ would round below
  // 16: Ψ = 7 648 here (gpt:2x16x2, T = 16, V = 25, the tied copy included).
  RunConfig s = c;
  s.model = "gpt:2x16x2";
  s.seq = 16;
  s.strategy = "single";
  s.world = 1;
  s.steps = 1;
  const RunResult one = run_training(s);
  MetricRuns single_runs(one, nullptr);
  const double psi = evaluate_metric(ref("param_count"), single_runs).measured;
  const double bytes = evaluate_metric(ref("model_state_bytes"), single_runs).measured;
  CHECK(bytes == 16 * psi);
  REQUIRE(psi == 7648);
  CHECK(bytes * (1.0 / psi) != 16);  // the case the division is there for
  CHECK(evaluate_metric(ref("bytes_per_param"), single_runs).measured == 16);
  const std::string line = command_line(c);
  CHECK_THAT(line, Catch::Contains(" --seq 8"));
  CHECK_THAT(line, Catch::Contains(" --data " + text.string()));
  CHECK_THAT(command_line(RunConfig{}), !Catch::Contains("--seq") && !Catch::Contains("--data"));
  // A float learning rate reads as written ("0.05"), not widened to a double's digits.
  RunConfig l;
  l.optimizer.lr = 0.05f;
  CHECK_THAT(command_line(l), Catch::EndsWith(" --lr 0.05"));
  l.optimizer.lr = 1.0f / 3;
  const std::string third = command_line(l);
  CHECK(std::strtof(third.substr(third.rfind(' ') + 1).c_str(), nullptr) == 1.0f / 3);
  // Bytes: the binary multiple and the exact count the reveal texts write.
  CHECK(format_value(446976, "B") == "436.50 KiB (446 976 B)");
  CHECK(format_value(512, "B") == "512 B");
  CHECK(format_value(5.33, "B") == "5.33 B");
  CHECK(format_value(194176, "count") == "194 176");
  CHECK(format_value(6, "count") == "6");
  fs::remove(text);
}

TEST_CASE("a step evaluates on its runs: gates, seek, prediction, answers", "[lessons]") {
  const Lesson l = load_lesson(kExample);
  const Step& s = l.steps[0];
  const StepRuns runs = run_step(s);
  REQUIRE(runs.b);
  const StepResult r = evaluate_step(s, runs.a, &*runs.b);
  REQUIRE(r.gates.size() == 3);
  for (const GateResult& g : r.gates) {
    INFO(g.left.error);
    CHECK(g.pass);
  }
  CHECK(r.gates_pass());
  REQUIRE(r.seek);
  CHECK(r.seek->found);
  CHECK(r.seek->t_ns > 0);
  REQUIRE(r.prediction);
  REQUIRE(r.prediction->value);
  const double measured = r.prediction->value->measured;
  CHECK(measured > 0);

  const Prediction& p = *s.predict;
  CHECK(check_answer(p, r, std::to_string(measured)).correct);
  CHECK(check_answer(p, r, std::to_string(measured * 1.05)).correct);
  CHECK_FALSE(check_answer(p, r, std::to_string(measured * 1.5)).correct);
  const AnswerCheck k = check_answer(p, r, std::to_string(measured / 1024) + " KiB");
  CHECK(k.error.empty());
  CHECK(k.correct);
  CHECK(!check_answer(p, r, "lots").error.empty());
  CHECK(!check_answer(p, r, "12 ms").error.empty());
  // The forms the lessons print: grouped digits, multiples of Ψ (issue 24: "446 976" and
  // "16Ψ" were refused).
  CHECK(r.psi > 0);
  const long long whole = std::llround(measured);
  const std::string digits = std::to_string(whole);
  std::string spaced, commas;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) {
      spaced += ' ';
      commas += ',';
    }
    spaced += digits[i];
    commas += digits[i];
  }
  INFO(spaced << " / " << commas << " / psi " << r.psi);
  CHECK(check_answer(p, r, spaced).correct);
  CHECK(check_answer(p, r, commas).correct);
  CHECK(check_answer(p, r, spaced + " B").correct);
  char psi_form[64];
  std::snprintf(psi_form, sizeof psi_form, "%.6g\xCE\xA8", measured / r.psi);
  CHECK(check_answer(p, r, psi_form).correct);
  std::snprintf(psi_form, sizeof psi_form, "%.6g\xCE\xA8/2", 2 * measured / r.psi);
  CHECK(check_answer(p, r, psi_form).correct);
  CHECK(!check_answer(p, r, "16\xCE\xA8/0").error.empty());
  CHECK(!check_answer(p, r, "1,5").error.empty());  // not a digit group: refused, not 15
  {
    // A ratio as the lessons print it ("1.50×").
    Prediction ratio;
    ratio.unit = "x";
    ratio.tolerance = 0.05;
    StepResult rr;
    rr.prediction = MetricResult{};
    rr.prediction->value = MetricValue{1.5, std::nullopt, "", "x"};
    CHECK(check_answer(ratio, rr, "1.5\xC3\x97").correct);
    CHECK(check_answer(ratio, rr, "1.5x").correct);
    CHECK(check_answer(ratio, rr, "1.5").correct);
    CHECK(!check_answer(ratio, rr, "1.5\xCE\xA8").error.empty());  // Ψ is no ratio
  }

  // A failing gate is a result, not an exception.
  Step bad = s;
  bad.gates[0].op = ">";
  const StepResult rb = evaluate_step(bad, runs.a, &*runs.b);
  CHECK_FALSE(rb.gates[0].pass);
  CHECK_FALSE(rb.gates_pass());

  // Multiple choice: the measured value picks the choice; answers by number or text.
  const Step& q = l.steps[1];
  const StepRuns qr = run_step(q);
  const StepResult res = evaluate_step(q, qr.a, nullptr);
  REQUIRE(res.right_choice >= 0);
  const double bubble = res.prediction->value->measured;
  CHECK(res.right_choice == (bubble < 50 ? 0 : 1));
  CHECK(check_answer(*q.predict, res, std::to_string(res.right_choice + 1)).correct);
  CHECK(check_answer(*q.predict, res, res.right_choice == 0 ? "smaller" : "larger").correct);
  CHECK(check_answer(*q.predict, res, res.right_choice == 0 ? "更小" : "更大").correct);
  CHECK(!check_answer(*q.predict, res, "3").error.empty());
  REQUIRE(res.seek);
  CHECK(res.seek->found);
}

TEST_CASE("lesson directories: order, ids, duplicates, names", "[lessons]") {
  const auto all = load_all_lessons(kTests + "/lessons_good");
  REQUIRE(all.size() == 1);
  CHECK(all[0].id == "example");
  CHECK(find_lesson("example", kTests + "/lessons_good").id == "example");
  CHECK(find_lesson("01-example", kTests + "/lessons_good").id == "example");
  CHECK_THROWS_WITH(find_lesson("zero", kTests + "/lessons_good"),
                    Catch::Contains("no lesson 'zero'") && Catch::Contains("valid: example"));
  CHECK_THROWS_WITH(load_all_lessons(kTests + "/lessons_dup"),
                    Catch::Contains("02-same.toml:1: id: 'same' is also the id of"));
  std::vector<std::string> errors;
  const auto lenient = load_all_lessons(kTests + "/lessons_dup", &errors);
  CHECK(lenient.size() == 1);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].find("also the id") != std::string::npos);
  errors.clear();
  CHECK(load_all_lessons(kTests + "/lessons_bad", &errors).empty());
  CHECK(errors.size() >= 50);
  const fs::path empty = fs::temp_directory_path() / "shardlab-no-lessons";
  fs::create_directories(empty);
  CHECK(load_all_lessons(empty.string()).empty());
  CHECK_THROWS_AS(load_all_lessons(kTests + "/no-such-dir"), ConfigError);
}

TEST_CASE("shardlab lesson list/show/run/check: output and exit codes", "[lessons]") {
  setenv("SHARDLAB_LESSONS", (kTests + "/lessons_good").c_str(), 1);
  auto r = run_cli("lesson list");
  CHECK(r.code == 0);
  CHECK(r.out.find("example") != std::string::npos);
  // The source articles' topics without a lesson are named as still to come.
  CHECK(r.out.find("Still to come") != std::string::npos);
  CHECK(r.out.find("parameter server") != std::string::npos);
  CHECK(r.out.find("tensor and sequence parallelism") != std::string::npos);
  r = run_cli("lesson list --lang zh");
  CHECK(r.out.find("示例") != std::string::npos);
  CHECK(r.out.find(" steps") == std::string::npos);
  CHECK(r.out.find("参数服务器") != std::string::npos);
  r = run_cli("lesson show example --lang zh");
  CHECK(r.code == 0);
  CHECK(r.out.find("模型状态被切分") != std::string::npos);
  r = run_cli("lesson show nope");
  CHECK(r.code == 2);
  CHECK(r.out.find("no lesson 'nope'") != std::string::npos);
  r = run_cli("lesson show example --lang fr");
  CHECK(r.code == 2);
  r = run_cli("lesson frobnicate");
  CHECK(r.code == 2);

  r = run_cli("lesson run example --step 1 --answer 16.5KiB");
  INFO(r.out);
  CHECK(r.code == 0);
  // The exact bytes beside the binary multiple, as the reveal texts write them.
  CHECK(r.out.find("your answer: 16.50 KiB (16 896 B) — right") != std::string::npos);
  CHECK(r.out.find("formula 16Ψ/N: 16.50 KiB (16 896 B)") != std::string::npos);
  // In Chinese the words around the numbers are Chinese too.
  const auto zh = run_cli("lesson run example --step 1 --answer 16.5KiB --lang zh");
  CHECK(zh.code == 0);
  CHECK(zh.out.find("你的答案：16.50 KiB (16 896 B) — 正确") != std::string::npos);
  CHECK(zh.out.find("实测：16.50 KiB") != std::string::npos);
  // ... and so are the labels, the gate's verdict and the step count (issue 24: "gate PASS",
  // "run:", "look:" were English under --lang zh).
  CHECK(zh.out.find("检验 通过") != std::string::npos);
  CHECK(zh.out.find("运行：") != std::string::npos);
  CHECK(zh.out.find("请看：") != std::string::npos);
  CHECK(zh.out.find("gate PASS") == std::string::npos);
  CHECK(zh.out.find("  run:") == std::string::npos);
  CHECK(r.out.find("measured: 16.50 KiB") != std::string::npos);
  CHECK(r.out.find("gate PASS") != std::string::npos);
  CHECK(r.out.find("Step 2/2") == std::string::npos);
  r = run_cli("lesson run example --answer 3");
  CHECK(r.code == 2);  // two predictions: which one?
  CHECK(r.out.find("--step K") != std::string::npos);
  r = run_cli("lesson run example --step 1 --answer lots");
  CHECK(r.code == 2);
  r = run_cli("lesson run example --step 3");
  CHECK(r.code == 2);

  r = run_cli("lesson run " + kTests + "/lessons_fail/01-failing.toml");
  CHECK(r.code == 1);
  CHECK(r.out.find("gate FAIL") != std::string::npos);

  r = run_cli("lesson check " + kExample);
  CHECK(r.code == 0);
  r = run_cli("lesson check " + kExample + " " + kTests + "/lessons_bad/bad_op.toml " + kTests +
              "/lessons_bad/empty.toml");
  CHECK(r.code == 2);
  CHECK(r.out.find("lessons_bad/bad_op.toml:") != std::string::npos);
  CHECK(r.out.find("lessons_bad/empty.toml:1:") != std::string::npos);
  r = run_cli("lesson check " + kTests + "/lessons_dup/01-same.toml " + kTests +
              "/lessons_dup/02-same.toml");
  CHECK(r.code == 2);
  CHECK(r.out.find("also the id") != std::string::npos);
  r = run_cli("lesson check /no/such/file.toml");
  CHECK(r.code == 2);

  const fs::path empty = fs::temp_directory_path() / "shardlab-no-lessons";
  fs::create_directories(empty);
  setenv("SHARDLAB_LESSONS", empty.c_str(), 1);
  r = run_cli("lesson list");
  CHECK(r.code == 0);
  CHECK(r.out.find("no lessons") != std::string::npos);
  r = run_cli("lesson run --all");
  CHECK(r.code == 0);
}

TEST_CASE("truncated and corrupted lesson files fail with a LessonError, never a crash",
          "[lessons]") {
  const std::string good = read_all(kExample);
  int errors = 0, loaded = 0;
  auto attempt = [&](const std::string& text) {
    try {
      parse_lesson(text, "mutant.toml");
      ++loaded;
    } catch (const LessonError& e) {
      const std::string what = e.what();
      CHECK(what.rfind("mutant.toml:", 0) == 0);
      ++errors;
    }
  };
  for (size_t cut = 0; cut < good.size(); cut += 5) attempt(good.substr(0, cut));
  // Every 11th byte replaced by characters TOML and Markdown treat specially.
  const std::string specials = "\"'[]{}=#*`\\\n<>|-\x01\xff";
  for (size_t i = 0; i < good.size(); i += 11) {
    std::string m = good;
    m[i] = specials[i % specials.size()];
    attempt(m);
  }
  CHECK(errors > 0);
  CHECK(errors + loaded > static_cast<int>(good.size() / 5));
}

TEST_CASE("a step with a recording: checked against its settings, replayed by lesson run",
          "[lessons]") {
  const fs::path dir = fs::temp_directory_path() / "shardlab-lesson-recording";
  fs::create_directories(dir);
  const std::string rec = (dir / "zero3.shardrec").string();
  auto r = run_cli("run --model mlp:2x32 --strategy zero3 --world 2 --batch 8 --steps 2 --record " +
                   rec);
  REQUIRE(r.code == 0);
  const std::string lesson = R"(format = 1
id = "recorded"
title = { en = "Recorded", zh = "录制" }
summary = { en = "A recorded run.", zh = "一次录制的运行。" }

[[step]]
title = { en = "Replay", zh = "回放" }
text = { en = "A run recorded earlier.", zh = "先前录制的运行。" }
recording = "zero3.shardrec"

[step.look]
seek = { event = "all_gather", layer = 1 }

[[step.gate]]
metric = { name = "model_state_bytes", rank = 1 }
op = "<"
value = 1e9
text = { en = "model states are measured", zh = "模型状态已测量" }
)";
  std::ofstream(dir / "01-recorded.toml") << lesson;
  const Lesson l = load_lesson((dir / "01-recorded.toml").string());
  REQUIRE(l.steps[0].recorded);
  CHECK(l.steps[0].recorded->strategy == "zero3");
  r = run_cli("lesson run " + (dir / "01-recorded.toml").string());
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(r.out.find("gate PASS") != std::string::npos);
  CHECK(r.out.find("seek:     found") != std::string::npos);
  // Ranks and layers are checked against the recording's settings.
  std::string bad = lesson;
  bad.replace(bad.find("rank = 1"), 8, "rank = 2");
  std::ofstream(dir / "02-bad.toml") << bad;
  CHECK_THROWS_WITH(load_lesson((dir / "02-bad.toml").string()),
                    Catch::Contains("02-bad.toml:15: step 1: gate[1].metric.rank"));
  bad = lesson;
  bad.replace(bad.find("layer = 1"), 9, "layer = 5");
  std::ofstream(dir / "03-bad.toml") << bad;
  CHECK_THROWS_WITH(load_lesson((dir / "03-bad.toml").string()),
                    Catch::Contains("look.seek.layer"));
}

namespace {

// A lesson of one step from its run and compare tables (and gates), in both languages.
Lesson one_step(const std::string& run, const std::string& compare, const std::string& gates) {
  const std::string text = R"(format = 1
id = "p"
title = { en = "P", zh = "进程" }
summary = { en = "Processes.", zh = "进程。" }
[[step]]
title = { en = "One", zh = "一" }
text = { en = "Some text.", zh = "一些文字。" }
run = )" + run + "\n" + (compare.empty() ? "" : "compare = " + compare + "\n") +
                           gates;
  return parse_lesson(text, "inline.toml");
}

std::string gate(const std::string& metric, const std::string& op, double value) {
  return "[[step.gate]]\nmetric = " + metric + "\nop = \"" + op +
         "\"\nvalue = " + std::to_string(value) + "\ntext = { en = \"g\", zh = \"门\" }\n";
}

// Points the launched runs at the real binary and a fresh TMPDIR (to see that
// nothing is left there), restoring both afterwards.
struct ProcessEnvScope {
  std::string old_bin, old_tmp;
  bool had_bin, had_tmp;
  fs::path tmp;
  ProcessEnvScope() {
    const char* b = std::getenv("SHARDLAB_BIN");
    const char* t = std::getenv("TMPDIR");
    had_bin = b;
    had_tmp = t;
    if (b) old_bin = b;
    if (t) old_tmp = t;
    tmp = fs::temp_directory_path() / ("shardlab-lesson-test-" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    ::setenv("SHARDLAB_BIN", SHARDLAB_BIN, 1);
    ::setenv("TMPDIR", tmp.c_str(), 1);
  }
  ~ProcessEnvScope() {
    had_bin ? ::setenv("SHARDLAB_BIN", old_bin.c_str(), 1) : ::unsetenv("SHARDLAB_BIN");
    had_tmp ? ::setenv("TMPDIR", old_tmp.c_str(), 1) : ::unsetenv("TMPDIR");
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }
  bool tmp_empty() const { return fs::is_empty(tmp); }
};

}  // namespace

TEST_CASE("process keys: compare inherits them, processes = false runs threads",
          "[lessons][processes]") {
  const std::string run =
      R"({ model = "mlp:2x32", strategy = "zero3", world = 2, batch = 8, steps = 4, )"
      R"(processes = true, fault = "1:2:kill", max-restarts = 1, checkpoint-every = 2 })";
  const Lesson inherit = one_step(run, R"({ strategy = "zero2" })", "");
  const Step& s = inherit.steps[0];
  CHECK(s.run_processes.on);
  CHECK(s.run_processes.fault == "1:2:kill");
  CHECK(s.run_processes.max_restarts == 1);
  CHECK(s.run_processes.checkpoint_every == 2);
  CHECK(s.compare_processes.on);
  CHECK(s.compare_processes.fault == "1:2:kill");
  CHECK(command_line(*s.run, s.run_processes) ==
        "SHARDLAB_FAULT=1:2:kill shardlab launch --nproc-per-node 2 --max-restarts 1 -- run "
        "--model mlp:2x32 --strategy zero3 --world 2 --batch 8 --steps 4 --checkpoint-every 2 "
        "--checkpoint-dir DIR");

  const Lesson threads = one_step(run, "{ processes = false }", "");
  CHECK_FALSE(threads.steps[0].compare_processes.on);
  CHECK(threads.steps[0].compare_processes.fault.empty());
  CHECK(threads.steps[0].compare_processes.max_restarts == 0);
  CHECK(command_line(*threads.steps[0].compare, threads.steps[0].compare_processes)
            .rfind("shardlab run ", 0) == 0);
  // A step with no process keys is unchanged.
  const Lesson plain_run = one_step(
      R"({ model = "mlp:2x32", strategy = "ddp", world = 2, batch = 8, steps = 2 })", "", "");
  CHECK_FALSE(plain_run.steps[0].run_processes.on);
}

TEST_CASE("a step run as processes: same weights as threads, clock offsets, nothing left behind",
          "[lessons][processes]") {
  ProcessEnvScope env;
  const std::string run =
      R"({ model = "mlp:2x32", strategy = "zero3", world = 2, batch = 8, steps = 3, )"
      R"(processes = true })";
  const Lesson l = one_step(run, "{ processes = false }",
                            gate(R"({ name = "weight_diff_between_runs" })", "==", 0) +
                                gate(R"({ name = "clock_offset_us", rank = 1 })", "<", 5000) +
                                gate(R"({ name = "resumed_after_step" })", "==", 0));
  const Step& s = l.steps[0];
  const StepRuns runs = run_step(s);
  REQUIRE(runs.b);
  CHECK(runs.a.clock_offset_ns.size() == 2);  // measured by the processes, kept in the recording
  CHECK(runs.b->clock_offset_ns.empty());     // threads share one clock
  CHECK(runs.a.recorders.size() == 2);
  CHECK(runs.a.final_params == runs.b->final_params);
  const StepResult r = evaluate_step(s, runs.a, &*runs.b);
  for (const GateResult& g : r.gates) {
    INFO(g.left.ref.name << ": " << g.left.error);
    CHECK(g.pass);
  }
  CHECK(env.tmp_empty());
}

TEST_CASE("a killed rank restarts from its checkpoint, a failed launch is one line",
          "[lessons][processes]") {
  ProcessEnvScope env;
  const std::string base =
      R"({ model = "mlp:2x32", strategy = "zero3", world = 2, batch = 8, steps = 6, )"
      R"(processes = true, fault = "1:4:kill", checkpoint-every = 3)";
  const Lesson l = one_step(base + ", max-restarts = 1 }", "{ processes = false }",
                            gate(R"({ name = "resumed_after_step" })", "==", 3) +
                                gate(R"({ name = "weight_diff_between_runs" })", "==", 0));
  const StepRuns runs = run_step(l.steps[0]);
  REQUIRE(runs.b);
  CHECK(runs.a.resumed_after_step == 3);
  CHECK(runs.a.losses.size() == 6);
  const StepResult r = evaluate_step(l.steps[0], runs.a, &*runs.b);
  for (const GateResult& g : r.gates) {
    INFO(g.left.ref.name << ": " << g.left.error);
    CHECK(g.pass);
  }
  CHECK(env.tmp_empty());

  // No restarts left: the step fails with the launcher's words, on one line.
  const Lesson dies = one_step(base + " }", "", "");
  try {
    run_step(dies.steps[0]);
    FAIL("the killed group ran to the end");
  } catch (const RunError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("shardlab launch --nproc-per-node 2 failed") != std::string::npos);
    CHECK(what.find("rank 1") != std::string::npos);
    CHECK(what.find('\n') == std::string::npos);
  }
  CHECK(env.tmp_empty());
}

// Files that used to crash or hang the lesson commands: toml++ recursed once
// per part of a 50,000-part dotted key (SIGSEGV), and opening a FIFO waited
// for a writer forever. Each is now one line naming the file, exit 2, at once.
TEST_CASE("a 50000-part dotted key and a FIFO are refused in one line (no crash and no hang)",
          "[lessons][cli]") {
  test::TempDir dir;
  std::string key = "a";
  for (int i = 1; i < 50000; ++i) key += ".a";
  const std::string deep = dir.file("deep.toml");
  std::ofstream(deep) << "format = 1\n" << key << " = 1\n";
  const std::string fifo = dir.file("pipe.toml");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // The limit is generous: what toml++ nests 32 deep parses; one level more is refused.
  auto nesting = [](int parts) {
    std::string k = "a";
    for (int i = 1; i < parts; ++i) k += ".a";
    try {
      parse_lesson("format = 1\n" + k + " = 1\n", "n.toml");
    } catch (const LessonError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(nesting(32).find("nests") == std::string::npos);  // an unknown key instead
  CHECK(nesting(33).find("n.toml:2: nests a key 33 levels deep") == 0);
  CHECK(nesting(2).find("nests") == std::string::npos);

  // Measured about 0.3 s each; the bound leaves room for a loaded machine, and
  // a regression that hangs is killed at 10 s.
  auto refused = [](const std::string& args, const std::string& part) {
    const test::TimedCliResult r = test::run_cli_within(args, 10);
    INFO("shardlab " << args << "\n" << r.out << "(" << r.seconds << " s)");
    CHECK(r.code == 2);
    CHECK(r.out.find(part) != std::string::npos);
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
    CHECK(r.seconds < 2.0);
  };
  refused("lesson check " + deep, deep + ":2: nests a key 50000 levels deep");
  refused("lesson check " + fifo, fifo + ":0: is a FIFO, not a lesson file");

  // In the lessons folder, `lesson list` names the file the same way.
  const fs::path folder = dir.path / "lessons";
  fs::create_directories(folder);
  fs::copy_file(deep, folder / "01-deep.toml");
  setenv("SHARDLAB_LESSONS", folder.c_str(), 1);
  refused("lesson list", "01-deep.toml:2: nests a key 50000 levels deep");
  fs::remove(folder / "01-deep.toml");
  REQUIRE(::mkfifo((folder / "02-pipe.toml").c_str(), 0600) == 0);
  refused("lesson list", "02-pipe.toml:0: is a FIFO, not a lesson file");
  // What the GUI's lesson player loads goes through the same reader.
  CHECK_THROWS_WITH(load_lesson((folder / "02-pipe.toml").string()),
                    Catch::Contains("is a FIFO, not a lesson file"));
}

TEST_CASE("lesson list shows the app's saved progress, read only", "[lessons]") {
  setenv("SHARDLAB_LESSONS", (kTests + "/lessons_good").c_str(), 1);
  const test::TempDir dir;
  const std::string state = dir.file("state");
  std::filesystem::create_directories(state + "/shardlab");
  const std::string file = state + "/shardlab/lessons.json";
  {
    std::ofstream out(file);
    out << R"({"format":1,"lang":"en","current_lesson":"example",)"
        << R"("lessons":{"example":{"step":1,"answers":{},"revealed":[0]}}})";
  }
  auto r = test::run_shell("XDG_STATE_HOME=" + state + " " + std::string(SHARDLAB_BIN) +
                           " lesson list 2>&1");
  CHECK(r.code == 0);
  CHECK(r.out.find("[1/2 steps revealed]") != std::string::npos);
  r = test::run_shell("XDG_STATE_HOME=" + state + " " + std::string(SHARDLAB_BIN) +
                      " lesson list --lang zh 2>&1");
  CHECK(r.out.find("[已揭晓 1/2 步]") != std::string::npos);
  // An unreadable progress file: no progress shown, and the file stays where it is.
  { std::ofstream(file) << "{ not json"; }
  r = test::run_shell("XDG_STATE_HOME=" + state + " " + std::string(SHARDLAB_BIN) +
                      " lesson list 2>&1");
  CHECK(r.code == 0);
  CHECK(r.out.find("revealed]") == std::string::npos);
  CHECK(std::filesystem::exists(file));
  unsetenv("SHARDLAB_LESSONS");
}

TEST_CASE("control characters in lessons are refused by file and field, and printed escaped",
          "[lessons]") {
  // lesson check names each file and field in one line, and the terminal never
  // receives an escape from a lesson (a clear screen, an OSC 52 clipboard write).
  const std::string bad = kTests + "/lessons_bad/";
  const auto r = run_cli("lesson check " + bad + "control_title.toml " + bad +
                         "control_osc52.toml " + bad + "control_key.toml " + kExample);
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK(r.out.find('\x07') == std::string::npos);
  CHECK(r.out.find(bad + "control_title.toml:4: title.en: holds control character U+001B "
                         "(escape) at character 1") != std::string::npos);
  CHECK(r.out.find(bad + "control_osc52.toml:9: step 1: text.en: holds control character") !=
        std::string::npos);
  CHECK(r.out.find(bad + "control_key.toml:5: \\x1b[2J: unknown key '\\x1b[2J'") !=
        std::string::npos);
  CHECK(r.out.find("ok: " + kExample) != std::string::npos);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 4);

  CHECK(find_control_character("plain text,\ttabs,\nnewlines and CRLF\r\n中文") == "");
  CHECK(find_control_character("a\rb") == "U+000D at character 2");
  CHECK(find_control_character("中\xc2\x9d") == "U+009D at character 2");
  CHECK(find_control_character("x\x7f") == "U+007F at character 2");

  // Whatever slips through is shown, not obeyed.
  CHECK(escape_controls("a\x1b[2Jb\n\tc\r\nd\x07\xc2\x9b中") == "a\\x1b[2Jb\n\tc\nd\\x07\\u009b中");
  CHECK(escape_controls("a\nb\tc", false) == "a\\x0ab\\x09c");
  Markdown md = parse_markdown("Copy this.");
  REQUIRE(!md.empty());
  REQUIRE(!md[0].runs.empty());
  md[0].runs[0].text = "Copy \x1b]52;c;cm0gLXJmIH4K\x07 this.";
  for (bool ansi : {false, true}) {
    const std::string out = render_terminal(md, 80, ansi);
    INFO(out);
    CHECK(out.find("\\x1b]52;c;cm0gLXJmIH4K\\x07") != std::string::npos);
    CHECK(out.find("\x1b]") == std::string::npos);
    CHECK(out.find('\x07') == std::string::npos);
  }
}
