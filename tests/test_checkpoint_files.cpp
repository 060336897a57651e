// Files that cannot lie: a corpus of malformed safetensors files, generated here,
// each refused with one clear line within a second, and the atomic writer under
// links, devices, racing writers and SIGKILL. Uses only core/safetensors and
// core/atomic_file, so it also builds alone as shardlab_files_asan (ASan+UBSan).
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/io/atomic_file.h"
#include "core/io/safetensors.h"
#include "tests/st_bytes.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace shardlab;
using shardlab::test::raw;
using shardlab::test::st_file;
using shardlab::test::TempDir;
using shardlab::test::u64_le;
using shardlab::test::write_bytes;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  uint64_t begin, uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// Loads `path` expecting a refusal: returns the message and checks that it is one
// line naming the file, came as SafetensorsError, and came within a second.
std::string refusal(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    load_safetensors(path);
  } catch (const SafetensorsError& e) {
    msg = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("loading " << path << " gave: " << msg << " after " << s << " s");
  REQUIRE_FALSE(msg.empty());
  CHECK(msg.find("'" + path + "'") != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);
  CHECK(s < 1.0);
  return msg;
}

// Writes `bytes` to a fresh file and expects its refusal to contain each of `parts`.
void expect_refused(const TempDir& dir, const std::string& bytes,
                    const std::vector<std::string>& parts) {
  static int n = 0;
  const std::string path = dir.file("case" + std::to_string(n++) + ".safetensors");
  write_bytes(path, bytes);
  const std::string msg = refusal(path);
  for (const std::string& p : parts) {
    INFO("message: " << msg);
    CHECK(msg.find(p) != std::string::npos);
  }
}

// Selects the temporary-file kind for one test and restores the default after,
// whatever the test does.
struct TempKind {
  explicit TempKind(bool unnamed) { set_atomic_file_unnamed_allowed(unnamed); }
  ~TempKind() { set_atomic_file_unnamed_allowed(true); }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::vector<NamedTensor> weights(float base, size_t n) {
  std::vector<NamedTensor> t = {{"a.weight", {static_cast<int64_t>(n)}, {}},
                                {"b.bias", {3}, {base, base + 1, base + 2}}};
  t[0].data.resize(n);
  for (size_t i = 0; i < n; ++i) t[0].data[i] = base + static_cast<float>(i % 1000) * 1e-3f;
  return t;
}

bool equal(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].shape != b[i].shape || !same_bits(a[i].data, b[i].data))
      return false;
  return true;
}

