// The parts every pipeline schedule shares (see pipeline.h): the partition, the
// stage topology, the checks on the settings, and a stage's forward/backward of
// one micro-batch with its receives posted in order and its sends asynchronous.
#include "core/parallel/pipeline.h"

#include "core/model/model_family.h"
#include "core/model/text_data.h"
#include "core/parallel/data_parallel_mesh.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>

namespace shardlab {

namespace {

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

std::string mb_name(const char* what, int mb) {
  return std::string(what) + "[mb " + std::to_string(mb) + "]";
}

}  // namespace

int pipeline_stages(const RunConfig& cfg) {
  if (!cfg.mesh.empty()) return parse_mesh(cfg.mesh, cfg.mesh_order).size(MeshAxis::pp);
  return cfg.stages > 0 ? cfg.stages : cfg.world;
}

int pipeline_replicas(const RunConfig& cfg) {
  return cfg.mesh.empty() ? 1 : parse_mesh(cfg.mesh, cfg.mesh_order).size(MeshAxis::dp);
}

int pipeline_stage_of(const RunConfig& cfg, int rank) {
  return cfg.mesh.empty() ? rank : parse_mesh(cfg.mesh, cfg.mesh_order).coord(rank, MeshAxis::pp);
}

std::vector<int> first_pipeline_ranks(const RunConfig& cfg) {
  if (!cfg.mesh.empty()) return parse_mesh(cfg.mesh, cfg.mesh_order).group_ranks(0, MeshAxis::pp);
  std::vector<int> ranks(static_cast<size_t>(pipeline_stages(cfg)));
  for (size_t s = 0; s < ranks.size(); ++s) ranks[s] = static_cast<int>(s);
  return ranks;
}

int pipeline_chunks(const RunConfig& cfg) {
  const StrategyInfo* info = find_strategy(cfg.strategy);
  if (!info || !info->reads_option(StrategyOption::virtual_stages)) return 1;
  return cfg.virtual_stages > 0 ? cfg.virtual_stages : 2;
}

std::vector<int> chunk_of_layers(const RunConfig& cfg, int rank) {
  const ModelLayout layout = make_layout(cfg);
  const std::vector<int> partition = pipeline_partition(cfg, layout);
  const int V = pipeline_chunks(cfg);
  std::vector<int> chunk(static_cast<size_t>(layout.num_layers()), -1);
  for (int c = 0; c < V; ++c) {
    const StageTopology t = stage_topology(pipeline_stage_of(cfg, rank), partition, V, c);
    for (int l = t.first_layer; l < t.last_layer; ++l) chunk[static_cast<size_t>(l)] = c;
  }
  return chunk;
}

namespace {
// The contiguous split of layers with weights w into `stages` whose largest
// stage weighs least; among equally good splits the earlier stages take the
// extra layers.
template <typename W>
std::vector<int> balance(const std::vector<W>& w, int stages) {
  const int L = static_cast<int>(w.size());
  if (stages < 1 || stages > L)
    throw std::invalid_argument("balanced_partition: need 1 to " + std::to_string(L) + " stages");
  std::vector<W> prefix(L + 1, W{});
  for (int l = 0; l < L; ++l) prefix[l + 1] = prefix[l] + w[l];
  auto weight = [&](int begin, int end) { return prefix[end] - prefix[begin]; };

  // best[k][j]: the smallest possible largest stage when layers [0, j) form k stages.
  const W kNone = std::numeric_limits<W>::max();
  std::vector<std::vector<W>> best(stages + 1, std::vector<W>(L + 1, kNone));
  best[0][0] = W{};
  for (int k = 1; k <= stages; ++k)
    for (int j = k; j <= L; ++j)
      for (int i = k - 1; i < j; ++i)
        if (best[k - 1][i] != kNone)
          best[k][j] = std::min(best[k][j], std::max(best[k - 1][i], weight(i, j)));
  const W cap = best[stages][L];

  // With that cap, each stage takes as many layers as fit while leaving one for
  // each later stage: the earlier stages get the extra layers. (Greedy filling
  // is never behind an optimal split, so the last stage fits under the cap too.)
  std::vector<int> counts;
  int begin = 0;
  for (int k = 0; k < stages; ++k) {
    const int limit = L - (stages - k - 1);
    int end = begin + 1;
    if (k + 1 == stages) end = L;
    while (end < limit && weight(begin, end + 1) <= cap) ++end;
    counts.push_back(end - begin);
    begin = end;
  }
  return counts;
}
}  // namespace

std::vector<int> balanced_partition(const ModelLayout& layout, int stages) {
  std::vector<size_t> numel;
  for (int l = 0; l < layout.num_layers(); ++l) numel.push_back(layout.layer_numel(l));
  return balance(numel, stages);
}

std::vector<int> balanced_partition(const std::vector<double>& costs, int stages) {
  return balance(costs, stages);
}

std::vector<double> measure_layer_costs(const RunConfig& cfg) {
  const ModelLayout m = make_layout(cfg);
  const std::unique_ptr<Dataset> data = m.family().dataset(m, cfg.seed, cfg);
  const std::unique_ptr<DeviceBackend> dev = make_cpu_backend();
  Recorder rec(0, true);
  Allocator alloc(*dev, &rec);
  const std::vector<float> init = init_params(m, cfg.seed);
  LayerStack stack(m, 0, m.num_layers(), alloc, &rec, FlatParams(init));
  const int rows = std::max(1, cfg.batch / std::max(1, cfg.micro_batches));
  Tensor x = alloc.alloc("probe.x", MemCategory::activations,
                         {rows, static_cast<int64_t>(m.act_numel(0))});
  Tensor y = alloc.alloc("probe.y", MemCategory::activations,
                         {rows, static_cast<int64_t>(m.target_numel())});
  data->load(*dev, 0, 0, rows, x.raw(), y.raw());
  const MixedPrecision fp32("fp32");
  std::vector<double> cost(m.num_layers(), 0.0);
  constexpr int kWarmup = 1, kRounds = 3;
  for (int round = 0; round < kWarmup + kRounds; ++round) {
    std::vector<Span> spans;
    rec.spans_since(0, spans);
    const size_t seen = spans.size();
    const void* out = stack.forward(x.raw(), rows, 0);
    Tensor g = alloc.alloc("probe.grad", MemCategory::temporary,
                           {rows, static_cast<int64_t>(m.act_numel(m.num_layers()))});
    m.family().loss(alloc, fp32, m, g.raw(), out, y.raw(), rows, rows, nullptr, -1);
    stack.backward(g.raw(), 0, false);
    if (round < kWarmup) continue;
    spans.clear();
    rec.spans_since(seen, spans);
    for (const Span& s : spans)
      if (s.layer >= 0 && (s.kind == SpanKind::forward || s.kind == SpanKind::backward))
        cost[s.layer] += static_cast<double>(s.t_end_ns - s.t_begin_ns) / 1e6 / kRounds;
  }
  return cost;
}

std::vector<int> pipeline_partition(const RunConfig& cfg, const ModelLayout& layout) {
  return cfg.partition.empty()
             ? balanced_partition(layout, pipeline_stages(cfg) * pipeline_chunks(cfg))
             : cfg.partition;
}

Schedule run_schedule(const RunConfig& cfg) {
  const int P = pipeline_stages(cfg), M = cfg.micro_batches, V = pipeline_chunks(cfg);
  if (cfg.schedule.empty()) {
    const StrategyInfo& info = strategy_info(cfg.strategy);
    if (!info.schedule)
      throw std::logic_error("run_schedule: " + cfg.strategy + " has no schedule");
    return info.schedule(P, M, V);
  }
  std::string text;
  try {
    text = read_text_file(cfg.schedule);
  } catch (const ConfigError& e) {
    throw ConfigError("--schedule " + cfg.schedule + ": " + e.what());
  }
  Schedule s = parse_schedule(text, cfg.schedule);
  try {
    if (s.chunks != V)
      throw ConfigError(
          s.chunks > 1
              ? "it names model chunks (" + std::to_string(s.chunks) + " per rank) but " +
                    cfg.strategy + " runs " + std::to_string(V) +
                    " (valid: --strategy interleaved --virtual-stages " + std::to_string(s.chunks) +
                    ")"
              : "it names no model chunks but " + cfg.strategy + " runs " + std::to_string(V) +
                    " per rank (valid: actions such as F0.1, chunk 1, or --virtual-stages " +
                    "matching the file)");
    validate_schedule(s, P, M, V);
  } catch (const ConfigError& e) {
    throw ConfigError("--schedule " + cfg.schedule + ": " + e.what());
  }
  return s;
}

StageTopology stage_topology(int rank, const std::vector<int>& partition, int chunks, int chunk) {
  const int S = static_cast<int>(partition.size());
  if (chunks < 1 || S % chunks != 0)
    throw std::invalid_argument("stage_topology: the partition is not stages x chunks");
  const int P = S / chunks;
  if (rank < 0 || rank >= P) throw std::invalid_argument("stage_topology: rank out of range");
  if (chunk < 0 || chunk >= chunks)
    throw std::invalid_argument("stage_topology: chunk out of range");
  const int s = chunk * P + rank;  // Megatron's round-robin
  StageTopology t;
  t.rank = rank;
  t.stages = P;
  t.chunk = chunk;
  t.model_stage = s;
  t.first_layer = std::accumulate(partition.begin(), partition.begin() + s, 0);
  t.last_layer = t.first_layer + partition[s];
  t.prev = s > 0 ? (s - 1) % P : -1;
  t.next = s + 1 < S ? (s + 1) % P : -1;
  t.is_first = s == 0;
  t.is_last = s + 1 == S;
  return t;
}

void validate_pipeline(const RunConfig& cfg) {
  const ModelLayout layout = make_layout(cfg);
  const int L = layout.num_layers();
  const std::string W = std::to_string(cfg.world);
  if (cfg.stages < 0)
    throw ConfigError("--stages " + std::to_string(cfg.stages) +
                      " is invalid (valid: one stage per rank, --stages " + W +
                      ", or leave it out)");
  const Mesh mesh = run_mesh(cfg);  // the mesh's own checks: it parses, its ranks are --world
  const int R = mesh.size(MeshAxis::dp);
  if (!cfg.mesh.empty()) {
    const std::string given = "--mesh " + cfg.mesh;
    layout.family().check_tensor_parallel(layout.spec(), mesh.size(MeshAxis::tp), given);
    if (cfg.stages != 0 && cfg.stages != mesh.size(MeshAxis::pp))
      throw ConfigError("--stages " + std::to_string(cfg.stages) + " does not match " + given +
                        " (valid: --stages " + std::to_string(mesh.size(MeshAxis::pp)) +
                        ", the pp axis, or leave it out)");
    if (cfg.batch % R != 0)
      throw ConfigError("--batch " + std::to_string(cfg.batch) +
                        " does not split over dp=" + std::to_string(R) + " of " + given +
                        " (valid: a multiple of " + std::to_string(R) + ")");
    if (R > 1 && layout.spec().batchnorm)
      throw ConfigError("--model " + cfg.model + " on " + given +
                        ": each pipeline replica would keep its own BatchNorm statistics "
                        "(valid: dp=1, or a model without +bn)");
  }
  check_sequence_parallel(cfg, mesh, "tp=2");
  if (cfg.dp_zero1 && mesh.size(MeshAxis::dp) < 2)
    throw ConfigError("--dp-zero1 shards the optimizer over pipelines side by side, but " +
                      (cfg.mesh.empty() ? std::string("there is no --mesh")
                                        : "--mesh " + cfg.mesh + " has no dp axis") +
                      " (valid: with a mesh whose dp is 2 or more, e.g. --mesh dp=2,pp=2)");
  if (cfg.stages != 0 && cfg.mesh.empty() && cfg.stages != cfg.world)
    throw ConfigError("--stages " + std::to_string(cfg.stages) + " does not match --world " + W +
                      " (valid: --stages " + W + ", or leave it out: one stage per rank)");
  const int P = pipeline_stages(cfg), V = pipeline_chunks(cfg);
  if (P > L)
    throw ConfigError((!cfg.mesh.empty() ? "--mesh " + cfg.mesh + " (pp=" + std::to_string(P) + ")"
                       : cfg.stages      ? "--stages " + std::to_string(P)
                                         : "--world " + W + " (one stage per rank)") +
                      " is more stages than the " + std::to_string(L) + " layers of " + cfg.model +
                      " (valid: 1 to " + std::to_string(L) +
                      " stages, each holding at least one layer)");
  if (cfg.virtual_stages < 0 || cfg.virtual_stages == 1)
    throw ConfigError("--virtual-stages " + std::to_string(cfg.virtual_stages) +
                      " is invalid (valid: 2 or more model chunks per rank, or leave it out: 2)");
  if (V > 1) {
    const std::string given = "--virtual-stages " + std::to_string(V);
    if (P < 2)
      throw ConfigError(given + " on 1 stage: interleaving deals chunks to 2 or more stages " +
                        "(valid: --world 2 or more, or --strategy 1f1b)");
    if (static_cast<int64_t>(P) * V > L)
      throw ConfigError(given + " on " + std::to_string(P) + " stages cuts " + cfg.model +
                        " into " + std::to_string(static_cast<int64_t>(P) * V) +
                        " chunks, more than its " + std::to_string(L) + " layers (valid: " +
                        (L / P >= 2 ? "--virtual-stages 2 to " + std::to_string(L / P)
                                    : "a model of " + std::to_string(2 * P) +
                                          " or more layers, or at most " + std::to_string(L / 2) +
                                          " stages") +
                        ")");
    if (layout.spec().batchnorm)
      throw ConfigError("--model " + cfg.model + " with " + given +
                        ": a chunk's BatchNorm statistics would live apart from its neighbours' "
                        "(valid: a model without +bn)");
  }
  if (!cfg.partition.empty()) {
    const std::string given = "--partition " + join(cfg.partition);
    const std::string pieces =
        V > 1 ? std::to_string(P) + " stages x " + std::to_string(V) + " chunks"
              : std::to_string(P) + " stages";
    const std::string valid = " (valid: " + std::to_string(P * V) +
                              " layer counts of 1 or more summing to " + std::to_string(L) +
                              ", e.g. " + join(balanced_partition(layout, P * V)) + ")";
    if (static_cast<int>(cfg.partition.size()) != P * V)
      throw ConfigError(given + " has " + std::to_string(cfg.partition.size()) + " entries for " +
                        pieces + valid);
    for (int c : cfg.partition)
      if (c < 1)
        throw ConfigError(given + " gives a stage " + std::to_string(c) + " layers" + valid);
    const int sum = std::accumulate(cfg.partition.begin(), cfg.partition.end(), 0);
    if (sum != L)
      throw ConfigError(given + " sums to " + std::to_string(sum) + " but " + cfg.model + " has " +
                        std::to_string(L) + " layers" + valid);
  }
  const int M = cfg.micro_batches;
  if (R > 1 && M >= 1 && (cfg.batch / R) % M != 0)
    throw ConfigError("--micro-batches " + std::to_string(M) + " does not divide the " +
                      std::to_string(cfg.batch / R) + " rows of each of the dp=" +
                      std::to_string(R) + " pipelines of --batch " + std::to_string(cfg.batch) +
                      " (valid: a divisor of " + std::to_string(cfg.batch / R) + ")");
  if (M < 1 || M > cfg.batch)
    throw ConfigError("--micro-batches " + std::to_string(M) + " is invalid (valid: 1 to --batch " +
                      std::to_string(cfg.batch) + ", dividing it)");
  if (cfg.batch % M != 0)
    throw ConfigError("--batch " + std::to_string(cfg.batch) +
                      " is not divisible by --micro-batches " + std::to_string(M) +
                      " (valid: a multiple of " + std::to_string(M) + ", e.g. " +
                      std::to_string(M * std::max(1, cfg.batch / M)) + ")");
  // The order: a learner's file read and checked now, before any rank starts;
  // a named one's own conditions (interleaved: M a multiple of P).
  run_schedule(cfg);
  // PyTorch's BatchNorm1d refuses a single row in training: no variance to normalise by.
  if (layout.spec().batchnorm && cfg.batch / M < 2)
    throw ConfigError("--model " + cfg.model + ": --batch " + std::to_string(cfg.batch) +
                      " in --micro-batches " + std::to_string(M) + " gives BatchNorm1d " +
                      std::to_string(cfg.batch / M) +
                      " row per micro-batch (valid: 2 or more rows per micro-batch, e.g. "
                      "--micro-batches " +
                      std::to_string(std::max(1, cfg.batch / 2)) + " or fewer)");
}

int pipe_tag(int micro_batch, int boundary, int model_stages, PipeDirection direction) {
  if (micro_batch < 0 || boundary < 0 || boundary >= model_stages)
    throw std::invalid_argument("pipe_tag: micro-batch or boundary out of range");
  return 2 * (micro_batch * model_stages + boundary) + static_cast<int>(direction);
}

// ---- one stage ----------------------------------------------------------------

PipelineStage::PipelineStage(RankEnv& env, const ParamSource& init) : env_(env) {
  // On a mesh (dp=R, pp=P, tp=T), this rank is stage coord(pp) of pipeline
  // coord(dp), holding slice coord(tp) of the stage's layers: it talks to its
  // stages over the pp group (the ranks with its dp and tp coordinates), to
  // its replicas over the dp group and to the other slices of its layers over
  // the tp group. Without one (a test's env), the world is one pipeline.
  const bool meshed = env.mesh != nullptr;
  const int stage = meshed ? env.mesh->coord(env.rank, MeshAxis::pp) : env.rank;
  replicas_ = meshed ? env.mesh->size(MeshAxis::dp) : 1;
  replica_ = meshed ? env.mesh->coord(env.rank, MeshAxis::dp) : 0;
  pp_comm_ = meshed ? env.comm_on(MeshAxis::pp) : env.comm;
  dp_comm_ = meshed ? env.comm_on(MeshAxis::dp) : nullptr;
  tp_comm_ = meshed ? env.comm_on(MeshAxis::tp) : nullptr;
  tp_rank_ = meshed ? env.mesh->coord(env.rank, MeshAxis::tp) : 0;
  // Every rank cuts the model where the whole model's parameter counts say,
  // so the slices of one stage hold the same layers.
  partition_ = pipeline_partition(env.cfg, env.layout);
  micro_batches_ = env.cfg.micro_batches;
  rows_ = env.cfg.batch / replicas_ / micro_batches_;
  first_row_ = replica_ * (env.cfg.batch / replicas_);
  layout_ = &env.layout;
  std::unique_ptr<SlicedParams> sliced;
  if (tp_comm_) {
    // This rank's slice of the model, initialised from the whole model's
    // seeded values: the tp ranks together hold exactly `single`'s weights.
    slice_ = std::make_unique<ModelLayout>(env.layout.spec(),
                                           TensorSlice{env.mesh->size(MeshAxis::tp), tp_rank_});
    layout_ = slice_.get();
    sliced = std::make_unique<SlicedParams>(init, *slice_);
  }
  // One LayerStack per model chunk this rank holds (one, but for interleaved).
  const int V = pipeline_chunks(env.cfg);
  for (int c = 0; c < V; ++c) {
    Chunk ch;
    ch.topo = stage_topology(stage, partition_, V, c);
    ch.boundary_in = ch.topo.first_layer - 1;
    ch.boundary_out = ch.topo.last_layer - 1;
    ch.layers =
        sliced ? std::make_unique<LayerStack>(*layout_, ch.topo.first_layer, ch.topo.last_layer,
                                              env.alloc, env.rec, *sliced, DType::f32, tp_comm_)
               : std::make_unique<LayerStack>(*layout_, ch.topo.first_layer, ch.topo.last_layer,
                                              env.alloc, env.rec, init);
    chunks_.push_back(std::move(ch));
  }
  std::vector<Optimizer::Range> optimized = ranges();
  if (env.cfg.dp_zero1 && dp_comm_) {
    assign_owners();
    std::vector<Optimizer::Range> mine;
    for (size_t i : owned_) mine.push_back(optimized[i]);
    optimized = std::move(mine);
  }
  optimizer_ = std::make_unique<Optimizer>(env.cfg.optimizer, env.alloc, optimized);
}

std::vector<Optimizer::Range> PipelineStage::ranges() const {
  std::vector<Optimizer::Range> all;
  for (const Chunk& c : chunks_)
    for (const Optimizer::Range& r : c.layers->ranges()) all.push_back(r);
  return all;
}

std::vector<float*> PipelineStage::param_ptrs() {
  std::vector<float*> all;
  for (Chunk& c : chunks_)
    for (float* p : c.layers->param_ptrs()) all.push_back(p);
  return all;
}

std::vector<float*> PipelineStage::grad_ptrs() {
  std::vector<float*> all;
  for (Chunk& c : chunks_)
    for (float* g : c.layers->grad_ptrs_mut()) all.push_back(g);
  return all;
}

// ZeRO-1 over the dp axis, by whole parameters as PyTorch's
// ZeroRedundancyOptimizer shards them: the largest first, each to the replica
// holding the fewest values so far (the lowest on a tie). Every replica
// computes the same table from the same layout.
void PipelineStage::assign_owners() {
  const std::vector<Optimizer::Range> all = ranges();
  std::vector<size_t> order(all.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return all[a].numel > all[b].numel; });
  std::vector<size_t> load(static_cast<size_t>(replicas_), 0);
  owner_.assign(all.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner_[i] = static_cast<int>(least);
    load[static_cast<size_t>(least)] += all[i].numel;
  }
  for (size_t i = 0; i < owner_.size(); ++i)
    if (owner_[i] == replica_) owned_.push_back(i);
}

