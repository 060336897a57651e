// The projection: each rank's recorded program replayed, in time order across
// ranks, on dedicated devices and a modelled link (a discrete-event simulation).
//
// A rank's program is read off its recording as points on its own CPU clock:
// span boundaries, op issues, and blocking intervals (waits on ops, barriers of
// shared memory, synchronous copies). Between two points the projected clock
// advances by the CPU time the thread spent between them; a blocking interval
// instead lasts until what it waited for is done on the projected devices. So
// computing costs what it cost the thread, whoever shared its core, and waiting
// costs what the model of the cluster says.
#include "core/predict/projection.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>

#include "core/config.h"
#include "core/model/model.h"

namespace shardlab {
namespace {

enum class ItemType : uint8_t {
  step_begin,  // the order of equal times: a step opens first ...
  span_end,
  issue,
  block,  // wait, sync or transfer
  span_begin,
  step_end,  // ... and closes last
};

enum class BlockKind : uint8_t { wait, sync, transfer };

struct Item {
  ItemType type;
  BlockKind block = BlockKind::wait;
  int64_t wall = 0;            // orders the items of one rank
  int64_t pos_b = 0, pos = 0;  // the program clock at its begin and end
  uint64_t ref = 0;            // span index, op id, sync ordinal or step
};

// Seconds a collective of `bytes` (the full buffer) takes on `n` devices in a
// ring, and the bytes each device puts on the wire.
double collective_seconds(SpanKind k, double bytes, int n, const Link& link) {
  if (n <= 1) return 0;
  const double bw = link.bytes_per_s, lat = link.latency_s, f = double(n - 1) / n;
  switch (k) {
    case SpanKind::all_reduce:
      return 2 * f * bytes / bw + 2 * (n - 1) * lat;
    case SpanKind::all_gather:
    case SpanKind::reduce_scatter:
      return f * bytes / bw + (n - 1) * lat;
    case SpanKind::broadcast:
    case SpanKind::reduce:  // a pipelined chain: the bytes once, a latency per hop
      return bytes / bw + (n - 1) * lat;
    case SpanKind::barrier:
      return 2 * (n - 1) * lat;
    default:
      return 0;
  }
}

int64_t collective_sent(SpanKind k, int64_t bytes, int n) {
  if (n <= 1) return 0;
  switch (k) {
    case SpanKind::all_reduce:
      return 2 * (n - 1) * bytes / n;
    case SpanKind::all_gather:
    case SpanKind::reduce_scatter:
      return (n - 1) * bytes / n;
    case SpanKind::broadcast:
    case SpanKind::reduce:
      return bytes;
    default:
      return 0;
  }
}

struct Op {
  int rank = 0;
  size_t span = 0;  // its comm span in the rank's snapshot
  double issued = -1, done = -1;
  double ready = -1;    // when the other side got there (send issued, last arrival)
  double arrival = -1;  // a recv: when its message has arrived
  double send_issued = -1;
  std::vector<int> waiters;  // ranks blocked on it
};

struct Collective {
  int arrived = 0;
  double last_arrival = 0;
  int64_t bytes = 0;
  SpanKind kind = SpanKind::other;
  std::vector<uint64_t> op_of_rank;
};

struct RankSim {
  std::vector<Item> items;
  size_t pc = 0;
  double now = 0;
  int64_t anchor = 0;
  bool started = false;
  // Collectives issued so far, per communicator group (Span::group): a group's
  // n-th joins the n-th of every rank of that group.
  std::map<int, int> collectives;
  std::unordered_map<size_t, double> open;  // span index -> projected begin
  int step = -1;
  double step_begin = 0;
  // Inside a compute span costed at its steady-state time: program positions
  // up to scale_until advance the clock `scale` times as fast.
  double scale = 1;
  int64_t scale_until = 0;
  double wait_begin = 0;  // of the block in progress
  int64_t wait_pos_end = 0;
  // Over the steps in the breakdown.
  double idle = 0, exposed = 0;
  // A link that moves bytes with the host's CPU (loopback): transfer time this
  // rank's core still owes; computing meanwhile runs at half speed.
  double debt = 0;
  int64_t sent = 0;
};

// Which compute spans cost the same (see Simulation::steady_costs): a layer's
// op by the shape of the layer, any other op by the rank's replica group.
// rule, group or shape, kind, layer (a layer's op: 1 for a split B), mb
using CostKey = std::tuple<int, int, int, int, int>;

class OpCostKeys {
 public:
  OpCostKeys(const std::vector<Recorder::Snapshot>& snaps, const std::vector<int>& shape_of_layer)
      : shape_of_layer_(shape_of_layer) {
    const int world = static_cast<int>(snaps.size());
    std::vector<std::set<std::pair<int, int>>> layers(world);
    for (int r = 0; r < world; ++r)
      for (const Span& s : snaps[r].spans)
        if (s.lane == Lane::compute && s.op == 0 && s.layer >= 0)
          layers[r].insert({static_cast<int>(s.kind), s.layer});
    // A B whose W the rank runs too is the input gradient alone (zero
    // bubble): cheaper than a whole backward of the same layer, so costed apart.
    split_.resize(world);
    for (int r = 0; r < world; ++r)
      for (const Span& s : snaps[r].spans)
        if (s.lane == Lane::compute && s.kind == SpanKind::weight && s.layer >= 0)
          split_[r].insert({s.step, s.micro_batch, s.layer});
    group_.resize(world);
    for (int r = 0; r < world; ++r) {
      group_[r] = r;
      for (int q = 0; q < r; ++q)
        if (layers[q] == layers[r]) {
          group_[r] = group_[q];
          break;
        }
    }
  }

