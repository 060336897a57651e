// Lesson texts: Markdown parsed by md4c into the blocks of lesson.h. Only what
// a lesson panel and a terminal can show is accepted; links, images, HTML,
// tables, quotes and rules are refused with a line saying so.
#include <md4c.h>

#include <string>

#include "app/lesson/lesson.h"

namespace shardlab::lesson {

namespace {

// U+3000.. (CJK punctuation, kana, ideographs) and full-width forms: a line
// break between two of them is no space (Chinese has no spaces).
bool wide_lead(unsigned char c) {
  return c >= 0xE3 && c <= 0xEF;
}
bool wide_at_end(const std::string& s) {
  if (s.size() < 3) return false;
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return wide_lead(static_cast<unsigned char>(s[i]));
}
bool wide_at_start(const std::string& s) {
  return !s.empty() && wide_lead(static_cast<unsigned char>(s[0]));
}
// The code point of a 3-byte UTF-8 sequence at s[i], or 0.
char32_t three_byte(const std::string& s, size_t i) {
  if (i + 2 >= s.size() || (static_cast<unsigned char>(s[i]) & 0xF0) != 0xE0) return 0;
  return (static_cast<char32_t>(s[i] & 0x0F) << 12) |
         (static_cast<char32_t>(s[i + 1] & 0x3F) << 6) | static_cast<char32_t>(s[i + 2] & 0x3F);
}
// CJK punctuation (U+3000..U+303F) and full-width forms (U+FF00..U+FFEF) carry
// their own space: "a2" at a line's end and "（这就是" on the next join without one.
bool full_width_punct(char32_t c) {
  return (c >= 0x3000 && c <= 0x303F) || (c >= 0xFF00 && c <= 0xFFEF);
}
bool punct_at_end(const std::string& s) {
  return s.size() >= 3 && full_width_punct(three_byte(s, s.size() - 3));
}
bool punct_at_start(const std::string& s) {
  return full_width_punct(three_byte(s, 0));
}

struct ListLevel {
  bool ordered = false;
  int next = 1;
};

struct Builder {
  Markdown out;
  std::vector<ListLevel> lists;
  int current = -1;  // block receiving text; -1: the next text opens a paragraph
  int emphasis = 0, strong = 0, code = 0;
  bool soft_break = false;  // a source line ended; a space unless Chinese meets Chinese
  std::string error;

  Block& open(BlockKind kind) {
    Block b;
    b.kind = kind;
    b.depth = static_cast<int>(lists.size());
    out.push_back(b);
    current = static_cast<int>(out.size()) - 1;
    return out.back();
  }

  void append(std::string text) {
    if (current < 0) open(BlockKind::paragraph);
    Block& b = out[current];
    if (soft_break) {
      soft_break = false;
      const bool wide = !b.runs.empty() && wide_at_end(b.runs.back().text) && wide_at_start(text);
      const bool punct =
          punct_at_start(text) || (!b.runs.empty() && punct_at_end(b.runs.back().text));
      if (!wide && !punct) text = " " + text;
    }
    const bool em = emphasis > 0, st = strong > 0, co = code > 0 || b.kind == BlockKind::code;
    if (!b.runs.empty() && b.runs.back().emphasis == em && b.runs.back().strong == st &&
        b.runs.back().code == co) {
      b.runs.back().text += text;
      return;
    }
    b.runs.push_back({text, em, st, co});
  }

