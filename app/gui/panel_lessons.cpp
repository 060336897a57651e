// The Lessons panel: the lesson list, then one step at a time — its text, where
// to look, the prediction asked before the run is shown, the run, the reveal
// (answer, formula and measured side by side, and why they differ) and the
// gates. Drivable from the keyboard alone (Page Down / Page Up / Enter: what a
// presenter's clicker sends). The runs are real: LessonPlayer runs them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <imgui.h>
#include <imgui_stdlib.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/format.h"
#include "app/gui/logic/text_tokens.h"
#include "app/gui/panels.h"

namespace shardlab::gui {

namespace {

using lesson::Lang;

// ---- Markdown: md4c's blocks drawn as wrapped, styled text -----------------

void draw_runs(const std::vector<lesson::TextRun>& runs, float indent, const UiColors& ui,
               bool high_contrast) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float line_h = ImGui::GetTextLineHeightWithSpacing();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float left = origin.x + indent;
  const float right = origin.x + ImGui::GetContentRegionAvail().x - 4;
  std::vector<Token> tokens;
  for (const lesson::TextRun& r : runs) tokenize(r, tokens);
  float x = left, y = origin.y;
  const ImU32 strong = high_contrast ? IM_COL32(255, 230, 80, 255) : IM_COL32(255, 214, 110, 255);
  const ImU32 emph = high_contrast ? IM_COL32(160, 220, 255, 255) : IM_COL32(150, 200, 255, 255);
  const ImU32 code = high_contrast ? IM_COL32(140, 255, 160, 255) : IM_COL32(150, 230, 160, 255);
  for (const Token& t : tokens) {
    const ImVec2 sz = ImGui::CalcTextSize(t.text.c_str());
    // Never start a line with closing punctuation (":" after inline code, "，" in Chinese).
    static constexpr const char* kNoLineStart[] = {":",
                                                   ";",
                                                   ",",
                                                   ".",
                                                   ")",
                                                   "!",
                                                   "?",
                                                   "\xEF\xBC\x8C",
                                                   "\xE3\x80\x82",
                                                   "\xEF\xBC\x9A",
                                                   "\xEF\xBC\x9B",
                                                   "\xEF\xBC\x89",
                                                   "\xE3\x80\x81"};  // ，。：；）、
    bool closes = false;
    for (const char* p : kNoLineStart) closes |= t.text.rfind(p, 0) == 0;
    if (x > left && x + sz.x > right && !closes) {
      x = left;
      y += line_h;
      if (t.text == " ") continue;
    }
    ImU32 col = ui.text;
    if (t.run->code) {
      col = code;
      dl->AddRectFilled(ImVec2(x - 1, y), ImVec2(x + sz.x + 1, y + sz.y),
                        IM_COL32(255, 255, 255, 22));
    } else if (t.run->strong) {
      col = strong;
    } else if (t.run->emphasis) {
      col = emph;
    }
    dl->AddText(ImVec2(x, y), col, t.text.c_str());
    if (t.run->strong) dl->AddText(ImVec2(x + 0.6f, y), col, t.text.c_str());  // faux bold
    x += sz.x;
  }
  ImGui::Dummy(ImVec2(right - origin.x, y + line_h - origin.y));
}

void draw_markdown(const lesson::Markdown& blocks, const UiColors& ui, bool high_contrast) {
  const float em = ImGui::GetFontSize();
  for (const lesson::Block& b : blocks) {
    switch (b.kind) {
      case lesson::BlockKind::paragraph:
        draw_runs(b.runs, 0, ui, high_contrast);
        ImGui::Dummy(ImVec2(1, em * 0.3f));
        break;
      case lesson::BlockKind::heading:
        draw_runs(b.runs, 0, ui, high_contrast);
        break;
      case lesson::BlockKind::list_item: {
        const float indent = em * 1.2f * static_cast<float>(std::max(1, b.depth));
        const std::string bullet =
            b.ordered ? std::to_string(b.number) + "." : std::string("\xE2\x80\xA2");  // •
        const ImVec2 p = ImGui::GetCursorScreenPos();
        ImGui::GetWindowDrawList()->AddText(ImVec2(p.x + indent - em * 1.0f, p.y), ui.text_dim,
                                            bullet.c_str());
        draw_runs(b.runs, indent, ui, high_contrast);
        break;
      }
      case lesson::BlockKind::code:
        for (const lesson::TextRun& r : b.runs) {
          ImGui::PushStyleColor(ImGuiCol_Text, IM_COL32(150, 230, 160, 255));
          ImGui::TextUnformatted(r.text.c_str());
          ImGui::PopStyleColor();
        }
        ImGui::Dummy(ImVec2(1, em * 0.3f));  // the paragraph's gap: text after it does not touch
        break;
    }
  }
}

// ---- Numbers in the reveal --------------------------------------------------

std::string value_text(double v, const std::string& unit) {
  char buf[64];
  if (unit == "B") {
    // The exact bytes beside "436.50 KiB": the reveal's text writes "446 976 B".
    const double whole = static_cast<double>(std::llround(v));
    std::string s = format_bytes(whole);
    if (std::abs(whole) >= 1024) s += " (" + lesson::exact_bytes(whole) + ")";
    return s;
  }
  if (unit == "ms") {
    std::snprintf(buf, sizeof buf, "%.3g ms", v);
  } else if (unit == "us") {
    std::snprintf(buf, sizeof buf, std::abs(v) >= 100 ? "%.0f \xC2\xB5s" : "%.3g \xC2\xB5s", v);
  } else if (unit == "%") {
    std::snprintf(buf, sizeof buf, "%.1f%%", v);
  } else if (unit == "x") {
    std::snprintf(buf, sizeof buf, "%.2f\xC3\x97", v);  // ×
  } else if (unit == "count") {
    return lesson::format_value(std::round(v),
                                "count");  // i18n: a unit key  // 194 176, as the texts write it
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

const char* view_word(const App& app, const std::string& view) {
  const auto v = view_from_name(view);
  return v ? view_title(*v, app.tr()) : view.c_str();
}

// The seek in the learner's language ("the first all-gather of layer 0 on rank 0").
std::string seek_words(const Tr& tr, const lesson::Seek& k) {
  const bool zh = tr.zh();
  switch (k.kind) {
    case lesson::Seek::Kind::step:
      return strf(tr("the start of step %d"), k.step);
    case lesson::Seek::Kind::peak_memory:
      return strf(tr("rank %d's memory peak"), k.rank);
    case lesson::Seek::Kind::event:
      break;
  }
  const std::string kind = span_kind_words(k.event, tr.lang);
  if (zh) {
    std::string t = "rank " + std::to_string(k.rank) + " 上";  // i18n: Chinese branch
    if (k.step >= 0) t += "第 " + std::to_string(k.step) + " 步中";
    if (k.micro_batch >= 0) t += "微批次 " + std::to_string(k.micro_batch) + " 的";
    if (k.layer >= 0) t += "第 " + std::to_string(k.layer) + " 层的";
    return t + "第 " + std::to_string(k.nth) + " 次" + kind;
  }
  // i18n: English branch (the Chinese, returned above, orders its words differently)
  static constexpr const char* kOrdinals[] = {"first", "second", "third"};
  // i18n: English branch
  std::string t = "the " +
                  (k.nth >= 1 && k.nth <= 3 ? std::string(kOrdinals[k.nth - 1])
                                            : std::to_string(k.nth) + "th") +
                  " " + kind;
  // i18n: English branch
  if (k.layer >= 0) t += " of layer " + std::to_string(k.layer);
  // i18n: English branch
  if (k.micro_batch >= 0) t += " of micro-batch " + std::to_string(k.micro_batch);
  // i18n: English branch
  if (k.step >= 0) t += " in step " + std::to_string(k.step);
  // i18n: English branch
  return t + " on rank " + std::to_string(k.rank);
}

// Units as a reader says them; a count needs no unit.
const char* unit_words(const Tr& tr, const std::string& unit) {
  if (unit == "count") return "";
  if (unit == "x") return "\xC3\x97";
  if (unit == "us") return "\xC2\xB5s";
  if (unit == "B") return tr("bytes (KiB, MiB allowed)");
  return unit.c_str();
}

void draw_lesson_list(App& app, const UiColors& ui) {
  const Tr tr = app.tr();
  LessonPlayer& p = app.lessons;
  const Lang lang = p.lang();
  ImGui::TextUnformatted(tr("Lessons"));
  ImGui::Separator();
  for (size_t i = 0; i < p.lessons().size(); ++i) {
    const lesson::Lesson& l = p.lessons()[i];
    char label[512];
    std::snprintf(label, sizeof label, "%zu. %s##lesson%zu", i + 1, l.title.source(lang).c_str(),
                  i);
    if (ImGui::Selectable(label, false)) p.open(static_cast<int>(i));
    ImGui::PushStyleColor(ImGuiCol_Text, ui.text_dim);
    ImGui::Indent();
    ImGui::TextWrapped("%s", l.summary.source(lang).c_str());
    ImGui::Unindent();
    ImGui::PopStyleColor();
  }
  ImGui::Spacing();
  ImGui::PushStyleColor(ImGuiCol_Text, ui.text_dim);
  ImGui::TextUnformatted(tr("Still to come"));
  for (const lesson::UpcomingTopic& t : lesson::topics_to_come()) {
    ImGui::Bullet();
    ImGui::TextWrapped("%s", lang == Lang::zh ? t.zh : t.en);
  }
  ImGui::PopStyleColor();
  if (!p.load_error().empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, ui.error);
    ImGui::TextWrapped("%s:\n%s", tr("The lessons could not all be read"), p.load_error().c_str());
    ImGui::PopStyleColor();
  }
}

void draw_prediction(App& app, const lesson::Prediction& pred, const UiColors& ui) {
  const Tr tr = app.tr();
  LessonPlayer& p = app.lessons;
  const Lang lang = p.lang();
  ImGui::Separator();
  ImGui::TextUnformatted(tr("Your prediction"));
  draw_markdown(pred.question.blocks(lang), ui, app.state.presenter.high_contrast);
  const bool locked = p.phase() != StepPhase::ask;
  if (locked) ImGui::BeginDisabled();
  if (pred.is_choice()) {
    for (size_t i = 0; i < pred.choices.size(); ++i) {
      char label[512];
      std::snprintf(label, sizeof label, "%s##choice%zu",
                    pred.choices[i].label.source(lang).c_str(), i);
      if (ImGui::RadioButton(label, p.choice() == static_cast<int>(i)))
        p.choice() = static_cast<int>(i);
    }
  } else {
    const float input_w = std::min(ImGui::GetFontSize() * 9, ImGui::GetContentRegionAvail().x);
    ImGui::SetNextItemWidth(input_w);
    // One field per step: a field still holding the keyboard from the last step
    // (a clicker's Page Down moved on while it was active) is not carried over.
    char id[48];
    std::snprintf(id, sizeof id, "##answer%d_%d", p.lesson_index(), p.step_index());
    if (ImGui::InputText(id, &p.answer(), ImGuiInputTextFlags_EnterReturnsTrue)) p.run_step();
    // Once the answer is locked (run, revealed) the field gives the keyboard
    // back, so the shortcut digits switch views instead of editing a saved answer.
    if (locked && ImGui::IsItemActive()) ImGui::SetWindowFocus(nullptr);
    const std::string tol_text = strf(tr("%s (right within %g%% of the measured value)"),
                                      unit_words(tr, pred.unit), pred.tolerance * 100);
    const char* tol = tol_text.c_str();
    // Beside the box when it fits on the line; under it in a narrow panel or at
    // presenter scale, rather than a few words per line in a sliver.
    const ImGuiStyle& style = ImGui::GetStyle();
    if (ImGui::CalcTextSize(tol).x + style.ItemSpacing.x <=
        ImGui::GetContentRegionAvail().x - input_w)
      ImGui::SameLine();
    ImGui::TextWrapped("%s", tol);
  }
  if (locked) ImGui::EndDisabled();
  const bool unanswered = pred.is_choice() ? p.choice() < 0 : p.answer().empty();
  if (!locked && unanswered) ImGui::TextDisabled("%s", tr("Answer first, or press Skip."));
}

// Dim text that wraps at the column's edge (TextDisabled would run past it).
void text_dim_wrapped(const std::string& s) {
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped("%s", s.c_str());
  ImGui::PopStyleColor();
}

void draw_reveal(App& app, const lesson::Step& s, const UiColors& ui) {
  const Tr tr = app.tr();
  LessonPlayer& p = app.lessons;
  const Lang lang = p.lang();
  const auto& result = p.result();
  if (s.predict && result && result->prediction) {
    const lesson::MetricResult& m = *result->prediction;
    const std::string& unit = s.predict->unit;
    if (ImGui::BeginTable("reveal", 3,
                          ImGuiTableFlags_Borders | ImGuiTableFlags_SizingStretchSame)) {
      ImGui::TableSetupColumn(tr("Your answer"));
      ImGui::TableSetupColumn(tr("Formula"));
      ImGui::TableSetupColumn(tr("Measured"));
      ImGui::TableHeadersRow();
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      const auto& check = p.answer_check();
      if (!check) {
        ImGui::TextDisabled("%s", tr("no answer"));
      } else if (!check->error.empty()) {
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(ui.error), "%s", check->error.c_str());
      } else {
        const std::string given = s.predict->is_choice() && check->choice >= 0
                                      ? s.predict->choices[check->choice].label.source(lang)
                                      : value_text(check->value, unit);
        ImGui::TextWrapped("%s", given.c_str());
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(check->correct ? ui.ok : ui.error), "%s",
                           (check->correct ? tr("right") : tr("not right")));
      }
      ImGui::TableNextColumn();
      if (m.value && m.value->formula) {
        ImGui::TextWrapped("%s", value_text(*m.value->formula, unit).c_str());
        text_dim_wrapped(tr(m.value->formula_text));  // a fixed one is translated
      } else {
        ImGui::TextDisabled("-");
        // Why there is none, when the metric says (BatchNorm on a cut batch).
        if (m.value && !m.value->formula_text.empty()) text_dim_wrapped(tr(m.value->formula_text));
      }
      ImGui::TableNextColumn();
      if (m.value) {
        std::string measured = value_text(m.value->measured, unit);
        if (s.predict->is_choice() && result->right_choice >= 0)
          measured +=
              "  \xE2\x86\x92 " + s.predict->choices[result->right_choice].label.source(lang);
        ImGui::TextWrapped("%s", measured.c_str());
      } else {
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(ui.error), "%s", m.error.c_str());
      }
      ImGui::EndTable();
    }
  }
  if (s.reveal) draw_markdown(s.reveal->blocks(lang), ui, app.state.presenter.high_contrast);
  if (result && !result->gates.empty()) {
    ImGui::TextUnformatted(tr("Checks"));
    for (const lesson::GateResult& g : result->gates) {
      const ImU32 col = g.pass ? ui.ok : ui.error;
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(col), "%s",
                         (g.pass ? tr("PASS") : tr("FAIL")));
      ImGui::SameLine();
      ImGui::TextWrapped("%s", g.gate ? g.gate->text.source(lang).c_str() : "");
      std::string detail;
      if (g.left.value) {
        detail = g.left.ref.name + " = " + value_text(g.left.value->measured, g.left.value->unit) +
                 " " + (g.gate ? g.gate->op : "") + " " +
                 (g.right && g.right->value ? value_text(g.right_value, g.right->value->unit)
                                            : value_text(g.right_value, g.left.value->unit));
      } else {
        detail = g.left.error;
      }
      ImGui::Indent();
      text_dim_wrapped(detail);
      ImGui::Unindent();
    }
  }
}

