// The app's own words in English and Chinese: every string a view shows goes
// through a Tr (the language is a value the app passes down, not a global).
// Keys are the English text, so a word with no entry shows English; a test
// (tests/test_i18n.cpp) fails when a view's string has no Chinese entry or an
// entry's printf conversions differ from its key's.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "app/lesson/lesson.h"

namespace shardlab::gui {

struct Tr {
  lesson::Lang lang = lesson::Lang::en;

  // The text in this language: `en` itself in English or when it has no entry.
  const char* operator()(const char* en) const;
  std::string operator()(const std::string& en) const { return (*this)(en.c_str()); }
  bool zh() const { return lang == lesson::Lang::zh; }
  // "a, b and c" / "a、b 和 c".
  std::string join(const std::vector<std::string>& parts) const;
};

// printf into a std::string: a whole translated sentence with its numbers in
// place, e.g. strf(tr("finished %d steps"), n) (word order differs between
// the languages, so sentences are translated whole, not glued from pieces).
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Every entry, in the table's order: (English, Chinese).
const std::vector<std::pair<const char*, const char*>>& string_table();

// Whether `en` has a Chinese entry.
bool has_translation(const char* en);

}  // namespace shardlab::gui