// Every entry of `dir` (hidden ones too).
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("malformed checkpoints: each refused with one clear line within a second",
          "[files][io]") {
  TempDir dir;
  const std::string f32x2 = raw(std::vector<float>{1.f, 2.f});
  const std::string f32x4 = raw(std::vector<float>{1.f, 2.f, 3.f, 4.f});

  SECTION("a good file loads (the control)") {
    write_bytes(dir.file("ok.safetensors"), st_file("{" + entry("w", "F32", "[2]", 0, 8) + "," +
                                                        entry("v", "F32", "[2]", 8, 16) + "}",
                                                    f32x4));
    CHECK(load_safetensors(dir.file("ok.safetensors")).size() == 2);
  }
  SECTION("0 bytes") {
    expect_refused(dir, "", {"only 0 bytes", "too short"});
  }
  SECTION("truncated: inside the length, the header, the data") {
    save_safetensors(dir.file("full.safetensors"), weights(1.f, 100));
    const std::string full = slurp(dir.file("full.safetensors"));
    expect_refused(dir, full.substr(0, 5), {"only 5 bytes", "too short"});
    expect_refused(dir, full.substr(0, 20), {"runs past the end of the 20-byte file"});
    expect_refused(dir, full.substr(0, full.size() - 1), {"outside the data section"});
    expect_refused(dir, full.substr(0, full.size() - 12), {"tensor 'b.bias'", "outside"});
  }
  SECTION("header length one byte short or long") {
    // 3 spaces of padding: one byte short still parses, and the data then starts a
    // byte early, which the tiling check catches.
    const std::string header = "{" + entry("w", "F32", "[2]", 0, 8) + "}   ";
    // The first data byte is a space (0x20), so one byte long still parses too, and
    // the data section is then a byte short.
    const std::string good = st_file(header, raw(std::vector<uint32_t>{0x3f800020u, 0x40000000u}));
    write_bytes(dir.file("good.safetensors"), good);
    REQUIRE(load_safetensors(dir.file("good.safetensors"))[0].data.size() == 2);
    expect_refused(dir, u64_le(header.size() - 1) + good.substr(8),
                   {"1 byte [8, 9) after the last tensor 'w'", "wrong header length"});
    expect_refused(dir, u64_le(header.size() + 1) + good.substr(8), {"outside the data section"});
    // What the issue found: a real saved checkpoint with the length off by one.
    save_safetensors(dir.file("saved.safetensors"), weights(0.5f, 64));
    const std::string saved = slurp(dir.file("saved.safetensors"));
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(saved[i])} << (8 * i);
    for (const uint64_t wrong : {n - 1, n + 1, n - 8, n + 8}) {
      INFO("header length " << wrong << " instead of " << n);
      write_bytes(dir.file("shifted.safetensors"), u64_le(wrong) + saved.substr(8));
      refusal(dir.file("shifted.safetensors"));
    }
  }
  SECTION("a file of zeros (header length 0)") {
    expect_refused(dir, std::string(100, '\0'),
                   {"header length 0 (valid: at least 2", "is this a safetensors file?"});
    // Sparse and 1 GiB: refused from its first 8 bytes, nothing else read.
    const std::string zeros = dir.file("zeros.safetensors");
    write_bytes(zeros, "");
    fs::resize_file(zeros, 1ull << 30);
    CHECK(refusal(zeros).find("header length 0 (valid: at least 2") != std::string::npos);
  }
  SECTION("huge header length") {
    expect_refused(dir, u64_le(~uint64_t{0}) + "{}",
                   {"header length 18446744073709551615", "runs past the end"});
    // Within the file (a sparse one) but over the reference's limit: refused unread.
    const std::string big = dir.file("bigheader.safetensors");
    write_bytes(big, u64_le(200ull << 20) + "{");
    fs::resize_file(big, 300ull << 20);
    CHECK(refusal(big).find("over the 100 MiB limit") != std::string::npos);
  }
  SECTION("offsets with gaps") {
    expect_refused(
        dir,
        st_file("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 8, 12) + "}",
                f32x2 + f32x2.substr(0, 4)),
        {"bytes [4, 8) of the data section belong to no tensor",
         "between 'a' [0, 4) and 'b' [8, 12)"});
    expect_refused(dir, st_file("{" + entry("a", "F32", "[1]", 4, 8) + "}", f32x2),
                   {"bytes [0, 4)", "before the first tensor 'a'"});
    // A duplicated key: JSON keeps one, and the other's bytes are left uncovered.
    expect_refused(
        dir,
        st_file("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("a", "F32", "[2]", 8, 16) + "}",
                f32x4),
        {"belong to no tensor"});
  }
  SECTION("overlapping offsets") {
    expect_refused(
        dir,
        st_file("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}",
                f32x4),
        {"tensors 'a' [0, 8) and 'b' [4, 12) overlap"});
    expect_refused(dir,
                   st_file("{" + entry("a", "F32", "[2]", 0, 8) + "," +
                               entry("same", "F32", "[2]", 0, 8) + "}",
                           f32x2),
                   {"overlap"});
  }
  SECTION("offsets out of range") {
    expect_refused(dir, st_file("{" + entry("a", "F32", "[4]", 0, 16) + "}", f32x2),
                   {"tensor 'a' has data_offsets [0, 16] outside the data section (8 bytes"});
    expect_refused(dir, st_file("{" + entry("a", "F32", "[0]", 8, 0) + "}", f32x2),
                   {"outside the data section"});
    expect_refused(
        dir,
        st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551615,7]}})",
                f32x2),
        {"outside the data section"});
    expect_refused(dir,
                   st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", f32x2),
                   {"\"data_offsets\" pair of non-negative integers"});
  }
  SECTION("trailing bytes") {
    expect_refused(dir, st_file("{" + entry("a", "F32", "[1]", 0, 4) + "}", f32x2),
                   {"4 bytes [4, 8) after the last tensor 'a'"});
    expect_refused(dir, st_file("{}", f32x2), {"8 bytes [0, 8) after an empty header"});
  }
  SECTION("dtype, shape and size mismatches") {
    expect_refused(dir, st_file("{" + entry("a", "F64", "[1]", 0, 8) + "}", f32x2),
                   {"tensor 'a' has unsupported dtype 'F64'"});
    expect_refused(dir, st_file("{" + entry("a", "F32", "[3]", 0, 8) + "}", f32x2),
                   {"tensor 'a' has shape [3] of F32 (12 bytes) but data_offsets span 8 bytes"});
    expect_refused(dir, st_file("{" + entry("a", "F16", "[2]", 0, 8) + "}", f32x2),
                   {"shape [2] of F16 (4 bytes) but data_offsets span 8 bytes"});
    expect_refused(dir, st_file("{" + entry("a", "I64", "[2]", 0, 8) + "}", f32x2),
                   {"shape [2] of I64 (16 bytes)"});
    expect_refused(dir, st_file("{" + entry("a", "F32", "[2.5]", 0, 8) + "}", f32x2),
                   {"\"shape\" list of non-negative integers"});
    expect_refused(
        dir,
        st_file("{" + entry("a", "F32", "[4294967296,4294967296,4294967296]", 0, 8) + "}", f32x2),
        {"shape too large"});
    expect_refused(dir,
                   st_file("{" + entry("n", "I64", "[1]", 0, 8) + "}",
                           raw(std::vector<int64_t>{int64_t{1} << 40})),
                   {"tensor 'n' holds I64 value 1099511627776 at index 0"});
  }
  SECTION("not JSON, not an object") {
    expect_refused(dir, st_file("{\"a\": ", ""), {"header is not valid JSON"});
    expect_refused(dir, st_file("[1,2]", ""), {"header is not a JSON object"});
    expect_refused(dir, st_file(std::string("{\"a\xff\":1}"), ""), {"not valid JSON"});
  }
}

