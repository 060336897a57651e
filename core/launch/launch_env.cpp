// Reads the launcher contracts (see launch_env.h). Every launcher names the same facts
// differently; this file maps each naming onto ProcessEnv and checks the facts agree.
#include "core/launch/launch_env.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <vector>

#include "core/config.h"

namespace shardlab {

namespace {

// Reads one launcher's variables; every message ends with the launcher's name, so a user
// who did not know which launcher's variables leaked into the environment learns it.
class Reader {
 public:
  Reader(const EnvLookup& get, std::string launcher) : get_(get), launcher_(std::move(launcher)) {}

  std::optional<std::string> str(const std::string& name) const {
    auto v = get_(name);
    // An empty value is what `export X=` leaves behind: treated as unset, as torchrun does.
    if (v && v->empty()) return std::nullopt;
    return v;
  }

  // The first of `names` that is set, as an integer of at least `min`; `valid` is the range
  // for the message. Strict: "4 ", "0x4", "4.0" and "" are not integers.
  std::optional<int> integer(const std::vector<std::string>& names, int min,
                             const std::string& valid) const {
    last_name_.clear();
    for (const auto& name : names) {
      const auto v = str(name);
      if (!v) continue;
      errno = 0;
      char* end = nullptr;
      const long long x = std::strtoll(v->c_str(), &end, 10);
      if (*end != '\0' || std::isspace(static_cast<unsigned char>((*v)[0])) || (*v)[0] == '+')
        fail(name + "=" + *v + " is not an integer (valid: " + valid + ")");
      if (errno == ERANGE || x < min || x > std::numeric_limits<int>::max())
        fail(name + "=" + *v + " is out of range (valid: " + valid + ")");
      last_name_ = name;
      return static_cast<int>(x);
    }
    return std::nullopt;
  }

  int required(const std::vector<std::string>& names, int min, const std::string& valid,
               const std::string& why) const {
    auto x = integer(names, min, valid);
    if (!x) fail(names[0] + " is not set, but " + why);
    return *x;
  }

  // The variable integer() read last: which spelling to name in a later message.
  const std::string& last_name() const { return last_name_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw ConfigError(what + " (" + launcher_ + ")");
  }

  const std::string& launcher() const { return launcher_; }

