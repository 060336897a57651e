// plan_placement: --device and --backend against the GPUs present.
#include "core/comm/placement.h"

#include "core/device/gpu.h"

namespace shardlab {

const char* to_string(CommKind k) {
  switch (k) {
    case CommKind::gloo:
      return "gloo";
    case CommKind::gloo_staged:
      return "gloo+host-staging";
    case CommKind::nccl:
      return "nccl";
  }
  return "?";
}

bool places_on_cuda(const RunConfig& cfg) {
  return cfg.device == "cuda" || (cfg.device == "auto" && cuda_device_count() > 0);
}

Placement plan_placement(const RunConfig& cfg) {
  Placement p;
  const std::string& dev = cfg.device;
  if (dev != "cpu" && dev != "cuda" && dev != "auto" && dev != "cpu-guarded")
    throw ConfigError("--device '" + dev + "' is invalid (valid: cpu, cuda, auto, cpu-guarded)");
  if (cfg.backend != "auto" && cfg.backend != "gloo" && cfg.backend != "nccl")
    throw ConfigError("--backend '" + cfg.backend + "' is invalid (valid: auto, gloo, nccl)");
  const int gpus = (dev == "cuda" || dev == "auto") ? cuda_device_count() : 0;
  if (dev == "cuda" && gpus == 0)
    throw ConfigError("--device cuda: no usable GPU here (" + cuda_status() +
                      "); valid on this machine: cpu, auto");
  const bool cuda = dev == "cuda" || (dev == "auto" && gpus > 0);
  if (cfg.tf32 && !cuda)
    throw ConfigError("--tf32 needs a GPU: TF32 is a tensor-core format and --device " + dev +
                      " runs here on the CPU, whose fp32 is exact (valid: --tf32 with --device "
                      "cuda, or no --tf32)");
  if (cfg.tf32 && cfg.precision != "fp32")
    throw ConfigError("--tf32 with --precision " + cfg.precision +
                      ": TF32 changes fp32 GEMMs only, and " + cfg.precision +
                      " GEMMs already run on tensor cores (valid: --tf32 with --precision fp32)");
  const std::string world = std::to_string(cfg.world);

  if (!cuda) {
    if (cfg.backend == "nccl")
      throw ConfigError(
          "--backend nccl needs --device cuda and a GPU per rank (valid with --device " +
          (dev == "auto" ? std::string("auto on this machine") : dev) + ": auto, gloo)");
    p.guarded = dev == "cpu-guarded";
    p.device_name = p.guarded ? "cpu-guarded" : "cpu";
    p.comm = p.guarded ? CommKind::gloo_staged : CommKind::gloo;
    p.summary = p.guarded ? world +
                                " rank(s) on the guarded CPU device (device memory is "
                                "unreadable outside kernels), Gloo with host staging"
                          : world + " rank(s) as CPU threads, Gloo over TCP on 127.0.0.1";
    return p;
  }

  p.kind = DeviceKind::cuda;
  p.device_name = "cuda";
  for (int r = 0; r < cfg.world; ++r) p.gpu_of_rank.push_back(r % gpus);
  const std::string g = std::to_string(gpus) + " GPU" + (gpus == 1 ? "" : "s");
  // One process per rank on several hosts: each host's GPUs serve its own ranks.
  const int here = cfg.ranks_on_host > 0 ? cfg.ranks_on_host : cfg.world;
  if (here <= gpus && cfg.backend != "gloo") {
    p.comm = CommKind::nccl;
    p.summary = world + " rank(s), one GPU each (" + cuda_status() + "), NCCL";
    return p;
  }
  if (cfg.backend == "nccl")
    throw ConfigError(
        "--backend nccl needs one GPU per rank: " +
        (here == cfg.world ? "--world " + world : std::to_string(here) + " ranks on this host") +
        " but " + g +
        " here, and NCCL refuses two ranks on one GPU (valid: --backend auto or gloo, "
        "or --world " +
        std::to_string(gpus) + " or less)");
  p.comm = CommKind::gloo_staged;
  p.summary = here <= gpus
                  ? world + " rank(s), one GPU each, Gloo with host staging (--backend gloo)"
                  : world + " ranks share " + g +
                        ": NCCL refuses two ranks on one GPU, so they talk through Gloo with "
                        "host staging";
  return p;
}

std::string effective_attention(const RunConfig& cfg) {
  if (cfg.attention.empty()) return places_on_cuda(cfg) ? "flash" : "naive";
  if (cfg.attention != "naive" && cfg.attention != "flash")
    throw ConfigError("--attention '" + cfg.attention + "' is invalid (valid: " + kAttentionValues +
                      ")");
  return cfg.attention;
}

}  // namespace shardlab
