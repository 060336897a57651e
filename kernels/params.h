// Hyperparameters passed to optimizer kernels, shared by the CPU and CUDA versions.
#pragma once

namespace shardlab::kernels {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};

}  // namespace shardlab::kernels
