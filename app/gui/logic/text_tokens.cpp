// Line-break pieces of the lessons' text (see text_tokens.h).
#include "app/gui/logic/text_tokens.h"

namespace shardlab::gui {

void tokenize(const lesson::TextRun& run, std::vector<Token>& out) {
  const std::string& s = run.text;
  std::string cur;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
    const std::string ch = s.substr(i, len);
    i += len;
    // CJK and wide punctuation (U+3000 on): a break is allowed on both sides.
    // Math and general punctuation below it (−, ≈, →, …) stay inside their word.
    // Opening brackets never end a line: "（" waits for what it opens.
    const auto opens = [](const std::string& x) {
      return x == "\xEF\xBC\x88" || x == "\xE3\x80\x8A" || x == "\xE3\x80\x8C" ||
             x == "\xE3\x80\x90";  // （《「【
    };
    if (len >= 3 && c >= 0xE3 && opens(ch)) {
      if (!cur.empty()) out.push_back({cur, &run});
      cur = ch;
    } else if (len >= 3 && c >= 0xE3 && opens(cur)) {
      out.push_back({cur + ch, &run});
      cur.clear();
    } else if (len >= 3 && c >= 0xE3) {
      if (!cur.empty()) out.push_back({cur, &run});
      cur.clear();
      out.push_back({ch, &run});
    } else if (ch == " " && !cur.empty() &&
               (lesson::thousands_space(s, i - 1) || lesson::formula_space(s, i - 1))) {
      cur += ch;  // "27 936" and "(M + P − 1)" stay on one line
    } else if (ch == " " || ch == "\n") {
      cur += ' ';
      out.push_back({cur, &run});
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) out.push_back({cur, &run});
}

}  // namespace shardlab::gui
