// The lesson player's logic (see lesson_player.h).
#include "app/gui/logic/lesson_player.h"

#include "app/gui/logic/i18n.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

namespace shardlab::gui {

namespace {

void add_text(std::set<std::string>& out, const lesson::Text& t) {
  out.insert(t.en);
  out.insert(t.zh);
}

}  // namespace

const char* ui_text(lesson::Lang l, const char* en) {
  return Tr{l}(en);
}

std::string glyph_text(const std::vector<lesson::Lesson>& lessons) {
  std::set<std::string> parts;
  for (const auto& [en, zh] : string_table()) parts.insert(zh);
  parts.insert("EN 中文");  // i18n: glyphs
  for (const lesson::UpcomingTopic& t : lesson::topics_to_come()) parts.insert(t.zh);
  // The panel's own sentences around numbers (app/gui/panel_lessons.cpp: views,
  // seeks, units, the tolerance); a test checks that every Chinese character of
  // that file is here.
  parts.insert(
      "时间线内存集群露营之旅对比损失第步开始处的内存峰值上中微批次层次字节（与实测相差以内算对）"
      "，；前向反向权重梯度损失计算优化器更新全规约规约散射全收集广播发送接收屏障主机到设备拷贝设备"
      "到主机"
      "分发收集准备数据其他操作");
  for (const lesson::Lesson& l : lessons) {
    add_text(parts, l.title);
    add_text(parts, l.summary);
    for (const lesson::Step& s : l.steps) {
      add_text(parts, s.title);
      add_text(parts, s.text);
      if (s.reveal) add_text(parts, *s.reveal);
      if (s.predict) {
        add_text(parts, s.predict->question);
        for (const lesson::Choice& c : s.predict->choices) add_text(parts, c.label);
      }
      for (const lesson::Gate& g : s.gates) add_text(parts, g.text);
    }
  }
  std::string out;
  for (const std::string& p : parts) out += p;
  return out;
}

LessonPlayer::~LessonPlayer() {
  join();
}

void LessonPlayer::join() {
  if (control_) control_->cancel();
  if (worker_.joinable()) worker_.join();
  control_.reset();
}

void LessonPlayer::load(const std::string& dir, const std::string& progress_path) {
  join();
  lessons_.clear();
  load_error_.clear();
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".toml") files.push_back(e.path());
  if (ec)  // i18n: error (the panel heads it in the learner's language)
    load_error_ = "cannot read the lessons folder '" + dir + "': " + ec.message();
  std::sort(files.begin(), files.end());
  // One bad file must not hide the others: load each on its own.
  for (const fs::path& f : files) {
    try {
      lessons_.push_back(lesson::load_lesson(f.string()));
    } catch (const std::exception& e) {
      if (!load_error_.empty()) load_error_ += "\n";
      load_error_ += e.what();
    }
  }
  progress_path_ = progress_path;
  store_ = load_progress(progress_path, &note_);
  lang_ = store_.lang == "zh" ? lesson::Lang::zh : lesson::Lang::en;
  lesson_ = -1;
  for (size_t i = 0; i < lessons_.size(); ++i)
    if (lessons_[i].id == store_.current_lesson) open(static_cast<int>(i));
}

int LessonPlayer::adopt(lesson::Lesson l) {
  for (size_t i = 0; i < lessons_.size(); ++i)
    if (lessons_[i].id == l.id) {
      if (lesson_ == static_cast<int>(i)) join();  // its runs belong to the old text
      lessons_[i] = std::move(l);
      return static_cast<int>(i);
    }
  lessons_.push_back(std::move(l));
  return static_cast<int>(lessons_.size()) - 1;
}

void LessonPlayer::set_lang(lesson::Lang l) {
  lang_ = l;
  store_.lang = lesson::to_string(l);
  ++revision_;
}

const lesson::Lesson* LessonPlayer::lesson() const {
  return lesson_ >= 0 && lesson_ < static_cast<int>(lessons_.size()) ? &lessons_[lesson_] : nullptr;
}

const lesson::Step* LessonPlayer::step() const {
  const lesson::Lesson* l = lesson();
  return l && step_ >= 0 && step_ < static_cast<int>(l->steps.size()) ? &l->steps[step_] : nullptr;
}

bool LessonPlayer::has_run() const {
  const lesson::Step* s = step();
  return s && (s->run || !s->recording.empty());
}

void LessonPlayer::open(int index) {
  if (index < 0 || index >= static_cast<int>(lessons_.size())) return;
  join();
  lesson_ = index;
  store_.current_lesson = lessons_[index].id;
  ++revision_;
  const int saved = store_.lessons[lessons_[index].id].step;
  step_ = std::clamp(saved, 0, static_cast<int>(lessons_[index].steps.size()) - 1);
  enter_step();
}

void LessonPlayer::close() {
  remember();
  join();
  lesson_ = -1;
  store_.current_lesson.clear();
}

