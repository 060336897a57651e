// Atomic file replacement (see atomic_file.h).
#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace shardlab {

namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

// The directory a new file at `path` lands in ("." for a bare name).
std::string parent_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// `dir/.name.tmp-XXXXXX` with six random letters or digits. The name part is
// cut so the whole stays under NAME_MAX (255) for long target names.
std::string temp_name(const std::string& dir, const std::string& name) {
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  static std::atomic<uint64_t> counter{0};
  unsigned char r[6];
  if (::getrandom(r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    // No entropy yet (early boot): uniqueness, not secrecy, is what matters here;
    // O_EXCL/link() catch a collision and the caller tries another name.
    const uint64_t x =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (static_cast<uint64_t>(::getpid()) << 32) ^ (counter++ * 0x9e3779b97f4a7c15ull);
    for (size_t i = 0; i < sizeof r; ++i) r[i] = static_cast<unsigned char>(x >> (8 * i));
  }
  // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false positive) on a + chain.
  std::string out = dir;
  out += "/.";
  out += name.substr(0, 200);
  out += ".tmp-";
  for (unsigned char c : r) out += kChars[c % (sizeof kChars - 1)];
  return out;
}

constexpr int kNameTries = 100;

// Why a new file could not be made in `dir`: a missing directory says so in the
// words of the system; anything else names the directory too.
std::string create_failure(int err, const std::string& dir) {
  if (err == ENOENT || err == ENOTDIR) return errno_text(err);
  return "cannot create a file in directory '" + dir + "': " + errno_text(err);
}

std::atomic<bool> unnamed_allowed{true};

// O_TMPFILE files are named through /proc/self/fd, so both must be there.
bool can_use_unnamed() {
#ifdef O_TMPFILE
  return unnamed_allowed.load() && ::access("/proc/self/fd", X_OK) == 0;
#else
  return false;
#endif
}

std::string not_regular(mode_t mode) {
  return std::string("it is ") + file_kind(mode) +
         ", not a regular file (valid: a regular file path)";
}

}  // namespace

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISREG(m)) return "a regular file";
  return "not a regular file";
}

void set_atomic_file_unnamed_allowed(bool allowed) {
  unnamed_allowed = allowed;
}

bool AtomicFile::fail(const std::string& why) {
  if (reason_.empty()) reason_ = why;
  return false;
}

AtomicFile::AtomicFile(const std::string& path, bool make_dirs) : path_(path) {
  namespace fs = std::filesystem;
  if (path.empty()) {
    fail("empty path");
    return;
  }
  const std::string name = fs::path(path).filename().string();
  if (name.empty() || name == "." || name == "..") {
    fail("it names a directory (valid: a file path)");
    return;
  }
  dir_ = parent_of(path);
  if (make_dirs) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) {
      fail("cannot create directory '" + dir_ + "': " + ec.message());
      return;
    }
  }
  struct stat old {};
  bool keep_mode = false;
  if (::lstat(path.c_str(), &old) == 0) {
    if (!S_ISREG(old.st_mode) && !S_ISLNK(old.st_mode)) {
      fail(not_regular(old.st_mode));
      return;
    }
    keep_mode = S_ISREG(old.st_mode);
  }

  // Created with 0666 so the kernel applies the umask (and any default ACL) to
  // a new file exactly as for any other; a replaced file keeps its mode below.
