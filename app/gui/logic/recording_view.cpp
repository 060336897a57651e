// Status text for an opened recording (see recording_view.h).
#include "app/gui/logic/recording_view.h"

#include <cctype>

#include "core/strategy.h"

namespace shardlab::gui {

std::string readable_date(const std::string& s) {
  // Exactly what describe_origin() writes: YYYY-MM-DDTHH:MM:SSZ.
  const char* shape = "dddd-dd-ddTdd:dd:ddZ";
  if (s.size() != 20) return s;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool digit = std::isdigit(static_cast<unsigned char>(s[i])) != 0;
    if (shape[i] == 'd' ? !digit : s[i] != shape[i]) return s;
  }
  return s.substr(0, 10) + " " + s.substr(11, 5) + " UTC";
}

std::string recording_status(const std::string& file, const RecordingOrigin& origin, int world,
                             bool trace) {
  return (trace ? "trace: " : "recording: ") + file + " \xE2\x80\x94 recorded on " + origin.device +
         ", world " + std::to_string(world) + ", " + readable_date(origin.date);
}

RunConfig on_this_cpu(RunConfig form) {
  form.device = "cpu";
  if (form.backend == "nccl") form.backend = "auto";
  form.tf32 = false;  // a tensor-core format: the CPU's fp32 is exact
  return form;
}

std::optional<std::string> rerun_here_note(const RunConfig& form, const RecordingOrigin& origin,
                                           int gpus_here) {
  if (form.device != "cuda" || gpus_here > 0) return std::nullopt;
  const RunConfig cpu = on_this_cpu(form);
  try {
    validate(cpu);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const std::string gpu = origin.gpus.empty() ? "" : " (" + origin.gpus.front() + ")";
  std::string flags = "--device cpu";
  if (cpu.backend != form.backend) flags += " --backend auto";
  if (form.tf32) flags += " without --tf32";
  return "Recorded on cuda" + gpu +
         "; this machine has no usable GPU, so it is shown as recorded. It can be re-run here "
         "with " +
         flags + ".";
}

std::string file_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos || slash + 1 == path.size() ? path : path.substr(slash + 1);
}

std::string recording_details(const RunResult& run, const std::string& path,
                              const RecordingOrigin& origin, bool trace) {
  std::string out = (trace ? "trace " : "recording ") + path + "\nrecorded " +
                    readable_date(origin.date) + " on " + origin.device;
  if (!origin.cpu.empty()) out += "\nCPU: " + origin.cpu;
  for (const std::string& g : origin.gpus) out += "\nGPU: " + g;
  if (!run.placement.summary.empty()) out += "\nplacement: " + run.placement.summary;
  if (!origin.shardlab.empty()) out += "\nwritten by " + origin.shardlab;
  if (!run.clock_offset_ns.empty())
    out += "\n" + std::to_string(run.clock_offset_ns.size()) +
           " processes, their clocks aligned to rank 0's at rendezvous";
  if (trace)
    out +=
        "\nA trace holds memory as totals per category (no buffer names) and no final "
        "weights.";
  out += "\nShown as recorded: nothing runs until Run (R).";
  return out;
}

}  // namespace shardlab::gui