RankState PipelineStage::rank_state() {
  // The chunks' parameters one after another, the optimizer's order. (A
  // model with BatchNorm buffers runs one chunk: validate_pipeline.)
  RankState st = chunks_.front().layers->rank_state(optimizer_.get(), nullptr);
  for (size_t c = 1; c < chunks_.size(); ++c) {
    const RankState more = chunks_[c].layers->rank_state(optimizer_.get(), nullptr);
    st.offset.insert(st.offset.end(), more.offset.begin(), more.offset.end());
    st.count.insert(st.count.end(), more.count.begin(), more.count.end());
    st.weight.insert(st.weight.end(), more.weight.begin(), more.weight.end());
    st.weight_at.insert(st.weight_at.end(), more.weight_at.begin(), more.weight_at.end());
  }
  st.slice = slice_.get();
  if (owner_.empty()) return st;
  // Only this replica's parameters: the optimizer's ranges, in the same order.
  RankState mine = st;
  mine.offset.clear();
  mine.count.clear();
  mine.weight.clear();
  mine.weight_at.clear();
  for (size_t i : owned_) {
    mine.offset.push_back(st.offset[i]);
    mine.count.push_back(st.count[i]);
    mine.weight.push_back(st.weight[i]);
    mine.weight_at.push_back(st.weight_at[i]);
  }
  return mine;
}