TEST_CASE("non-regular files are refused before anything is read", "[files][io]") {
  TempDir dir;
  const auto not_regular = [](const std::string& path, const std::string& kind) {
    const std::string msg = refusal(path);
    INFO(msg);
    CHECK(msg == "cannot read '" + path + "': " + kind +
                     ", not a regular file (valid: a safetensors file)");
  };
  SECTION("a directory") {
    not_regular(dir.path.string(), "Is a directory");
  }
  SECTION("a FIFO with no writer does not block") {
    const std::string fifo = dir.file("pipe.safetensors");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    not_regular(fifo, "it is a FIFO");
  }
  SECTION("/dev/zero (it would read forever) and /dev/null") {
    not_regular("/dev/zero", "it is a character device");
    not_regular("/dev/null", "it is a character device");
  }
  SECTION("a socket") {
    const std::string sock = dir.file("s.sock");
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(sock.size() < sizeof addr.sun_path);
    std::strcpy(addr.sun_path, sock.c_str());
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    not_regular(sock, "it is a socket");
    ::close(fd);
  }
  SECTION("a missing file") {
    CHECK(refusal(dir.file("nope")) ==
          "cannot open '" + dir.file("nope") + "': No such file or directory");
  }
  SECTION("an 8 GiB sparse file with a small header: refused by its size, not read") {
    const std::string big = dir.file("huge.safetensors");
    const std::string header = "{" + entry("w", "F32", "[2]", 0, 8) + "}";
    write_bytes(big, st_file(header, raw(std::vector<float>{1, 2})));
    fs::resize_file(big, 8ull << 30);
    const std::string msg = refusal(big);
    const uint64_t data_size = (8ull << 30) - 8 - header.size();
    INFO(msg);
    CHECK(msg.find(std::to_string(data_size - 8) + " bytes [8, " + std::to_string(data_size) +
                   ") after the last tensor 'w'") != std::string::npos);
  }
}

