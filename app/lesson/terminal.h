// Lesson texts for a terminal: Markdown blocks wrapped to a width, with list
// bullets, and emphasis as ANSI styles (a terminal) or as *marks* (a pipe).
#pragma once
#include <string>

#include "app/lesson/lesson.h"

namespace shardlab::lesson {

// Columns a UTF-8 string takes in a terminal: Chinese characters take two.
int display_width(const std::string& utf8);

// Every line starts with `indent` spaces and, escapes aside, fits in `width`
// columns (a single word longer than that stands alone on its line). Control
// characters in the texts are printed escaped (see escape_controls).
std::string render_terminal(const Markdown& blocks, int width, bool ansi, int indent = 0);

// Control characters (C0 but newline and tab, DEL, C1) shown as text, "\x1b" or
// "\u009b", so text from a file cannot act on the terminal it is printed to
// (clear the screen, move the cursor, write the clipboard with OSC 52). With
// `keep_lines` false, newline and tab are escaped too (for a one-line message).
std::string escape_controls(const std::string& utf8, bool keep_lines = true);

// Empty when `utf8` holds no control character but newline, tab and a CR
// before a newline; else names the first: "U+001B (escape) at character 12".
std::string find_control_character(const std::string& utf8);

}  // namespace shardlab::lesson