void PipelineStage::begin_step(int step) {
  step_ = step;
  loss_ = 0;
  for (auto& [peer, posted] : recv_posted_) posted = 0;
  for (Chunk& c : chunks_) c.layers->zero_grads();
}

int PipelineStage::peer_of(const RecvKey& key) const {
  const StageTopology& t = chunks_.at(static_cast<size_t>(key.chunk)).topo;
  return key.direction == PipeDirection::activation ? t.prev : t.next;
}

void PipelineStage::post_recv(const RecvKey& key) {
  if (recvs_.count(key)) return;
  const int peer = peer_of(key);
  if (peer < 0) return;  // the first model stage reads the batch, the last the loss
  const std::vector<RecvKey>& order = recv_order_.at(peer);
  size_t& posted = recv_posted_[peer];
  if (std::find(order.begin() + static_cast<std::ptrdiff_t>(posted), order.end(), key) ==
      order.end())
    return;  // posted already (and taken)
  // Posting message n from a neighbour posts every earlier one not yet posted:
  // receive n here is then the neighbour's send n.
  for (; posted < order.size(); ++posted) {
    const RecvKey& k = order[posted];
    const Chunk& c = chunks_.at(static_cast<size_t>(k.chunk));
    const bool activation = k.direction == PipeDirection::activation;
    const int boundary = activation ? c.topo.model_stage - 1 : c.topo.model_stage;
    PendingRecv p;
    p.buffer = env_.alloc.alloc(
        mb_name(activation ? "pipeline.input" : "pipeline.grad_output", k.mb),
        activation ? MemCategory::activations : MemCategory::temporary,
        {rows_, static_cast<int64_t>(
                    layout_->act_numel(activation ? c.topo.first_layer : c.topo.last_layer))});
    p.work = pp_comm_->recv_async(
        p.buffer.raw(), p.buffer.bytes(), peer,
        pipe_tag(k.mb, boundary, static_cast<int>(partition_.size()), k.direction),
        CommMeta{activation ? c.boundary_in : c.boundary_out, k.mb});
    recvs_.emplace(k, std::move(p));
    if (k == key) {
      ++posted;
      break;
    }
  }
}