#ifdef O_TMPFILE
  if (can_use_unnamed()) {
    fd_ = ::open(dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    unnamed_ = fd_ >= 0;
    // EOPNOTSUPP and friends: a file system without it; the named way below
    // also reports a missing or read-only directory.
  }
#endif
  for (int i = 0; fd_ < 0 && i < kNameTries; ++i) {
    tmp_ = temp_name(dir_, name);
    // O_EXCL: a file or link planted at the name makes it try another, never follow it.
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      const int err = errno;
      tmp_.clear();
      if (err != EEXIST) {
        fail(create_failure(err, dir_));
        return;
      }
    }
  }
  if (fd_ < 0) {
    fail("cannot find a free temporary name in directory '" + dir_ + "'");
    return;
  }
  if (keep_mode && ::fchmod(fd_, old.st_mode & 07777) != 0) fail("fchmod: " + errno_text(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

bool AtomicFile::write(const void* data, size_t n) {
  if (!ok() || committed_) return fail("write after commit");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return fail("write: " + errno_text(w < 0 ? errno : EIO));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool AtomicFile::commit() {
  if (!ok()) return false;
  if (committed_) return true;
  if (::fsync(fd_) != 0) return fail("fsync: " + errno_text(errno));
#ifdef O_TMPFILE
  if (unnamed_) {
    // The file gets a name only now, for the rename; a crash before this point
    // leaves nothing on disk.
    char proc[64];
    std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd_);
    for (int i = 0; tmp_.empty() && i < kNameTries; ++i) {
      std::string candidate = temp_name(dir_, std::filesystem::path(path_).filename().string());
      if (::linkat(AT_FDCWD, proc, AT_FDCWD, candidate.c_str(), AT_SYMLINK_FOLLOW) == 0)
        tmp_ = std::move(candidate);
      else if (errno != EEXIST)
        return fail("cannot give the temporary file a name in '" + dir_ +
                    "': " + errno_text(errno));
    }
    if (tmp_.empty()) return fail("cannot find a free temporary name in directory '" + dir_ + "'");
  }
#endif
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return fail("close: " + errno_text(errno));
  // Checked again just before the rename: something other than a file or link
  // may have appeared at the name since (rename would put the file over an
  // empty directory, or fail on another kind with a vaguer message).
  struct stat now {};
  if (::lstat(path_.c_str(), &now) == 0 && !S_ISREG(now.st_mode) && !S_ISLNK(now.st_mode))
    return fail(not_regular(now.st_mode));
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) return fail("rename: " + errno_text(errno));
  tmp_.clear();
  committed_ = true;
  // The rename is durable only once the directory itself is on disk.
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || ::fsync(dfd) != 0) {
    const int err = errno;
    if (dfd >= 0) ::close(dfd);
    return fail("written, but syncing directory '" + dir_ + "' failed: " + errno_text(err));
  }
  ::close(dfd);
  return true;
}

bool write_file_atomic(const std::string& path, const std::string& bytes, std::string* error,
                       bool make_dirs, const std::string& what) {
  AtomicFile f(path, make_dirs);
  if (f.write(bytes.data(), bytes.size()) && f.commit()) return true;
  if (error)
    *error = "cannot write " + (what.empty() ? "" : what + " ") + "'" + path + "': " + f.reason();
  return false;
}

bool check_file_writable(const std::string& path, std::string* reason) {
  const auto no = [&](const std::string& why) {
    if (reason) *reason = why;
    return false;
  };
  if (path.empty()) return no("empty path");
  const std::string name = std::filesystem::path(path).filename().string();
  if (name.empty() || name == "." || name == "..")
    return no("it names a directory (valid: a file path)");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) return no(not_regular(st.st_mode));
  } else if (errno != ENOENT) {
    return no(errno_text(errno));
  }
  const std::string dir = parent_of(path);
  if (::stat(dir.c_str(), &st) != 0)
    return no(errno == ENOENT ? "directory '" + dir +
                                    "' does not exist (valid: a file path in an existing directory)"
                              : "directory '" + dir + "': " + errno_text(errno));
  if (!S_ISDIR(st.st_mode))
    return no("'" + dir + "' is " + file_kind(st.st_mode) + ", not a directory");
#ifdef O_TMPFILE
  // The real test, and it leaves nothing behind: an unnamed file vanishes on close.
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    return true;
  }
  if (errno == EACCES || errno == EPERM || errno == EROFS || errno == ENOSPC || errno == EDQUOT)
    return no("directory '" + dir + "': " + errno_text(errno));
#endif
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return no("directory '" + dir + "': " + errno_text(errno));
  return true;
}

}  // namespace shardlab
