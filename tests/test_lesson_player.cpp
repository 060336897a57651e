// The lesson player without a window: progress on disk (atomic, never lost),
// the step phases a clicker drives (Page Down: run, reveal, next), and the
// glyphs the font atlas is built from.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "app/gui/logic/key_taps.h"
#include "app/gui/logic/lesson_player.h"
#include "app/gui/logic/lesson_progress.h"
#include "app/gui/logic/text_tokens.h"
#include "core/io/atomic_file.h"
#include "tests/test_util.h"

using namespace shardlab;
using namespace shardlab::gui;
using shardlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("progress round-trips through its JSON", "[lesson-player]") {
  ProgressStore s;
  s.lang = "zh";
  s.current_lesson = "zero";
  s.lessons["zero"].step = 3;
  s.lessons["zero"].answers[1] = "1.5 MiB";
  s.lessons["zero"].answers[2] = "2";
  s.lessons["zero"].revealed[1] = true;
  s.lessons["gpipe"].step = 0;
  const ProgressStore t = progress_from_json(progress_json(s));
  CHECK(t.lang == "zh");
  CHECK(t.current_lesson == "zero");
  CHECK(t.lessons.at("zero").step == 3);
  CHECK(t.lessons.at("zero").answers.at(1) == "1.5 MiB");
  CHECK(t.lessons.at("zero").answers.at(2) == "2");
  CHECK(t.lessons.at("zero").revealed.at(1));
  CHECK(t.lessons.at("zero").revealed.count(2) == 0);
  CHECK(t.lessons.count("gpipe") == 1);
}

TEST_CASE("progress is saved under a fresh directory and read back", "[lesson-player]") {
  const TempDir dir;
  const fs::path d = dir.path;
  const std::string path = (d / "state" / "shardlab" / "lessons.json").string();
  ProgressStore s;
  s.current_lesson = "ddp";
  s.lessons["ddp"].step = 2;
  std::string error;
  REQUIRE(save_progress(path, s, &error));
  std::string note;
  const ProgressStore t = load_progress(path, &note);
  CHECK(note.empty());
  CHECK(t.lessons.at("ddp").step == 2);
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(d / "state" / "shardlab"))
    files += e.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("an unreadable progress file is set aside, never overwritten", "[lesson-player]") {
  const TempDir dir;
  const fs::path d = dir.path;
  const fs::path path = d / "lessons.json";
  for (const char* bad :
       {"{not json", "[1,2]", "{\"format\": 99}", "{\"format\":1,\"lang\":\"fr\"}",
        "{\"format\":1,\"lessons\":{\"x\":{\"step\":-4,\"answers\":{},\"revealed\":[]}}}"}) {
    { std::ofstream(path) << bad; }
    std::string note;
    const ProgressStore s = load_progress(path.string(), &note);
    INFO(bad);
    CHECK(s.lessons.empty());
    CHECK(note.find("could not be read") != std::string::npos);
    CHECK(!fs::exists(path));
    CHECK(read(d / "lessons.json.unreadable") == bad);  // what the user had is kept
  }
  // A directory where the file should be: reported, left alone, and saving fails cleanly.
  fs::create_directories(path);
  std::string note, error;
  load_progress(path.string(), &note);
  CHECK(note.find("not a regular file") != std::string::npos);
  CHECK(fs::is_directory(path));
  CHECK_FALSE(save_progress(path.string(), ProgressStore{}, &error));
  CHECK(error.find("not a regular file") != std::string::npos);
}

TEST_CASE("atomic writes replace a symlink, not its target, and refuse devices",
          "[lesson-player]") {
  const TempDir dir;
  const fs::path d = dir.path;
  const fs::path target = d / "target.txt";
  { std::ofstream(target) << "keep me"; }
  const fs::path link = d / "out.txt";
  fs::create_symlink(target, link);
  std::string error;
  REQUIRE(write_file_atomic(link.string(), "new", &error));
  CHECK(read(target) == "keep me");
  CHECK(!fs::is_symlink(link));
  CHECK(read(link) == "new");
  CHECK_FALSE(write_file_atomic("/dev/null", "x", &error));
  CHECK(error.find("/dev/null") != std::string::npos);
  CHECK(fs::is_character_file("/dev/null"));
  CHECK_FALSE(write_file_atomic((d / "missing" / "x.json").string(), "x", &error));
  CHECK(write_file_atomic((d / "made" / "x.json").string(), "x", &error, true));
}

