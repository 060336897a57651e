// Atomic file replacement (see atomic_file.h).
#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace shardlab {

namespace {

bool fail(std::string* error, const std::string& path, const std::string& why) {
  if (error) *error = "cannot write '" + path + "': " + why;
  return false;
}

}  // namespace

bool write_file_atomic(const std::string& path, const std::string& bytes, std::string* error,
                       bool make_dirs) {
  namespace fs = std::filesystem;
  if (path.empty()) return fail(error, path, "empty path");
  const fs::path target(path);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  if (make_dirs) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      return fail(error, path, "cannot create directory '" + dir.string() + "': " + ec.message());
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
    return fail(error, path, "it exists and is not a regular file");

  // mkstemp: a fresh name no other writer (or a planted symlink) can hold.
  std::string tmpl = (dir / (target.filename().string() + ".tmp-XXXXXX")).string();
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) return fail(error, path, std::strerror(errno));
  const std::string tmp(name.data());
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return fail(error, path, why);
    }
    done += static_cast<size_t>(n);
  }
  // mkstemp creates 0600; a saved file should read like any other the user makes.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return fail(error, path, why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return fail(error, path, why);
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);  // the rename itself survives a crash
    ::close(dfd);
  }
  return true;
}

}  // namespace shardlab
