// Text data for the character-level GPT: a tokenizer over Unicode code points
// (so Chinese text is one token per character), the bounded reader of a
// training text, and seeded windows of T+1 tokens that every strategy shares.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardlab {

// Character-level tokenizer: the vocabulary is the sorted set of distinct
// Unicode code points of a text; a character's id is its place in it.
class CharTokenizer {
 public:
  // Throws ConfigError on invalid UTF-8, naming `what` (the source, such as the
  // file path) and the byte offset; and on an empty text.
  static CharTokenizer from_text(std::string_view utf8, const std::string& what);
  // The inverse of vocabulary(): a UTF-8 string holding each vocabulary
  // character once, in id order (what a checkpoint stores in its metadata).
  // Throws ConfigError when it is empty, not UTF-8 or repeats a character.
  static CharTokenizer from_vocabulary(std::string_view utf8);

  std::string vocabulary() const;
  int vocab_size() const { return static_cast<int>(chars_.size()); }

  // Throws ConfigError naming the first character not in the vocabulary and
  // its position (and on invalid UTF-8).
  std::vector<int32_t> encode(std::string_view utf8) const;
  // Throws std::out_of_range for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode(int32_t id) const;

 private:
  explicit CharTokenizer(std::vector<char32_t> chars);  // throws on a repeated character
  const std::string& utf8_of(int32_t id) const;         // throws std::out_of_range

  std::vector<char32_t> chars_;    // id -> code point
  std::vector<std::string> utf8_;  // id -> its UTF-8 bytes
  // code point -> id (-1: not in the vocabulary), up to the largest one: a
  // table, not a search, since encode sees every character of a 64 MiB text.
  std::vector<int32_t> id_of_;
};

// Reads a training text: a regular file only (a FIFO, directory or device is
// refused without blocking), at most kMaxTextBytes (read with a bounded read,
// so a file that grows or lies about its size cannot make it read forever),
// valid UTF-8 with at least 2 distinct characters. A leading UTF-8 byte-order
// mark is dropped. Every refusal is a one-line ConfigError naming the path.
constexpr size_t kMaxTextBytes = size_t{64} << 20;
std::string read_text_file(const std::string& path);

// Token windows of a corpus. Row r of step s's global batch is the T+1 tokens
// starting at a position drawn from a generator seeded from (seed, s, r)
// alone, so every strategy and world size sees the same rows, and each
// data-parallel rank makes just its own. x = the first T tokens, y = the next
// T (the same window shifted by one).
class TextData {
 public:
  // Throws ConfigError when seq < 1 or tokens.size() < seq + 1.
  TextData(std::vector<int32_t> tokens, int seq, uint64_t seed);
  int seq() const { return seq_; }
  size_t size() const { return tokens_.size(); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Position of row `row`'s window in step `step`, in [0, size() - seq - 1].
  size_t window_start(int step, int row) const;
  // Rows [row_begin, row_begin + rows) of step `step`'s global batch, in host
  // memory: x[rows, seq] and y[rows, seq]; y may be null (inputs only).
  void rows(int step, int row_begin, int rows, int32_t* x, int32_t* y) const;

 private:
  std::vector<int32_t> tokens_;
  int seq_;
  uint64_t seed_;
};

// The default corpus: $SHARDLAB_ASSETS/corpus.txt when that variable is set
// (and not empty), else the source tree's assets/corpus.txt.
std::string default_corpus_path();

}  // namespace shardlab