  CostKey key(int r, const Span& s) const {
    const int kind = static_cast<int>(s.kind);
    if (s.layer >= 0 && s.layer < static_cast<int>(shape_of_layer_.size())) {
      const bool split = s.kind == SpanKind::backward &&
                         split_[static_cast<size_t>(r)].count({s.step, s.micro_batch, s.layer});
      return {0, shape_of_layer_[s.layer], kind, split ? 1 : 0, 0};
    }
    return {1, group_[r], kind, s.layer, s.micro_batch};
  }

  // The CPU time of every compute span from `first_step` on, by key.
  void collect(const std::vector<Recorder::Snapshot>& snaps, int first_step,
               std::map<CostKey, std::vector<double>>& into) const {
    for (size_t r = 0; r < snaps.size(); ++r)
      for (const Span& s : snaps[r].spans)
        if (s.lane == Lane::compute && s.op == 0 && s.step >= first_step && s.cpu_begin_ns >= 0)
          into[key(static_cast<int>(r), s)].push_back(
              static_cast<double>(s.cpu_end_ns - s.cpu_begin_ns));
  }

 private:
  const std::vector<int>& shape_of_layer_;
  std::vector<int> group_;
  std::vector<std::set<std::tuple<int, int, int>>> split_;  // per rank: (step, mb, layer) with a W
};

// The first step a projection's breakdown counts: all but the first (warm-up)
// when the run timed at least two.
int first_step_in_breakdown(const RunResult& run) {
  const int first = run.resumed_after_step;
  return run.cfg.steps - first >= 2 ? first + 1 : first;
}

class Simulation {
 public:
  Simulation(const RunResult& run, const ProjectionOptions& o, Projection& out)
      : run_(run),
        link_(o.link),
        world_(run.cfg.world),
        with_data_(o.with_data),
        raw_costs_(o.raw_costs),
        pool_(o.pool_costs_with),
        out_(out) {}