Tensor PipelineStage::wait_recv(const RecvKey& key) {
  post_recv(key);
  auto it = recvs_.find(key);
  if (it == recvs_.end()) throw std::logic_error("pipeline: receive for micro-batch not posted");
  it->second.work.wait();
  Tensor t = std::move(it->second.buffer);
  recvs_.erase(it);
  return t;
}

void PipelineStage::send(const Chunk& c, const void* borrowed, Tensor owned, int mb,
                         PipeDirection direction) {
  const bool activation = direction == PipeDirection::activation;
  PendingSend s;
  s.buffer = std::move(owned);
  const void* data = s.buffer.empty() ? borrowed : s.buffer.raw();
  // An activation leaves through this chunk's output boundary, a gradient
  // through its input boundary: rows × the activation's size there.
  const size_t values = layout_->act_numel(activation ? c.topo.last_layer : c.topo.first_layer);
  const int boundary = activation ? c.topo.model_stage : c.topo.model_stage - 1;
  s.work =
      pp_comm_->send_async(data, static_cast<size_t>(rows_) * values * sizeof(float),
                           activation ? c.topo.next : c.topo.prev,
                           pipe_tag(mb, boundary, static_cast<int>(partition_.size()), direction),
                           CommMeta{activation ? c.boundary_out : c.boundary_in, mb});
  sends_.push_back(std::move(s));
}

