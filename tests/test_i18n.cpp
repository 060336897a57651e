// 中文 everywhere: every string the app's views show has a Chinese entry, with
// the same printf conversions as its English key; the scan reads the views'
// sources, so a new caption without an entry fails here, not in a classroom.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/gui/logic/i18n.h"
#include "core/parallel/strategy.h"

using namespace shardlab;
using namespace shardlab::gui;

namespace {

namespace fs = std::filesystem;

// The printf conversions of a format, in order ("%d", "%.2f", "%s"); "%%" is none.
std::vector<std::string> conversions(const std::string& s) {
  static const std::regex conv("%[-+ #0-9.*]*(?:hh|h|ll|l|z|j|t|L)?[diouxXfFeEgGaAcsp%]");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), conv); it != std::sregex_iterator(); ++it)
    if (it->str() != "%%") out.push_back(it->str());
  return out;
}

// A literal's text shows English when, without its conversions, escapes and
// ImGui "##id" suffix, it still holds a word of two letters.
bool has_english(std::string s) {
  s = s.substr(0, s.find("##"));
  s = std::regex_replace(s, std::regex(R"(\\x[0-9A-Fa-f]{2}|\\[ntr"\\])"), " ");
  s = std::regex_replace(s, std::regex("%[-+ #0-9.*]*(?:hh|h|ll|l|z)?[diouxXfFeEgGsc%]"), " ");
  return std::regex_search(s, std::regex("[A-Za-z]{2,}"));
}

// What a literal's escapes stand for (the table's keys are compiled strings).
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char e = s[++i];
    if (e == 'n')
      out += '\n';
    else if (e == 't')
      out += '\t';
    else if (e == 'x') {
      size_t n = 0;
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), &n, 16));
      i += n;
    } else
      out += e;
  }
  return out;
}

struct Literal {
  std::string text;       // adjacent literals joined, escapes as written
  bool translated;        // the argument of tr(...)
  std::string statement;  // the code before it, from the statement's start
  int line;
  bool skipped;  // "// i18n: <why>" in its statement or on the line above it
};

