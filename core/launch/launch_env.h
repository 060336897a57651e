// Which launcher started this process (torchrun, mpirun, Slurm, `shardlab launch`), read from
// the environment each one sets, validated into one value: this process's place in the group.
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace shardlab {

struct ProcessEnv {
  bool present = false;  // this process is one rank of a launched group
  std::string launcher;  // "torchrun", "mpirun", "slurm", "shardlab launch", "env" (set by hand)
  int rank = 0, world = 1, local_rank = 0, local_world = 1, node_rank = 0, nnodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // torchrun's agent already serves a c10d TCPStore on MASTER_PORT
  int restart = 0;           // TORCHELASTIC_RESTART_COUNT or SHARDLAB_RESTART_COUNT
  std::string run_id;        // TORCHELASTIC_RUN_ID, SHARDLAB_RUN_ID, OMPI job id, SLURM_JOB_ID.STEP
};

// Returns the variable's value, or nullopt when it is unset. Tests pass a map.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Precedence: RANK/WORLD_SIZE (torchrun, `shardlab launch`, or set by hand) > Open MPI's
// OMPI_COMM_WORLD_* > Slurm's SLURM_PROCID/SLURM_NTASKS. None of them: present = false and the
// defaults above. Throws ConfigError with one line naming the variable, its value and what is
// valid, for anything that is not an integer in range or that contradicts another variable.
ProcessEnv detect_process_env(const EnvLookup& get);
ProcessEnv detect_process_env();  // the real environment (::getenv)

// The first host of a Slurm hostlist: "node[03-05,9],gpu1" -> "node03".
std::string first_slurm_host(const std::string& hostlist);

}  // namespace shardlab
