// Text data of the character-level GPT: the tokenizer over code points, the
// refusals of the training-text reader, the seeded token windows, and the
// shipped corpus.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <set>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/model/text_data.h"
#include "test_util.h"

using namespace shardlab;
using Catch::Matchers::Contains;
using shardlab::test::TempDir;

namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// The message of the ConfigError that `f` throws ("" when it throws none).
template <class F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the tokenizer's ids are the text's sorted code points, Chinese included", "[text]") {
  const std::string text = "数据并行 and 流水线并行";
  const CharTokenizer tok = CharTokenizer::from_text(text, "sample");
  // Distinct: 数 据 并 行 ' ' a n d 流 水 线 — characters, not the 3 bytes of each hanzi.
  CHECK(tok.vocab_size() == 11);
  const std::vector<int32_t> ids = tok.encode(text);
  CHECK(ids.size() == 14);
  CHECK(tok.decode(ids) == text);
  CHECK(tok.encode("并行") == std::vector<int32_t>{ids[2], ids[3]});
  // Sorted by code point: ' ' (U+0020) < 'a' < 'd' < 'n' < every hanzi.
  CHECK(tok.encode(" adn") == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(tok.decode(0) == " ");
  CHECK(tok.vocabulary() == " adn并据数水流线行");
  CHECK(tok.encode("").empty());
  CHECK(tok.decode(std::vector<int32_t>{}).empty());

  // Every length of UTF-8 sequence: 1 (a), 2 (é), 3 (中), 4 (😀).
  const std::string mixed = "aé中😀a";
  const CharTokenizer m = CharTokenizer::from_text(mixed, "mixed");
  CHECK(m.vocab_size() == 4);
  CHECK(m.encode(mixed) == std::vector<int32_t>{0, 1, 2, 3, 0});
  CHECK(m.decode(m.encode(mixed)) == mixed);
}

TEST_CASE("vocabulary() round-trips through from_vocabulary, order kept", "[text]") {
  const std::string text = "数据并行 and 流水线并行\nPipeline: 1F1B.";
  const CharTokenizer tok = CharTokenizer::from_text(text, "sample");
  const CharTokenizer back = CharTokenizer::from_vocabulary(tok.vocabulary());
  CHECK(back.vocab_size() == tok.vocab_size());
  CHECK(back.vocabulary() == tok.vocabulary());
  CHECK(back.encode(text) == tok.encode(text));

  // A stored vocabulary keeps its ids even when it is not sorted.
  const CharTokenizer given = CharTokenizer::from_vocabulary("行b并a");
  CHECK(given.encode("ab并行") == std::vector<int32_t>{3, 1, 2, 0});
  CHECK(given.decode(0) == "行");

  CHECK_THAT(config_error([] { CharTokenizer::from_vocabulary("ab并a"); }),
             Contains("repeats character 'a'") && Contains("ids 0 and 3"));
  CHECK_THAT(config_error([] { CharTokenizer::from_vocabulary(""); }), Contains("empty"));
  CHECK_THAT(config_error([] { CharTokenizer::from_vocabulary("ab\xff"); }),
             Contains("vocabulary: invalid UTF-8 at byte offset 2"));
}

TEST_CASE("invalid UTF-8 is refused, naming the source and the byte offset", "[text]") {
  const auto err = [](const std::string& bytes) {
    return config_error([&] { CharTokenizer::from_text(bytes, "corpus.txt"); });
  };
  CHECK_THAT(err("ab\xff"
                 "cd"),
             Contains("corpus.txt: invalid UTF-8 at byte offset 2 (0xFF"));
  CHECK_THAT(err("ab\x80"), Contains("byte offset 2 (0x80"));         // stray continuation byte
  CHECK_THAT(err("中文\xe4\xb8"), Contains("byte offset 6 (0xE4"));   // truncated at the end
  CHECK_THAT(err("\xe4z\xad"), Contains("byte offset 0"));            // broken continuation
  CHECK_THAT(err("a\xc0\x80"), Contains("byte offset 1 (0xC0"));      // overlong NUL
  CHECK_THAT(err("a\xe0\x80\xaf"), Contains("byte offset 1"));        // overlong '/'
  CHECK_THAT(err("a\xed\xa0\x80"), Contains("byte offset 1 (0xED"));  // surrogate U+D800
  CHECK_THAT(err("a\xf4\x90\x80\x80"), Contains("byte offset 1"));    // above U+10FFFF
  CHECK_THAT(err(""), Contains("corpus.txt: the text is empty"));
  // The largest valid code points of each length pass.
  CHECK(CharTokenizer::from_text("\x7f\xdf\xbf\xef\xbf\xbf\xf4\x8f\xbf\xbf", "x").vocab_size() ==
        4);
}

