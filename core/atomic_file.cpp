// Atomic file replacement (see atomic_file.h).
#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace shardlab {

bool write_file_atomic(const std::string& path, const std::string& bytes, std::string* error,
                       bool make_dirs, const std::string& what) {
  namespace fs = std::filesystem;
  const auto fail = [&](const std::string& why) {
    if (error)
      *error = "cannot write " + (what.empty() ? "" : what + " ") + "'" + path + "': " + why;
    return false;
  };
  if (path.empty()) return fail("empty path");
  const fs::path target(path);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  if (make_dirs) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return fail("cannot create directory '" + dir.string() + "': " + ec.message());
  }
  struct stat old {};
  const bool existed = ::lstat(path.c_str(), &old) == 0;
  if (existed && !S_ISREG(old.st_mode) && !S_ISLNK(old.st_mode))
    return fail("it exists and is not a regular file");
  mode_t mode = 0;
  if (existed && S_ISREG(old.st_mode)) {
    mode = old.st_mode & 07777;
  } else {
    mode = ::umask(0);
    ::umask(mode);
    mode = 0666 & ~mode;
  }

  // mkostemp creates with O_EXCL: a file or link planted at the name makes it pick another.
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0)
    return fail("cannot create a temporary file in '" + dir.string() +
                "': " + std::strerror(errno));
  const auto give_up = [&](const std::string& step, int err, bool close_fd) {
    if (close_fd) ::close(fd);
    ::unlink(tmp.c_str());
    return fail(step + ": " + std::strerror(err));
  };
  if (::fchmod(fd, mode) != 0) return give_up("fchmod", errno, true);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return give_up("write", n < 0 ? errno : EIO, true);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return give_up("fsync", errno, true);
  if (::close(fd) != 0) return give_up("close", errno, false);
  // Checked again just before the rename: something other than a file or link
  // may have appeared at the name since.
  struct stat now {};
  if (::lstat(path.c_str(), &now) == 0 && !S_ISREG(now.st_mode) && !S_ISLNK(now.st_mode)) {
    ::unlink(tmp.c_str());
    return fail("it exists and is not a regular file");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return give_up("rename", errno, false);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || ::fsync(dfd) != 0) {
    const int err = errno;
    if (dfd >= 0) ::close(dfd);
    return fail("written, but syncing directory '" + dir.string() +
                "' failed: " + std::strerror(err));
  }
  ::close(dfd);
  return true;
}

}  // namespace shardlab