  void run() {
    snaps_.resize(world_);
    sims_.resize(world_);
    for (int r = 0; r < world_; ++r) snaps_[r] = run_.recorders[r]->snapshot();
    use_cpu_ = true;
    bool any_marks = false;
    for (int r = 0; r < world_; ++r) {
      for (const Span& s : snaps_[r].spans)
        if (s.lane == Lane::compute && s.cpu_begin_ns < 0) use_cpu_ = false;
      for (const Mark& m : snaps_[r].marks) {
        if (m.cpu_begin_ns < 0) use_cpu_ = false;
        if (m.kind == MarkKind::step) any_marks = true;
      }
    }
    if (!any_marks)
      throw ConfigError(
          "this run has no program marks (where each op was issued and waited for, where each "
          "step began): it was recorded before Shardlab 'project' existed (valid: a recording or "
          "trace written by this version; run it again)");
    out_.compute_source = use_cpu_ ? "thread CPU time" : "span wall time (no CPU clocks recorded)";
    for (int r = 0; r < world_; ++r) build(r);
    for (int r = 0; r < world_; ++r) {
      group_ranks_[0].push_back(r);
      for (const Span& s : snaps_[r].spans)
        if (s.group != 0 && is_collective(s.kind)) {
          std::vector<int>& g = group_ranks_[s.group];
          if (g.empty() || g.back() != r) g.push_back(r);
        }
    }
    steady_.resize(world_);
    if (use_cpu_ && !raw_costs_) steady_costs();
    out_.run.recorders.clear();
    for (int r = 0; r < world_; ++r) out_.run.recorders.push_back(std::make_shared<Recorder>(r));
    simulate();
  }

  std::map<int, std::vector<double>> step_ms;  // step -> per rank
  std::map<std::pair<int, int>, int64_t> traffic;

 private:
  int64_t pos_of(int64_t cpu, int64_t wall) const { return use_cpu_ ? cpu : wall; }

  void build(int r) {
    const Recorder::Snapshot& snap = snaps_[r];
    std::vector<Item>& items = sims_[r].items;
    for (size_t i = 0; i < snap.spans.size(); ++i) {
      const Span& s = snap.spans[i];
      if (s.op != 0) {
        Op& op = ops_[key(r, s.op)];
        op.rank = r;
        op.span = i;
        if (s.flow_id != 0 && s.kind == SpanKind::recv) recv_of_flow_[s.flow_id] = key(r, s.op);
        continue;
      }
      if (s.lane == Lane::compute) {
        items.push_back({ItemType::span_begin, BlockKind::wait, s.t_begin_ns,
                         pos_of(s.cpu_begin_ns, s.t_begin_ns), pos_of(s.cpu_begin_ns, s.t_begin_ns),
                         i});
        items.push_back({ItemType::span_end, BlockKind::wait, s.t_end_ns,
                         pos_of(s.cpu_end_ns, s.t_end_ns), pos_of(s.cpu_end_ns, s.t_end_ns), i});
      } else if (s.peer >= 0 && s.peer != r) {
        // A copy the program made itself (dp's replicas and slices): a transfer.
        items.push_back({ItemType::block, BlockKind::transfer, s.t_begin_ns,
                         pos_of(s.cpu_begin_ns, s.t_begin_ns), pos_of(s.cpu_end_ns, s.t_end_ns),
                         i});
      }
    }
    for (const Mark& m : snap.marks) {
      const int64_t b = pos_of(m.cpu_begin_ns, m.t_begin_ns), e = pos_of(m.cpu_end_ns, m.t_end_ns);
      switch (m.kind) {
        case MarkKind::step:
          items.push_back({ItemType::step_begin, BlockKind::wait, m.t_begin_ns, b, b, m.id});
          items.push_back({ItemType::step_end, BlockKind::wait, m.t_end_ns, e, e, m.id});
          break;
        case MarkKind::issue:
          if (ops_.count(key(r, m.id)))
            items.push_back({ItemType::issue, BlockKind::wait, m.t_begin_ns, b, e, m.id});
          break;
        case MarkKind::wait:
          if (ops_.count(key(r, m.id)))
            items.push_back({ItemType::block, BlockKind::wait, m.t_begin_ns, b, e, m.id});
          break;
        case MarkKind::sync:
          items.push_back({ItemType::block, BlockKind::sync, m.t_begin_ns, b, e, m.id});
          break;
      }
    }
    std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
      if (a.wall != b.wall) return a.wall < b.wall;
      return static_cast<int>(a.type) < static_cast<int>(b.type);
    });
  }

  static uint64_t key(int rank, uint64_t op) { return (uint64_t(rank) << 48) ^ op; }

