// safetensors checkpoints (the Hugging Face format) with PyTorch names and
// shapes, so weights move between Shardlab and the wider ecosystem.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardlab {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major; numel = product of shape
  // Stored as I64 (PyTorch's num_batches_tracked) instead of F32: the values
  // must be integers within float's exact range, ±2^24; the reader sets it for I64.
  bool int64 = false;
};

class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws SafetensorsError("cannot write '<path>': <reason>").
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Throws SafetensorsError naming the file and what is wrong (missing, truncated,
// bad header, unsupported dtype, offsets out of range).
std::vector<NamedTensor> load_safetensors(const std::string& path);

// Same, and also returns the file's "__metadata__" strings (empty when it has none).
std::vector<NamedTensor> load_safetensors(const std::string& path,
                                          std::map<std::string, std::string>& metadata);

}  // namespace shardlab