// Called before every forward and backward: the sends of the previous one are
// waited for here, not at the flush, so that their spans end where the
// neighbour took the data and their buffers go back to the allocator. The
// neighbour posts its receives early, so this rarely waits.
void PipelineStage::settle_sends() {
  for (PendingSend& s : sends_) s.work.wait();
  sends_.clear();
}

void PipelineStage::run(const Schedule& schedule) {
  const int me = topology().rank;
  const std::vector<Action>& actions = schedule.ranks.at(static_cast<size_t>(me));
  const auto key = [](const Receive& m) {
    return RecvKey{m.gradient ? PipeDirection::gradient : PipeDirection::activation, m.micro_batch,
                   m.chunk};
  };
  if (early_.empty()) {
    // When this rank posts its receives (plan_receives): early enough that
    // no neighbour waits forever for this rank to take its send.
    const ReceivePlan plan = plan_receives(schedule);
    for (int peer = 0; peer < static_cast<int>(plan.order[me].size()); ++peer) {
      std::vector<RecvKey> order;
      for (const Receive& m : plan.order[me][peer]) order.push_back(key(m));
      if (!order.empty()) recv_order_[peer] = std::move(order);
    }
    early_.clear();
    for (const std::vector<Receive>& before : plan.early[me]) {
      early_.emplace_back();
      for (const Receive& m : before) early_.back().push_back(key(m));
    }
  }
  // A B whose W the line runs too is split (zero bubble): B computes the
  // input's gradient, W later the weights'. Without a W it is the whole backward.
  for (Chunk& c : chunks_) c.split.assign(static_cast<size_t>(micro_batches_), false);
  for (const Action& a : actions)
    if (a.kind == ActionKind::weight)
      chunks_.at(static_cast<size_t>(a.chunk)).split.at(static_cast<size_t>(a.micro_batch)) = true;
  for (size_t i = 0; i < actions.size(); ++i) {
    // Posted before this action waits for the last one's sends: the plan's
    // early receives (the next B's gradient, the next F's input, ...).
    for (const RecvKey& k : early_.at(i)) post_recv(k);
    const Action& a = actions[i];
    if (a.kind == ActionKind::forward)
      forward(a.micro_batch, a.chunk);
    else if (a.kind == ActionKind::backward)
      backward(a.micro_batch, a.chunk);
    else
      weight(a.micro_batch, a.chunk);
  }
}