  // Moves rank r's clock to program position `pos`.
  void advance(RankSim& s, int64_t pos) {
    if (!s.started) {
      s.anchor = pos;
      s.started = true;
    }
    if (pos <= s.anchor) return;
    double delta = 0;
    if (s.anchor < s.scale_until) {
      const int64_t inside = std::min(pos, s.scale_until);
      delta += static_cast<double>(inside - s.anchor) * s.scale;
      s.anchor = inside;
    }
    delta += static_cast<double>(pos - s.anchor);
    s.anchor = pos;
    // Sharing the core with a transfer in flight: both go at half speed.
    const double shared = std::min(s.debt, delta);
    s.debt -= shared;
    s.now += delta + shared;
  }

  void owe(int r, double ns) {
    if (link_.host_cpu) sims_[r].debt += ns;
  }

  // Each compute op's steady-state cost: the median over the breakdown's steps
  // of the same computation. One op's CPU time varies 20-30% from step to step
  // on a busy machine, and a whole rank can run 25% slower than another for a
  // run (its core shared with other threads, whose traffic evicts its caches);
  // a dedicated device repeats an op far more closely, and identical devices
  // doing identical work take the same time. Costed apart, the rank that
  // happened to be slower here would make the others wait for it at every
  // collective and hand-over: a bubble of this machine, not of the strategy,
  // and communication the strategy hides would read as exposed on the faster
  // ranks. So samples are pooled over everything that computes the same thing:
  //  - a layer's forward or backward, over the layers of the same shapes (the
  //    blocks of a GPT, the hidden layers of an MLP; the first and last layers
  //    apart, as they skip an input gradient or an activation), over the
  //    micro-batches and over the ranks;
  //  - any other op (loss, optimizer, data) over the rank's replicas: ranks
  //    that run the same layers (data-parallel peers, one shard group).
  //    Pipeline stages run different layers, so their optimizer steps, of
  //    different sizes, are costed apart.
  // A layer kind the model cannot describe (a recording whose data file is
  // gone) falls back to the replica rule.
  //
  // Runs of the same work (same_work: they differ only in when they
  // communicate) can be costed together: the op costs of a compare pair come
  // from both, so the difference between their projections is the schedule's
  // and not this machine's, whose speed drifts by up to 1.5x between two runs
  // a second apart (other tenants of the host).
  void steady_costs() {
    std::vector<int> shape_of_layer;  // layer -> id of its shape
    try {
      const ModelLayout layout = make_layout(run_.cfg);
      std::map<std::string, int> ids;
      for (int l = 0; l < layout.num_layers(); ++l) {
        std::string sig = layout.layers()[l].kind + (l == 0 ? " first" : "") +
                          (l == layout.num_layers() - 1 ? " last" : "");
        for (int k = 0; k < layout.param_count(l); ++k) {
          sig += " (";
          for (int64_t d : layout.params()[layout.first_param(l) + k].shape)
            sig += std::to_string(d) + ",";
          sig += ")";
        }
        sig += " buffers " + std::to_string(layout.buffer_begin(l + 1) - layout.buffer_begin(l));
        for (int boundary : {l, l + 1}) {
          sig += " [";
          for (int64_t d : layout.act_shape(boundary)) sig += std::to_string(d) + ",";
          sig += "]";
        }
        shape_of_layer.push_back(ids.emplace(sig, static_cast<int>(ids.size())).first->second);
      }
    } catch (const std::exception&) {
      shape_of_layer.clear();
    }
    std::map<CostKey, std::vector<double>> costs;
    const OpCostKeys own(snaps_, shape_of_layer);
    own.collect(snaps_, out_.first_step_in_breakdown, costs);
    for (const RunResult* other : pool_) {
      std::vector<Recorder::Snapshot> snaps;
      for (const auto& rec : other->recorders) snaps.push_back(rec->snapshot());
      OpCostKeys(snaps, shape_of_layer).collect(snaps, first_step_in_breakdown(*other), costs);
    }
    std::map<CostKey, double> steady;
    for (auto& [k, v] : costs)
      if (v.size() >= 3) steady[k] = median(v);
    for (int r = 0; r < world_; ++r) {
      const std::vector<Span>& spans = snaps_[r].spans;
      std::vector<double>& out = steady_[r];
      out.assign(spans.size(), -1.0);
      for (size_t i = 0; i < spans.size(); ++i) {
        const Span& s = spans[i];
        if (s.lane != Lane::compute || s.step < 0 || s.cpu_begin_ns < 0) continue;
        auto it = steady.find(own.key(r, s));
        if (it != steady.end()) out[i] = it->second;
      }
    }
  }