TEST_CASE("NaN and Inf load as stored, find_nonfinite names the first", "[files][io]") {
  TempDir dir;
  const std::string path = dir.file("nan.safetensors");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  save_safetensors(path, {{"ok", {2}, {1.f, 2.f}}, {"bad", {4}, {0.f, inf, nan, -inf}}});
  const auto t = load_safetensors(path);
  REQUIRE(t.size() == 2);
  CHECK(std::isinf(t[1].data[1]));
  CHECK(find_nonfinite(t) ==
        "tensor 'bad' holds 3 non-finite values of 4, the first +Inf at index 1");
  CHECK(find_nonfinite({{"n", {3}, {0.f, 0.f, nan}}}) ==
        "tensor 'n' holds 1 non-finite value of 3, the first NaN at index 2");
  CHECK(find_nonfinite({t[0]}).empty());
  // F16 infinity widens to float infinity and is found the same way.
  write_bytes(path, st_file("{" + entry("h", "F16", "[2]", 0, 4) + "}",
                            raw(std::vector<uint16_t>{0x3C00, 0xFC00})));
  CHECK(find_nonfinite(load_safetensors(path)) ==
        "tensor 'h' holds 1 non-finite value of 2, the first -Inf at index 1");
}

TEST_CASE("atomic writes: links, devices, leftovers", "[files][io]") {
  TempDir dir;
  const bool unnamed = GENERATE(true, false);
  const TempKind kind(unnamed);
  INFO((unnamed ? "O_TMPFILE temporaries" : "named temporaries"));
  const std::string path = dir.file("out.safetensors");
  const auto a = weights(1.f, 10), b = weights(2.f, 10);

  SECTION("a symlink at the target is replaced by the file, its target untouched") {
    write_bytes(dir.file("victim"), "keep me");
    fs::create_symlink(dir.file("victim"), path);
    save_safetensors(path, a);
    CHECK_FALSE(fs::is_symlink(path));
    CHECK(equal(load_safetensors(path), a));
    CHECK(slurp(dir.file("victim")) == "keep me");
  }
  SECTION("links at temporary-like names are never written through") {
    write_bytes(dir.file("victim"), "keep me");
    // The old fixed name, and hidden names like the writer's own.
    for (const std::string& name :
         {std::string("out.safetensors.tmp"), std::string(".out.safetensors.tmp-AAAAAA"),
          std::string(".out.safetensors.tmp")})
      fs::create_symlink(dir.file("victim"), dir.file(name));
    for (int i = 0; i < 20; ++i) save_safetensors(path, i % 2 ? a : b);
    CHECK(equal(load_safetensors(path), a));
    CHECK(slurp(dir.file("victim")) == "keep me");
    CHECK(fs::is_symlink(dir.file("out.safetensors.tmp")));
    CHECK(entries(dir.path).size() == 5);  // nothing left behind by 20 writes
  }
  SECTION("a device, FIFO or directory target is refused and left alone") {
    // Run as root here: /dev/null must still be the device afterwards.
    struct stat before {
    }, after{};
    REQUIRE(::stat("/dev/null", &before) == 0);
    try {
      save_safetensors("/dev/null", a);
      FAIL("saving over /dev/null did not throw");
    } catch (const SafetensorsError& e) {
      CHECK(std::string(e.what()) ==
            "cannot write '/dev/null': it is a character device, not a regular file (valid: a "
            "regular file path)");
    }
    REQUIRE(::stat("/dev/null", &after) == 0);
    CHECK(S_ISCHR(after.st_mode));
    CHECK(after.st_rdev == before.st_rdev);
    CHECK(after.st_ino == before.st_ino);
    std::string why;
    CHECK_FALSE(check_file_writable("/dev/null", &why));
    CHECK(why.find("a character device") != std::string::npos);

    const std::string fifo = dir.file("fifo");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH(save_safetensors(fifo, a), Catch::Contains("it is a FIFO"));
    CHECK_FALSE(check_file_writable(fifo, &why));
    fs::create_directory(dir.file("d"));
    CHECK_THROWS_WITH(save_safetensors(dir.file("d"), a), Catch::Contains("it is a directory"));
    CHECK_THROWS_WITH(save_safetensors(dir.file("d") + "/", a),
                      Catch::Contains("it names a directory"));
    CHECK(entries(dir.path) == std::vector<std::string>{"d", "fifo"});
  }
  SECTION("check_file_writable creates, truncates and removes nothing") {
    std::string why;
    CHECK(check_file_writable(path, &why));
    CHECK_FALSE(fs::exists(path));
    write_bytes(path, "old");
    CHECK(check_file_writable(path, &why));
    CHECK(slurp(path) == "old");
    CHECK_FALSE(check_file_writable(dir.file("no/such/x"), &why));
    CHECK(why.find("does not exist") != std::string::npos);
    CHECK(entries(dir.path) == std::vector<std::string>{"out.safetensors"});
  }
  SECTION("a failed write keeps the old file and leaves no temporary") {
    save_safetensors(path, a);
    AtomicFile f(path);
    REQUIRE(f.ok());
    REQUIRE(f.write("partial", 7));
    // Dropped without commit(), as a throwing writer would.
    CHECK(equal(load_safetensors(path), a));
  }
  CHECK(entries(dir.path).size() <= 5);
  for (const std::string& e : entries(dir.path))
    if (e != ".out.safetensors.tmp-AAAAAA") CHECK(e.find(".tmp-") == std::string::npos);
}

