// Host buffers given to the NCCL comm: NCCL needs device memory, so host memory is
// staged through slots (pinned host + device), reused across ops.
#include <bit>

#include "core/comm/nccl/nccl_comm.h"

namespace shardlab::nccl {

namespace {
// The smallest staging slot: a 1-element vote and its like fit many times over.
constexpr size_t kMinSlotBytes = 4096;
}  // namespace

// Throws for another GPU's memory, which is a caller's mistake.
bool NcclComm::usable_in_place(const OpInfo& op, const void* p) const {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    SHARDLAB_CUDA_IGNORE(e);  // older runtimes reject plain host pointers this way
    return false;
  }
  if (a.type == cudaMemoryTypeManaged) return true;
  if (a.type != cudaMemoryTypeDevice) return false;
  if (a.device != index_) {
    throw CommError(errors_.prefix(op) + ": a buffer is on GPU " + std::to_string(a.device) +
                    ", but this rank's GPU is " + std::to_string(index_));
  }
  return true;
}

Slot* StagingSlots::acquire(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot* best = nullptr;
  for (Slot* s : free_slots_) {
    if (s->capacity >= bytes && (!best || s->capacity < best->capacity)) best = s;
  }
  if (best) {
    free_slots_.erase(std::find(free_slots_.begin(), free_slots_.end(), best));
    return best;
  }
  auto slot = std::make_unique<Slot>();
  const size_t capacity = std::bit_ceil(std::max(bytes, kMinSlotBytes));
  if (const std::string e = SHARDLAB_CUDA_ERROR(cudaMallocHost(&slot->host, capacity));
      !e.empty()) {
    throw std::runtime_error("staging a host buffer: " + e);
  }
  if (alloc_) {
    try {
      slot->tensor =
          alloc_->alloc("comm.nccl.staging", MemCategory::comm_buffers, capacity / 4, DType::f32);
    } catch (const std::exception& ex) {
      SHARDLAB_CUDA_IGNORE(cudaFreeHost(slot->host));
      throw std::runtime_error("staging a host buffer: " + one_line(ex.what()));
    }
    slot->dev = slot->tensor.raw();
  } else {
    if (const std::string e = SHARDLAB_CUDA_ERROR(cudaMalloc(&slot->dev, capacity)); !e.empty()) {
      SHARDLAB_CUDA_IGNORE(cudaFreeHost(slot->host));
      throw std::runtime_error("staging a host buffer: " + e);
    }
  }
  slot->capacity = capacity;
  Slot* raw = slot.get();
  slots_.push_back(std::move(slot));
  return raw;
}

void StagingSlots::release(Slot* slot) {
  if (!slot) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_slots_.push_back(slot);
}

void StagingSlots::free_all() {
  for (auto& slot : slots_) {
    if (slot->host) SHARDLAB_CUDA_IGNORE(cudaFreeHost(slot->host));
    if (slot->dev && slot->tensor.empty()) SHARDLAB_CUDA_IGNORE(cudaFree(slot->dev));
    slot->tensor.reset();
  }
}

void StagingSlots::leak_all() {
  for (auto& slot : slots_) (void)slot.release();
}

}  // namespace shardlab::nccl
