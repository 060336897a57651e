// safetensors checkpoints (the Hugging Face format) with PyTorch names and
// shapes, so weights move between Shardlab and the wider ecosystem.
#pragma once
#include <cstdint>
#include <functional>
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

// Throws SafetensorsError("cannot write '<path>': <reason>"). Written through
// core/atomic_file: the old file stays whole until the new one is complete.
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Throws SafetensorsError naming the file and what is wrong: missing, not a
// regular file (a directory, device, FIFO or socket is refused before anything
// is read), truncated, header length over 100 MiB or past the end, bad header,
// unsupported dtype, shape not matching its byte range, or tensors that do not
// exactly cover the data section (a gap, an overlap, trailing bytes: what a
// wrong header length gives). Reads at most the file's size, and the data
// section only once the header has been found consistent with it. Values are
// returned as stored, NaN and Inf included (see find_nonfinite).
std::vector<NamedTensor> load_safetensors(const std::string& path);

// Same, and also returns the file's "__metadata__" strings (empty when it has none).
std::vector<NamedTensor> load_safetensors(const std::string& path,
                                          std::map<std::string, std::string>& metadata);

// What the header says of one tensor; known before any of its data is read.
struct TensorHeader {
  std::string name;
  std::string dtype;  // F32, F16, BF16 or I64
  std::vector<int64_t> shape;
  size_t numel() const;
};

// Called once the header has been found consistent with the file (offsets
// within its size, tensors tiling the data section) and before any tensor data
// is read or allocated: a caller that expects certain tensors throws here, so
// a 4 GiB file of the wrong shapes costs a header read, not 4 GiB.
using HeaderCheck = std::function<void(const std::vector<TensorHeader>& tensors,
                                       const std::map<std::string, std::string>& metadata)>;

// Same, with `check` called on the header before the data is read.
std::vector<NamedTensor> load_safetensors(const std::string& path,
                                          std::map<std::string, std::string>& metadata,
                                          const HeaderCheck& check);

// The header alone, with every check of load_safetensors that does not need
// the data: the tensors in file order and the metadata. Never reads the data
// section, so it costs the header's size whatever the file's.
std::vector<TensorHeader> read_safetensors_header(const std::string& path,
                                                  std::map<std::string, std::string>& metadata);

// Empty when every value is finite; else names the first tensor holding NaN or
// Inf: "tensor 'w' holds 3 non-finite values of 16, the first NaN at index 5".
// The reader keeps such values (a file may rightly hold them); callers that load
// them as weights refuse them with this (core/model/checkpoint.cpp).
std::string find_nonfinite(const std::vector<NamedTensor>& tensors);

}  // namespace shardlab