TEST_CASE("encode names the first character not in the vocabulary, decode checks ids", "[text]") {
  const CharTokenizer tok = CharTokenizer::from_text("abc 并行", "sample");
  CHECK_THAT(config_error([&] { tok.encode("ab 数据"); }),
             Contains("character '数' (U+6570) at character 3 (byte offset 3)") &&
                 Contains("not in the vocabulary of 6 characters"));
  // A control character is named by number only: the message stays on one line.
  const std::string newline = config_error([&] { tok.encode("a\nb"); });
  CHECK_THAT(newline, Contains("character U+000A at character 1"));
  CHECK(newline.find('\n') == std::string::npos);
  CHECK_THAT(config_error([&] { tok.encode("a\xff"); }), Contains("byte offset 1"));

  CHECK_THROWS_AS(tok.decode(6), std::out_of_range);
  CHECK_THROWS_AS(tok.decode(-1), std::out_of_range);
  CHECK_THROWS_WITH(tok.decode(std::vector<int32_t>{0, 99}),
                    Contains("token id 99 is outside the vocabulary [0, 6)"));
}

TEST_CASE("text windows come from (seed, step, row) alone: any split gives the same rows",
          "[text]") {
  std::vector<int32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>(i);  // token = position
  const int seq = 16, rows = 8;
  const TextData data(tokens, seq, 42);
  CHECK(data.seq() == seq);
  CHECK(data.size() == tokens.size());
  CHECK(data.tokens() == tokens);

  const auto batch = [&](const TextData& d, int step, int begin, int n, bool with_y = true) {
    std::vector<int32_t> x(static_cast<size_t>(n) * seq, -1), y(x.size(), -1);
    d.rows(step, begin, n, x.data(), with_y ? y.data() : nullptr);
    return std::make_pair(x, y);
  };
  for (int step : {0, 1, 7}) {
    INFO("step " << step);
    const auto [x, y] = batch(data, step, 0, rows);
    // Deterministic, also from a second TextData with the same seed.
    CHECK(batch(data, step, 0, rows) == std::make_pair(x, y));
    CHECK(batch(TextData(tokens, seq, 42), step, 0, rows) == std::make_pair(x, y));
    // Split as two, four or eight data-parallel ranks would: the same rows.
    for (int parts : {2, 4, 8}) {
      std::vector<int32_t> xs, ys;
      for (int p = 0; p < parts; ++p) {
        const auto [px, py] = batch(data, step, p * rows / parts, rows / parts);
        xs.insert(xs.end(), px.begin(), px.end());
        ys.insert(ys.end(), py.begin(), py.end());
      }
      CHECK(xs == x);
      CHECK(ys == y);
    }
    CHECK(batch(data, step, 0, rows, false).first == x);  // y = null: x alone
    for (int r = 0; r < rows; ++r) {
      const size_t start = data.window_start(step, r);
      CHECK(start + seq + 1 <= tokens.size());
      for (int j = 0; j < seq; ++j) {
        const size_t k = static_cast<size_t>(r) * seq + j;
        CHECK(x[k] == static_cast<int32_t>(start) + j);  // a contiguous window
        CHECK(y[k] == x[k] + 1);                         // the next token
      }
    }
  }
  CHECK(batch(data, 0, 0, rows) != batch(data, 1, 0, rows));
  CHECK(batch(data, 0, 0, rows) != batch(TextData(tokens, seq, 43), 0, 0, rows));
}

TEST_CASE("text windows cover the corpus, both ends included", "[text]") {
  // 5 tokens, seq 3: the windows of 4 tokens start at 0 or 1, and both occur.
  const TextData data({10, 11, 12, 13, 14}, 3, 7);
  std::set<size_t> starts;
  for (int step = 0; step < 200; ++step)
    for (int row = 0; row < 4; ++row) starts.insert(data.window_start(step, row));
  CHECK(starts == std::set<size_t>{0, 1});
  // Exactly T+1 tokens: one window, at 0.
  const TextData exact({1, 2, 3}, 2, 1);
  std::vector<int32_t> x(2), y(2);
  exact.rows(5, 3, 1, x.data(), y.data());
  CHECK(x == std::vector<int32_t>{1, 2});
  CHECK(y == std::vector<int32_t>{2, 3});
}

