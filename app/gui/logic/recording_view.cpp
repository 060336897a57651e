// Status text for an opened recording (see recording_view.h).
#include "app/gui/logic/recording_view.h"

#include <cctype>

#include "core/parallel/strategy.h"

namespace shardlab::gui {

std::string readable_date(const std::string& s) {
  // Exactly what describe_origin() writes: YYYY-MM-DDTHH:MM:SSZ.
  const char* shape = "dddd-dd-ddTdd:dd:ddZ";  // i18n: not shown
  if (s.size() != 20) return s;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool digit = std::isdigit(static_cast<unsigned char>(s[i])) != 0;
    if (shape[i] == 'd' ? !digit : s[i] != shape[i]) return s;
  }
  return s.substr(0, 10) + " " + s.substr(11, 5) + " UTC";  // i18n: a time zone, as in Chinese
}

std::string recording_status(const std::string& file, const RecordingOrigin& origin, int world,
                             bool trace, const Tr& tr) {
  return strf(trace ? tr("trace: %s \xE2\x80\x94 recorded on %s, world %d, %s")
                    : tr("recording: %s \xE2\x80\x94 recorded on %s, world %d, %s"),
              file.c_str(), origin.device.c_str(), world, readable_date(origin.date).c_str());
}

RunConfig on_this_cpu(RunConfig form) {
  form.device = "cpu";                                // i18n: not shown
  if (form.backend == "nccl") form.backend = "auto";  // i18n: not shown
  form.tf32 = false;  // a tensor-core format: the CPU's fp32 is exact
  return form;
}

std::optional<std::string> rerun_here_note(const RunConfig& form, const RecordingOrigin& origin,
                                           int gpus_here, const Tr& tr) {
  if (form.device != "cuda" || gpus_here > 0) return std::nullopt;
  const RunConfig cpu = on_this_cpu(form);
  try {
    validate(cpu);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  // The settings as command-line flags, the same in every language.
  std::string flags = "--device cpu";                           // i18n: not shown
  if (cpu.backend != form.backend) flags += " --backend auto";  // i18n: not shown
  if (form.tf32) flags = strf(tr("%s without --tf32"), flags.c_str());
  if (origin.gpus.empty())
    return strf(tr("Recorded on cuda; this machine has no usable GPU, so it is shown as recorded. "
                   "It can be re-run here with %s."),
                flags.c_str());
  return strf(tr("Recorded on cuda (%s); this machine has no usable GPU, so it is shown as "
                 "recorded. It can be re-run here with %s."),
              origin.gpus.front().c_str(), flags.c_str());
}

std::string file_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos || slash + 1 == path.size() ? path : path.substr(slash + 1);
}

std::string recording_details(const RunResult& run, const std::string& path,
                              const RecordingOrigin& origin, bool trace, const Tr& tr) {
  std::string out = strf(trace ? tr("trace %s") : tr("recording %s"), path.c_str());
  const auto line = [&](const std::string& text) { out += "\n" + text; };
  line(strf(tr("recorded %s on %s"), readable_date(origin.date).c_str(), origin.device.c_str()));
  if (!origin.cpu.empty()) line(strf(tr("CPU: %s"), origin.cpu.c_str()));
  for (const std::string& g : origin.gpus) line(strf(tr("GPU: %s"), g.c_str()));
  if (!run.placement.summary.empty())
    line(strf(tr("placement: %s"), run.placement.summary.c_str()));
  if (!origin.shardlab.empty()) line(strf(tr("written by %s"), origin.shardlab.c_str()));
  if (!run.clock_offset_ns.empty())
    line(strf(tr("%zu processes, their clocks aligned to rank 0's at rendezvous"),
              run.clock_offset_ns.size()));
  if (trace)
    line(
        tr("A trace holds memory as totals per category (no buffer names) and no final "
           "weights."));
  line(tr("Shown as recorded: nothing runs until Run (R)."));
  return out;
}

}  // namespace shardlab::gui
