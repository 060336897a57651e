// The ranks of one in-process NCCL run (setup and rendezvous): one unique id shared by
// the rank threads, and each rank joining the group and getting its NcclComm.
#include "core/cuda/nccl_comm.h"
#include "core/gpu.h"

namespace shardlab {

namespace {

using nccl::Backoff;
using nccl::SteadyClock;
using std::chrono::milliseconds;

class NcclGroupImpl final : public NcclGroup {
 public:
  NcclGroupImpl(int world, milliseconds timeout, FailureBoard& failures)
      : world_(world), timeout_(timeout), failures_(failures), joined_(world, false) {
    // Made once and shared by the rank threads: it names this group to NCCL's bootstrap.
    if (const std::string e = SHARDLAB_NCCL_ERROR(ncclGetUniqueId(&id_), nullptr); !e.empty()) {
      throw CommError("make_nccl_group: " + e);
    }
  }

  // The comm keeps references to the failure board and the p2p ledger, so the group
  // (and the board) must outlive its comms.
  std::unique_ptr<Comm> connect(int rank, DeviceBackend& device, Recorder* recorder,
                                Allocator* alloc) override {
    if (rank < 0 || rank >= world_) {
      throw CommError("NcclGroup::connect: rank " + std::to_string(rank) +
                      " is not a rank of a group of " + std::to_string(world_));
    }
    const std::string who = "rank " + std::to_string(rank) + ": ";
    const std::string joining = who + "connecting to a group of " + std::to_string(world_);
    auto* cuda = dynamic_cast<CudaBackend*>(&device);
    if (!cuda) {
      throw CommError(joining + " failed: NCCL needs a CUDA device, this rank has " +
                      device.device().str());
    }
    if (const std::string e = SHARDLAB_CUDA_ERROR(cudaSetDevice(cuda->index())); !e.empty()) {
      throw CommError(joining + " failed: " + e);
    }
    // The backend has a timer only when it records; asking for it otherwise throws.
    GpuTimer* timer = nullptr;
    try {
      timer = &cuda->timer();
    } catch (const std::logic_error&) {
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      joined_[rank] = true;
    }

    // Nonblocking: init returns at once and is polled, so that it can give up at the
    // timeout or when a peer has failed, instead of waiting forever for a rank that
    // will never join.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    auto give_up = [&](const std::string& why) {
      if (comm) SHARDLAB_NCCL_IGNORE(ncclCommAbort(comm));
      return CommError(why);
    };
    ncclResult_t r = ncclCommInitRankConfig(&comm, world_, id_, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      throw give_up(joining + " failed: " +
                    SHARDLAB_NCCL_FAILED(r, comm, "ncclCommInitRankConfig") + others());
    }
    const auto deadline = SteadyClock::now() + timeout_;
    Backoff backoff;
    for (;;) {
      ncclResult_t state = ncclInProgress;
      r = ncclCommGetAsyncError(comm, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) {
        throw give_up(joining + " failed: " +
                      SHARDLAB_NCCL_FAILED(state, comm, "ncclCommGetAsyncError") + others());
      }
      if (failures_.any()) {
        throw give_up(joining + " failed: a peer failed while connecting: " + failures_.describe());
      }
      if (SteadyClock::now() >= deadline) {
        const std::string missing = not_joined();
        throw give_up(joining + " timed out after " + std::to_string(timeout_.count()) + " ms" +
                      (missing.empty() ? "" : " (" + missing + " never connected)"));
      }
      backoff.sleep();
    }
    // The constructor aborts `comm` itself if it fails.
    return std::make_unique<nccl::NcclComm>(rank, world_, comm, *cuda, timer, timeout_, failures_,
                                            ledger_, recorder, alloc);
  }

 private:
  std::string others() const {
    const std::string d = failures_.describe();
    return d.empty() ? "" : " (" + d + ")";
  }

  // "rank 2, rank 3": the ranks that have not called connect yet.
  std::string not_joined() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (int r = 0; r < world_; ++r) {
      if (!joined_[r]) out += (out.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r);
    }
    return out;
  }

  const int world_;
  const milliseconds timeout_;
  FailureBoard& failures_;
  ncclUniqueId id_{};
  std::mutex mu_;
  std::vector<bool> joined_;
  nccl::P2PLedger ledger_;
};

}  // namespace

std::unique_ptr<NcclGroup> make_nccl_group(int world, std::chrono::milliseconds timeout,
                                           FailureBoard& failures) {
  if (world <= 0) {
    throw CommError("make_nccl_group: world must be positive, got " + std::to_string(world));
  }
  return std::make_unique<NcclGroupImpl>(world, timeout, failures);
}

}  // namespace shardlab
