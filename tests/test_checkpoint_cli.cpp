// Checkpoint files through `shardlab run` and load_params: non-finite weights
// refused by name (unless --allow-nonfinite), a device as an output refused before
// the run and left alone, a shifted header refused, two runs saving to one
// path at once both succeeding with one whole file, and inputs checked from
// their headers before their data is read (sparse multi-GiB files, under a
// memory limit).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/config.h"
#include "core/io/safetensors.h"
#include "core/model/checkpoint.h"
#include "core/model/model.h"
#include "core/run/recording.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace shardlab;
using shardlab::test::CliResult;
using shardlab::test::run_cli;
using shardlab::test::run_shell;
using shardlab::test::TempDir;

namespace {

const std::string kSmall = "run --strategy single --world 1 --model mlp:2x16 --steps 2 --batch 4 ";

// run_cli without Catch2 assertions, which must not run off the main thread.
CliResult run_in_thread(const std::string& args) {
  const std::string cmd = std::string(SHARDLAB_BIN) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// A safetensors file whose header is `header` (JSON) and whose data section is
// `data_bytes` of zeros, made sparse: a 4 GiB file costs nothing to write.
void write_sparse_safetensors(const std::string& path, std::string header, uint64_t data_bytes) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes << header;
  fs::resize_file(path, 8 + header.size() + data_bytes);
}

// `shardlab ARGS` under a 1.5 GiB address-space limit, killed after 20 s:
// reading a multi-GiB input whole would fail here (std::bad_alloc, exit 1).
struct Bounded {
  CliResult r;
  double seconds;
};
Bounded run_bounded(const std::string& args) {
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = run_shell("ulimit -v 1572864; timeout -s KILL 20 " +
                                std::string(SHARDLAB_BIN) + " " + args + " 2>&1");
  return {r, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

bool same(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].data != b[i].data) return false;
  return true;
}

}  // namespace

TEST_CASE("non-finite weights are refused by name unless --allow-nonfinite", "[files][cli]") {
  TempDir dir;
  const std::string init = dir.file("init.safetensors"), bad = dir.file("nan.safetensors");
  REQUIRE(run_cli(kSmall + "--save-init " + init).code == 0);
  auto t = load_safetensors(init);
  REQUIRE(t.size() == 4);
  t[1].data[5] = std::numeric_limits<float>::quiet_NaN();
  t[1].data[7] = std::numeric_limits<float>::infinity();
  save_safetensors(bad, t);

  const ModelLayout layout(ModelSpec::parse("mlp:2x16"));
  CHECK_THROWS_WITH(load_params(bad, layout),
                    "--init-from '" + bad + "': tensor '" + t[1].name +
                        "' holds 2 non-finite values of 16, the first NaN at index 5; training "
                        "from it would give NaN (valid: finite weights, or --allow-nonfinite to "
                        "load them anyway)");
  const std::vector<float> loaded = load_params(bad, layout, /*allow_nonfinite=*/true);
  CHECK(std::count_if(loaded.begin(), loaded.end(), [](float v) { return !std::isfinite(v); }) ==
        2);
  CHECK(load_params(init, layout).size() == layout.state_total());

  const CliResult r = run_cli(kSmall + "--init-from " + bad);
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.find("tensor '" + t[1].name + "' holds 2 non-finite values") != std::string::npos);
  CHECK(r.out.find("--allow-nonfinite") != std::string::npos);

  const CliResult lone = run_cli(kSmall + "--allow-nonfinite");
  INFO(lone.out);
  CHECK(lone.code == 2);
  CHECK(lone.out.find("--allow-nonfinite applies to --init-from weights only") !=
        std::string::npos);
}

