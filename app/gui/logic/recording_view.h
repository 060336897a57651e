// What the GUI says about an opened recording: the status line naming the file
// and where, on how many ranks and when it was recorded.
#pragma once
#include <string>

#include "core/recording.h"

namespace shardlab::gui {

// "2026-11-23T16:40:05Z" -> "2026-11-23 16:40 UTC"; anything else unchanged.
std::string readable_date(const std::string& iso_utc);

// "recording: FILE — recorded on DEVICE, world N, DATE" ("trace: FILE ..." for a
// Chrome trace read back).
std::string recording_status(const std::string& file, const RecordingOrigin& origin, int world,
                             bool trace = false);

// "run.shardrec" from "/some/dir/run.shardrec": the status line has little room.
std::string file_name(const std::string& path);

// Several lines for the status line's tooltip: the full path, the machine (CPU,
// GPUs, placement), the date and the program that wrote it.
std::string recording_details(const RunResult& run, const std::string& path,
                              const RecordingOrigin& origin, bool trace = false);

}  // namespace shardlab::gui
