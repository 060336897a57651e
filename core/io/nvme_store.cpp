// Model states in a nameless file per rank (nvme_store.h).
#include "core/io/nvme_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/config.h"

namespace shardlab {

namespace {

// O_DIRECT wants offsets, lengths and buffers aligned to the device's logical
// block; 4 KiB covers every disk and filesystem in use.
constexpr size_t kAlign = 4096;
constexpr size_t kBounce = NvmeStore::kBounceBytes;  // bytes moved per O_DIRECT call

size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

std::string bytes_text(int64_t n) {
  return std::to_string(n) + " B";
}

}  // namespace

NvmeStore::NvmeStore(const std::string& dir, int rank, std::string what)
    : dir_(dir), what_(std::move(what)) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw ConfigError(what_ + ": '" + dir + "' is not a directory (valid: an existing directory " +
                      "this user can write in, ideally on an NVMe disk)");
  // A file with no name: it is gone when the process is, however it ends.
  auto open_nameless = [&](int extra) -> int {
    int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC | extra, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != ENOENT)) return fd;
    // No O_TMPFILE here: a named file, unlinked at once.
    std::string path = dir + "/.shardlab-offload-rank" + std::to_string(rank) + "-XXXXXX";
    fd = ::mkostemp(path.data(), O_CLOEXEC);
    if (fd < 0) return fd;
    ::unlink(path.c_str());
    if (extra && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | extra) != 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return -1;
    }
    return fd;
  };
  fd_ = open_nameless(O_DIRECT);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) fd_ = open_nameless(0);  // a filesystem without O_DIRECT
  if (fd_ < 0)
    throw ConfigError(what_ + ": cannot write in '" + dir + "': " + std::strerror(errno) +
                      " (valid: a directory this user can write in)");
  if (direct_ && ::posix_memalign(&bounce_, kAlign, kBounce) != 0) {
    ::close(fd_);
    throw std::bad_alloc();
  }
}

NvmeStore::NvmeStore(Counting, std::string what) : dir_("(none)"), what_(std::move(what)) {}

NvmeStore::~NvmeStore() {
  if (io_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    io_.join();  // runs what was submitted first: nothing is left half-written
  }
  if (fd_ >= 0) ::close(fd_);  // the file had no name: closing it frees its blocks
  std::free(bounce_);
}

int NvmeStore::add(const std::string& name, size_t bytes) {
  Region r;
  r.name = name;
  r.bytes = bytes;
  r.at = end_;
  const size_t span = align_up(std::max<size_t>(bytes, 1));
  // Reserve the blocks now: a disk too small fails here, before any step.
  // SHARDLAB_DISK_LIMIT (bytes) stands for a smaller disk, where none can be mounted.
  int err = 0;
  if (counting()) {
    // nothing to reserve
  } else if (const char* env = std::getenv("SHARDLAB_DISK_LIMIT");
             env && end_ + static_cast<int64_t>(span) > std::strtoll(env, nullptr, 10))
    err = ENOSPC;
  else
    err = ::posix_fallocate(fd_, r.at, static_cast<off_t>(span));
  if (err == ENOSPC || err == EFBIG || err == EDQUOT)
    throw DiskError(what_ + ": no room under '" + dir_ + "' for " + name + " (" +
                    bytes_text(static_cast<int64_t>(bytes)) + ", after " + bytes_text(end_) +
                    " already reserved): " + std::strerror(err));
  if (err != 0) fail("reserving", -1, err);
  regions_.push_back(r);
  end_ += static_cast<int64_t>(span);
  return static_cast<int>(regions_.size()) - 1;
}

std::future<void> NvmeStore::submit(std::function<void()> job) {
  std::packaged_task<void()> task(std::move(job));
  std::future<void> done = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(task));
    if (!io_.joinable())
      io_ = std::thread([this] {
        std::unique_lock<std::mutex> lock(mu_);
        while (true) {
          cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
          if (jobs_.empty()) return;  // stop_, and everything submitted has run
          std::packaged_task<void()> next = std::move(jobs_.front());
          jobs_.pop_front();
          lock.unlock();
          next();  // an exception goes to the job's future
          lock.lock();
        }
      });
  }
  cv_.notify_one();
  return done;
}

void NvmeStore::write(int region, const void* src, size_t n, size_t offset) {
  transfer(region, const_cast<void*>(src), n, offset, true);
  written_ += static_cast<int64_t>(n);
}

void NvmeStore::read(int region, void* dst, size_t n, size_t offset) {
  transfer(region, dst, n, offset, false);
  read_ += static_cast<int64_t>(n);
}

void NvmeStore::fail(const std::string& doing, int region, int err) const {
  const std::string of =
      region >= 0 ? " " + regions_[static_cast<size_t>(region)].name : std::string();
  throw DiskError(what_ + ": " + doing + of + " under '" + dir_ +
                  "' failed: " + std::strerror(err));
}

void NvmeStore::transfer(int region, void* host, size_t n, size_t offset, bool to_file) {
  const Region& r = regions_.at(static_cast<size_t>(region));
  if (offset > r.bytes || n > r.bytes - offset)
    throw std::logic_error("NvmeStore: bytes [" + std::to_string(offset) + ", " +
                           std::to_string(offset + n) + ") outside " + r.name);
  if (counting()) return;  // a meta run moves no bytes
  const char* doing = to_file ? "writing" : "reading";
  char* p = static_cast<char*>(host);
  // Every call moves whole bytes until done (pread/pwrite may return fewer).
  auto whole = [&](bool out, char* buf, size_t len, int64_t at) {
    while (len > 0) {
      const ssize_t got = out ? ::pwrite(fd_, buf, len, at) : ::pread(fd_, buf, len, at);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail(doing, region, errno);
      if (got == 0) fail(doing, region, EIO);  // the reserved blocks cannot end early
      buf += got;
      len -= static_cast<size_t>(got);
      at += got;
    }
  };
  if (!direct_) {
    whole(to_file, p, n, r.at + static_cast<int64_t>(offset));
    return;
  }
  // O_DIRECT: whole aligned blocks through the aligned bounce buffer; a write
  // that covers part of a block reads the block first, to keep the rest.
  int64_t pos = r.at + static_cast<int64_t>(offset);
  size_t left = n;
  char* bounce = static_cast<char*>(bounce_);
  while (left > 0) {
    const int64_t block = pos / static_cast<int64_t>(kAlign) * static_cast<int64_t>(kAlign);
    const size_t skip = static_cast<size_t>(pos - block);
    const size_t take = std::min(left, kBounce - skip);
    const size_t span = align_up(skip + take);
    const bool partial = skip != 0 || take % kAlign != 0;
    if (!to_file || partial) whole(false, bounce, span, block);
    if (to_file) {
      std::memcpy(bounce + skip, p, take);
      whole(true, bounce, span, block);
    } else {
      std::memcpy(p, bounce + skip, take);
    }
    p += take;
    pos += static_cast<int64_t>(take);
    left -= take;
  }
}

}  // namespace shardlab
