// Checkpoint files through `shardlab run` and load_params: non-finite weights
// refused by name (unless --allow-nonfinite), a device as an output refused before
// the run and left alone, a shifted header refused, and two runs saving to one
// path at once both succeeding with one whole file.
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
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/checkpoint.h"
#include "core/config.h"
#include "core/model.h"
#include "core/safetensors.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace shardlab;
using shardlab::test::CliResult;
using shardlab::test::run_cli;
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