TEST_CASE("a checkpoint with its header length off by one is refused, not loaded", "[files][cli]") {
  TempDir dir;
  const std::string init = dir.file("init.safetensors"), shifted = dir.file("shifted.safetensors");
  REQUIRE(run_cli(kSmall + "--save-init " + init).code == 0);
  std::string bytes;
  {
    std::ifstream in(init, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  for (const uint64_t wrong : {n - 1, n + 1}) {
    std::string copy = bytes;
    for (int i = 0; i < 8; ++i) copy[i] = static_cast<char>((wrong >> (8 * i)) & 0xff);
    std::ofstream(shifted, std::ios::binary | std::ios::trunc) << copy;
    const CliResult r = run_cli(kSmall + "--init-from " + shifted);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(r.out.find("--init-from: bad safetensors file '" + shifted + "'") != std::string::npos);
    CHECK(r.out.find("final loss") == std::string::npos);
  }
}

TEST_CASE("devices and FIFOs as inputs or outputs are refused before the run, left alone",
          "[files][cli]") {
  TempDir dir;
  struct stat before {
  }, after{};
  REQUIRE(::stat("/dev/null", &before) == 0);
  for (const char* key : {"--save-final", "--save-init", "--save-data", "--trace"}) {
    const auto t0 = std::chrono::steady_clock::now();
    const CliResult r = run_cli(kSmall + key + " /dev/null");
    INFO(key << ": " << r.out);
    CHECK(r.code == 2);
    CHECK(r.out.find(std::string("cannot write ") + key +
                     " '/dev/null': it is a character device, not a regular file") !=
          std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  }
  REQUIRE(::stat("/dev/null", &after) == 0);
  CHECK(S_ISCHR(after.st_mode));
  CHECK(after.st_ino == before.st_ino);
  CHECK(after.st_rdev == before.st_rdev);

  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& input : {std::string("/dev/zero"), fifo, dir.path.string()}) {
    const auto t0 = std::chrono::steady_clock::now();
    const CliResult r = run_cli(kSmall + "--init-from " + input);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(r.out.find("cannot read '" + input + "'") != std::string::npos);
    CHECK(r.out.find("not a regular file") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  }
  const CliResult r = run_cli(kSmall + "--save-final " + fifo);
  CHECK(r.code == 2);
  CHECK(r.out.find("it is a FIFO") != std::string::npos);
  // Checking an output path creates nothing: a run refused after the check (its
  // --init-from is missing) leaves no file.
  const CliResult missing =
      run_cli(kSmall + "--save-final " + dir.file("x.st") + " --init-from " + dir.file("none"));
  CHECK(missing.code == 2);
  CHECK_FALSE(fs::exists(dir.file("x.st")));
}

TEST_CASE("two runs saving to one path at once: both exit 0, one whole file", "[files][cli]") {
  TempDir dir;
  const std::string same_path = dir.file("final.safetensors");
  const std::string a = dir.file("a.safetensors"), b = dir.file("b.safetensors");
  const std::string run = "run --strategy single --world 1 --model mlp:3x64 --steps 20 --batch 16 ";
  REQUIRE(run_cli(run + "--seed 1 --save-final " + a).code == 0);
  REQUIRE(run_cli(run + "--seed 2 --save-final " + b).code == 0);
  const auto want_a = load_safetensors(a), want_b = load_safetensors(b);
  REQUIRE_FALSE(same(want_a, want_b));
  for (int trial = 0; trial < 3; ++trial) {
    CliResult ra{}, rb{};
    std::thread ta([&] { ra = run_in_thread(run + "--seed 1 --save-final " + same_path); });
    std::thread tb([&] { rb = run_in_thread(run + "--seed 2 --save-final " + same_path); });
    ta.join();
    tb.join();
    INFO(ra.out << "\n" << rb.out);
    CHECK(ra.code == 0);
    CHECK(rb.code == 0);
    const auto got = load_safetensors(same_path);
    CHECK((same(got, want_a) || same(got, want_b)));
  }
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path)) left.push_back(e.path().filename());
  CHECK(left.size() == 3);  // a, b, final: no temporaries
}

TEST_CASE("inputs are checked from their headers before their data is read", "[files][cli]") {
  TempDir dir;
  const ModelLayout layout(ModelSpec::parse("mlp:2x16"));
  const ParamInfo& p0 = layout.params().at(0);

  // --init-from: a 4 GiB file whose first tensor has the wrong shape is refused
  // from its header, at once and without reading it.
  const std::string big = dir.file("big.safetensors");
  const uint64_t four_gib = uint64_t{4} << 30;
  write_sparse_safetensors(big,
                           "{\"" + p0.name +
                               "\":{\"dtype\":\"F32\",\"shape\":[65536,16384],\"data_offsets\":"
                               "[0," +
                               std::to_string(four_gib) + "]}}",
                           four_gib);
  Bounded b = run_bounded(kSmall + "--init-from " + big);
  INFO(b.r.out);
  CHECK(b.r.code == 2);
  CHECK(b.seconds < 1.0);
  CHECK(b.r.out.find("error: --init-from '" + big + "': tensor '" + p0.name +
                     "' has shape [65536,16384], model mlp:2x16 needs [16,16]") !=
        std::string::npos);
  CHECK(std::count(b.r.out.begin(), b.r.out.end(), '\n') == 1);
  CHECK_THROWS_WITH(load_params(big, layout), Catch::Contains("has shape [65536,16384]"));
  // The size is checked against the header's offsets before anything else: a
  // header claiming more data than the file holds.
  const std::string short_file = dir.file("short.safetensors");
  write_sparse_safetensors(
      short_file,
      "{\"" + p0.name + "\":{\"dtype\":\"F32\",\"shape\":[16,16],\"data_offsets\":[0,1024]}}", 100);
  b = run_bounded(kSmall + "--init-from " + short_file);
  CHECK(b.r.code == 2);
  CHECK(b.r.out.find("outside the data section") != std::string::npos);
  std::map<std::string, std::string> meta;
  const auto header = read_safetensors_header(big, meta);
  REQUIRE(header.size() == 1);
  CHECK(header[0].numel() == size_t{1} << 30);

  // sample --from: a 250-byte file whose metadata claims a 3 GiB model is
  // refused from its header, before the model's weights are allocated.
  const std::string claim = dir.file("claim.safetensors");
  save_safetensors(claim, {NamedTensor{"x", {2}, {1.0f, 2.0f}}},
                   {{"model", "gpt:16x2048x1"}, {"vocabulary", "ab\n"}, {"seq", "64"}});
  CHECK(fs::file_size(claim) < 300);
  b = run_bounded("sample --from " + claim);
  INFO(b.r.out);
  CHECK(b.r.code == 2);
  CHECK(b.seconds < 1.0);
  CHECK(b.r.out.find("error: --from '" + claim + "' has no tensor '") != std::string::npos);
  CHECK(b.r.out.find("(model gpt:16x2048x1") != std::string::npos);

  // gui --open and project: files over the README's 64 MiB are refused unread,
  // a recording or a trace alike (a 300 MB trace once ran a bounded machine out
  // of memory while being parsed).
  for (const uint64_t size : {(uint64_t{64} << 20) + 1, uint64_t{300} << 20}) {
    const std::string trace = dir.file("big-" + std::to_string(size) + ".json");
    { std::ofstream(trace) << "{\"traceEvents\":["; }
    fs::resize_file(trace, size);
    for (const std::string& cmd : {"gui --open " + trace, "project " + trace}) {
      b = run_bounded(cmd);
      INFO(cmd << ": " << b.r.out);
      CHECK(b.r.code == 2);
      CHECK(b.seconds < 1.0);
      CHECK(b.r.out.find("error: recording or trace '" + trace + "': is " + std::to_string(size) +
                         " bytes, more than the 64 MiB a recording or trace may have") !=
            std::string::npos);
    }
    CHECK_THROWS_WITH(load_run_file(trace), Catch::Contains("more than the 64 MiB"));
  }
}
