// What a model family supplies behind the layer table (core/model/model.h): its
// names, how it builds the table and initialises it, each layer's forward and
// backward on parameters the caller holds (whole, gathered or replicated), the
// data it trains on and its loss. LayerStack, LayerTape and the pipelines call
// only these, so no strategy ever names a model or a loss.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/model/layer_call.h"
#include "core/model/model.h"

namespace shardlab {

class MixedPrecision;

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual std::string name() const = 0;   // "mlp"
  virtual std::string forms() const = 0;  // "gpt:LxCxH with ..., e.g. gpt:2x64x4"
  // nullopt when `text` is not this family's; ConfigError when it is, but bad.
  virtual std::optional<ModelSpec> parse(const std::string& text) const = 0;
  virtual void build(ModelLayout& layout) const = 0;
  virtual std::vector<float> init(const ModelLayout& layout, uint64_t seed) const = 0;
  // Adds what a run supplies (gpt: seq, vocab); checks the run's settings.
  virtual ModelSpec resolve(ModelSpec spec, const RunConfig& cfg) const = 0;

  // Layer `layer` on x [rows, act_numel(layer)] (dt; int32 ids when it is the
  // model's token input). params: the layer's parameters in table order.
  // Allocates its output and what its backward needs into keep.
  virtual void forward(const LayerCall& c, const ModelLayout& m, int layer,
                       const std::vector<const void*>& params, const void* x, LayerKeep& keep,
                       const LayerNorms* norms) const = 0;
  // g: the gradient of the layer's output (may be overwritten). Parameter
  // gradients accumulate (+=); din [rows, act_numel(layer)] is written unless null.
  virtual void backward(const LayerCall& c, const ModelLayout& m, int layer,
                        const std::vector<const void*>& params, const std::vector<void*>& grads,
                        const void* x, LayerKeep& keep, void* g, void* din) const = 0;

  virtual std::unique_ptr<Dataset> dataset(const ModelLayout& m, uint64_t seed,
                                           const RunConfig& cfg) const = 0;
  // The loss of output [rows, act_numel(L)] (dt) against targets [rows,
  // target_numel()] (device), summed over the rows and divided by
  // divisor_rows × (values per row): rows of the mean the step computes.
  // Writes the gradient (dt, times mp's loss scale) into dout. Under tensor
  // parallelism (m a slice, tp its group) the output may be this rank's slice
  // of it (gpt: its vocabulary's logits), and the loss a collective over tp;
  // micro-batch mb (-1: none) names its spans.
  virtual double loss(Allocator& alloc, const MixedPrecision& mp, const ModelLayout& m, void* dout,
                      const void* output, const void* targets, int rows, int divisor_rows, Comm* tp,
                      int mb) const = 0;
  // Host bytes the dataset holds for a run (the memory preflight's shared part).
  virtual int64_t data_bytes(const ModelLayout& m, const RunConfig& cfg) const = 0;
  // Tensor parallelism over `tp` ranks (a mesh's tp axis, named `given` in
  // messages): throws ConfigError in one line when this model cannot be cut so.
  virtual void check_tensor_parallel(const ModelSpec& spec, int tp,
                                     const std::string& given) const = 0;
};

// The registry, like strategies': every family, and the one that parses `text`.
const std::vector<const ModelFamily*>& model_families();
const ModelFamily& find_family(const std::string& name);

// Pointers to layer `layer`'s parameters inside a buffer holding the layer's
// parameters contiguously in table order from `base` (values of dtype dt).
std::vector<const void*> layer_param_ptrs(const ModelLayout& m, int layer, const void* base,
                                          DType dt);
std::vector<void*> layer_param_ptrs(const ModelLayout& m, int layer, void* base, DType dt);

// Sums each tied pair's gradients so both copies take the same update
// (core/model/model.h, ParamInfo::tied_to). grad(i) returns parameter i's gradient
// (dt), or null where this rank does not hold it; a pair is summed only where
// both are held.
void sum_tied_grads(const ModelLayout& m, DeviceBackend& dev, DType dt,
                    const std::function<void*(int param)>& grad);

}  // namespace shardlab
