// Bounded, hostile-file-safe JSON reading (see json_file.h).
#include "core/io/json_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/config.h"
#include "core/io/atomic_file.h"

namespace shardlab {

namespace {
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

nlohmann::json read_json_file(const std::string& path, const std::string& what, int64_t max_bytes,
                              int max_depth) {
  auto bad = [&](const std::string& why) { throw ConfigError(what + " '" + path + "': " + why); };
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (f.fd < 0) bad(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) bad(std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    bad(std::string("is ") + file_kind(st.st_mode) + ", not a " + what +
        " (valid: a regular file)");
  if (st.st_size == 0) bad("is empty, not a " + what);
  if (st.st_size > max_bytes)
    bad("is " + std::to_string(st.st_size) + " bytes, more than the " +
        std::to_string(max_bytes >> 20) + " MiB a " + what + " may have");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(f.fd, text.data() + got, text.size() - got);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) bad(std::string("cannot read: ") + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  char extra;
  if (got != text.size() || ::read(f.fd, &extra, 1) > 0)
    bad("changed size while being read (valid: a finished " + what + ")");

  int depth = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > max_depth)
        bad("nested more than " + std::to_string(max_depth) + " levels deep, not a " + what);
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    std::string msg = e.what();
    // "[json.exception.parse_error.101] parse error at line 3, ..." -> "parse error at line 3, ..."
    if (const size_t b = msg.find("] "); msg.rfind("[json.", 0) == 0 && b != std::string::npos)
      msg.erase(0, b + 2);
    bad("not valid JSON: " + msg);
  }
  return {};
}

}  // namespace shardlab
