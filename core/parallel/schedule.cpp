// Pipeline schedules as data (see schedule.h): the text form, the validator
// and the named schedules.
#include "core/parallel/schedule.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include "core/config.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/run_result.h"
#include "core/parallel/strategy.h"
#include "core/record/recorder.h"

namespace shardlab {

namespace {

char letter(ActionKind k) {
  switch (k) {
    case ActionKind::forward:
      return 'F';
    case ActionKind::backward:
      return 'B';
    case ActionKind::weight:
      return 'W';
  }
  return '?';
}

Action act(ActionKind k, int mb, int chunk = 0) {
  return {k, mb, chunk};
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// A non-negative decimal number, or -1.
int parse_index(const std::string& s) {
  if (s.empty() || s.size() > 6) return -1;
  int v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::string to_string(const Action& a, int chunks) {
  std::string s = letter(a.kind) + std::to_string(a.micro_batch);
  if (chunks > 1) s += "." + std::to_string(a.chunk);
  return s;
}

std::string format_schedule(const Schedule& s, const std::string& title) {
  std::string out;
  if (!title.empty()) out += "# " + title + "\n";
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    out += "rank " + std::to_string(r) + ":";
    for (const Action& a : s.ranks[r]) out += " " + to_string(a, s.chunks);
    out += "\n";
  }
  return out;
}

Schedule parse_schedule(const std::string& text, const std::string& origin) {
  Schedule s;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  const std::string valid =
      " (valid: F<m>, B<m> or W<m> for micro-batch m, with .<c> for model chunk c, e.g. F3 or "
      "B0.1)";
  while (std::getline(in, line)) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    const std::string where = origin + ":" + std::to_string(line_no);
    const int rank = static_cast<int>(s.ranks.size());
    // An optional "rank R:" (or "R:") before the actions, in order.
    if (const size_t colon = line.find(':'); colon != std::string::npos) {
      std::string head = trim(line.substr(0, colon));
      if (head.rfind("rank", 0) == 0) head = trim(head.substr(4));
      if (parse_index(head) != rank)
        throw ConfigError(where + ": '" + trim(line.substr(0, colon)) +
                          ":' does not name the next rank (valid: 'rank " + std::to_string(rank) +
                          ":', the lines in rank order, or no label)");
      line = line.substr(colon + 1);
    }
    std::vector<Action> actions;
    std::istringstream words(line);
    std::string w;
    while (words >> w) {
      const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
      ActionKind k;
      if (c == 'F')
        k = ActionKind::forward;
      else if (c == 'B')
        k = ActionKind::backward;
      else if (c == 'W')
        k = ActionKind::weight;
      else
        throw ConfigError(where + ": '" + w + "' is not an action" + valid);
      const std::string rest = w.substr(1);
      const size_t dot = rest.find('.');
      const int mb = parse_index(rest.substr(0, dot));
      const int chunk = dot == std::string::npos ? 0 : parse_index(rest.substr(dot + 1));
      if (mb < 0 || chunk < 0) throw ConfigError(where + ": '" + w + "' is not an action" + valid);
      actions.push_back(act(k, mb, chunk));
      s.micro_batches = std::max(s.micro_batches, mb + 1);
      s.chunks = std::max(s.chunks, chunk + 1);
    }
    s.ranks.push_back(std::move(actions));
  }
  if (s.ranks.empty())
    throw ConfigError(origin +
                      " holds no schedule (valid: one line of actions per rank, e.g. "
                      "'rank 0: F0 F1 B0 B1')");
  s.stages = static_cast<int>(s.ranks.size());
  return s;
}

namespace {

// Where each action's inputs come from, and the simulation with unit costs
// that both the deadlock check and UnitTiming use.
struct Dependencies {
  int P, M, V;
  // Index of (kind, mb, chunk) on a rank.
  size_t slot(const Action& a) const {
    return (static_cast<size_t>(a.kind) * M + a.micro_batch) * V + a.chunk;
  }
  size_t slots() const { return static_cast<size_t>(3) * M * V; }
  int model_stage(int rank, int chunk) const { return chunk * P + rank; }
};

struct Needed {
  int rank;
  Action action;
};

// What `a` on `rank` waits for (other than the rank's earlier actions).
std::vector<Needed> needs(const Dependencies& d, int rank, const Action& a) {
  const int s = d.model_stage(rank, a.chunk);
  const int S = d.P * d.V;
  std::vector<Needed> n;
  switch (a.kind) {
    case ActionKind::forward:
      if (s > 0)
        n.push_back({(s - 1) % d.P, act(ActionKind::forward, a.micro_batch, (s - 1) / d.P)});
      break;
    case ActionKind::backward:
      n.push_back({rank, act(ActionKind::forward, a.micro_batch, a.chunk)});
      if (s + 1 < S)
        n.push_back({(s + 1) % d.P, act(ActionKind::backward, a.micro_batch, (s + 1) / d.P)});
      break;
    case ActionKind::weight:
      n.push_back({rank, act(ActionKind::backward, a.micro_batch, a.chunk)});
      break;
  }
  return n;
}

struct Simulated {
  std::vector<std::vector<double>> finish;  // per rank, per slot; -1 = never ran
  std::vector<size_t> pc;                   // per rank: actions run
  std::vector<double> busy;
  double makespan = 0;
};

Simulated simulate(const Schedule& s, const Dependencies& d,
                   const std::vector<std::vector<bool>>& split) {
  Simulated sim;
  sim.finish.assign(s.stages, std::vector<double>(d.slots(), -1));
  sim.pc.assign(s.stages, 0);
  sim.busy.assign(s.stages, 0);
  std::vector<double> free_at(s.stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.stages; ++r) {
      while (sim.pc[r] < s.ranks[r].size()) {
        const Action& a = s.ranks[r][sim.pc[r]];
        double start = free_at[r];
        bool ready = true;
        for (const Needed& n : needs(d, r, a)) {
          const double f = sim.finish[n.rank][d.slot(n.action)];
          if (f < 0) {
            ready = false;
            break;
          }
          start = std::max(start, f);
        }
        if (!ready) break;
        double cost = 1;
        if (a.kind == ActionKind::backward &&
            !split[r][static_cast<size_t>(a.micro_batch) * d.V + a.chunk])
          cost = 2;
        free_at[r] = start + cost;
        sim.busy[r] += cost;
        sim.finish[r][d.slot(a)] = free_at[r];
        sim.makespan = std::max(sim.makespan, free_at[r]);
        ++sim.pc[r];
        progress = true;
      }
    }
  }
  return sim;
}

// Per rank and (mb, chunk): whether the rank runs a W for it (its B is split).
std::vector<std::vector<bool>> split_backwards(const Schedule& s, const Dependencies& d) {
  std::vector<std::vector<bool>> split(s.stages, std::vector<bool>(static_cast<size_t>(d.M) * d.V));
  for (int r = 0; r < s.stages; ++r)
    for (const Action& a : s.ranks[r])
      if (a.kind == ActionKind::weight)
        split[r][static_cast<size_t>(a.micro_batch) * d.V + a.chunk] = true;
  return split;
}

}  // namespace

void validate_schedule(const Schedule& s, int P, int M, int V) {
  const int lines = static_cast<int>(s.ranks.size());
  if (lines != P)
    throw ConfigError("the schedule has " + std::to_string(lines) + " rank line" +
                      (lines == 1 ? "" : "s") + " but the pipeline has " + std::to_string(P) +
                      " stages (valid: " + std::to_string(P) + " lines, one per rank)");
  const Dependencies d{P, M, V};
  const auto name = [&](const Action& a) { return to_string(a, V); };
  for (int r = 0; r < P; ++r) {
    const std::string R = "rank " + std::to_string(r);
    std::vector<int> at(d.slots(), -1);  // the position of each action on this rank
    for (size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Action& a = s.ranks[r][i];
      const std::string pos = R + ", action " + std::to_string(i + 1) + " (" + name(a) + ")";
      if (a.micro_batch >= M)
        throw ConfigError(pos + ": there is no micro-batch " + std::to_string(a.micro_batch) +
                          " (valid: 0 to " + std::to_string(M - 1) + ", --micro-batches " +
                          std::to_string(M) + ")");
      if (a.chunk >= V)
        throw ConfigError(pos + ": there is no model chunk " + std::to_string(a.chunk) +
                          (V == 1 ? std::string(" (valid: no chunk, one model chunk per rank)")
                                  : " (valid: 0 to " + std::to_string(V - 1) +
                                        ", --virtual-stages " + std::to_string(V) + ")"));
      int& seen = at[d.slot(a)];
      if (seen >= 0)
        throw ConfigError(pos + ": " + R + " already ran " + name(a) + " at action " +
                          std::to_string(seen + 1) + " (valid: each action once)");
      seen = static_cast<int>(i);
      if (a.kind != ActionKind::forward) {
        const Action before =
            act(a.kind == ActionKind::backward ? ActionKind::forward : ActionKind::backward,
                a.micro_batch, a.chunk);
        if (at[d.slot(before)] < 0)
          throw ConfigError(pos + " comes before " + name(before) + " on " + R +
                            " (valid: " + name(before) + " first: " +
                            (a.kind == ActionKind::backward
                                 ? "a backward needs its forward's activations)"
                                 : "a weight gradient needs its backward's output gradient)"));
      }
    }
    for (int mb = 0; mb < M; ++mb)
      for (int c = 0; c < V; ++c)
        for (ActionKind k : {ActionKind::forward, ActionKind::backward})
          if (at[d.slot(act(k, mb, c))] < 0)
            throw ConfigError(R + " never runs " + name(act(k, mb, c)) +
                              " (valid: an F and a B of every micro-batch" +
                              (V > 1 ? std::string(" and chunk") : "") + " on every rank)");
  }
  const Simulated sim = simulate(s, d, split_backwards(s, d));
  for (int r = 0; r < P; ++r) {
    if (sim.pc[r] == s.ranks[r].size()) continue;
    // The first stuck rank: name what it waits for and where that rank stopped.
    const Action& a = s.ranks[r][sim.pc[r]];
    for (const Needed& n : needs(d, r, a)) {
      if (sim.finish[n.rank][d.slot(n.action)] >= 0) continue;
      const size_t q = sim.pc[n.rank];
      throw ConfigError("rank " + std::to_string(r) + ", action " + std::to_string(sim.pc[r] + 1) +
                        " (" + name(a) + ") waits for " + name(n.action) + " of rank " +
                        std::to_string(n.rank) + ", which is itself waiting at action " +
                        std::to_string(q + 1) + " (" + name(s.ranks[n.rank][q]) +
                        "): a deadlock (valid: an order in which every action's input is made "
                        "before the action)");
    }
  }
}

namespace {

// Where a message goes: the receiving rank and the message as it names it.
struct Addressed {
  int to = -1;
  Receive message;
};

// What action `a` of rank `r` sends (to = −1: nothing).
Addressed sent_by(const Dependencies& d, int r, const Action& a) {
  const int s = d.model_stage(r, a.chunk), S = d.P * d.V;
  if (a.kind == ActionKind::forward && s + 1 < S)
    return {(s + 1) % d.P, {false, a.micro_batch, (s + 1) / d.P, r}};
  if (a.kind == ActionKind::backward && s > 0)
    return {(s - 1) % d.P, {true, a.micro_batch, (s - 1) / d.P, r}};
  return {};
}

// The message action `a` of rank `r` waits for (to = −1: none; W, and the
// first model stage's F and the last one's B, read nothing from another rank).
Addressed input_of(const Dependencies& d, int r, const Action& a) {
  const int s = d.model_stage(r, a.chunk), S = d.P * d.V;
  if (a.kind == ActionKind::forward && s > 0)
    return {r, {false, a.micro_batch, a.chunk, (s - 1) % d.P}};
  if (a.kind == ActionKind::backward && s + 1 < S)
    return {r, {true, a.micro_batch, a.chunk, (s + 1) % d.P}};
  return {};
}

}  // namespace

ReceivePlan plan_receives(const Schedule& s) {
  validate_schedule(s, s.stages, s.micro_batches, s.chunks);
  const int P = s.stages;
  const Dependencies d{P, s.micro_batches, s.chunks};
  ReceivePlan plan;
  plan.order.assign(P, std::vector<std::vector<Receive>>(P));
  // Per rank and action: the message it sends, as (receiver, its index there).
  std::vector<std::vector<std::pair<int, size_t>>> sends(P);
  for (int r = 0; r < P; ++r)
    for (const Action& a : s.ranks[r]) {
      const Addressed out = sent_by(d, r, a);
      if (out.to < 0) {
        sends[r].push_back({-1, 0});
        continue;
      }
      std::vector<Receive>& q = plan.order[out.to][r];
      sends[r].push_back({out.to, q.size()});
      q.push_back(out.message);
    }
  const auto index_of = [&](int r, const Receive& m) {
    const std::vector<Receive>& q = plan.order[r][m.from];
    return static_cast<size_t>(std::find(q.begin(), q.end(), m) - q.begin());
  };

  // The usual early posts (PipelineStage::run's rules).
  plan.early.resize(P);
  plan.posted.resize(P);
  for (int r = 0; r < P; ++r) {
    const std::vector<Action>& line = s.ranks[r];
    plan.early[r].resize(line.size());
    plan.posted[r].resize(line.size());
    for (size_t i = 0; i < line.size(); ++i) {
      std::vector<Receive>& e = plan.early[r][i];
      const auto add = [&](const Action& a) {
        const Addressed in = input_of(d, r, a);
        if (in.to >= 0) e.push_back(in.message);
      };
      if (d.V > 1) {
        // Chunks send both ways between a pair of ranks: the action's own
        // input and the next F's and B's are posted before its sends are
        // waited for, as Megatron's interleaved steady state does.
        add(line[i]);
        bool forward_seen = false, backward_seen = false;
        for (size_t j = i + 1; j < line.size() && !(forward_seen && backward_seen); ++j) {
          if (line[j].kind == ActionKind::forward && !forward_seen) {
            forward_seen = true;
            add(line[j]);
          } else if (line[j].kind == ActionKind::backward && !backward_seen) {
            backward_seen = true;
            add(line[j]);
          }
        }
      } else if (i + 1 < line.size()) {
        // The next B's gradient; during a run of forwards, the next F's input.
        const Action& next = line[i + 1];
        if (next.kind == ActionKind::backward ||
            (next.kind == ActionKind::forward && line[i].kind == ActionKind::forward))
          add(next);
      }
    }
  }

  // The run, as the executor runs it, with no times: each rank posts its
  // early receives, waits until its last action's send was posted by its
  // receiver, posts and waits for its own input, computes and sends.
  std::vector<size_t> pc(P, 0);
  std::vector<bool> posted_early(P, false), done(P, false);
  std::vector<std::vector<size_t>> through(P, std::vector<size_t>(P, 0));  // [to][from] posted
  std::vector<std::vector<size_t>> issued(P, std::vector<size_t>(P, 0));   // [to][from] sent
  const auto post = [&](int r, const Receive& m) {
    const size_t upto = index_of(r, m) + 1;
    for (size_t& k = through[r][m.from]; k < upto; ++k)
      plan.posted[r][pc[r]].push_back(plan.order[r][m.from][k]);
  };
  // The send rank r waits for before its next action (to = −1: none waiting).
  const auto waiting_send = [&](int r) -> std::pair<int, size_t> {
    if (pc[r] == 0) return {-1, 0};
    const auto [to, k] = sends[r][pc[r] - 1];
    if (to < 0 || through[to][r] > k) return {-1, 0};
    return {to, k};
  };
  for (;;) {
    bool progress = false, all_done = true;
    for (int r = 0; r < P; ++r) {
      const std::vector<Action>& line = s.ranks[r];
      while (!done[r]) {
        if (pc[r] < line.size() && !posted_early[r]) {
          for (const Receive& m : plan.early[r][pc[r]]) post(r, m);
          posted_early[r] = true;
        }
        if (waiting_send(r).first >= 0) break;
        if (pc[r] == line.size()) {
          done[r] = progress = true;
          break;
        }
        const Addressed in = input_of(d, r, line[pc[r]]);
        if (in.to >= 0) {
          post(r, in.message);
          if (issued[r][in.message.from] <= index_of(r, in.message)) break;
        }
        const auto [to, k] = sends[r][pc[r]];
        if (to >= 0) issued[to][r] = k + 1;
        ++pc[r];
        posted_early[r] = false;
        progress = true;
      }
      all_done = all_done && done[r];
    }
    if (all_done) break;
    if (progress) continue;
    // Hung: some rank waits for its send to be taken. Its receiver, stopped
    // at action pc (it has not run the action that takes the message),
    // posts that receive early, before pc.
    bool mended = false;
    for (int r = 0; r < P && !mended; ++r) {
      const auto [to, k] = waiting_send(r);
      if (to < 0 || done[to] || pc[to] >= s.ranks[to].size()) continue;
      const Receive m = plan.order[to][r][k];
      plan.early[to][pc[to]].push_back(m);
      post(to, m);
      plan.mended.push_back({to, pc[to], m});
      mended = true;
    }
    if (!mended)
      throw std::logic_error("plan_receives: a validated schedule hangs with no send waiting");
  }
  return plan;
}

std::vector<std::string> schedule_names() {
  std::vector<std::string> names;
  for (const StrategyInfo& s : all_strategies())
    if (s.schedule) names.push_back(s.name);
  return names;
}

Schedule named_schedule(const std::string& name, int P, int M, int V) {
  if (P < 1 || M < 1 || V < 1)
    throw ConfigError("a schedule needs at least 1 stage, micro-batch and chunk (given P " +
                      std::to_string(P) + ", M " + std::to_string(M) + ", V " + std::to_string(V) +
                      ")");
  // A pipeline strategy's own order (its file in strategies/ writes it).
  const StrategyInfo* s = find_strategy(name);
  if (!s || !s->schedule) {
    std::string valid;
    for (const std::string& n : schedule_names()) valid += (valid.empty() ? "" : ", ") + n;
    throw ConfigError("no schedule named '" + name + "' (valid: " + valid + ")");
  }
  if (V != 1 && !s->reads_option(StrategyOption::virtual_stages))
    throw ConfigError("--virtual-stages " + std::to_string(V) + ": " + name +
                      " runs one model chunk per rank (valid: --virtual-stages 1, or --strategy "
                      "interleaved)");
  return s->schedule(P, M, V);
}

double UnitTiming::bubble_over_compute() const {
  const double most = busy.empty() ? 0 : *std::max_element(busy.begin(), busy.end());
  return most > 0 ? (makespan - most) / most : 0;
}

double UnitTiming::bubble_share(int r) const {
  return makespan > 0 ? (makespan - busy.at(r)) / makespan : 0;
}

NearestFormula nearest_formula(const Schedule& s) {
  const int P = s.stages, M = s.micro_batches, V = s.chunks;
  bool split = false;
  for (const auto& rank : s.ranks)
    for (const Action& a : rank) split = split || a.kind == ActionKind::weight;
  if (V > 1) return {"interleaved's (P-1)/(V*M)", double(P - 1) / (V * M)};
  if (split) return {"zb-h1's (P-1)/(3M)", double(P - 1) / (3.0 * M)};
  return {"1f1b's and gpipe's (P-1)/M", double(P - 1) / M};
}

std::vector<TimedAction> actions_in_spans(const std::vector<Span>& all, int step,
                                          const std::vector<int>& chunk_of_layer) {
  std::vector<const Span*> spans;
  for (const Span& sp : all)
    if (sp.step == step && sp.lane == Lane::compute &&
        (sp.kind == SpanKind::forward || sp.kind == SpanKind::backward ||
         sp.kind == SpanKind::weight))
      spans.push_back(&sp);
  std::stable_sort(spans.begin(), spans.end(),
                   [](const Span* a, const Span* b) { return a->t_begin_ns < b->t_begin_ns; });
  std::vector<TimedAction> out;
  for (const Span* sp : spans) {
    const Action a = act(sp->kind == SpanKind::forward  ? ActionKind::forward
                         : sp->kind == SpanKind::weight ? ActionKind::weight
                                                        : ActionKind::backward,
                         std::max(0, sp->micro_batch),
                         sp->layer >= 0 && sp->layer < static_cast<int>(chunk_of_layer.size())
                             ? std::max(0, chunk_of_layer[sp->layer])
                             : 0);
    if (out.empty() || !(out.back().action == a))
      out.push_back({a, sp->t_begin_ns, sp->t_end_ns});
    else
      out.back().end = std::max(out.back().end, sp->t_end_ns);
  }
  return out;
}

Schedule recorded_schedule(const RunResult& run, int step) {
  const std::vector<int> ranks = first_pipeline_ranks(run.cfg);
  Schedule s;
  s.stages = static_cast<int>(ranks.size());
  s.micro_batches = std::max(1, run.cfg.micro_batches);
  s.chunks = pipeline_chunks(run.cfg);
  for (int rank : ranks) {
    if (rank >= static_cast<int>(run.recorders.size()) || !run.recorders[rank])
      throw ConfigError("this run holds no spans (it was made with --no-record)");
    std::vector<Action> actions;
    for (const TimedAction& t : actions_in_spans(run.recorders[rank]->snapshot().spans, step,
                                                 chunk_of_layers(run.cfg, rank)))
      actions.push_back(t.action);
    s.ranks.push_back(std::move(actions));
  }
  return s;
}

UnitTiming unit_timing(const Schedule& s) {
  validate_schedule(s, s.stages, s.micro_batches, s.chunks);
  const Dependencies d{s.stages, s.micro_batches, s.chunks};
  const auto split = split_backwards(s, d);
  const Simulated sim = simulate(s, d, split);
  UnitTiming t;
  t.makespan = sim.makespan;
  t.busy = sim.busy;
  for (int r = 0; r < s.stages; ++r) {
    int alive = 0, unbacked = 0, peak = 0, peak_unbacked = 0;
    for (const Action& a : s.ranks[r]) {
      const bool split_here = split[r][static_cast<size_t>(a.micro_batch) * d.V + a.chunk];
      if (a.kind == ActionKind::forward) {
        ++alive;
        ++unbacked;
      } else if (a.kind == ActionKind::backward) {
        --unbacked;
        if (!split_here) --alive;
      } else {
        --alive;
      }
      peak = std::max(peak, alive);
      peak_unbacked = std::max(peak_unbacked, unbacked);
    }
    t.peak_alive.push_back(peak);
    t.peak_unbacked.push_back(peak_unbacked);
  }
  return t;
}

}  // namespace shardlab
