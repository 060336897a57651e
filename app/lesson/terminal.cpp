// Terminal rendering of lesson texts (see terminal.h). Chinese has no spaces:
// a line may break between any two Chinese characters, never before closing
// punctuation.
#include "app/lesson/terminal.h"

#include <cstdint>
#include <cstdio>
#include <vector>

namespace shardlab::lesson {

namespace {

// Decodes one code point at s[i], advancing i; invalid bytes count as U+FFFD.
uint32_t next_cp(const std::string& s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    ++i;
    return 0xFFFD;
  }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

bool is_wide(uint32_t cp) {
  return (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) ||
         (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
         (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
         (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x20000 && cp <= 0x3FFFD);
}

// Punctuation that must not start a line.
bool no_break_before(uint32_t cp) {
  switch (cp) {
    case 0x3001:
    case 0x3002:
    case 0xFF0C:
    case 0xFF0E:
    case 0xFF1A:
    case 0xFF1B:
    case 0xFF01:
    case 0xFF1F:
    case 0xFF09:
    case 0x300D:
    case 0x300F:
    case 0x3011:
    case 0x300B:
    case 0x3009:
    case 0x2019:
    case 0x201D:
    case 0x2026:
      return true;
    default:
      return false;
  }
}

struct Piece {
  std::string text;
  int width = 0;
  bool space_before = false;
  bool newline = false;  // a hard break
  bool em = false, strong = false, code = false;
  bool run_start = false, run_end = false;  // for *marks* around a whole run
};

std::vector<Piece> pieces_of(const std::vector<TextRun>& runs) {
  std::vector<Piece> out;
  for (const TextRun& r : runs) {
    const size_t first = out.size();
    bool space = false;
    size_t i = 0;
    Piece cur;
    auto flush = [&] {
      if (cur.text.empty()) return;
      cur.em = r.emphasis;
      cur.strong = r.strong;
      cur.code = r.code;
      out.push_back(cur);
      cur = Piece{};
    };
    while (i < r.text.size()) {
      const size_t at = i;
      const uint32_t cp = next_cp(r.text, i);
      const std::string ch = r.text.substr(at, i - at);
      if (cp == '\n') {
        flush();
        Piece nl;
        nl.newline = true;
        out.push_back(nl);
        space = false;
        continue;
      }
      if (cp == ' ' && !cur.text.empty() &&
          (thousands_space(r.text, at) || formula_space(r.text, at))) {
        cur.text += ch;  // "27 936" stays on one line
        cur.width += 1;
        continue;
      }
      if (cp == ' ' || cp == '\t') {
        flush();
        space = true;
        continue;
      }
      if (is_wide(cp) && !no_break_before(cp)) {
        flush();  // a Chinese character is a piece of its own
        cur.space_before = space;
        cur.text = ch;
        cur.width = 2;
        space = false;
        flush();
        continue;
      }
      if (no_break_before(cp) && cur.text.empty() && !out.empty() && !out.back().newline &&
          !space && out.size() > first) {
        out.back().text += ch;
        out.back().width += is_wide(cp) ? 2 : 1;
        continue;
      }
      if (cur.text.empty()) cur.space_before = space;
      space = false;
      cur.text += ch;
      cur.width += is_wide(cp) ? 2 : 1;
    }
    flush();
    if (space) {
      Piece sp;  // trailing space: the next run starts after a space
      sp.space_before = true;
      out.push_back(sp);
    }
    if (out.size() > first) {
      out[first].run_start = true;
      out.back().run_end = true;
    }
  }
  // Fold empty space-only pieces into the piece after them.
  std::vector<Piece> folded;
  bool pending_space = false;
  for (Piece& p : out) {
    if (p.text.empty() && !p.newline) {
      pending_space = true;
      if (p.run_end && !folded.empty()) folded.back().run_end = true;
      continue;
    }
    if (pending_space) p.space_before = true;
    pending_space = false;
    folded.push_back(p);
  }
  return folded;
}

std::string styled(const Piece& p, bool ansi) {
  if (ansi) {
    std::string codes;
    if (p.strong) codes += "\033[1m";
    if (p.em) codes += "\033[3m";
    if (p.code) codes += "\033[36m";
    return codes.empty() ? p.text : codes + p.text + "\033[0m";
  }
  // Plain text (a pipe, a file, NO_COLOR): emphasis is dropped rather than printed
  // as Markdown's asterisks, which read as noise; code keeps its backticks, which
  // say where a command or a name begins and ends.
  std::string open, close;
  if (p.run_start && p.code) open += "`";
  if (p.run_end && p.code) close += "`";
  return open + p.text + close;
}

int marks_width(const Piece& p, bool ansi) {
  if (ansi) return 0;
  int w = 0;
  for (bool edge : {p.run_start, p.run_end})
    if (edge) w += p.code ? 1 : 0;
  return w;
}

// Wraps pieces: the first line starts with `first`, the others with `rest`.
std::string wrap(const std::vector<TextRun>& runs, int width, bool ansi, const std::string& first,
                 const std::string& rest) {
  std::string out = first, prefix_rest = rest;
  int col = display_width(first);
  const int start_col = col;
  bool line_empty = true;
  for (const Piece& p : pieces_of(runs)) {
    if (p.newline) {
      out += "\n" + prefix_rest;
      col = display_width(prefix_rest);
      line_empty = true;
      continue;
    }
    const int w = p.width + marks_width(p, ansi);
    const int gap = (!line_empty && p.space_before) ? 1 : 0;
    if (!line_empty && col + gap + w > width) {
      out += "\n" + prefix_rest;
      col = display_width(prefix_rest);
      line_empty = true;
    } else if (gap) {
      out += " ";
      col += 1;
    }
    out += styled(p, ansi);
    col += w;
    line_empty = false;
  }
  (void)start_col;
  return out + "\n";
}

}  // namespace

int display_width(const std::string& s) {
  int w = 0;
  size_t i = 0;
  while (i < s.size()) w += is_wide(next_cp(s, i)) ? 2 : 1;
  return w;
}

std::string escape_controls(const std::string& s, bool keep_lines) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const unsigned char next = i + 1 < s.size() ? static_cast<unsigned char>(s[i + 1]) : 0;
    char buf[8];
    if (keep_lines && (c == '\n' || c == '\t')) {
      out += static_cast<char>(c);
    } else if (keep_lines && c == '\r' && next == '\n') {
      continue;  // a CRLF line end: the newline alone
    } else if (c < 0x20 || c == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else if (c == 0xc2 && next >= 0x80 && next <= 0x9f) {
      // C1 controls (U+0080..U+009F), UTF-8 C2 80..C2 9F: some terminals take
      // U+009B as ESC [ and U+009D as ESC ].
      std::snprintf(buf, sizeof buf, "\\u%04x", next);
      out += buf;
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string find_control_character(const std::string& s) {
  size_t i = 0, chars = 0;
  while (i < s.size()) {
    const size_t at = i;
    const uint32_t cp = next_cp(s, i);
    ++chars;
    const bool crlf = cp == '\r' && at + 1 < s.size() && s[at + 1] == '\n';
    if (cp == '\n' || cp == '\t' || crlf) continue;
    if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
      return std::string(buf) + (cp == 0x1b ? " (escape)" : "") + " at character " +
             std::to_string(chars);
    }
  }
  return "";
}

std::string render_terminal(const Markdown& source, int width, bool ansi, int indent) {
  // What a file says is shown, never obeyed: its control characters escaped.
  Markdown blocks = source;
  for (Block& b : blocks)
    for (TextRun& r : b.runs) r.text = escape_controls(r.text);
  const std::string pad(static_cast<size_t>(indent), ' ');
  std::string out;
  BlockKind prev = BlockKind::paragraph;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Block& b = blocks[i];
    // A blank line between blocks, but not between the items of one list.
    const bool in_list = b.kind == BlockKind::list_item || b.depth > 0;
    const bool prev_in_list = i > 0 && (prev == BlockKind::list_item || blocks[i - 1].depth > 0);
    if (i > 0 && !(in_list && prev_in_list)) out += "\n";
    prev = b.kind;
    const std::string nest(static_cast<size_t>(2 * std::max(0, b.depth - 1)), ' ');
    switch (b.kind) {
      case BlockKind::paragraph: {
        const std::string lead = pad + std::string(static_cast<size_t>(2 * b.depth), ' ');
        out += wrap(b.runs, width, ansi, lead, lead);
        break;
      }
      case BlockKind::list_item: {
        const std::string bullet = b.ordered ? std::to_string(b.number) + ". " : "• ";
        out += wrap(b.runs, width, ansi, pad + nest + bullet,
                    pad + nest + std::string(static_cast<size_t>(display_width(bullet)), ' '));
        break;
      }
      case BlockKind::heading: {
        std::vector<TextRun> runs = b.runs;
        for (TextRun& r : runs) r.strong = true;
        out += wrap(runs, width, ansi, pad, pad);
        break;
      }
      case BlockKind::code: {
        const std::string text = b.runs.empty() ? "" : b.runs[0].text;
        size_t pos = 0;
        while (pos <= text.size()) {
          const size_t nl = text.find('\n', pos);
          const std::string line =
              text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
          out += pad + "    " + (ansi ? "\033[36m" + line + "\033[0m" : line) + "\n";
          if (nl == std::string::npos) break;
          pos = nl + 1;
        }
        break;
      }
    }
  }
  return out;
}

}  // namespace shardlab::lesson
