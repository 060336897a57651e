// Character tokenizer, training-text reader and seeded token windows (see text_data.h).
#include "core/model/text_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "core/config.h"
#include "core/io/atomic_file.h"
#include "core/rng.h"

namespace shardlab {

namespace {

// Decodes the code point at s[i] and advances i past it; false (i unchanged) on
// invalid UTF-8: a stray continuation byte, a truncated sequence, an overlong
// form, a surrogate or a value above U+10FFFF (the Unicode standard's table 3-7).
bool next_code_point(std::string_view s, size_t& i, char32_t& out) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    out = b0;
    ++i;
    return true;
  }
  int len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong below U+0800
    if (b0 == 0xED) hi = 0x9F;  // surrogates U+D800..U+DFFF
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong below U+10000
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return false;
  }
  if (s.size() - i < static_cast<size_t>(len)) return false;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return false;
  char32_t c = b0 & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const unsigned char b = byte(i + k);
    if ((b & 0xC0) != 0x80) return false;
    c = (c << 6) | (b & 0x3F);
  }
  out = c;
  i += len;
  return true;
}

std::string hex_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", b);
  return buf;
}

[[noreturn]] void invalid_utf8(std::string_view s, size_t at, const std::string& what) {
  throw ConfigError(what + ": invalid UTF-8 at byte offset " + std::to_string(at) + " (" +
                    hex_byte(static_cast<unsigned char>(s[at])) + "; valid: UTF-8 text)");
}

std::vector<char32_t> decode_utf8(std::string_view s, const std::string& what) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  char32_t c;
  while (i < s.size()) {
    if (!next_code_point(s, i, c)) invalid_utf8(s, i, what);
    out.push_back(c);
  }
  return out;
}

std::string encode_utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// "'中' (U+4E2D)"; control characters by number only, so the message stays one line.
std::string describe(char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
  const bool control = c < 0x20 || (c >= 0x7F && c < 0xA0) || c == 0x2028 || c == 0x2029;
  if (control) return buf;
  std::string s = "'";
  s += encode_utf8(c);
  s += "' (";
  s += buf;
  s += ")";
  return s;
}

}  // namespace

CharTokenizer::CharTokenizer(std::vector<char32_t> chars) : chars_(std::move(chars)) {
  const char32_t largest = *std::max_element(chars_.begin(), chars_.end());
  id_of_.assign(static_cast<size_t>(largest) + 1, -1);
  utf8_.reserve(chars_.size());
  for (size_t id = 0; id < chars_.size(); ++id) {
    int32_t& slot = id_of_[chars_[id]];
    // Two ids for one character: a stored vocabulary that is corrupt.
    if (slot >= 0)
      throw ConfigError("vocabulary repeats character " + describe(chars_[id]) + " (ids " +
                        std::to_string(slot) + " and " + std::to_string(id) +
                        "; valid: each character once)");
    slot = static_cast<int32_t>(id);
    utf8_.push_back(encode_utf8(chars_[id]));
  }
}

CharTokenizer CharTokenizer::from_text(std::string_view utf8, const std::string& what) {
  // One pass marking the code points seen (a 1.1 Mbit table), not a sort of the
  // whole text: a 64 MiB text has some 50 million characters.
  std::vector<bool> seen(0x110000);
  size_t i = 0;
  char32_t c;
  while (i < utf8.size()) {
    if (!next_code_point(utf8, i, c)) invalid_utf8(utf8, i, what);
    seen[c] = true;
  }
  std::vector<char32_t> chars;
  for (char32_t cp = 0; cp < seen.size(); ++cp)
    if (seen[cp]) chars.push_back(cp);
  if (chars.empty())
    throw ConfigError(what + ": the text is empty (valid: UTF-8 text with at least 1 character)");
  return CharTokenizer(std::move(chars));
}

CharTokenizer CharTokenizer::from_vocabulary(std::string_view utf8) {
  std::vector<char32_t> chars = decode_utf8(utf8, "vocabulary");
  if (chars.empty()) throw ConfigError("vocabulary is empty (valid: at least 1 character)");
  return CharTokenizer(std::move(chars));
}

std::string CharTokenizer::vocabulary() const {
  std::string s;
  for (const std::string& u : utf8_) s += u;
  return s;
}

std::vector<int32_t> CharTokenizer::encode(std::string_view utf8) const {
  std::vector<int32_t> ids;
  ids.reserve(utf8.size());
  size_t i = 0;
  char32_t c;
  while (i < utf8.size()) {
    const size_t at = i;
    if (!next_code_point(utf8, i, c)) invalid_utf8(utf8, i, "text to encode");
    const int32_t id = c < id_of_.size() ? id_of_[c] : -1;
    if (id < 0)
      throw ConfigError("character " + describe(c) + " at character " + std::to_string(ids.size()) +
                        " (byte offset " + std::to_string(at) + ") is not in the vocabulary of " +
                        std::to_string(vocab_size()) +
                        " characters (valid: characters of the training text)");
    ids.push_back(id);
  }
  return ids;
}