  bool in_breakdown(const RankSim& s) const { return s.step >= out_.first_step_in_breakdown; }

  void emit(int r, const Span& original, double begin, double end) {
    Span s = original;
    s.t_begin_ns = std::llround(begin);
    s.t_end_ns = std::llround(std::max(begin, end));
    s.cpu_begin_ns = s.cpu_end_ns = -1;
    out_.run.recorders[r]->add_span(s);
  }

  void count_sent(int src, int dst, int64_t bytes) {
    RankSim& s = sims_[src];
    if (!in_breakdown(s) || bytes <= 0) return;
    s.sent += bytes;
    traffic[{src, dst}] += bytes;
  }

  // A port carries one transfer at a time in each direction.
  double transfer(int src, int dst, int64_t bytes, double ready) {
    const double wire = static_cast<double>(bytes) / link_.bytes_per_s * 1e9;
    const double start = std::max({ready, out_free_[src], in_free_[dst]});
    out_free_[src] = in_free_[dst] = start + wire;
    owe(src, wire);
    owe(dst, wire);
    return start + wire + link_.latency_s * 1e9;
  }

  void wake(Op& op) {
    for (int w : op.waiters) finish_wait(w, op);
    op.waiters.clear();
  }

  void finish_wait(int r, const Op& op) {
    RankSim& s = sims_[r];
    const double t = s.wait_begin;
    const double done = std::max(t, op.done);
    const double idle = std::max(0.0, std::min(done, op.ready) - t);
    if (in_breakdown(s)) {
      s.idle += idle;
      s.exposed += done - t - idle;
    }
    s.debt = std::max(0.0, s.debt - (done - t));  // while waiting, transfers had the core
    s.now = done;
    s.anchor = s.wait_pos_end;
    s.pc++;
    queue_.push({s.now, r});
  }

  void issue(int r, uint64_t id) {
    RankSim& s = sims_[r];
    Op& op = ops_.at(key(r, id));
    op.issued = s.now;
    const Span& sp = snaps_[r].spans[op.span];
    if (is_collective(sp.kind)) {
      // The group's ranks (the world's, or a mesh axis's group), each with
      // its own stream: a rank's groups run their collectives side by side.
      const std::vector<int>& ranks = group_ranks(sp.group);
      const int size = static_cast<int>(ranks.size());
      const int n = s.collectives[sp.group]++;
      Collective& c = collectives_[{sp.group, n}];
      if (c.op_of_rank.empty()) {
        c.op_of_rank.assign(world_, 0);
        c.kind = sp.kind;
      } else if (c.kind != sp.kind) {
        throw ConfigError("cannot project: collective #" + std::to_string(n) + " of group " +
                          std::to_string(sp.group) + " is " + to_string(c.kind) +
                          " on one rank and " + to_string(sp.kind) + " on rank " +
                          std::to_string(r) + " (the recording is inconsistent)");
      }
      c.op_of_rank[r] = id;
      c.bytes = std::max(c.bytes, sp.bytes);
      c.last_arrival = std::max(c.last_arrival, s.now);
      if (++c.arrived < size) return;
      double start = c.last_arrival;
      for (int q : ranks) start = std::max(start, stream_free_[{q, sp.group}]);
      const double end =
          start + collective_seconds(c.kind, static_cast<double>(c.bytes), size, link_) * 1e9;
      const int64_t sent = collective_sent(c.kind, c.bytes, size);
      for (int i = 0; i < size; ++i) {
        const int q = ranks[i];
        stream_free_[{q, sp.group}] = end;
        Op& o = ops_.at(key(q, c.op_of_rank[q]));
        o.done = end;
        owe(q, end - start);
        o.ready = c.last_arrival;
        emit(q, snaps_[q].spans[o.span], start, end);
        count_sent(q, ranks[(i + 1) % size], sent);
      }
      const std::vector<uint64_t> members = std::move(c.op_of_rank);
      collectives_.erase({sp.group, n});
      for (int q : ranks) wake(ops_.at(key(q, members[q])));
      return;
    }
    if (sp.kind == SpanKind::send) {
      const int dst = sp.peer;
      const double end = transfer(r, dst, sp.bytes, s.now);
      op.done = end;
      op.ready = s.now;
      emit(r, sp, s.now, end);
      count_sent(r, dst, sp.bytes);
      auto it = recv_of_flow_.find(sp.flow_id);
      if (it != recv_of_flow_.end()) {
        Op& recv = ops_.at(it->second);
        recv.arrival = end;
        recv.send_issued = s.now;
        if (recv.issued >= 0) complete_recv(recv);
      }
      wake(op);
      return;
    }
    if (sp.kind == SpanKind::recv) {
      if (op.arrival >= 0) complete_recv(op);
      return;
    }
    // Any other op completes at once.
    op.done = op.ready = s.now;
    emit(r, sp, s.now, s.now);
  }