TEST_CASE("two writers racing on one path: both succeed, one whole file wins", "[files][io]") {
  TempDir dir;
  const bool unnamed = GENERATE(true, false);
  const TempKind kind(unnamed);
  const std::string path = dir.file("race.safetensors");
  const auto a = weights(1.f, 50000), b = weights(-1.f, 50000);
  for (int round = 0; round < 10; ++round) {
    std::string err_a, err_b;
    auto writer = [&path](const std::vector<NamedTensor>& t, std::string& err) {
      try {
        for (int i = 0; i < 3; ++i) save_safetensors(path, t);
      } catch (const std::exception& e) {
        err = e.what();
      }
    };
    std::thread ta(writer, std::cref(a), std::ref(err_a)),
        tb(writer, std::cref(b), std::ref(err_b));
    ta.join();
    tb.join();
    CHECK(err_a.empty());
    CHECK(err_b.empty());
    const auto got = load_safetensors(path);
    CHECK((equal(got, a) || equal(got, b)));
  }
  CHECK(entries(dir.path) == std::vector<std::string>{"race.safetensors"});
}

TEST_CASE("SIGKILL while writing: the old file survives intact", "[files][io]") {
  TempDir dir;
  const bool unnamed = GENERATE(true, false);
  const std::string path = dir.file("w.safetensors");
  const auto old = weights(3.f, 1000), fresh = weights(4.f, 1 << 20);
  save_safetensors(path, old);

  SECTION("killed in the middle of one slow write") {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      set_atomic_file_unnamed_allowed(unnamed);
      AtomicFile f(path);
      const std::string chunk(64 << 10, 'x');
      for (int i = 0; i < 1000; ++i) {
        if (!f.write(chunk.data(), chunk.size())) ::_exit(3);
        ::usleep(5000);
      }
      ::_exit(4);  // not reached: killed first
    }
    ::usleep(150 * 1000);
    REQUIRE(::kill(child, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    CHECK(equal(load_safetensors(path), old));
    // O_TMPFILE: the half-written data had no name, so nothing is left. Named
    // temporaries: the killed process's one hidden `.w.safetensors.tmp-XXXXXX`.
    const auto left = entries(dir.path);
    if (unnamed) {
      CHECK(left == std::vector<std::string>{"w.safetensors"});
    } else {
      REQUIRE(left.size() == 2);
      CHECK(left[0].rfind(".w.safetensors.tmp-", 0) == 0);
    }
  }
  SECTION("killed at a random point of repeated saves") {
    for (int trial = 0; trial < 5; ++trial) {
      const pid_t child = ::fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        set_atomic_file_unnamed_allowed(unnamed);
        for (;;) save_safetensors(path, fresh);
      }
      ::usleep(static_cast<useconds_t>(20000 + 17000 * trial));
      REQUIRE(::kill(child, SIGKILL) == 0);
      int status = 0;
      REQUIRE(::waitpid(child, &status, 0) == child);
      const auto got = load_safetensors(path);
      CHECK((equal(got, old) || equal(got, fresh)));
      // A named temporary can outlive its writer (with O_TMPFILE only if the kill
      // lands in the microseconds between naming it and the rename); nothing reads it.
      for (const std::string& e : entries(dir.path))
        if (e != "w.safetensors") {
          CHECK(e.rfind(".w.safetensors.tmp-", 0) == 0);
          fs::remove(dir.path / e);
        }
    }
  }
}