// The string literals of a C++ file, comments skipped, adjacent ones joined.
std::vector<Literal> literals(const std::string& code) {
  std::vector<Literal> out;
  std::string stmt;  // code since the last ; { or }
  std::vector<std::string> lines;
  {
    std::istringstream in(code);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  // The marker covers its statement: any line from the one above the statement's
  // first to the literal's own.
  const auto marked = [&](int first, int line) {
    for (int l = std::max(1, first - 1); l <= line; ++l)
      if (l <= static_cast<int>(lines.size()) &&
          lines[static_cast<size_t>(l - 1)].find("// i18n: ") != std::string::npos)
        return true;
    return false;
  };
  int line = 1, stmt_line = 1;
  for (size_t i = 0; i < code.size();) {
    const char c = code[i];
    if (c == '\n') ++line;
    if (code.compare(i, 2, "//") == 0) {
      i = code.find('\n', i);
      if (i == std::string::npos) break;
      continue;
    }
    if (code.compare(i, 2, "/*") == 0) {
      const size_t e = code.find("*/", i + 2);
      for (size_t k = i; k < e && k < code.size(); ++k) line += code[k] == '\n';
      i = e == std::string::npos ? code.size() : e + 2;
      continue;
    }
    if (c == '#' && (i == 0 || code[i - 1] == '\n')) {  // #include "…", #pragma
      i = code.find('\n', i);
      if (i == std::string::npos) break;
      continue;
    }
    if (c == '\'') {  // a character literal: '"' is not a string
      i += code[i + 1] == '\\' ? 4 : 3;
      continue;
    }
    if (c == 'R' && code.compare(i, 2, "R\"") == 0) {  // raw strings: skipped whole
      const size_t open = code.find('(', i);
      const std::string delim = ")" + code.substr(i + 2, open - i - 2) + "\"";
      const size_t e = code.find(delim, open);
      for (size_t k = i; k < e; ++k) line += code[k] == '\n';
      i = e + delim.size();
      continue;
    }
    if (c == '"') {
      Literal lit;
      lit.line = line;
      lit.skipped = marked(stmt_line, line);
      std::string before = stmt;
      while (!before.empty() && std::isspace(static_cast<unsigned char>(before.back())))
        before.pop_back();
      lit.translated = std::regex_search(before, std::regex(R"((^|[^A-Za-z0-9_])tr\($)"));
      lit.statement = stmt;
      size_t j = i;
      while (j < code.size() && code[j] == '"') {  // "a" "b" is one literal
        size_t k = j + 1;
        while (k < code.size() && code[k] != '"') k += code[k] == '\\' ? 2 : 1;
        lit.text += code.substr(j + 1, k - j - 1);
        j = k + 1;
        size_t n = j;
        int lines_between = 0;
        while (n < code.size() && std::isspace(static_cast<unsigned char>(code[n]))) {
          if (code[n] == '\n') ++lines_between;
          ++n;
        }
        // The line breaks up to a joined literal are counted here; otherwise the
        // main loop counts them as it passes.
        if (n < code.size() && code[n] == '"') {
          j = n;
          line += lines_between;
        }
      }
      out.push_back(lit);
      stmt += "\"…\"";
      i = j;
      continue;
    }
    if (c == ';' || c == '{' || c == '}') {
      stmt.clear();
      stmt_line = line;
    } else {
      if (stmt.find_first_not_of(" \t\n") == std::string::npos &&
          !std::isspace(static_cast<unsigned char>(c)))
        stmt_line = line;  // the statement's first character
      stmt += c;
    }
    ++i;
  }
  return out;
}

// Code that shows no text to the learner: window and child ids, errors for
// the command line, comparisons with keys.
bool not_shown(const std::string& statement) {
  static const std::regex r(
      R"(ImGui::(BeginChild|PushID|Begin|BeginTable|BeginPopup\w*|OpenPopup|IsPopupOpen|GetID)\(|throw |Error\(|runtime_error\(|f?printf\(|==\s*$|!=\s*$)");
  return std::regex_search(statement, r);
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The views' sources: every app/gui file but the command line's, the window's
// and the table's own.
std::vector<fs::path> view_sources() {
  std::vector<fs::path> out;
  const std::set<std::string> not_views = {"gui_main.cpp", "window.cpp", "lesson_progress.cpp",
                                           "i18n.cpp"};
  for (const char* dir : {"app/gui", "app/gui/logic"})
    for (const auto& e : fs::directory_iterator(fs::path(SHARDLAB_SOURCE_DIR) / dir)) {
      const std::string name = e.path().filename().string();
      if (e.path().extension() != ".cpp" || not_views.count(name) ||
          name.rfind("strings_zh", 0) == 0)
        continue;
      out.push_back(e.path());
    }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("i18n: every entry has Chinese with its key's printf conversions", "[i18n]") {
  std::map<std::string, std::string> seen;
  for (const auto& [en, zh] : string_table()) {
    INFO("\"" << en << "\" -> \"" << zh << "\"");
    CHECK(std::string(en).size() > 0);
    CHECK(std::string(zh).size() > 0);
    CHECK(conversions(en) == conversions(zh));
    // One key, one translation: the first would silently win.
    const auto [it, fresh] = seen.emplace(en, zh);
    if (!fresh) CHECK(it->second == zh);
  }
  CHECK(seen.size() > 300);
  const Tr zh{lesson::Lang::zh}, en{lesson::Lang::en};
  CHECK(std::string(zh("Run this step")) == "运行本步");
  CHECK(std::string(en("Run this step")) == "Run this step");
  CHECK(std::string(zh("no such key, shown as it is")) == "no such key, shown as it is");
  CHECK(en.join({"a", "b", "c"}) == "a, b and c");
  CHECK(zh.join({"a", "b", "c"}) == "a、b 和 c");
}

TEST_CASE("i18n: every string a view shows goes through tr() and has an entry", "[i18n]") {
  int translated = 0;
  const auto files = view_sources();
  REQUIRE(files.size() > 20);
  for (const fs::path& f : files) {
    for (const Literal& lit : literals(read(f))) {
      INFO(f.filename().string() << ":" << lit.line << ": \"" << lit.text << "\"");
      if (lit.translated) {
        ++translated;
        CHECK(has_translation(unescape(lit.text).c_str()));
      } else if (has_english(lit.text) && !lit.skipped && !not_shown(lit.statement)) {
        // Shown in English whatever the language: wrap it in tr() and add its
        // Chinese to a strings_zh_*.cpp, or mark a key or id "// i18n: not shown".
        FAIL_CHECK("a string the views show has no tr()");
      }
    }
  }
  CHECK(translated > 300);
}

TEST_CASE("i18n: every span kind's label has Chinese (the legend and tooltips show them)",
          "[i18n]") {
  for (int k = 0; k < kNumSpanKinds; ++k) {
    const SpanKindRow& row = span_kind_row(static_cast<SpanKind>(k));
    INFO(row.name);
    CHECK(static_cast<int>(row.kind) == k);
    CHECK(has_translation(row.label));
  }
}

TEST_CASE("i18n: every strategy's summary has Chinese (the run bar lists them)", "[i18n]") {
  for (const StrategyInfo& s : all_strategies()) {
    INFO(s.name << ": " << s.summary);
    CHECK(has_translation(s.summary.c_str()));
  }
}

TEST_CASE("i18n: the scan reads literals as the compiler does", "[i18n]") {
  const auto l = literals(
      "void f() {\n"
      "  // \"a comment\"\n"
      "  ImGui::Text(\"%s\", tr(\"Memory \"\n"
      "                         \"over time\"));\n"
      "  ImGui::BeginChild(\"view pane\");\n"
      "  char q = '\"'; label(\"Shown raw\");\n"
      "  label(\"id only\");  // i18n: not shown\n"
      "  // i18n: keys\n"
      "  const char* k[] = {\"alpha\",\n"
      "                     \"beta\"};\n"
      "  label(\"after\");\n"
      "}\n");
  REQUIRE(l.size() == 8);
  CHECK(l[5].skipped);
  CHECK(l[6].skipped);
  CHECK_FALSE(l[7].skipped);
  CHECK(l[0].text == "%s");
  CHECK_FALSE(has_english(l[0].text));
  CHECK(l[1].text == "Memory over time");
  CHECK(l[1].translated);
  CHECK(not_shown(l[2].statement));
  CHECK(l[3].text == "Shown raw");
  CHECK_FALSE(l[3].translated);
  CHECK_FALSE(not_shown(l[3].statement));
  CHECK_FALSE(l[3].skipped);
  CHECK(l[4].skipped);
  CHECK(conversions("%d of %.2f%% in %s") == std::vector<std::string>{"%d", "%.2f", "%s"});
  CHECK(unescape(R"(a \xC2\xB7 b)") == "a \xC2\xB7 b");
}

TEST_CASE(
    "i18n: every strategy option's words have Chinese (the run bar and compare view show them)",
    "[i18n]") {
  int checked = 0;
  for (const OptionRow& r : option_rows())
    for (const char* s : {r.label, r.tip, r.short_label, r.label_word, r.default_note}) {
      if (!s || !has_english(s)) continue;
      INFO(r.flag << ": \"" << s << "\"");
      CHECK(has_translation(s));
      ++checked;
    }
  CHECK(checked >= 2 * static_cast<int>(option_rows().size()));
}