void draw_step(App& app, const UiColors& ui) {
  const Tr tr = app.tr();
  LessonPlayer& p = app.lessons;
  const Lang lang = p.lang();
  const lesson::Lesson& l = *p.lesson();
  const lesson::Step& s = *p.step();
  const float em = ImGui::GetFontSize();

  if (ImGui::SmallButton(tr("All lessons"))) {
    p.close();
    return;
  }
  ImGui::SameLine();
  ImGui::PushStyleColor(ImGuiCol_Text, ui.text_dim);
  ImGui::TextWrapped("%s \xC2\xB7 %s", l.title.source(lang).c_str(),
                     strf(tr("Step %d of %zu"), p.step_index() + 1, l.steps.size()).c_str());
  ImGui::PopStyleColor();
  ImGui::PushStyleColor(ImGuiCol_Text, IM_COL32(255, 214, 110, 255));
  ImGui::TextWrapped("%s", s.title.source(lang).c_str());
  ImGui::PopStyleColor();
  ImGui::Separator();

  // Everything between the title and the buttons scrolls.
  const float buttons_h = ImGui::GetFrameHeightWithSpacing() * 1.5f + em * 0.5f;
  ImGui::BeginChild("step_body",
                    ImVec2(0, std::max(em * 4, ImGui::GetContentRegionAvail().y - buttons_h)));
  draw_markdown(s.text.blocks(lang), ui, app.state.presenter.high_contrast);
  if (s.look) {
    std::string look = std::string(tr("Look at")) + ": " + view_word(app, s.look->view);
    if (s.look->seek) look += " \xC2\xB7 " + seek_words(tr, *s.look->seek);
    if (p.result() && p.result()->seek && !p.result()->seek->found)
      look += " (" + p.result()->seek->description + ")";
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(ui.text_dim), "\xE2\x86\x92 %s",
                       look.c_str());
  }
  if (!s.recording.empty()) {
    // A recording says where it was made: a GPU run shown on a laptop is still a GPU run.
    ImGui::PushStyleColor(ImGuiCol_Text, ui.text_dim);
    ImGui::TextWrapped("%s: %s \xE2\x80\x94 %s %s", tr("recorded run"),
                       std::filesystem::path(s.recording).filename().c_str(), tr("recorded on"),
                       s.recorded_where.c_str());
    ImGui::PopStyleColor();
  }
  if (s.predict) draw_prediction(app, *s.predict, ui);
  if (p.phase() == StepPhase::failed) {
    ImGui::PushStyleColor(ImGuiCol_Text, ui.error);
    ImGui::TextWrapped("%s: %s", tr("The run failed"), p.run_error().c_str());
    ImGui::PopStyleColor();
  }
  if (p.phase() == StepPhase::revealed) {
    // Once per revealed step: scroll the reveal into sight (a long text left the
    // answer, formula and measured value below the fold).
    const int64_t key = (static_cast<int64_t>(p.lesson_index()) + 1) * 100000 + p.step_index() + 1;
    if (app.state.lesson_reveal_scrolled != key) {
      app.state.lesson_reveal_scrolled = key;
      ImGui::SetScrollHereY(0.0f);
    }
    ImGui::Separator();
    draw_reveal(app, s, ui);
  } else {
    app.state.lesson_reveal_scrolled = 0;
  }
  if (!p.has_run() && p.phase() == StepPhase::ask)
    ImGui::TextDisabled("%s", tr("This step has no run: read, then go on."));
  ImGui::EndChild();

  // The step's actions, always at the bottom.
  ImGui::Separator();
  if (ImGui::Button(tr("Prev"))) p.prev_step();
  ImGui::SameLine();
  switch (p.phase()) {
    case StepPhase::ask:
      if (p.has_run()) {
        // The prediction comes before the run is shown: answer, or skip it on purpose.
        const bool asks =
            s.predict && (s.predict->is_choice() ? p.choice() < 0 : p.answer().empty());
        if (asks) ImGui::BeginDisabled();
        if (ImGui::Button(tr("Run this step"))) p.run_step();
        if (asks) {
          ImGui::EndDisabled();
          ImGui::SameLine();
          if (ImGui::Button(tr("Skip"))) p.run_step();
        }
      }
      break;
    case StepPhase::running:
      ImGui::BeginDisabled();
      ImGui::Button(tr("Running..."));
      ImGui::EndDisabled();
      break;
    case StepPhase::ran:
      if (ImGui::Button(tr("Reveal"))) p.reveal();
      break;
    case StepPhase::revealed:
    case StepPhase::failed:
      if (p.has_run() && ImGui::Button(tr("Run this step"))) p.run_step();
      break;
  }
  ImGui::SameLine();
  if (ImGui::Button(tr("Next"))) p.next_step();
  // The clicker keys, on hover: the panel keeps its height for the lesson's text.
  ImGui::SameLine();
  help_marker(tr("Page Down: run, reveal, next step. Page Up: back. Enter: run / reveal."));
}

}  // namespace

void draw_lessons(App& app) {
  const UiColors& ui = ui_colors(app.state.presenter.high_contrast);
  LessonPlayer& p = app.lessons;
  // Language switch: at any time, every text of the lesson and the player.
  const bool zh = p.lang() == Lang::zh;
  if (ImGui::RadioButton("EN", !zh)) p.set_lang(Lang::en);  // i18n: the language's own name
  ImGui::SameLine();
  if (ImGui::RadioButton("\xE4\xB8\xAD\xE6\x96\x87", zh)) p.set_lang(Lang::zh);  // 中文
  if (!p.note().empty()) {
    ImGui::SameLine();
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(ui.error), "(!)");
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", p.note().c_str());
  }
  if (p.step()) {
    draw_step(app, ui);
  } else {
    draw_lesson_list(app, ui);
  }
}

}  // namespace shardlab::gui