TEST_CASE("the player's words exist in both languages", "[lesson-player]") {
  for (const char* w :
       {"Run this step", "Reveal", "Next", "Prev", "Your answer", "Formula", "Measured"}) {
    INFO(w);
    CHECK(std::string(ui_text(lesson::Lang::zh, w)) != w);
    CHECK(std::string(ui_text(lesson::Lang::en, w)) == w);
  }
  const std::string g = glyph_text({});
  CHECK(g.find("揭晓") != std::string::npos);
  // Every Chinese character the panel writes itself (view names, seeks, units)
  // is in the atlas even when no lesson uses it: a glyph left out draws as '?'
  // ("0 号?上" once the lessons stopped using 秩).
  std::ifstream src(std::string(SHARDLAB_TEST_DIR) + "/../app/gui/panel_lessons.cpp");
  REQUIRE(src);
  const std::string code((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());
  int checked = 0;
  for (size_t i = 0; i + 2 < code.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(code[i]);
    if (c < 0xE3 || c > 0xEF) continue;  // U+3000..: CJK and full-width forms
    const std::string ch = code.substr(i, 3);
    i += 2;
    INFO(ch);
    CHECK(g.find(ch) != std::string::npos);
    ++checked;
  }
  CHECK(checked > 20);
}

namespace {

// Polls the player the way the app does once per frame, until its step's runs are in.
std::optional<StepShow> wait_for_runs(LessonPlayer& p) {
  for (int i = 0; i < 6000 && p.phase() == StepPhase::running; ++i) {
    if (auto show = p.poll()) return show;
    usleep(10000);
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("the player runs a step for real, reveals it and remembers where the learner is",
          "[lesson-player]") {
  const TempDir dir;
  const fs::path d = dir.path;
  const std::string progress = (d / "lessons.json").string();
  LessonPlayer p;
  p.load(std::string(SHARDLAB_TEST_DIR) + "/lessons_good", progress);
  REQUIRE(p.load_error().empty());
  REQUIRE(p.lessons().size() == 1);
  REQUIRE(p.lesson() == nullptr);  // the list first
  p.open(0);
  REQUIRE(p.step_index() == 0);
  REQUIRE(p.phase() == StepPhase::ask);
  REQUIRE(p.has_run());
  const lesson::Step& s = *p.step();
  REQUIRE(s.predict);

  // Page Down after answering: the run starts.
  p.answer() = "1 KiB";
  p.advance();
  REQUIRE(p.phase() == StepPhase::running);
  std::optional<StepShow> show = wait_for_runs(p);
  REQUIRE(show);
  REQUIRE(show->a);
  CHECK(show->a->cfg.strategy == s.run->strategy);
  CHECK(p.phase() == StepPhase::ran);
  REQUIRE(p.result());
  CHECK(p.result()->gates.size() == s.gates.size());
  CHECK(p.result()->gates_pass());
  CHECK(p.result()->prediction->value);
  CHECK_FALSE(p.answer_check());  // nothing is judged before the reveal

  p.advance();  // reveal
  CHECK(p.phase() == StepPhase::revealed);
  REQUIRE(p.answer_check());
  CHECK(p.answer_check()->error.empty());
  CHECK_FALSE(p.answer_check()->correct);  // 1 KiB is far from the model's states

  p.advance();  // next step
  CHECK(p.step_index() == 1);
  CHECK(p.phase() == StepPhase::ask);
  CHECK(p.answer().empty());
  p.set_lang(lesson::Lang::zh);
  std::string error;
  REQUIRE(p.save(&error));

  // A new player (the app started again) resumes on step 2, in Chinese, with the
  // first step's answer and reveal remembered.
  LessonPlayer q;
  q.load(std::string(SHARDLAB_TEST_DIR) + "/lessons_good", progress);
  REQUIRE(q.lesson());
  CHECK(q.step_index() == 1);
  CHECK(q.lang() == lesson::Lang::zh);
  q.prev_step();
  CHECK(q.answer() == "1 KiB");
  const ProgressStore saved = load_progress(progress, nullptr);
  CHECK(saved.lessons.at("example").revealed.at(0));

  // The atlas is built from the lessons' own characters.
  const std::string glyphs = glyph_text(q.lessons());
  CHECK(glyphs.find(q.lessons()[0].title.zh) != std::string::npos);
}

TEST_CASE("a whole lesson driven by a clicker's keys alone: Page Down, Page Up, Enter",
          "[lesson-player]") {
  LessonPlayer p;
  p.load(std::string(SHARDLAB_TEST_DIR) + "/lessons_good", "");  // progress in memory
  REQUIRE(p.lessons().size() == 1);
  CHECK_FALSE(press_lesson_key(p, LessonKey::page_down, false));  // the list: nothing to drive
  p.open(0);
  const size_t steps = p.lesson()->steps.size();
  REQUIRE(steps >= 2);
  // Page Down only: run, reveal, next, … through every step, the answer field
  // keeping the keyboard all along (a clicker cannot leave it).
  for (size_t k = 0; k < steps; ++k) {
    INFO("step " << k + 1);
    REQUIRE(p.step_index() == static_cast<int>(k));
    REQUIRE(p.phase() == StepPhase::ask);
    CHECK(press_lesson_key(p, LessonKey::page_down, true));
    REQUIRE(p.phase() == StepPhase::running);
    REQUIRE(wait_for_runs(p));
    REQUIRE(p.phase() == StepPhase::ran);
    CHECK(p.result()->gates_pass());
    CHECK(press_lesson_key(p, LessonKey::page_down, true));
    CHECK(p.phase() == StepPhase::revealed);
    if (k + 1 < steps) CHECK(press_lesson_key(p, LessonKey::page_down, true));
  }
  // On the last step's reveal Page Down has nowhere to go.
  CHECK_FALSE(press_lesson_key(p, LessonKey::page_down, false));
  CHECK(p.step_index() == static_cast<int>(steps) - 1);
  // Page Up walks back, a step at a time, and stops at the first.
  for (size_t k = steps - 1; k > 0; --k) CHECK(press_lesson_key(p, LessonKey::page_up, true));
  CHECK(p.step_index() == 0);
  CHECK_FALSE(press_lesson_key(p, LessonKey::page_up, false));
  // Enter: run, then reveal, but not while a field takes the text.
  p.go_to_step(1);
  REQUIRE(p.phase() == StepPhase::ask);
  CHECK_FALSE(press_lesson_key(p, LessonKey::enter, true));
  CHECK(p.phase() == StepPhase::ask);
  CHECK(press_lesson_key(p, LessonKey::enter, false));
  REQUIRE(wait_for_runs(p));
  CHECK(press_lesson_key(p, LessonKey::enter, false));
  CHECK(p.phase() == StepPhase::revealed);
  CHECK_FALSE(press_lesson_key(p, LessonKey::enter, false));  // Enter never leaves a step
}

TEST_CASE("progress lives under $XDG_STATE_HOME, else ~/.local/state", "[lesson-player]") {
  const char* old_xdg = std::getenv("XDG_STATE_HOME");
  const char* old_home = std::getenv("HOME");
  const std::string xdg = old_xdg ? old_xdg : "", home = old_home ? old_home : "";
  setenv("XDG_STATE_HOME", "/srv/state", 1);
  setenv("HOME", "/home/learner", 1);
  CHECK(default_progress_path() == "/srv/state/shardlab/lessons.json");
  setenv("XDG_STATE_HOME", "relative/state", 1);  // the spec ignores relative paths
  CHECK(default_progress_path() == "/home/learner/.local/state/shardlab/lessons.json");
  unsetenv("XDG_STATE_HOME");
  CHECK(default_progress_path() == "/home/learner/.local/state/shardlab/lessons.json");
  if (old_xdg) setenv("XDG_STATE_HOME", xdg.c_str(), 1);
  if (old_home)
    setenv("HOME", home.c_str(), 1);
  else
    unsetenv("HOME");
}

TEST_CASE("bad lesson options in the app are one line and exit 2, before any window",
          "[lesson-player]") {
  using shardlab::test::run_cli;
  auto r = run_cli("gui --lesson nosuch");
  CHECK(r.code == 2);
  CHECK(r.out.find("no lesson 'nosuch'") != std::string::npos);
  r = run_cli("gui --lesson zero --lesson-step 99");
  CHECK(r.code == 2);
  CHECK(r.out.find("--lesson-step 99 is invalid") != std::string::npos);
  r = run_cli("gui --reveal");
  CHECK(r.code == 2);
  CHECK(r.out.find("--reveal needs --lesson") != std::string::npos);
  r = run_cli("gui --lessons --lang fr");
  CHECK(r.code == 2);
  CHECK(r.out.find("--lang 'fr'") != std::string::npos);
}

TEST_CASE("a lesson copied outside the folder with a gate broken shows FAIL, app and command line",
          "[lesson-player]") {
  // The learner's copy keeps the installed lesson's id and file name; only the copy
  // is edited: weight_diff_to_single <= 1e-5 becomes < 0, which cannot hold.
  const TempDir dir;
  const fs::path copy = dir.path / "01-example.toml";
  {
    std::ifstream in(std::string(SHARDLAB_TEST_DIR) + "/lessons_good/01-example.toml");
    std::stringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    const std::string gate = "op = \"<=\"\nvalue = 1e-5";
    REQUIRE(s.find(gate) != std::string::npos);
    s.replace(s.find(gate), gate.size(), "op = \"<\"\nvalue = 0");
    std::ofstream(copy) << s;
  }
  // The app: the folder's lesson of that id gives way to the file.
  LessonPlayer p;
  p.load(std::string(SHARDLAB_TEST_DIR) + "/lessons_good", "");
  REQUIRE(p.lessons().size() == 1);
  const int i = p.adopt(lesson::load_lesson(copy.string()));
  CHECK(i == 0);
  CHECK(p.lessons().size() == 1);
  CHECK(p.lessons()[0].path == copy.string());
  p.open(i);
  p.answer() = "1 KiB";
  p.advance();
  REQUIRE(wait_for_runs(p));
  REQUIRE(p.result());
  CHECK_FALSE(p.result()->gates_pass());
  // The command line, given the file's path.
  const auto r = shardlab::test::run_cli("lesson run " + copy.string() + " --step 1");
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("gate FAIL") != std::string::npos);
  // A lesson that is nowhere names where lessons are looked for.
  const auto none = shardlab::test::run_cli("lesson show nosuch");
  CHECK(none.code == 2);
  CHECK(none.out.find("SHARDLAB_LESSONS") != std::string::npos);
}

TEST_CASE("lesson keys: taps shorter than a frame are never dropped", "[lesson-player]") {
  // A clicker's tap lasts ~10 ms; a frame ~16 ms or, while the app sleeps, far
  // longer: press and release both arrive before the frame that reads them.
  // The window's key callback feeds KeyTaps::on_key; the frame reads them
  // through drive_lesson_keys, as handle_shortcuts does.
  LessonPlayer p;
  p.load(std::string(SHARDLAB_TEST_DIR) + "/lessons_good", "");
  REQUIRE(p.lessons().size() == 1);
  p.open(0);
  const int last = static_cast<int>(p.lesson()->steps.size()) - 1;
  REQUIRE(last >= 1);
  p.go_to_step(last);
  KeyTaps taps;
  for (int k = last; k > 0; --k) {
    taps.on_key(kKeyPageUp, 1);  // press
    taps.on_key(kKeyPageUp, 0);  // release, 10 ms later, no frame between
    taps.next_frame();
    CHECK(drive_lesson_keys(p, taps, true) == 1);
    CHECK(p.step_index() == k - 1);
  }
  // Two taps within one frame are two steps; a key repeat is no new tap.
  p.go_to_step(last);
  taps.on_key(kKeyPageUp, 1);
  taps.on_key(kKeyPageUp, 2);  // repeat
  taps.on_key(kKeyPageUp, 0);
  taps.on_key(kKeyPageUp, 1);
  taps.on_key(kKeyPageUp, 0);
  taps.next_frame();
  CHECK(taps.presses(kKeyPageUp) == 2);
  CHECK(drive_lesson_keys(p, taps, true) == std::min(2, last));
  CHECK(p.step_index() == std::max(0, last - 2));
  // A frame without presses repeats none.
  taps.next_frame();
  CHECK(taps.presses(kKeyPageUp) == 0);
  CHECK(drive_lesson_keys(p, taps, true) == 0);
}

TEST_CASE("lesson text: no line ends with an opening bracket, numbers stay whole",
          "[lesson-player]") {
  lesson::TextRun run;
  run.text = "每个 DDP rank 背负多少字节的模型状态？（16Ψ）共 27 936 个";
  std::vector<Token> t;
  tokenize(run, t);
  std::vector<std::string> texts;
  for (const Token& k : t) texts.push_back(k.text);
  // "（" travels with what it opens; "）" may not start a line (draw_runs' rule).
  CHECK(std::find(texts.begin(), texts.end(), "（16Ψ") != texts.end());
  CHECK(std::find(texts.begin(), texts.end(), "（") == texts.end());
  CHECK(std::find(texts.begin(), texts.end(), "27 936 ") != texts.end());
  run.text = "（全收集）";  // an opener before a CJK character
  t.clear();
  tokenize(run, t);
  REQUIRE(!t.empty());
  CHECK(t[0].text == "（全");
}
