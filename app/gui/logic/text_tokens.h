// Where the lessons' wrapped text may break a line: pieces of a run, each a
// word with its trailing space or one CJK character (Chinese has no spaces
// between words), with the exceptions a reader expects ("27 936" whole, no
// opening bracket at a line's end).
#pragma once

#include <string>
#include <vector>

#include "app/lesson/lesson.h"

namespace shardlab::gui {

struct Token {
  std::string text;
  const lesson::TextRun* run;
};

// Appends `run`'s pieces to `out`; a line may break after any piece.
void tokenize(const lesson::TextRun& run, std::vector<Token>& out);

}  // namespace shardlab::gui
