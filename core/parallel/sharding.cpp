// Shard plans, flat groups of layers, and the buffer-name scheme (see sharding.h).
#include "core/parallel/sharding.h"

#include <algorithm>
#include <cstring>
#include <regex>
#include <stdexcept>

#include "core/model/precision.h"
#include "core/parallel/data_parallel_mesh.h"

namespace shardlab {

std::string layers_name(int first, int last) {
  if (last - first == 1) return "layers." + std::to_string(first);
  return "layers." + std::to_string(first) + "-" + std::to_string(last - 1);
}

std::string shard_tag(int rank, int world) {
  return "[shard " + std::to_string(rank) + "/" + std::to_string(world) + "]";
}

std::optional<BufferName> parse_buffer_name(const std::string& name) {
  static const std::regex re(
      R"(layers\.(\d+)(?:-(\d+))?\.(weight|bias|flat)(?:\[(shard (\d+)/(\d+)|gathered|unreduced|replica)\])?(?:\.(grad|exp_avg|exp_avg_sq))?)");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return std::nullopt;
  BufferName b;
  b.first_layer = std::stoi(m[1]);
  b.last_layer = m[2].matched ? std::stoi(m[2]) : b.first_layer;
  b.tensor = m[3];
  const std::string form = m[4];
  if (form.empty()) {
    b.form = BufferName::Form::full;
  } else if (form == "gathered") {
    b.form = BufferName::Form::gathered;
  } else if (form == "unreduced") {
    b.form = BufferName::Form::unreduced;
  } else if (form == "replica") {
    b.form = BufferName::Form::replica;
  } else {
    b.form = BufferName::Form::shard;
    b.shard = std::stoi(m[5]);
    b.shards = std::stoi(m[6]);
  }
  b.role = m[7];
  return b;
}

ShardPlan::ShardPlan(size_t n, int w) : numel(n), world(w) {
  if (w < 1) throw std::invalid_argument("ShardPlan: world must be positive");
  shard = (n + static_cast<size_t>(w) - 1) / static_cast<size_t>(w);
}

size_t ShardPlan::real(int rank) const {
  const size_t b = begin(rank);
  if (b >= numel) return 0;
  return std::min(shard, numel - b);
}

size_t FlatGroup::layer_offset(const ModelLayout& layout, int layer) const {
  return layout.layer_begin(layer) - offset;
}

std::vector<FlatGroup> make_flat_groups(const ModelLayout& layout, int layers_per_group,
                                        int world) {
  if (layers_per_group < 1) throw std::invalid_argument("make_flat_groups: group of no layers");
  std::vector<FlatGroup> groups;
  for (int first = 0; first < layout.num_layers(); first += layers_per_group) {
    FlatGroup g;
    g.index = static_cast<int>(groups.size());
    g.first = first;
    g.last = std::min(layout.num_layers(), first + layers_per_group);
    // The model's flat vector already stores each layer as weight then bias,
    // so a group of consecutive layers is one contiguous range of it.
    g.offset = layout.layer_begin(g.first);
    size_t n = 0;
    for (int l = g.first; l < g.last; ++l) n += layout.layer_numel(l);
    g.plan = ShardPlan(n, world);
    g.name = layers_name(g.first, g.last) + ".flat";
    groups.push_back(std::move(g));
  }
  return groups;
}

double padding_per_rank(const std::vector<FlatGroup>& groups) {
  double extra = 0;
  for (const FlatGroup& g : groups)
    extra += static_cast<double>(g.plan.shard) -
             static_cast<double>(g.plan.numel) / static_cast<double>(g.plan.world);
  return extra;
}

void require_batch_divisible(const RunConfig& cfg) {
  // On a mesh the dp axis takes the batch, and the mesh has its own checks.
  validate_data_parallel_mesh(cfg);
  if (!cfg.mesh.empty()) return;
  if (cfg.world >= 1 && cfg.batch % cfg.world != 0)
    throw ConfigError("--batch " + std::to_string(cfg.batch) + " is not divisible by --world " +
                      std::to_string(cfg.world) + " (valid: a multiple of " +
                      std::to_string(cfg.world) + ", e.g. " + std::to_string(cfg.world * 16) + ")");
}

void write_group_values(DeviceBackend& dev, Tensor& t, const FlatGroup& g,
                        const ParamSource& model_flat, size_t begin, size_t count) {
  const size_t real = begin >= g.numel() ? 0 : std::min(count, g.numel() - begin);
  if (real) model_flat.write_to(dev, t, 0, g.offset + begin, real);
  if (count > real) {  // the padding: fewer values than ranks
    const std::vector<float> zeros(count - real, 0.0f);
    write_from_host(dev, t, real, zeros.data(), zeros.size());
  }
}

std::vector<float> gather_model_params(Comm& comm, Allocator& alloc, size_t total,
                                       const std::vector<FlatGroup>& groups,
                                       const std::vector<const float*>& shards,
                                       bool shards_on_host) {
  const int rank = comm.rank();
  ExportBuffer flat(alloc, rank == 0 ? total : 0);
  for (const FlatGroup& g : groups) {
    const float* shard = shards[g.index];
    Tensor staged;
    if (shards_on_host) {
      staged = alloc.alloc(g.shard_name(rank), MemCategory::comm_buffers, g.plan.shard);
      ScopedSpan span(alloc.recorder(), Lane::comm, SpanKind::copy_h2d, g.first, -1,
                      static_cast<int64_t>(staged.bytes()));
      alloc.backend().copy(staged.raw(), shard, staged.bytes(), CopyKind::host_to_device);
      shard = static_cast<const float*>(staged.raw());
    }
    Tensor full = alloc.alloc(g.name + kGathered, MemCategory::comm_buffers, g.plan.padded());
    comm.all_gather(shard, full.raw(), g.plan.counts(), DType::f32, CommMeta{g.first, -1});
    if (rank == 0 && flat.keeps())
      alloc.backend().copy(flat.at(g.offset, g.numel()), full.raw(), g.numel() * sizeof(float),
                           CopyKind::device_to_host);
  }
  return flat.take();
}

}  // namespace shardlab
