// Model weights <-> safetensors with PyTorch names and shapes, and the data
// file of a run (x, y as [steps, batch, D]) so a run can be replayed in PyTorch.
#pragma once
#include <string>
#include <vector>

#include "core/data.h"
#include "core/model.h"

namespace shardlab {

void save_params(const std::string& path, const ModelLayout& layout,
                 const std::vector<float>& flat);

// Throws ConfigError naming the file and the first missing, unexpected or
// mis-shaped tensor.
std::vector<float> load_params(const std::string& path, const ModelLayout& layout);

void save_data(const std::string& path, const SyntheticData& data, int steps, int batch);

// Throws ConfigError("cannot write <what> '<path>': <reason>") when the path
// cannot be created; leaves no file behind when it did not exist before.
void check_writable(const std::string& path, const std::string& what);

}  // namespace shardlab
