// Reading a lesson file before toml++ sees it: only a regular file of at most
// 1 MiB is read, and only text whose keys nest a bounded depth is parsed, so a
// hostile file is one LessonError (lesson.h), never a hang or a crash.
#pragma once
#include <string>

namespace shardlab::lesson {

// The file's bytes. Throws LessonError (line 0) for a directory, a FIFO or
// any other non-regular file (refused before it is opened), one that cannot
// be read, or one larger than 1 MiB.
std::string read_lesson_file(const std::string& path);

// Throws LessonError naming `path` and the line when a key in `content` nests
// deeper than toml++ can safely recurse (a dotted key, table header and open
// arrays and inline tables together: at most 32 levels).
void check_key_nesting(const std::string& content, const std::string& path);

}  // namespace shardlab::lesson