  int refuse(const std::string& what) {
    if (error.empty()) error = what;
    return 1;  // non-zero stops md_parse
  }
};

std::string decode_entity(const std::string& e) {
  if (e == "&amp;") return "&";
  if (e == "&lt;") return "<";
  if (e == "&gt;") return ">";
  if (e == "&quot;") return "\"";
  if (e == "&apos;") return "'";
  if (e == "&nbsp;") return "\u00a0";
  if (e.size() > 3 && e[1] == '#') {
    const bool hex = e[2] == 'x' || e[2] == 'X';
    unsigned long cp = std::strtoul(e.c_str() + (hex ? 3 : 2), nullptr, hex ? 16 : 10);
    if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
    std::string u;
    if (cp < 0x80) {
      u += static_cast<char>(cp);
    } else if (cp < 0x800) {
      u += static_cast<char>(0xC0 | (cp >> 6));
      u += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      u += static_cast<char>(0xE0 | (cp >> 12));
      u += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      u += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      u += static_cast<char>(0xF0 | (cp >> 18));
      u += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      u += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      u += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return u;
  }
  return e;  // an unknown named entity stays as written
}

int enter_block(MD_BLOCKTYPE type, void* detail, void* user) {
  Builder& b = *static_cast<Builder*>(user);
  switch (type) {
    case MD_BLOCK_DOC:
      return 0;
    case MD_BLOCK_UL:
      b.lists.push_back({false, 1});
      b.current = -1;
      return 0;
    case MD_BLOCK_OL:
      b.lists.push_back({true, static_cast<int>(static_cast<MD_BLOCK_OL_DETAIL*>(detail)->start)});
      b.current = -1;
      return 0;
    case MD_BLOCK_LI: {
      Block& li = b.open(BlockKind::list_item);
      ListLevel& level = b.lists.back();
      li.ordered = level.ordered;
      if (level.ordered) li.number = level.next++;
      return 0;
    }
    case MD_BLOCK_P:
      // A loose list item's first paragraph is the item itself.
      if (b.current >= 0 && b.out[b.current].kind == BlockKind::list_item &&
          b.out[b.current].runs.empty())
        return 0;
      b.open(BlockKind::paragraph);
      return 0;
    case MD_BLOCK_H:
      b.open(BlockKind::heading).level =
          static_cast<int>(static_cast<MD_BLOCK_H_DETAIL*>(detail)->level);
      return 0;
    case MD_BLOCK_CODE:
      b.open(BlockKind::code);
      return 0;
    case MD_BLOCK_QUOTE:
      return b.refuse("block quotes ('>') are not used in lesson texts");
    case MD_BLOCK_HR:
      return b.refuse("horizontal rules are not used in lesson texts (start a new step instead)");
    case MD_BLOCK_HTML:
      return b.refuse("HTML is not used in lesson texts (write Markdown)");
    default:
      return b.refuse("tables are not used in lesson texts (write a list)");
  }
}

int leave_block(MD_BLOCKTYPE type, void*, void* user) {
  Builder& b = *static_cast<Builder*>(user);
  if (type == MD_BLOCK_UL || type == MD_BLOCK_OL) b.lists.pop_back();
  if (type == MD_BLOCK_CODE && b.current >= 0) {
    auto& runs = b.out[b.current].runs;
    if (!runs.empty() && !runs.back().text.empty() && runs.back().text.back() == '\n')
      runs.back().text.pop_back();
  }
  b.current = -1;
  b.soft_break = false;
  return 0;
}

int enter_span(MD_SPANTYPE type, void*, void* user) {
  Builder& b = *static_cast<Builder*>(user);
  switch (type) {
    case MD_SPAN_EM:
      ++b.emphasis;
      return 0;
    case MD_SPAN_STRONG:
      ++b.strong;
      return 0;
    case MD_SPAN_CODE:
      ++b.code;
      return 0;
    case MD_SPAN_A:
      return b.refuse("links are not used in lesson texts (write the address as `inline code`)");
    case MD_SPAN_IMG:
      return b.refuse("images are not used in lesson texts");
    default:
      return b.refuse(
          "this Markdown span is not used in lesson texts (valid: *emphasis*, "
          "**strong**, `code`)");
  }
}

int leave_span(MD_SPANTYPE type, void*, void* user) {
  Builder& b = *static_cast<Builder*>(user);
  if (type == MD_SPAN_EM) --b.emphasis;
  if (type == MD_SPAN_STRONG) --b.strong;
  if (type == MD_SPAN_CODE) --b.code;
  return 0;
}

int text(MD_TEXTTYPE type, const MD_CHAR* data, MD_SIZE size, void* user) {
  Builder& b = *static_cast<Builder*>(user);
  const std::string t(data, size);
  switch (type) {
    case MD_TEXT_NORMAL:
    case MD_TEXT_CODE:
      b.append(t);
      return 0;
    case MD_TEXT_NULLCHAR:
      b.append("\uFFFD");
      return 0;
    case MD_TEXT_BR:
      b.append("\n");
      return 0;
    case MD_TEXT_SOFTBR:
      b.soft_break = true;
      return 0;
    case MD_TEXT_ENTITY:
      b.append(decode_entity(t));
      return 0;
    case MD_TEXT_HTML:
      return b.refuse("HTML is not used in lesson texts (write Markdown)");
    default:
      return b.refuse("LaTeX is not used in lesson texts (write formulas as plain text)");
  }
}

}  // namespace

namespace {
// At most `n` bytes of `s`, never cutting a UTF-8 character in two.
std::string utf8_prefix(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}
}  // namespace

bool thousands_space(const std::string& s, size_t i) {
  auto digit = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '9'; };
  return i > 0 && i < s.size() && s[i] == ' ' && digit(i - 1) && digit(i + 1) && digit(i + 2) &&
         digit(i + 3) && !digit(i + 4);
}

bool formula_space(const std::string& s, size_t i) {
  if (i >= s.size() || s[i] != ' ') return false;
  // Either side of " = " ("V = 719", "M = 4"): a line never starts or ends with '='.
  if ((i + 1 < s.size() && s[i + 1] == '=') || (i > 0 && s[i - 1] == '=')) return true;
  constexpr size_t kSpan = 24;
  size_t open = std::string::npos;
  for (size_t k = i; k-- > 0 && i - k <= kSpan;) {
    if (s[k] == ')' || s[k] == '\n') return false;
    if (s[k] == '(') {
      open = k;
      break;
    }
  }
  if (open == std::string::npos) return false;
  for (size_t k = i + 1; k < s.size() && k - open <= kSpan; ++k) {
    if (s[k] == '(' || s[k] == '\n') return false;
    if (s[k] == ')') return true;
  }
  return false;
}

Markdown parse_markdown(const std::string& source) {
  Builder b;
  MD_PARSER parser{};
  parser.abi_version = 0;
  // Fenced code only: indented lines in a TOML string are text, not code.
  // Tables are switched on only to be refused rather than shown as pipes.
  parser.flags = MD_FLAG_NOINDENTEDCODEBLOCKS | MD_FLAG_TABLES;
  parser.enter_block = enter_block;
  parser.leave_block = leave_block;
  parser.enter_span = enter_span;
  parser.leave_span = leave_span;
  parser.text = text;
  const int rc = md_parse(source.data(), static_cast<MD_SIZE>(source.size()), &parser, &b);
  if (!b.error.empty()) throw ConfigError(b.error);
  if (rc != 0) throw ConfigError("the Markdown could not be parsed");
  // Marks md4c left as text would show as literal asterisks. The usual cause in
  // Chinese: CommonMark does not close ** right after full-width punctuation
  // when a character follows ("**全局 rank（global rank）**在").
  for (const Block& blk : b.out)
    for (const TextRun& r : blk.runs)
      if (!r.code &&
          (r.text.find("**") != std::string::npos || r.text.find("__") != std::string::npos))
        throw ConfigError("emphasis marks are left as text near '" + utf8_prefix(r.text, 40) +
                          "' (put ** outside full-width punctuation, e.g. **全局 rank**（global "
                          "rank）, or add a space after the closing **)");
  // Drop blocks left without text (an empty list item keeps its bullet).
  Markdown out;
  for (Block& blk : b.out)
    if (!blk.runs.empty() || blk.kind == BlockKind::list_item) out.push_back(std::move(blk));
  return out;
}

}  // namespace shardlab::lesson