  const std::vector<int>& group_ranks(int group) const {
    const auto it = group_ranks_.find(group);
    if (it == group_ranks_.end())
      throw std::logic_error("projection: group " + std::to_string(group) + " has no ranks");
    return it->second;
  }

  void complete_recv(Op& recv) {
    recv.done = std::max(recv.issued, recv.arrival);
    recv.ready = recv.send_issued;
    emit(recv.rank, snaps_[recv.rank].spans[recv.span], recv.issued, recv.done);
    wake(recv);
  }

  // Processes rank r's next item (a blocked rank is queued again when what it waits for is done).
  void step(int r) {
    RankSim& s = sims_[r];
    const Item& it = s.items[s.pc];
    switch (it.type) {
      case ItemType::span_begin: {
        advance(s, it.pos);
        s.open[it.ref] = s.now;
        const Span& sp = snaps_[r].spans[it.ref];
        const double steady = steady_[r].empty() ? -1 : steady_[r][it.ref];
        const int64_t cpu = sp.cpu_end_ns - sp.cpu_begin_ns;
        if (steady >= 0 && cpu > 0) {
          s.scale = steady / static_cast<double>(cpu);
          s.scale_until = sp.cpu_end_ns;
        }
        break;
      }
      case ItemType::span_end: {
        const Span& sp = snaps_[r].spans[it.ref];
        if (sp.kind == SpanKind::data && !with_data_) {
          // Made ahead by a data loader: the program does not spend this time.
          s.anchor = std::max(s.anchor, it.pos);
          s.open.erase(it.ref);
          break;
        }
        advance(s, it.pos);
        auto o = s.open.find(it.ref);
        if (o != s.open.end()) {
          emit(r, snaps_[r].spans[it.ref], o->second, s.now);
          s.open.erase(o);
        }
        break;
      }
      case ItemType::step_begin:
        advance(s, it.pos);
        s.step = static_cast<int>(it.ref);
        s.step_begin = s.now;
        break;
      case ItemType::step_end:
        advance(s, it.pos);
        step_ms[static_cast<int>(it.ref)].resize(world_, 0.0);
        step_ms[static_cast<int>(it.ref)][r] = (s.now - s.step_begin) / 1e6;
        s.step = -1;
        break;
      case ItemType::issue:
        advance(s, it.pos);
        issue(r, it.ref);
        break;
      case ItemType::block:
        break;
    }
    if (it.type != ItemType::block) {
      s.pc++;
      queue_.push({s.now, r});
      return;
    }
    advance(s, it.pos_b);
    s.wait_begin = s.now;
    s.wait_pos_end = it.pos;
    if (it.block == BlockKind::transfer) {
      const Span& sp = snaps_[r].spans[it.ref];
      const bool outbound = sp.kind == SpanKind::gather || sp.kind == SpanKind::reduce;
      const int src = outbound ? r : sp.peer, dst = outbound ? sp.peer : r;
      const double end = transfer(src, dst, sp.bytes, s.now);
      emit(r, sp, s.now, end);
      count_sent(src, dst, sp.bytes);
      Op done_now;
      done_now.done = end;
      done_now.ready = s.now;
      finish_wait(r, done_now);
      return;
    }
    if (it.block == BlockKind::sync) {
      Collective& c = syncs_[it.ref];
      c.last_arrival = std::max(c.last_arrival, s.now);
      sync_waiters_[it.ref].push_back(r);
      if (++c.arrived < world_) return;
      Op met;
      met.done = met.ready = c.last_arrival;
      for (int q : sync_waiters_[it.ref]) finish_wait(q, met);
      syncs_.erase(it.ref);
      sync_waiters_.erase(it.ref);
      return;
    }
    Op& op = ops_.at(key(r, it.ref));
    if (op.done >= 0) {
      finish_wait(r, op);
    } else {
      op.waiters.push_back(r);
    }
  }

