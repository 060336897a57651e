// Values the CPU and CUDA kernels share: storage formats and optimizer
// hyperparameters.
#pragma once
#include <cstdint>

namespace shardlab {

// Storage formats: fp32, and the 2-byte formats of mixed precision.
enum class DType : uint8_t { f32, bf16, f16 };

}  // namespace shardlab

namespace shardlab::kernels {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};

// torch.nn.BatchNorm1d's defaults (momentum 0.1, eps 1e-5).
struct BatchNormParams {
  double momentum = 0.1;
  double eps = 1e-5;
};

}  // namespace shardlab::kernels
