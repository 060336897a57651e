// The ranks of one NCCL run (setup and rendezvous): one unique id shared by the rank
// threads (or, one process per rank, passed through the run's store), and each rank
// joining the group and getting its NcclComm.
#include <gloo/rendezvous/store.h>

#include <cstring>

#include "core/comm/nccl/nccl_comm.h"
#include "core/comm/nccl_group.h"
#include "core/device/gpu.h"

namespace shardlab {

namespace {

using nccl::Backoff;
using nccl::SteadyClock;
using std::chrono::milliseconds;

class NcclGroupImpl final : public NcclGroup {
 public:
  // `store` null: the ranks are threads of this process. Else this process is
  // rank `process_rank` alone and the id travels through the store.
  NcclGroupImpl(int world, milliseconds timeout, FailureBoard& failures,
                gloo::rendezvous::Store* store, int process_rank)
      : world_(world),
        timeout_(timeout),
        failures_(failures),
        joined_(world, false),
        one_process_per_rank_(store != nullptr) {
    // Made once and shared by the ranks: it names this group to NCCL's bootstrap.
    if (!store || process_rank == 0) {
      if (const std::string e = SHARDLAB_NCCL_ERROR(ncclGetUniqueId(&id_), nullptr); !e.empty()) {
        throw CommError("make_nccl_group: " + e);
      }
    }
    if (!store) return;
    const std::string key = "nccl/unique_id";
    try {
      if (process_rank == 0) {
        const char* p = reinterpret_cast<const char*>(&id_);
        store->set(key, std::vector<char>(p, p + sizeof id_));
      } else {
        const std::vector<char> v = store->get(key);
        if (v.size() != sizeof id_) {
          throw CommError("make_nccl_group: the unique id in the store has " +
                          std::to_string(v.size()) + " bytes, NCCL's has " +
                          std::to_string(sizeof id_));
        }
        std::memcpy(&id_, v.data(), sizeof id_);
      }
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      throw CommError("rank " + std::to_string(process_rank) +
                      ": NCCL's unique id could not travel through the store: " + e.what());
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
        // One process per rank: the others joined (or not) in their own processes.
        const std::string missing = one_process_per_rank_ ? "" : not_joined();
        throw give_up(joining + " timed out after " + std::to_string(timeout_.count()) + " ms" +
                      (missing.empty() ? "" : " (" + missing + " never connected)"));
      }
      backoff.sleep();
    }
    // The constructor aborts `comm` itself if it fails.
    return std::make_unique<nccl::NcclComm>(rank, world_, comm, *cuda, timer, timeout_, failures_,
                                            one_process_per_rank_ ? nullptr : &ledger_, recorder,
                                            alloc);
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
  const bool one_process_per_rank_;
};

}  // namespace

std::unique_ptr<NcclGroup> make_nccl_group(int world, std::chrono::milliseconds timeout,
                                           FailureBoard& failures) {
  if (world <= 0) {
    throw CommError("make_nccl_group: world must be positive, got " + std::to_string(world));
  }
  return std::make_unique<NcclGroupImpl>(world, timeout, failures, nullptr, 0);
}

std::unique_ptr<NcclGroup> make_nccl_group(int world, std::chrono::milliseconds timeout,
                                           FailureBoard& failures, gloo::rendezvous::Store& store,
                                           int rank) {
  if (world <= 0) {
    throw CommError("make_nccl_group: world must be positive, got " + std::to_string(world));
  }
  if (rank < 0 || rank >= world) {
    throw CommError("make_nccl_group: rank " + std::to_string(rank) + " is not a rank of " +
                    std::to_string(world));
  }
  return std::make_unique<NcclGroupImpl>(world, timeout, failures, &store, rank);
}

}  // namespace shardlab