  void simulate() {
    stream_free_.clear();
    out_free_.assign(world_, 0.0);
    in_free_.assign(world_, 0.0);
    for (int r = 0; r < world_; ++r)
      if (!sims_[r].items.empty()) queue_.push({0.0, r});
    while (!queue_.empty()) {
      const int r = queue_.top().second;
      queue_.pop();
      if (sims_[r].pc < sims_[r].items.size()) step(r);
    }
    for (int r = 0; r < world_; ++r) {
      const RankSim& s = sims_[r];
      if (s.pc >= s.items.size()) continue;
      const Item& it = s.items[s.pc];
      std::string what = "a barrier";
      if (it.block == BlockKind::wait) {
        const Op& op = ops_.at(key(r, it.ref));
        const Span& sp = snaps_[r].spans[op.span];
        what = std::string(to_string(sp.kind)) + " of " + std::to_string(sp.bytes) + " bytes" +
               (sp.peer >= 0 ? " with rank " + std::to_string(sp.peer) : "");
      }
      throw ConfigError("cannot project: rank " + std::to_string(r) + " waits for " + what +
                        " that no other rank completes in the recording (it is incomplete or "
                        "inconsistent)");
    }
    for (int r = 0; r < world_; ++r) {
      out_.end_ms = std::max(out_.end_ms, sims_[r].now / 1e6);
      out_.ranks[r].bytes_sent = sims_[r].sent;
      out_.ranks[r].bubble_ms = sims_[r].idle / 1e6;
      out_.ranks[r].exposed_comm_ms = sims_[r].exposed / 1e6;
    }
  }

  const RunResult& run_;
  const Link link_;
  const int world_;
  const bool with_data_;
  const bool raw_costs_;
  const std::vector<const RunResult*> pool_;
  Projection& out_;
  bool use_cpu_ = true;
  std::vector<Recorder::Snapshot> snaps_;
  std::vector<RankSim> sims_;
  std::vector<std::vector<double>> steady_;  // per rank and span: its steady cost, -1 = its own
  std::unordered_map<uint64_t, Op> ops_;
  std::unordered_map<uint64_t, uint64_t> recv_of_flow_;
  std::map<std::pair<int, int>, Collective> collectives_;  // by (group, n)
  // The ranks of each communicator group, from the spans that name it; the
  // world's (group 0) is every rank.
  std::map<int, std::vector<int>> group_ranks_;
  std::map<uint64_t, Collective> syncs_;
  std::map<uint64_t, std::vector<int>> sync_waiters_;
  std::map<std::pair<int, int>, double> stream_free_;  // by (rank, group): a comm's own stream
  std::vector<double> out_free_, in_free_;
  using Entry = std::pair<double, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue_;
};

}  // namespace

bool same_work(const RunConfig& a, const RunConfig& b) {
  // What decides each op's arithmetic; bucket_mb, overlap, prefetch,
  // reshard_after_forward, backend, steps, seed and the bookkeeping options
  // change when bytes move or how long a run lasts, not what an op computes.
  return a.model == b.model && a.seq == b.seq && a.data == b.data && a.attention == b.attention &&
         a.strategy == b.strategy && a.world == b.world && a.batch == b.batch &&
         a.optimizer.kind == b.optimizer.kind && a.device == b.device &&
         a.precision == b.precision && a.tf32 == b.tf32 && a.fsdp_unit == b.fsdp_unit &&
         a.offload == b.offload && a.offload_to == b.offload_to && a.stages == b.stages &&
         a.micro_batches == b.micro_batches && a.partition == b.partition &&
         a.recompute == b.recompute;
}

