// The Strategy interface and the registry of strategies by name. The same
// strategy object runs on every rank (SPMD), knowing only its RankEnv.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/config.h"
#include "core/data.h"
#include "core/memory.h"
#include "core/model.h"
#include "core/recorder.h"

namespace shardlab {

// Objects shared by the ranks of one in-process run, created on first use.
// Only a strategy that is not SPMD needs it: `dp`, whose controller thread
// hands work to the device threads through memory instead of a communicator.
class RunShared {
 public:
  template <typename T, typename... Args>
  std::shared_ptr<T> get_or_create(const std::string& key, Args&&... args) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = slots_[key];
    if (!slot) slot = std::make_shared<T>(std::forward<Args>(args)...);
    return std::static_pointer_cast<T>(slot);
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<void>> slots_;
};

// What one rank sees: its place in the group and its own device, allocator,
// recorder and communicator. A value per rank, never a global.
struct RankEnv {
  int rank = 0;
  int world = 1;
  const RunConfig& cfg;
  const ModelLayout& layout;
  const SyntheticData& data;
  DeviceBackend& device;
  Allocator& alloc;
  Recorder* rec;  // may be null (recording off)
  Comm* comm;     // null for strategies that do not communicate
  RunShared& shared;
};

// A rank's share of the step's loss: the global loss is Σsum / Σcount over ranks
// (count = samples this rank computed the loss for; 0 on ranks without a loss).
struct LossShare {
  double sum = 0;
  int64_t count = 0;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // Allocate and fill this rank's state from the full initial parameters.
  virtual void setup(RankEnv& env, const std::vector<float>& init_params) = 0;
  virtual LossShare step(int step) = 0;
  // Collective: the full flat parameters on rank 0 (other ranks may return {}).
  virtual std::vector<float> export_params() = 0;
  // Bytes this rank has sent so far outside its communicator (dp's device
  // copies); the runner adds them to the communicator's count.
  virtual int64_t bytes_sent_outside_comm() const { return 0; }
};

struct StrategyInfo {
  std::string name;
  std::string summary;  // one line for --help and the UI
  std::function<std::unique_ptr<Strategy>()> make;
  // Checks settings this strategy cannot run with; throws ConfigError.
  std::function<void(const RunConfig&)> validate;
};

// Registration happens from each strategy file's static initialiser.
bool register_strategy(StrategyInfo info);
const std::vector<StrategyInfo>& all_strategies();
const StrategyInfo* find_strategy(const std::string& name);
std::string strategy_names();  // "single, ddp, ..."

// For strategies without mixed precision yet: throws ConfigError unless --precision fp32.
void require_fp32(const RunConfig& cfg);

// For `mlp:LxD+bn`: throws ConfigError unless the strategy keeps BatchNorm
// statistics (single, naive-mp, gpipe, 1f1b), --precision is fp32 and the batch
// has 2 or more rows. Nothing to check without +bn.
void require_batchnorm_support(const RunConfig& cfg);

// validate_common + require_batchnorm_support + the strategy's own checks; throws ConfigError.
void validate(const RunConfig& cfg);

}  // namespace shardlab
