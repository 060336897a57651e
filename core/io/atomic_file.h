// Writing a file so that it is either the old content or the whole new one,
// never half of either: an unnamed (or hidden, uniquely named) temporary file in
// the target's directory, fsync, rename over the target, fsync of the directory.
// The one way Shardlab writes an output file (checkpoints, data files, traces,
// recordings, lesson progress, CSV and PNG exports).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <string>

namespace shardlab {

// "a directory", "a FIFO", "a character device", "a block device", "a socket",
// "a symbolic link" for a file type other than a regular file.
const char* file_kind(mode_t mode);

// A new version of the file `path`, written piece by piece (a checkpoint need
// not be built in memory first) and put in place whole by commit(). Until then
// the old file is untouched; an AtomicFile destroyed without a successful
// commit leaves nothing behind.
//
// Where the kernel supports it (O_TMPFILE, Linux ext4/xfs/btrfs/tmpfs) the data
// goes to an unnamed file that only gets a name in commit(), right before the
// rename: a process killed while writing leaves no file at all. Elsewhere the
// temporary file is `.<name>.tmp-XXXXXX` beside the target (hidden, unique,
// created with O_EXCL so a planted file or link at that name is never followed);
// a killed process leaves that one file, which nothing reads.
//
// The target must be a regular file, a symbolic link (replaced by the new
// file, its target left alone) or absent; a directory, device, FIFO or socket
// is refused. A replaced file keeps its permissions; a new one gets 0666 less
// the umask. Two writers racing on one path both succeed, and the path ends up
// holding one of the two complete files.
class AtomicFile {
 public:
  // Creates the temporary file (and missing parent directories when
  // `make_dirs`); check ok() or the result of write()/commit().
  explicit AtomicFile(const std::string& path, bool make_dirs = false);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  bool ok() const { return reason_.empty(); }
  // Appends `n` bytes; false (and nothing more is written) once anything failed.
  bool write(const void* data, size_t n);
  // fsync, rename over the target, fsync of the directory. False with reason()
  // set when any step failed (the target is then as it was, except when only
  // the final directory fsync failed, which reason() says).
  bool commit();
  // Why it failed, e.g. "No such file or directory" or "write: No space left on
  // device"; empty while all is well.
  const std::string& reason() const { return reason_; }

 private:
  bool fail(const std::string& why);
  std::string path_, dir_, tmp_;  // tmp_: the temporary's name once it has one
  int fd_ = -1;
  bool unnamed_ = false;  // O_TMPFILE: no name until commit()
  bool committed_ = false;
  mode_t mode_ = 0;
  std::string reason_;
};

// For tests: false makes AtomicFile take the named temporary even where
// O_TMPFILE works, to exercise the way other file systems go. Default true.
void set_atomic_file_unnamed_allowed(bool allowed);

// Replaces (or creates) the regular file `path` with `bytes` through AtomicFile.
// Returns false with `*error` set ("cannot write [what ]'x': reason").
bool write_file_atomic(const std::string& path, const std::string& bytes, std::string* error,
                       bool make_dirs = false, const std::string& what = "");

// Whether AtomicFile could write `path` now, checked without creating,
// truncating or removing anything: the target is absent, a regular file or a
// symbolic link, and its directory exists and accepts a new file. False with
// `*reason` set ("it is a character device, not a regular file (valid: ...)").
bool check_file_writable(const std::string& path, std::string* reason);

}  // namespace shardlab
