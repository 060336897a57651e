// Reading a lesson file before toml++ sees it (see lesson_file.h).
#include "app/lesson/lesson_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "app/lesson/lesson.h"
#include "core/io/atomic_file.h"

namespace shardlab::lesson {

namespace {

constexpr size_t kMaxFileBytes = 1 << 20;  // a lesson is a few KiB; anything this big is not one

// toml++ recurses once per level a key nests, so a hostile file of 50,000
// dotted parts (a.a.a…) overflowed the stack. Before parsing, a bound on the
// deepest level any key reaches, found by a scan that knows only strings,
// comments and brackets: the table header's parts, plus the open arrays and
// inline tables, plus the dotted key's own parts. It may count too much (a
// float's dot) but never too little, and lessons stay far below the limit.
struct Nesting {
  int depth = 0;
  int line = 1;  // where the deepest key is
};
constexpr int kMaxNesting = 32;

Nesting deepest_key(const std::string& s) {
  Nesting worst;
  const size_t n = s.size();
  int line = 1, open = 0, header = 0, dots = 0;
  bool in_header = false, line_start = true;
  auto end_run = [&](int base) {
    if (base + dots + 1 > worst.depth) worst = {base + dots + 1, line};
    dots = 0;
  };
  // Skips the string opening at i: quote q, tripled when multi-line; "…" has escapes.
  auto skip_string = [&](size_t i, char q) {
    const bool multi = s.compare(i, 3, std::string(3, q)) == 0;
    i += multi ? 3 : 1;
    for (; i < n; ++i) {
      if (s[i] == '\n') {
        if (!multi) return i;  // unterminated (toml++ names it); the caller counts the line
        ++line;
      } else if (q == '"' && s[i] == '\\') {
        if (i + 1 < n && s[i + 1] == '\n') ++line;
        ++i;
      } else if (s[i] == q && (!multi || s.compare(i, 3, std::string(3, q)) == 0)) {
        return i + (multi ? 3 : 1);
      }
    }
    return n;
  };
  size_t i = 0;
  while (i < n) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    const bool was_line_start = line_start;
    line_start = false;
    if (c == '"' || c == '\'') {
      i = skip_string(i, c);
      continue;
    }
    if (c == '.') {
      ++dots;
    } else if (c == '\n' || c == '#') {
      end_run(open + (in_header ? 0 : header));
      while (i < n && s[i] != '\n') ++i;
      if (i < n) ++line;
      line_start = true;
    } else if (c == '[' && was_line_start && open == 0) {  // [table] or [[array of tables]]
      in_header = true;
      dots = 0;
      if (i + 1 < n && s[i + 1] == '[') ++i;
    } else if (c == ']' && in_header && open == 0) {
      header = dots + 1;
      end_run(0);
      in_header = false;
      if (i + 1 < n && s[i + 1] == ']') ++i;
    } else if (c == '[' || c == '{') {
      end_run(open + (in_header ? 0 : header));
      ++open;
    } else if (c == ']' || c == '}') {
      end_run(open + (in_header ? 0 : header));
      open = std::max(0, open - 1);
    } else if (c == '=' || c == ',') {
      end_run(open + (in_header ? 0 : header));
    }
    ++i;
  }
  end_run(open + header);
  return worst;
}

}  // namespace

void check_key_nesting(const std::string& content, const std::string& path) {
  if (const Nesting deep = deepest_key(content); deep.depth > kMaxNesting)
    throw LessonError(path, deep.line, "",
                      "nests a key " + std::to_string(deep.depth) +
                          " levels deep (dotted parts, tables, arrays): not a lesson file "
                          "(valid: at most " +
                          std::to_string(kMaxNesting) + ")");
}

// What is not a regular file is refused before it is opened: opening a FIFO
// waits for a writer, so a FIFO named *.toml hung `lesson list` and `check`.
std::string read_lesson_file(const std::string& path) {
  auto refuse_kind = [&](mode_t mode) {
    if (S_ISDIR(mode)) throw LessonError(path, 0, "", "is a directory, not a lesson file");
    if (!S_ISREG(mode))
      throw LessonError(
          path, 0, "",
          std::string("is ") + file_kind(mode) + ", not a lesson file (valid: a regular file)");
  };
  const auto unreadable = [&] {
    return LessonError(path, 0, "", "cannot be read (no such file, or no permission)");
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw unreadable();
  refuse_kind(st.st_mode);
  // O_NONBLOCK: should the path have become a FIFO since, the open still
  // returns at once, and fstat refuses what it opened.
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (f.fd < 0 || ::fstat(f.fd, &st) != 0) throw unreadable();
  refuse_kind(st.st_mode);
  std::string s;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw unreadable();
    if (n == 0) break;
    s.append(buf, static_cast<size_t>(n));
    if (s.size() > kMaxFileBytes)
      throw LessonError(path, 0, "", "is larger than 1 MiB: not a lesson file");
  }
  return s;
}

}  // namespace shardlab::lesson
