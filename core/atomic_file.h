// Writing a file so that it is either the old content or the whole new one,
// never half of either: a unique temporary name in the same directory, fsync,
// rename over the target, fsync of the directory. The one way Shardlab replaces
// a file (recordings, lesson progress).
#pragma once
#include <string>

namespace shardlab {

// Replaces (or creates) the regular file `path` with `bytes`. Refuses to
// replace anything that is not a regular file (a device, a FIFO, a directory);
// a symlink at `path` is replaced by the new file, its target left alone
// (callers that must refuse links check first). A replaced file keeps its
// permissions; a new one gets 0666 less the umask. Creates missing parent
// directories when `make_dirs`. Returns false with `*error` set ("cannot write
// [what ]'x': step: reason"); the old file is then untouched and no temporary
// file is left behind.
bool write_file_atomic(const std::string& path, const std::string& bytes, std::string* error,
                       bool make_dirs = false, const std::string& what = "");

}  // namespace shardlab
