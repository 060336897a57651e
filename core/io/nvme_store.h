// Model states kept in files instead of memory: ZeRO-Infinity's offload to
// NVMe (`--offload nvme:DIR`). Each rank keeps one file under DIR holding
// named regions (a shard's optimizer state, its parameters), read and written
// with pread/pwrite, with O_DIRECT where the filesystem takes it so the page
// cache does not quietly keep the bytes in memory after all.
//
// The file has no name from the moment it exists (O_TMPFILE, or unlinked right
// after it is made where O_TMPFILE is not supported): nothing is left in DIR
// when the run ends, fails or is killed. Its space is reserved when a region
// is added (posix_fallocate), so a disk too small says so before training,
// in one line naming DIR, the region and the bytes.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace shardlab {

// A disk that is full, or failed: one line naming the setting, the directory
// and the region.
class DiskError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class NvmeStore {
 public:
  // Opens the rank's file under `dir`; throws ConfigError naming `dir` when it
  // is not a directory this process can write in. `what` names the setting in
  // messages ("--offload nvme:/mnt/nvme").
  NvmeStore(const std::string& dir, int rank, std::string what);
  // A store that keeps no file (a meta run's): regions, sizes and byte counts
  // as the real one's, and reads and writes that move nothing.
  struct Counting {};
  NvmeStore(Counting, std::string what);
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  // A region of `bytes` for `name`, its space reserved now; returns its id.
  // Throws DiskError when the disk cannot hold it.
  int add(const std::string& name, size_t bytes);
  size_t size(int region) const { return regions_.at(region).bytes; }
  int regions() const { return static_cast<int>(regions_.size()); }
  const std::string& name(int region) const { return regions_.at(region).name; }

  // Bytes [offset, offset + n) of a region from or to host memory. Throws
  // DiskError naming the region on an I/O error (a full disk among them).
  void write(int region, const void* src, size_t n, size_t offset = 0);
  void read(int region, void* dst, size_t n, size_t offset = 0);

  // Runs `job` (reads and writes of this store) on the store's I/O thread,
  // in submission order, so that disk transfers overlap the caller's compute.
  // The future rethrows what the job threw (a DiskError).
  std::future<void> submit(std::function<void()> job);

  // Bytes the regions hold, and moved so far.
  int64_t bytes_reserved() const { return end_; }
  int64_t bytes_read() const { return read_; }
  int64_t bytes_written() const { return written_; }
  // Whether the file is read and written past the page cache (O_DIRECT).
  bool direct() const { return direct_; }
  bool counting() const { return fd_ < 0; }
  const std::string& dir() const { return dir_; }
  // Host memory the store holds beside the allocator (its O_DIRECT bounce buffer).
  static constexpr size_t kBounceBytes = size_t{1} << 20;

 private:
  struct Region {
    std::string name;
    size_t bytes = 0;
    int64_t at = 0;  // offset in the file, aligned
  };
  // pread/pwrite of a whole aligned range, through the aligned bounce buffer when direct.
  void transfer(int region, void* host, size_t n, size_t offset, bool to_file);
  [[noreturn]] void fail(const std::string& doing, int region, int err) const;

  std::string dir_, what_;
  int fd_ = -1;
  bool direct_ = false;
  std::vector<Region> regions_;
  int64_t end_ = 0;
  std::atomic<int64_t> read_{0}, written_{0};  // moved on the I/O thread, read anywhere
  void* bounce_ = nullptr;                     // aligned, kBounceBytes (direct only)
  // The I/O thread, started by the first submit().
  std::thread io_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stop_ = false;
};

}  // namespace shardlab