void PipelineStage::forward(int mb, int chunk) {
  Chunk& c = chunks_.at(static_cast<size_t>(chunk));
  // The last action's sends are waited for first (run() posted this rank's
  // early receives before): a --recompute output they free is gone before
  // this input arrives.
  settle_sends();
  Tensor input;
  if (c.topo.is_first) {
    // Stage 0 reads its micro-batch's rows of x (the targets are the last stage's business).
    input = env_.alloc.alloc(mb_name("batch.x", mb), MemCategory::activations,
                             {rows_, static_cast<int64_t>(layout_->act_numel(0))});
    ScopedSpan span(env_.rec, Lane::compute, SpanKind::data, -1, mb);
    span.set_made_ahead(
        env_.data.load(env_.device, step_, first_row_ + mb * rows_, rows_, input.raw(), nullptr));
  } else {
    input = wait_recv({PipeDirection::activation, mb, chunk});
  }
  const void* in = input.raw();
  c.inputs[mb] = std::move(input);  // the first layer's backward reads it

  if (!env_.cfg.recompute) {
    const void* out = c.layers->forward(in, rows_, mb);
    // Sent straight from the layer's output, which lives until backward(mb).
    if (c.topo.is_last)
      compute_loss(c, out, mb);
    else
      send(c, out, Tensor(), mb, PipeDirection::activation);
  } else {
    // --recompute: the layers keep only the stage input; the output is dropped
    // once the loss has read it, or once its send has been waited for.
    Tensor out = c.layers->forward_keep_input(in, rows_, mb);
    if (c.topo.is_last)
      compute_loss(c, out.raw(), mb);
    else
      send(c, nullptr, std::move(out), mb, PipeDirection::activation);
  }
}

void PipelineStage::compute_loss(Chunk& c, const void* pred, int mb) {
  const ModelLayout& m = *layout_;
  Tensor y = env_.alloc.alloc(mb_name("batch.y", mb), MemCategory::temporary,
                              {rows_, static_cast<int64_t>(m.target_numel())});
  {
    ScopedSpan span(env_.rec, Lane::compute, SpanKind::data, -1, mb);
    Tensor unused_x = env_.alloc.alloc(mb_name("batch.x", mb), MemCategory::temporary,
                                       {rows_, static_cast<int64_t>(m.act_numel(0))});
    span.set_made_ahead(env_.data.load(env_.device, step_, first_row_ + mb * rows_, rows_,
                                       unused_x.raw(), y.raw()));
  }
  // Divided by the global batch's size, not the micro-batch's: the
  // micro-batches' gradients then add up to exactly the full-batch gradient.
  Tensor dpred = env_.alloc.alloc(mb_name("loss.grad", mb), MemCategory::temporary,
                                  {rows_, static_cast<int64_t>(m.act_numel(m.num_layers()))});
  ScopedSpan span(env_.rec, Lane::compute, SpanKind::loss, -1, mb);
  loss_ += m.family().loss(env_.alloc, fp32_, m, dpred.raw(), pred, y.raw(), rows_, env_.cfg.batch,
                           tp_comm_, mb);
  c.loss_grads[mb] = std::move(dpred);
}