double Projection::bubble_share(int rank) const {
  const ProjectedRank& r = ranks.at(rank);
  return r.step_ms > 0 ? r.bubble_ms / r.step_ms : 0.0;
}

double Projection::exposed_share(int rank) const {
  const ProjectedRank& r = ranks.at(rank);
  return r.step_ms > 0 ? r.exposed_comm_ms / r.step_ms : 0.0;
}

Projection project(const RunResult& run, const ProjectionOptions& o) {
  const int world = run.cfg.world;
  if (o.devices != world)
    throw ConfigError("--devices " + std::to_string(o.devices) + ": this run has " +
                      std::to_string(world) +
                      " ranks, one per device (valid: " + std::to_string(world) + ")");
  if (!(o.link.bytes_per_s > 0) || !(o.link.latency_s >= 0))
    throw ConfigError("--link: bandwidth must be above 0 and latency at least 0");
  if (static_cast<int>(run.recorders.size()) != world)
    throw ConfigError("this run holds no spans (it was made with --no-record)");
  for (const auto& r : run.recorders)
    if (!r) throw ConfigError("this run holds no spans (it was made with --no-record)");

  Projection p;
  p.devices = o.devices;
  p.link = o.link;
  p.with_data = o.with_data;
  p.raw_costs = o.raw_costs;
  for (const RunResult* other : o.pool_costs_with) {
    if (!other || !same_work(run.cfg, other->cfg))
      throw ConfigError(
          "cannot pool op costs with a run of different work (valid: runs that differ only in "
          "overlap, bucket size, prefetch, resharding, backend, steps or seed)");
    if (static_cast<int>(other->recorders.size()) != world)
      throw ConfigError(
          "a run to pool op costs with holds no spans (it was made with --no-record)");
    for (const auto& r : other->recorders)
      if (!r)
        throw ConfigError(
            "a run to pool op costs with holds no spans (it was made with --no-record)");
  }
  p.pooled_runs = static_cast<int>(o.pool_costs_with.size());
  p.ranks.assign(world, ProjectedRank{});
  p.run.cfg = run.cfg;
  p.run.losses = run.losses;
  p.run.ranks = run.ranks;  // memory is what it was: only time is projected
  p.run.placement = run.placement;
  p.run.placement.summary = "as on " + std::to_string(world) + " devices, " + o.link.name;
  p.run.resumed_after_step = run.resumed_after_step;

  // Steps timed by this run; the breakdown leaves out the first (warm-up) when it can.
  p.first_step_in_breakdown = first_step_in_breakdown(run);

  Simulation sim(run, o, p);
  sim.run();

  for (auto& [step, per_rank] : sim.step_ms) {
    double slowest = 0;
    for (double ms : per_rank) slowest = std::max(slowest, ms);
    p.step_ms.push_back(slowest);
  }
  p.median_step_ms = steady_median(p.step_ms);  // as the measured run's
  p.run.step_ms = p.step_ms;
  p.run.median_step_ms = p.median_step_ms;
  int counted = 0;
  for (auto& [step, per_rank] : sim.step_ms) {
    if (step < p.first_step_in_breakdown) continue;
    ++counted;
    for (int r = 0; r < world; ++r) p.ranks[r].step_ms += per_rank[r];
  }
  for (int r = 0; r < world; ++r) {
    p.run.ranks[r].step_ms.clear();
    for (auto& [step, per_rank] : sim.step_ms) p.run.ranks[r].step_ms.push_back(per_rank[r]);
  }
  if (counted > 0) {
    for (ProjectedRank& r : p.ranks) {
      r.step_ms /= counted;
      r.bubble_ms /= counted;
      r.exposed_comm_ms /= counted;
      r.bytes_sent /= counted;
      r.compute_ms = std::max(0.0, r.step_ms - r.bubble_ms - r.exposed_comm_ms);
    }
    for (auto& [pair, bytes] : sim.traffic)
      p.links.push_back({pair.first, pair.second, bytes / counted});
    std::stable_sort(p.links.begin(), p.links.end(),
                     [](const LinkTraffic& a, const LinkTraffic& b) {
                       return a.bytes_per_step > b.bytes_per_step;
                     });
  }
  return p;
}

}  // namespace shardlab