const std::string& CharTokenizer::utf8_of(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(vocab_size()) + ")");
  return utf8_[static_cast<size_t>(id)];
}

std::string CharTokenizer::decode(int32_t id) const {
  return utf8_of(id);
}

std::string CharTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string s;
  s.reserve(ids.size());
  for (int32_t id : ids) s += utf8_of(id);
  return s;
}

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw ConfigError("cannot read text '" + path + "': " + why);
}

[[noreturn]] void not_regular(const std::string& path, mode_t mode) {
  refuse(path, std::string("it is ") + file_kind(mode) + ", not a regular file (valid: a UTF-8 " +
                   "text file)");
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

[[noreturn]] void too_large(const std::string& path, uint64_t bytes, bool at_least) {
  refuse(path, std::string("it is ") + (at_least ? "more than " : "") + mib(bytes) + " (" +
                   std::to_string(bytes) + " bytes); the limit is " +
                   std::to_string(kMaxTextBytes >> 20) + " MiB" + " (valid: a shorter text)");
}

}  // namespace

std::string read_text_file(const std::string& path) {
  // stat first, so a device is refused without being opened (opening some has
  // side effects); fstat on the open file is the check that counts. O_NONBLOCK:
  // opening a FIFO must not wait for a writer.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (f.fd < 0) refuse(path, std::strerror(errno));
  if (::fstat(f.fd, &st) != 0) refuse(path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
  if (static_cast<uint64_t>(st.st_size) > kMaxTextBytes)
    too_large(path, static_cast<uint64_t>(st.st_size), false);

  // Bounded: at most one byte past the limit, whatever the size said (files in
  // /proc say 0; a file may grow while it is read).
  std::string text;
  text.resize(std::min<uint64_t>(static_cast<uint64_t>(st.st_size), kMaxTextBytes) + 1);
  size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      if (got > kMaxTextBytes) too_large(path, kMaxTextBytes, true);
      text.resize(std::min(text.size() * 2, kMaxTextBytes + 1));
    }
    const ssize_t n = ::read(f.fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) refuse(path, std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  if (got > kMaxTextBytes) too_large(path, kMaxTextBytes, true);

  // A byte-order mark is an encoding marker, not a character of the text.
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  if (text.empty())
    refuse(path, "the file is empty (valid: UTF-8 text with at least 2 characters)");
  const CharTokenizer tok = CharTokenizer::from_text(text, "text '" + path + "'");
  if (tok.vocab_size() < 2)
    refuse(path, "it holds only one distinct character, " +
                     describe(decode_utf8(tok.vocabulary(), path)[0]) +
                     " (valid: a text with at least 2 distinct characters)");
  return text;
}

TextData::TextData(std::vector<int32_t> tokens, int seq, uint64_t seed)
    : tokens_(std::move(tokens)), seq_(seq), seed_(seed) {
  if (seq < 1)
    throw ConfigError("--seq " + std::to_string(seq) + " is invalid (valid: at least 1)");
  if (tokens_.size() < static_cast<size_t>(seq) + 1)
    throw ConfigError("the text has " + std::to_string(tokens_.size()) +
                      " characters, fewer than the " + std::to_string(seq + 1) +
                      " of one training window (--seq " + std::to_string(seq) +
                      " + 1): use a longer text or a shorter --seq");
}

size_t TextData::window_start(int step, int row) const {
  Rng rng(mix_seed(seed_, static_cast<uint64_t>(step), static_cast<uint64_t>(row)));
  // Uniform over the size() - seq starts whose T+1 tokens fit: the high half of
  // a 64x64-bit product (no modulo, whose bias would favour early positions).
  const uint64_t starts = tokens_.size() - static_cast<size_t>(seq_);
  return static_cast<size_t>((static_cast<unsigned __int128>(rng.next()) * starts) >> 64);
}

void TextData::rows(int step, int row_begin, int rows, int32_t* x, int32_t* y) const {
  const size_t t = static_cast<size_t>(seq_);
  for (int r = 0; r < rows; ++r) {
    const int32_t* w = tokens_.data() + window_start(step, row_begin + r);
    std::copy(w, w + t, x + r * t);
    if (y) std::copy(w + 1, w + 1 + t, y + r * t);
  }
}

std::string default_corpus_path() {
  const char* dir = std::getenv("SHARDLAB_ASSETS");
  return std::string(dir && *dir ? dir : SHARDLAB_ASSETS_DIR) + "/corpus.txt";
}

}  // namespace shardlab