void PipelineStage::backward(int mb, int chunk) {
  Chunk& c = chunks_.at(static_cast<size_t>(chunk));
  settle_sends();  // (see forward)
  Tensor dout;
  if (c.topo.is_last) {
    auto it = c.loss_grads.find(mb);
    if (it == c.loss_grads.end()) throw std::logic_error("pipeline: backward before forward");
    dout = std::move(it->second);
    c.loss_grads.erase(it);
  } else {
    dout = wait_recv({PipeDirection::gradient, mb, chunk});
  }
  if (env_.cfg.recompute) c.layers->recompute(mb);
  const bool split = static_cast<size_t>(mb) < c.split.size() && c.split[mb];
  // A split backward is B alone: the weight gradients wait for weight(mb),
  // and so does the stage input, which the first layer's W reads.
  Tensor din = split ? c.layers->backward_input(dout.raw(), mb, !c.topo.is_first)
                     : c.layers->backward(dout.raw(), mb, !c.topo.is_first);
  dout.reset();
  if (!split) c.inputs.erase(mb);
  if (!c.topo.is_first) send(c, nullptr, std::move(din), mb, PipeDirection::gradient);
}

void PipelineStage::weight(int mb, int chunk) {
  settle_sends();
  Chunk& c = chunks_.at(static_cast<size_t>(chunk));
  c.layers->backward_weights(mb);
  c.inputs.erase(mb);
}

LossShare PipelineStage::finish_step() {
  bool left = !recvs_.empty();
  for (const Chunk& c : chunks_) left = left || !c.inputs.empty() || !c.loss_grads.empty();
  if (left)
    throw std::logic_error("pipeline: the schedule left micro-batches in flight at the flush");
  settle_sends();
  sum_tied_grads();
  if (!owner_.empty()) {
    zero1_step();
  } else {
    reduce_over_replicas();
    ScopedSpan span(env_.rec, Lane::compute, SpanKind::optimizer);
    const std::vector<float*> grads = grad_ptrs();
    optimizer_->step(param_ptrs(), std::vector<const float*>(grads.begin(), grads.end()));
  }
  // Every tp rank of the last stage computed the same loss: the first reports it.
  if (!chunks_.back().topo.is_last || tp_rank_ != 0) return {};
  // This pipeline's loss is its rows' share of the global mean (divided by the
  // whole batch), so the replicas' shares add up: each counts its own rows.
  return {loss_ * env_.cfg.batch, env_.cfg.batch / replicas_};
}

// On a mesh with dp > 1: each pipeline computed the gradient of its own rows
// (each divided by the whole batch), so the sum over the dp group — the same
// stage of every pipeline — is the whole batch's gradient, as in ddp. One
// all-reduce per parameter, all issued before any is waited for.
void PipelineStage::reduce_over_replicas() {
  if (!dp_comm_) return;
  const std::vector<float*> grads = grad_ptrs();
  const std::vector<Optimizer::Range> all = ranges();
  std::vector<Work> works;
  works.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i)
    works.push_back(dp_comm_->all_reduce_async(grads[i], all[i].numel, DType::f32));
  for (Work& w : works) w.wait();
}

// ZeRO-1 over dp: each parameter's gradient is reduced to the replica that
// owns it (the whole batch's gradient, there only), the owner updates it with
// the optimizer state only it keeps, and broadcasts the new values to the
// other replicas. What is saved is the optimizer state, 1/dp of it on each
// replica. The bytes grow: Gloo's reduce is a ring reduce-scatter and then a
// gather to the root, so on 2 replicas a reduce and a broadcast move 1.25
// times the all-reduce's (a flat reduce-scatter and all-gather would not).
void PipelineStage::zero1_step() {
  const std::vector<float*> grads = grad_ptrs();
  const std::vector<float*> params = param_ptrs();
  const std::vector<Optimizer::Range> all = ranges();
  std::vector<Work> works;
  works.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i)
    works.push_back(dp_comm_->reduce_async(grads[i], all[i].numel, DType::f32, owner_[i]));
  for (Work& w : works) w.wait();
  works.clear();
  {
    ScopedSpan span(env_.rec, Lane::compute, SpanKind::optimizer);
    std::vector<float*> p;
    std::vector<const float*> g;
    for (size_t i : owned_) {
      p.push_back(params[i]);
      g.push_back(grads[i]);
    }
    optimizer_->step(p, g);
  }
  for (size_t i = 0; i < params.size(); ++i)
    works.push_back(dp_comm_->broadcast_async(params[i], all[i].numel, DType::f32, owner_[i]));
  for (Work& w : works) w.wait();
}