 private:
  const EnvLookup& get_;
  std::string launcher_;
  mutable std::string last_name_;
};

void check_below(const Reader& r, const std::string& name, int value, const std::string& bound_name,
                 int bound) {
  if (value >= bound)
    r.fail(name + "=" + std::to_string(value) + " is not below " + bound_name + "=" +
           std::to_string(bound));
}

// Slurm's compressed per-node task counts: "2(x3),1" is 2, 2, 2, 1.
std::vector<int> parse_tasks_per_node(const Reader& r, const std::string& name,
                                      const std::string& text) {
  std::vector<int> out;
  size_t i = 0;
  auto bad = [&]() {
    r.fail(name + "=" + text + " is not a Slurm task count list (valid: e.g. 4 or 2(x3),1)");
  };
  auto number = [&]() {
    if (i >= text.size() || text[i] < '0' || text[i] > '9') bad();
    long long x = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      x = x * 10 + (text[i++] - '0');
      if (x > 1000000) bad();
    }
    return static_cast<int>(x);
  };
  while (true) {
    const int count = number();
    int repeat = 1;
    if (i < text.size() && text[i] == '(') {
      if (text.compare(i, 2, "(x") != 0) bad();
      i += 2;
      repeat = number();
      if (i >= text.size() || text[i] != ')') bad();
      ++i;
    }
    if (repeat < 1 || out.size() + repeat > 100000) bad();
    out.insert(out.end(), repeat, count);
    if (i == text.size()) break;
    if (text[i] != ',') bad();
    ++i;
  }
  return out;
}

// The checks every launcher shares, on values already read into `e`.
void check_group(const Reader& r, const ProcessEnv& e, const std::string& rank_name,
                 const std::string& world_name, const std::string& local_rank_name,
                 const std::string& local_world_name) {
  check_below(r, rank_name, e.rank, world_name, e.world);
  check_below(r, local_rank_name, e.local_rank, local_world_name, e.local_world);
  if (e.local_world > e.world)
    r.fail(local_world_name + "=" + std::to_string(e.local_world) + " is larger than " +
           world_name + "=" + std::to_string(e.world));
  if (e.local_rank > e.rank)
    r.fail(local_rank_name + "=" + std::to_string(e.local_rank) + " is larger than " + rank_name +
           "=" + std::to_string(e.rank) + " (ranks on earlier nodes come first)");
}

// MASTER_ADDR / MASTER_PORT for launchers that do not set them (mpirun, srun): the user
// exports them (`mpirun -x MASTER_ADDR -x MASTER_PORT`). One node can default to loopback;
// several cannot, since no rank can guess where rank 0 listens.
void read_master(const Reader& r, ProcessEnv& e, const std::string& fallback_host) {
  if (auto addr = r.str("MASTER_ADDR")) {
    e.master_addr = *addr;
  } else if (!fallback_host.empty()) {
    e.master_addr = fallback_host;
  } else if (e.nnodes > 1) {
    r.fail("MASTER_ADDR is not set, but the " + std::to_string(e.world) + " ranks span " +
           std::to_string(e.nnodes) +
           " nodes: export MASTER_ADDR (the host of rank 0) and MASTER_PORT to every rank");
  }
  // A fixed default, so every rank that falls back on it agrees (torch's default too).
  e.master_port = r.integer({"MASTER_PORT"}, 1, "1 to 65535").value_or(29500);
  if (e.master_port > 65535)
    r.fail("MASTER_PORT=" + std::to_string(e.master_port) + " is out of range (valid: 1 to 65535)");
}

// torchrun, `shardlab launch`, or RANK/WORLD_SIZE exported by hand (env://).
ProcessEnv from_torch_style(const EnvLookup& get) {
  std::string launcher = "env";
  auto set = [&](const char* n) { return get(n).has_value(); };
  if (set("SHARDLAB_RUN_ID") || set("SHARDLAB_RESTART_COUNT"))
    launcher = "shardlab launch";
  else if (set("TORCHELASTIC_RUN_ID") || set("TORCHELASTIC_RESTART_COUNT"))
    launcher = "torchrun";
  const Reader r(get, launcher);
  ProcessEnv e;
  e.present = true;
  e.launcher = launcher;
  e.world = r.required({"WORLD_SIZE"}, 1, "a positive integer", "RANK is set");
  e.rank = r.required({"RANK"}, 0, "0 to WORLD_SIZE-1", "WORLD_SIZE is set");
  const auto local_world = r.integer({"LOCAL_WORLD_SIZE"}, 1, "a positive integer");
  const auto local_rank = r.integer({"LOCAL_RANK"}, 0, "0 to LOCAL_WORLD_SIZE-1");
  const auto nnodes = r.integer({"GROUP_WORLD_SIZE"}, 1, "a positive integer");
  const auto node_rank = r.integer({"GROUP_RANK"}, 0, "0 to GROUP_WORLD_SIZE-1");
  // Set by hand with only RANK/WORLD_SIZE: one node holding every rank.
  e.local_world =
      local_world.value_or(nnodes && e.world % *nnodes == 0 ? e.world / *nnodes : e.world);
  e.local_rank = local_rank.value_or(e.rank % e.local_world);
  e.nnodes = nnodes.value_or(e.world % e.local_world == 0 ? e.world / e.local_world : 1);
  e.node_rank = node_rank.value_or(e.rank / e.local_world);
  check_group(r, e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  if (node_rank && nnodes) check_below(r, "GROUP_RANK", e.node_rank, "GROUP_WORLD_SIZE", e.nnodes);
  // torchrun starts the same nproc_per_node on every node, and so do we.
  if (local_world && nnodes && e.world != e.local_world * e.nnodes)
    r.fail("WORLD_SIZE=" + std::to_string(e.world) + " is not LOCAL_WORLD_SIZE=" +
           std::to_string(e.local_world) + " x GROUP_WORLD_SIZE=" + std::to_string(e.nnodes));
  if (local_world && !nnodes && e.world % e.local_world != 0)
    r.fail("WORLD_SIZE=" + std::to_string(e.world) +
           " is not a multiple of LOCAL_WORLD_SIZE=" + std::to_string(e.local_world));
  if (node_rank && local_world && e.rank / e.local_world != e.node_rank)
    r.fail("RANK=" + std::to_string(e.rank) + " is not on node GROUP_RANK=" +
           std::to_string(e.node_rank) + " (valid: " + std::to_string(e.node_rank * e.local_world) +
           " to " + std::to_string((e.node_rank + 1) * e.local_world - 1) +
           " with LOCAL_WORLD_SIZE=" + std::to_string(e.local_world) + ")");
  read_master(r, e, "");
  if (auto s = r.str("TORCHELASTIC_USE_AGENT_STORE")) e.agent_store = (*s == "True" || *s == "1");
  e.restart = r.integer({"SHARDLAB_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}, 0, "0 or more")
                  .value_or(0);
  e.run_id = r.str("SHARDLAB_RUN_ID").value_or(r.str("TORCHELASTIC_RUN_ID").value_or(""));
  return e;
}

// Open MPI's mpirun. It names no node index: OMPI_COMM_WORLD_NODE_RANK is the rank among
// this node's processes (like LOCAL_RANK), not the node's number. Ranks fill nodes in order
// under the default by-slot mapping, so node = rank / local size there; nnodes is exact only
// in the one fact that matters here, whether there is more than one node.
ProcessEnv from_ompi(const EnvLookup& get) {
  const Reader r(get, "mpirun");
  ProcessEnv e;
  e.present = true;
  e.launcher = "mpirun";
  e.world =
      r.required({"OMPI_COMM_WORLD_SIZE"}, 1, "a positive integer", "OMPI_COMM_WORLD_RANK is set");
  e.rank = r.required({"OMPI_COMM_WORLD_RANK"}, 0, "0 to OMPI_COMM_WORLD_SIZE-1",
                      "OMPI_COMM_WORLD_SIZE is set");
  e.local_world =
      r.integer({"OMPI_COMM_WORLD_LOCAL_SIZE"}, 1, "a positive integer").value_or(e.world);
  e.local_rank = r.integer({"OMPI_COMM_WORLD_LOCAL_RANK"}, 0, "0 to OMPI_COMM_WORLD_LOCAL_SIZE-1")
                     .value_or(e.rank);
  check_below(r, "OMPI_COMM_WORLD_RANK", e.rank, "OMPI_COMM_WORLD_SIZE", e.world);
  check_below(r, "OMPI_COMM_WORLD_LOCAL_RANK", e.local_rank, "OMPI_COMM_WORLD_LOCAL_SIZE",
              e.local_world);
  if (e.local_world > e.world)
    r.fail("OMPI_COMM_WORLD_LOCAL_SIZE=" + std::to_string(e.local_world) +
           " is larger than OMPI_COMM_WORLD_SIZE=" + std::to_string(e.world));
  e.nnodes = (e.world + e.local_world - 1) / e.local_world;
  e.node_rank = std::min(e.rank / e.local_world, e.nnodes - 1);
  read_master(r, e, "");
  e.run_id = r.str("OMPI_MCA_ess_base_jobid").value_or(r.str("PMIX_NAMESPACE").value_or(""));
  return e;
}

// Slurm's srun. Only a task step counts: a batch script also sees SLURM_PROCID=0 and the
// job's SLURM_NTASKS, but it is not rank 0 of anything, and srun is what sets SLURM_STEP_ID.
ProcessEnv from_slurm(const EnvLookup& get) {
  const Reader r(get, "slurm");
  ProcessEnv e;
  e.present = true;
  e.launcher = "slurm";
  e.world = r.required({"SLURM_NTASKS", "SLURM_NPROCS", "SLURM_STEP_NUM_TASKS"}, 1,
                       "a positive integer", "SLURM_PROCID is set");
  const std::string world_name = r.last_name();
  e.rank = r.required({"SLURM_PROCID"}, 0, "0 to SLURM_NTASKS-1", "SLURM_NTASKS is set");
  e.nnodes = r.integer({"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, 1,
                       "a positive integer")
                 .value_or(1);
  const std::string nnodes_name = r.last_name().empty() ? "SLURM_NNODES" : r.last_name();
  e.node_rank = r.integer({"SLURM_NODEID"}, 0, "0 to SLURM_NNODES-1").value_or(0);
  e.local_rank = r.integer({"SLURM_LOCALID"}, 0, "0 to the node's task count - 1").value_or(0);
  check_below(r, "SLURM_PROCID", e.rank, world_name, e.world);
  check_below(r, "SLURM_NODEID", e.node_rank, nnodes_name, e.nnodes);
  // This node's task count: the per-node list when there is one (nodes may differ).
  e.local_world = e.world / e.nnodes;
  std::string tpn_name = "SLURM_STEP_TASKS_PER_NODE";
  auto tpn = r.str(tpn_name);
  if (!tpn) tpn = r.str(tpn_name = "SLURM_TASKS_PER_NODE");
  if (tpn) {
    const auto counts = parse_tasks_per_node(r, tpn_name, *tpn);
    if (static_cast<int>(counts.size()) != e.nnodes)
      r.fail(tpn_name + "=" + *tpn + " lists " + std::to_string(counts.size()) + " nodes, not " +
             nnodes_name + "=" + std::to_string(e.nnodes));
    long long sum = 0;
    for (int c : counts) sum += c;
    if (sum != e.world)
      r.fail(tpn_name + "=" + *tpn + " adds up to " + std::to_string(sum) + " tasks, not " +
             world_name + "=" + std::to_string(e.world));
    e.local_world = counts[e.node_rank];
  } else if (e.world % e.nnodes != 0) {
    r.fail(world_name + "=" + std::to_string(e.world) + " is not a multiple of " + nnodes_name +
           "=" + std::to_string(e.nnodes) + " and SLURM_STEP_TASKS_PER_NODE is not set");
  }
  if (e.local_rank >= e.local_world)
    r.fail("SLURM_LOCALID=" + std::to_string(e.local_rank) + " is not below " +
           std::to_string(e.local_world) + ", this node's task count (" +
           (tpn ? tpn_name + "=" + *tpn : world_name + " / " + nnodes_name) + ")");
  std::string host;
  if (e.nnodes > 1) {
    auto list = r.str("SLURM_STEP_NODELIST");
    if (!list) list = r.str("SLURM_JOB_NODELIST");
    if (list) host = first_slurm_host(*list);
  }
  read_master(r, e, host);
  e.run_id = r.str("SLURM_JOB_ID").value_or("") + "." + r.str("SLURM_STEP_ID").value_or("");
  return e;
}

}  // namespace

std::string first_slurm_host(const std::string& hostlist) {
  // Prefixes and bracketed ranges alternate ("rack[1-2]-n[01-04]"); the first host takes the
  // first item of each range, keeping its zero padding, up to the first top-level comma.
  std::string host;
  size_t i = 0;
  while (i < hostlist.size() && hostlist[i] != ',') {
    if (hostlist[i] == '[') {
      ++i;
      while (i < hostlist.size() && hostlist[i] != '-' && hostlist[i] != ',' && hostlist[i] != ']')
        host += hostlist[i++];
      while (i < hostlist.size() && hostlist[i] != ']') ++i;
      ++i;
    } else {
      host += hostlist[i++];
    }
  }
  return host;
}

ProcessEnv detect_process_env(const EnvLookup& get) {
  auto set = [&](const char* n) {
    auto v = get(n);
    return v && !v->empty();
  };
  if (set("RANK") || set("WORLD_SIZE")) return from_torch_style(get);
  if (set("OMPI_COMM_WORLD_RANK") || set("OMPI_COMM_WORLD_SIZE")) return from_ompi(get);
  if (set("SLURM_PROCID") && (set("SLURM_STEP_ID") || set("SLURM_STEPID"))) return from_slurm(get);
  return ProcessEnv{};
}

ProcessEnv detect_process_env() {
  return detect_process_env([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

}  // namespace shardlab