TEST_CASE("a text shorter than one window is refused, naming its length and --seq", "[text]") {
  const std::string err = config_error([] { TextData(std::vector<int32_t>(64, 0), 64, 1); });
  CHECK_THAT(err, Contains("64 characters") && Contains("--seq 64") &&
                      Contains("a longer text or a shorter --seq"));
  CHECK_NOTHROW(TextData(std::vector<int32_t>(65, 0), 64, 1));
  CHECK_THAT(config_error([] { TextData(std::vector<int32_t>(10, 0), 0, 1); }),
             Contains("--seq 0 is invalid"));
}

TEST_CASE("read_text_file reads UTF-8 text and refuses anything else in one line", "[text]") {
  TempDir dir;
  const std::string good = dir.file("good.txt");
  write_file(good, "\xEF\xBB\xBF数据并行 and 流水线并行\n");
  CHECK(read_text_file(good) == "数据并行 and 流水线并行\n");  // the byte-order mark dropped

  const auto refused = [](const std::string& path) {
    const std::string err = config_error([&] { read_text_file(path); });
    CHECK(err.find('\n') == std::string::npos);
    CHECK_THAT(err, Contains(path));
    return err;
  };
  CHECK_THAT(refused(dir.path.string()), Contains("it is a directory, not a regular file"));
  CHECK_THAT(refused(dir.file("missing.txt")), Contains("No such file or directory"));
  if (::access("/dev/zero", R_OK) == 0)
    CHECK_THAT(refused("/dev/zero"), Contains("it is a character device"));

  const std::string bad = dir.file("latin1.txt");
  write_file(bad, "caf\xe9 au lait");
  CHECK_THAT(refused(bad), Contains("invalid UTF-8 at byte offset 3 (0xE9"));
  const std::string empty = dir.file("empty.txt");
  write_file(empty, "");
  CHECK_THAT(refused(empty), Contains("empty"));
  const std::string one = dir.file("one.txt");
  write_file(one, "并并并并");
  CHECK_THAT(refused(one), Contains("only one distinct character, '并'"));

  // Larger than the limit: a sparse file, refused by its size before a byte is read.
  const std::string big = dir.file("big.txt");
  write_file(big, "ab");
  REQUIRE(::truncate(big.c_str(), static_cast<off_t>(kMaxTextBytes + 1)) == 0);
  CHECK_THAT(refused(big), Contains("it is 64.0 MiB (67108865 bytes); the limit is 64 MiB"));
}

TEST_CASE("read_text_file refuses a FIFO without waiting for a writer", "[text]") {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto result =
      std::async(std::launch::async, [&] { return config_error([&] { read_text_file(fifo); }); });
  if (result.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
    // Release the blocked reader (a writer that opens and closes), then fail.
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    FAIL("read_text_file blocked on a FIFO");
  }
  CHECK_THAT(result.get(), Contains("'" + fifo + "'") && Contains("it is a FIFO"));
}

TEST_CASE("the shipped corpus loads: English and Chinese, over 100 characters", "[text]") {
  const std::string shipped = std::string(SHARDLAB_SOURCE_DIR) + "/assets/corpus.txt";
  const char* env = std::getenv("SHARDLAB_ASSETS");
  if (!env || !*env) CHECK(default_corpus_path() == shipped);

  const std::string text = read_text_file(shipped);
  const CharTokenizer tok = CharTokenizer::from_text(text, shipped);
  CHECK(tok.vocab_size() > 100);
  CHECK(tok.decode(tok.encode(text)) == text);
  for (const char* word : {"数据并行", "流水线", "pipeline", "ZeRO"}) {
    INFO(word);
    CHECK_NOTHROW(tok.encode(word));
  }
  const TextData data(tok.encode(text), 64, 1);
  std::vector<int32_t> x(4 * 64);
  data.rows(0, 0, 4, x.data(), nullptr);
  for (int32_t id : x) CHECK((id >= 0 && id < tok.vocab_size()));

  // $SHARDLAB_ASSETS names another directory (an installed copy).
  const std::string keep = env ? env : "";
  ::setenv("SHARDLAB_ASSETS", "/opt/shardlab/assets", 1);
  CHECK(default_corpus_path() == "/opt/shardlab/assets/corpus.txt");
  if (env)
    ::setenv("SHARDLAB_ASSETS", keep.c_str(), 1);
  else
    ::unsetenv("SHARDLAB_ASSETS");
}
