// What the GUI says about an opened recording: the status line naming the file
// and where, on how many ranks and when it was recorded.
#pragma once
#include <optional>
#include <string>

#include "app/gui/logic/i18n.h"
#include "core/run/recording.h"

namespace shardlab::gui {

// "2026-11-23T16:40:05Z" -> "2026-11-23 16:40 UTC"; anything else unchanged.
std::string readable_date(const std::string& iso_utc);

// "recording: FILE — recorded on DEVICE, world N, DATE" ("trace: FILE ..." for a
// Chrome trace read back), in `tr`'s language.
std::string recording_status(const std::string& file, const RecordingOrigin& origin, int world,
                             bool trace = false, const Tr& tr = Tr{});

// The run bar's line for an opened recording made with --device cuda on a
// machine with no usable GPU (`gpus_here` 0): a fact of replaying, not an error
// to fix, with the settings that run it here. nullopt when the recording asked
// for no GPU, this machine has one, or the settings fail on the CPU too (then
// the error itself is what to show).
std::optional<std::string> rerun_here_note(const RunConfig& form, const RecordingOrigin& origin,
                                           int gpus_here, const Tr& tr = Tr{});
// The settings rerun_here_note offers: `form` on the CPU (--backend nccl, a GPU
// communicator, back to auto; --tf32, a tensor-core format, off).
RunConfig on_this_cpu(RunConfig form);

// "run.shardrec" from "/some/dir/run.shardrec": the status line has little room.
std::string file_name(const std::string& path);

// Several lines for the status line's tooltip: the full path, the machine (CPU,
// GPUs, placement), the date and the program that wrote it.
std::string recording_details(const RunResult& run, const std::string& path,
                              const RecordingOrigin& origin, bool trace = false,
                              const Tr& tr = Tr{});

}  // namespace shardlab::gui
