// Model weights <-> safetensors with PyTorch names and shapes, and the data
// file of a run (x, y as [steps, batch, ...]) so a run can be replayed in PyTorch.
#pragma once
#include <string>
#include <vector>

#include <map>

#include "core/model/layer_call.h"
#include "core/model/model.h"

namespace shardlab {

void save_params(const std::string& path, const ModelLayout& layout,
                 const std::vector<float>& flat);

// Throws ConfigError naming the file and the first missing, unexpected or
// mis-shaped tensor (found from the header, before any data is read or the
// model's vector allocated), or the first tensor holding NaN or Inf (with its
// first bad index) unless `allow_nonfinite` (`--allow-nonfinite`).
std::vector<float> load_params(const std::string& path, const ModelLayout& layout,
                               bool allow_nonfinite = false);

// The metadata a checkpoint carries: the model's name, and for gpt its --seq
// and the tokenizer's vocabulary (what `shardlab sample` needs to decode).
std::map<std::string, std::string> checkpoint_metadata(const ModelSpec& spec);

// Every step's inputs and targets: fp32 values, or token ids stored as I64.
void save_data(const std::string& path, const ModelLayout& layout, const Dataset& data, int steps,
               int batch);

// Throws ConfigError("cannot write <what> '<path>': <reason>") unless the
// atomic writer (core/io/atomic_file.h) could write `path`: a directory, device,
// FIFO or socket there, or a missing or read-only directory, is refused. Checks
// without creating, truncating or removing anything.
void check_writable(const std::string& path, const std::string& what);

}  // namespace shardlab
