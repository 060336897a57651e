// Lesson texts for a terminal: Markdown blocks wrapped to a width, with list
// bullets, and emphasis as ANSI styles (a terminal) or as *marks* (a pipe).
#pragma once
#include <string>

#include "app/lesson/lesson.h"

namespace shardlab::lesson {

// Columns a UTF-8 string takes in a terminal: Chinese characters take two.
int display_width(const std::string& utf8);

// Every line starts with `indent` spaces and, escapes aside, fits in `width`
// columns (a single word longer than that stands alone on its line).
std::string render_terminal(const Markdown& blocks, int width, bool ansi, int indent = 0);

}  // namespace shardlab::lesson
