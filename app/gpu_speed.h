// What a training step asks of a GPU: its model FLOPs, and the GPU's peak for
// the precision its GEMMs run in, for `bench gpu`'s TFLOP/s and share of peak.
#pragma once
#include <optional>
#include <string>

#include "core/model/model.h"

namespace shardlab::app {

// Model FLOPs of one training step on `batch` rows (sequences, for a gpt),
// as MFU counts them: every Linear 2·rows·in·out forward and twice that
// backward (the input and the weight gradient), lm_head included; a gpt adds
// attention's two GEMMs (QKᵀ and AV), 2·B·T·T·C each forward over the full
// T×T (the causal half is computed, then masked) and twice that backward.
// Element-wise work, embeddings and the optimizer are not counted.
double train_step_flops(const ModelSpec& spec, int batch);

// Dense peak TFLOP/s of the GPU CUDA names `gpu_name` ("1 x NVIDIA H100 80GB
// HBM3", as cuda_status() says), for GEMMs in `precision` (fp32 | bf16 | fp16;
// fp32 with tf32: TF32 tensor cores). nullopt for a GPU the table lacks.
std::optional<double> peak_tflops(const std::string& gpu_name, const std::string& precision,
                                  bool tf32);

}  // namespace shardlab::app
