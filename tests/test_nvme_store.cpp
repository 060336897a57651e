// The offload file (core/io/nvme_store.h): regions round-trip at any offset and
// length, the file never has a name in its directory, a disk too small is one
// line naming the directory and the region, and a bad directory is refused.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <sys/mount.h>

#include <cstdint>
#include <filesystem>
#include <numeric>
#include <random>
#include <vector>

#include "core/config.h"
#include "core/io/nvme_store.h"

using namespace shardlab;

namespace {

std::filesystem::path fresh_dir(const std::string& where, const std::string& name) {
  std::filesystem::path d = std::filesystem::path(where) / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

size_t entries(const std::filesystem::path& d) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(d)) ++n;
  return n;
}

}  // namespace

TEST_CASE("offload file: regions round-trip at any offset, and the file has no name", "[nvme]") {
  // /var/tmp: a disk filesystem (O_DIRECT); /dev/shm: tmpfs (buffered where O_DIRECT is not taken).
  for (const char* where : {"/var/tmp", "/dev/shm"}) {
    const auto dir = fresh_dir(where, "shardlab-test-nvme-" + std::to_string(::getpid()));
    INFO(where);
    {
      NvmeStore store(dir.string(), 0, "--offload nvme:" + dir.string());
      const int a = store.add("layers.0.flat[shard 0/2].exp_avg", 10000);
      const int b = store.add("layers.0.flat[shard 0/2].exp_avg_sq", (size_t{3} << 20) + 7);
      CHECK(store.bytes_reserved() >= static_cast<int64_t>(10000 + (size_t{3} << 20) + 7));
      CHECK(entries(dir) == 0);  // nothing with a name, even while it is open
      std::mt19937 rng(7);
      std::vector<uint8_t> want_a(10000), want_b(store.size(b));
      for (auto& x : want_a) x = static_cast<uint8_t>(rng());
      for (auto& x : want_b) x = static_cast<uint8_t>(rng());
      store.write(a, want_a.data(), want_a.size());
      store.write(b, want_b.data(), want_b.size());
      // A partial write keeps the bytes around it (O_DIRECT reads the block first).
      const std::vector<uint8_t> patch(5000, 0xAB);
      store.write(b, patch.data(), patch.size(), 4093);
      std::copy(patch.begin(), patch.end(), want_b.begin() + 4093);
      std::vector<uint8_t> got_a(want_a.size()), got_b(want_b.size());
      store.read(a, got_a.data(), got_a.size());
      store.read(b, got_b.data(), got_b.size());
      CHECK(got_a == want_a);  // region a untouched by b's writes
      CHECK(got_b == want_b);
      std::vector<uint8_t> mid(1234);
      store.read(b, mid.data(), mid.size(), 1000001);
      CHECK(std::equal(mid.begin(), mid.end(), want_b.begin() + 1000001));
      CHECK(store.bytes_written() ==
            static_cast<int64_t>(want_a.size() + want_b.size() + patch.size()));
      CHECK(store.bytes_read() == static_cast<int64_t>(got_a.size() + got_b.size() + mid.size()));
      CHECK_THROWS_AS(store.read(a, got_a.data(), 10, 9995), std::logic_error);  // past the end
    }
    CHECK(entries(dir) == 0);
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("offload file: a disk too small, or a directory that is not one, is one line", "[nvme]") {
  // A 1 MiB tmpfs, where this process may mount one (root); else a 1 MiB limit
  // standing for it (SHARDLAB_DISK_LIMIT).
  const auto dir = fresh_dir("/tmp", "shardlab-test-nvme-small-" + std::to_string(::getpid()));
  const bool mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") == 0;
  if (!mounted) ::setenv("SHARDLAB_DISK_LIMIT", "1048576", 1);
  INFO((mounted ? "a 1 MiB tmpfs" : "SHARDLAB_DISK_LIMIT=1048576"));
  {
    NvmeStore store(dir.string(), 1, "--offload nvme:" + dir.string());
    store.add("small", 4096);
    try {
      store.add("layers.3.flat[shard 1/4].exp_avg", size_t{2} << 20);
      FAIL("a region larger than the disk was reserved");
    } catch (const DiskError& e) {
      const std::string m = e.what();
      INFO(m);
      CHECK(m.rfind("--offload nvme:" + dir.string() + ": no room under '", 0) == 0);
      CHECK(m.find("layers.3.flat[shard 1/4].exp_avg") != std::string::npos);
      CHECK(m.find('\n') == std::string::npos);
    }
    CHECK(entries(dir) == 0);
  }
  CHECK(entries(dir) == 0);
  if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
  ::unsetenv("SHARDLAB_DISK_LIMIT");
  std::filesystem::remove_all(dir);

  for (const std::string bad : {"/nonexistent/shardlab", "/etc/hostname"}) {
    try {
      NvmeStore store(bad, 0, "--offload nvme:" + bad);
      FAIL("opened " << bad);
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      CHECK(m.find("'" + bad + "' is not a directory") != std::string::npos);
      CHECK(m.find('\n') == std::string::npos);
    }
  }
}
