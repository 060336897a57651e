// Model FLOPs per training step and the GPU peak table (see gpu_speed.h).
#include "app/gpu_speed.h"

namespace shardlab::app {

double train_step_flops(const ModelSpec& spec, int batch) {
  const double L = spec.layers, C = spec.dim, B = batch;
  double forward = 0;
  if (spec.family == "gpt") {
    const double T = spec.seq, V = spec.vocab, rows = B * T;
    // Per block: c_attn C→3C, attn.c_proj C→C, c_fc C→4C, mlp.c_proj 4C→C.
    const double block_linears = 2 * rows * (3 * C * C + C * C + 4 * C * C + 4 * C * C);
    const double attention = 2 * (2 * B * T * T * C);              // QKᵀ and AV over every head
    forward = L * (block_linears + attention) + 2 * rows * C * V;  // + lm_head
  } else {
    forward = L * 2 * B * C * C;  // L Linear(D, D)
  }
  return 3 * forward;  // backward: twice the forward
}

std::optional<double> peak_tflops(const std::string& gpu_name, const std::string& precision,
                                  bool tf32) {
  struct Peak {
    double fp32, tf32, half;  // dense, from NVIDIA's data sheets
  };
  auto has = [&](const char* s) { return gpu_name.find(s) != std::string::npos; };
  std::optional<Peak> p;
  // H200 first: its name holds no "H100". PCIe before the SXM test: both say H100.
  if (has("H200"))
    p = Peak{67, 495, 989};  // the H100 SXM's compute with more memory
  else if (has("H100") && has("PCIe"))
    p = Peak{51, 378, 756};
  else if (has("H100") && (has("SXM") || has("HBM3")))
    p = Peak{67, 495, 989};
  else if (has("A100"))
    p = Peak{19.5, 156, 312};
  if (!p) return std::nullopt;
  if (precision == "bf16" || precision == "fp16") return p->half;
  return tf32 ? p->tf32 : p->fp32;
}

}  // namespace shardlab::app