// A tied pair (gpt's token embedding on the first stage, lm_head on the last)
// lives on two stages, as in Megatron: the two stages swap their gradients
// and each adds the other's, so both copies take the same update. The sum
// a + b is the same bits on both sides (addition commutes).
void PipelineStage::sum_tied_grads() {
  const ModelLayout& m = *layout_;
  if (!m.has_tied()) return;
  // The chunk of this rank holding `layer`, or null.
  auto chunk_of = [&](int layer) -> Chunk* {
    for (Chunk& c : chunks_)
      if (layer >= c.topo.first_layer && layer < c.topo.last_layer) return &c;
    return nullptr;
  };
  const int P = topology().stages;
  auto rank_of = [&](int layer) {
    int end = 0;
    for (size_t s = 0; s < partition_.size(); ++s)
      if (layer < (end += partition_[s])) return static_cast<int>(s) % P;
    throw std::logic_error("pipeline: layer past the partition");
  };
  for (int i = 0; i < static_cast<int>(m.params().size()); ++i) {
    const ParamInfo& p = m.params()[i];
    if (p.tied_to < 0) continue;
    const int home_layer = m.params()[p.tied_to].layer;
    Chunk* home = chunk_of(home_layer);
    Chunk* away = chunk_of(p.layer);
    if (home && home == away) {
      home->layers->sum_tied_grads();
      continue;
    }
    if (!home && !away) continue;
    float* mine =
        static_cast<float*>(home ? home->layers->grad_of(p.tied_to) : away->layers->grad_of(i));
    Tensor theirs = env_.alloc.alloc(p.name + "[tied].grad", MemCategory::comm_buffers, p.numel);
    // (The two ends never share a rank across chunks: model stage 0 is rank 0's,
    // the last rank P − 1's.)
    if (home && away) throw std::logic_error("pipeline: a tied pair in two chunks of one rank");
    const int peer = home ? rank_of(p.layer) : rank_of(home_layer);
    Work sent = pp_comm_->send_async(mine, p.numel * sizeof(float), peer, kTiedGradTag);
    Work got = pp_comm_->recv_async(theirs.raw(), p.numel * sizeof(float), peer, kTiedGradTag);
    got.wait();
    sent.wait();
    env_.device.add(mine, theirs.raw(), DType::f32, p.numel);
  }
}

std::vector<float> PipelineStage::export_params() {
  const ModelLayout& layout = *layout_;
  // A chunk's layers are one contiguous run of the parameters (weight, bias,
  // weight, ...) and one of the BatchNorm buffers, which follow all parameters.
  struct Slices {
    size_t params_begin, params_count, buffers_begin, buffers_count;
  };
  auto slices = [&](const StageTopology& t) {
    return Slices{layout.layer_begin(t.first_layer),
                  layout.layer_begin(t.last_layer) - layout.layer_begin(t.first_layer),
                  layout.buffer_begin(t.first_layer),
                  layout.buffer_begin(t.last_layer) - layout.buffer_begin(t.first_layer)};
  };
  // Chunk c's slices travel under their own tags.
  auto params_tag = [](int c) { return c == 0 ? kGatherParamsTag : kGatherParamsTag + 2 + 2 * c; };
  auto buffers_tag = [](int c) {
    return c == 0 ? kGatherBuffersTag : kGatherParamsTag + 3 + 2 * c;
  };
  // Every pipeline holds the same weights: the first one's are the export.
  if (replica_ != 0) return {};
  const int me = topology().rank, P = topology().stages, V = chunks();
  if (me != 0) {
    for (int c = 0; c < V; ++c) {
      const Slices mine = slices(chunks_[c].topo);
      ExportBuffer params(env_.alloc, mine.params_count), buffers(env_.alloc, mine.buffers_count);
      float* p = params.at(0, mine.params_count);
      float* b = buffers.at(0, mine.buffers_count);
      if (params.keeps()) chunks_[c].layers->copy_state_slices(p, b);
      pp_comm_->send(p, mine.params_count * sizeof(float), 0, params_tag(c));
      if (mine.buffers_count)
        pp_comm_->send(b, mine.buffers_count * sizeof(float), 0, buffers_tag(c));
    }
    return {};
  }
  ExportBuffer flat(env_.alloc, layout.state_total());
  for (Chunk& c : chunks_) c.layers->copy_params_to(flat);
  std::vector<Work> works;
  for (int r = 1; r < P; ++r)
    for (int c = 0; c < V; ++c) {
      const Slices theirs = slices(stage_topology(r, partition_, V, c));
      // (On a meta device nothing is kept, and the receives land nowhere.)
      works.push_back(pp_comm_->recv_async(flat.at(theirs.params_begin, theirs.params_count),
                                           theirs.params_count * sizeof(float), r, params_tag(c)));
      if (theirs.buffers_count)
        works.push_back(pp_comm_->recv_async(flat.at(theirs.buffers_begin, theirs.buffers_count),
                                             theirs.buffers_count * sizeof(float), r,
                                             buffers_tag(c)));
    }
  for (Work& w : works) w.wait();
  if (!tp_comm_) return flat.take();
  return gather_slices(flat);
}

// Under tensor parallelism the first stage now holds its slice of the whole
// model (the pp gather above ran within its tp coordinate); the tp group's
// first rank puts every slice where it belongs in the full state vector.
std::vector<float> PipelineStage::gather_slices(ExportBuffer& mine) {
  return gather_tensor_slices(*tp_comm_, env_.alloc, *layout_, mine.at(0, layout_->state_total()));
}

}  // namespace shardlab