void LessonPlayer::enter_step() {
  phase_ = StepPhase::ask;
  result_.reset();
  check_.reset();
  run_error_.clear();
  answer_.clear();
  choice_ = -1;
  const lesson::Lesson* l = lesson();
  if (!l) return;
  const LessonProgress& p = store_.lessons[l->id];
  if (auto it = p.answers.find(step_); it != p.answers.end()) {
    const lesson::Step* s = step();
    if (s && s->predict && s->predict->is_choice()) {
      try {
        choice_ = std::stoi(it->second) - 1;
      } catch (const std::exception&) {
        choice_ = -1;
      }
    } else {
      answer_ = it->second;
    }
  }
}

void LessonPlayer::remember() {
  const lesson::Lesson* l = lesson();
  if (!l) return;
  ++revision_;
  LessonProgress& p = store_.lessons[l->id];
  p.step = step_;
  const lesson::Step* s = step();
  const std::string given = s && s->predict && s->predict->is_choice()
                                ? (choice_ >= 0 ? std::to_string(choice_ + 1) : "")
                                : answer_;
  if (!given.empty()) p.answers[step_] = given;
  if (phase_ == StepPhase::revealed) p.revealed[step_] = true;
}

void LessonPlayer::go_to_step(int k) {
  const lesson::Lesson* l = lesson();
  if (!l || k < 0 || k >= static_cast<int>(l->steps.size())) return;
  remember();
  join();
  step_ = k;
  store_.lessons[lesson()->id].step = k;
  ++revision_;
  enter_step();
}

bool LessonPlayer::next_step() {
  const lesson::Lesson* l = lesson();
  if (!l || step_ + 1 >= static_cast<int>(l->steps.size())) return false;
  go_to_step(step_ + 1);
  return true;
}

bool LessonPlayer::prev_step() {
  if (!lesson() || step_ == 0) return false;
  go_to_step(step_ - 1);
  return true;
}

bool press_lesson_key(LessonPlayer& p, LessonKey key, bool typing) {
  if (!p.step()) return false;
  switch (key) {
    case LessonKey::page_down: {
      const auto before = std::pair{p.step_index(), p.phase()};
      p.advance();
      return before != std::pair{p.step_index(), p.phase()};
    }
    case LessonKey::page_up:
      return p.prev_step();
    case LessonKey::enter:
      if (typing) return false;
      if (p.phase() == StepPhase::ran) {
        p.reveal();
        return true;
      }
      if (p.phase() == StepPhase::ask && p.has_run()) {
        p.run_step();
        return true;
      }
      return false;
  }
  return false;
}

void LessonPlayer::advance() {
  if (!step()) return;
  switch (phase_) {
    case StepPhase::ask:
      if (has_run()) {
        run_step();
      } else {
        phase_ = StepPhase::revealed;
        remember();
      }
      break;
    case StepPhase::running:
      break;  // wait for it
    case StepPhase::ran:
      reveal();
      break;
    case StepPhase::revealed:
    case StepPhase::failed:
      next_step();
      break;
  }
}

void LessonPlayer::run_step() {
  const lesson::Step* s = step();
  if (!s || phase_ == StepPhase::running || !has_run()) return;
  join();
  remember();
  phase_ = StepPhase::running;
  result_.reset();
  check_.reset();
  run_error_.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    worker_done_ = false;
    finished_.reset();
    worker_error_.clear();
  }
  control_ = std::make_unique<RunControl>();
  RunControl* control = control_.get();
  worker_ = std::thread([this, s, control] {
    try {
      RunCallbacks cb;
      cb.control = control;
      lesson::StepRuns runs = lesson::run_step(*s, cb);
      StepShow show;
      show.a = std::make_unique<RunResult>(std::move(runs.a));
      if (runs.b) show.b = std::make_unique<RunResult>(std::move(*runs.b));
      show.result = lesson::evaluate_step(*s, *show.a, show.b.get());
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = std::move(show);
      worker_done_ = true;
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      worker_error_ = e.what();
      worker_done_ = true;
    }
  });
}

std::optional<StepShow> LessonPlayer::poll() {
  if (phase_ != StepPhase::running) return std::nullopt;
  std::optional<StepShow> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!worker_done_) return std::nullopt;
    if (finished_) {
      out = std::move(finished_);
      finished_.reset();
    }
    run_error_ = worker_error_;
  }
  if (worker_.joinable()) worker_.join();
  control_.reset();
  if (out) {
    result_ = out->result;
    phase_ = StepPhase::ran;
  } else {
    phase_ = StepPhase::failed;
  }
  return out;
}

void LessonPlayer::reveal() {
  if (phase_ != StepPhase::ran) return;
  const lesson::Step* s = step();
  if (s && s->predict && result_) {
    const std::string given = s->predict->is_choice()
                                  ? (choice_ >= 0 ? std::to_string(choice_ + 1) : std::string())
                                  : answer_;
    if (!given.empty()) check_ = lesson::check_answer(*s->predict, *result_, given);
  }
  phase_ = StepPhase::revealed;
  remember();
}

bool LessonPlayer::save(std::string* error) {
  const uint64_t unchanged = revision_;  // saving is not a change worth saving again
  remember();
  revision_ = unchanged;
  return save_progress(progress_path_, store_, error);
}

}  // namespace shardlab::gui
