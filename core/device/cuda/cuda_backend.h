// The CUDA device backend (compiled only with SHARDLAB_CUDA): memory through
// cudaMalloc, one compute stream per rank, kernels from kernels/cuda/, and
// device-side timing from CUDA events. Also what NcclComm needs from it.
#pragma once
#include <cuda_runtime.h>

#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/record/recorder.h"
#include "kernels/cuda/check.h"

namespace shardlab {

// Makes GPU `index` current for a scope and restores the previous one. Backend
// and communicator calls may come from a thread whose current device is another
// (a comm's worker thread, a waiter, a destructor). Never throws: used on
// teardown paths, and a device that cannot be made current fails the next call
// (cudaSetDevice's error is left for the next check to see).
class ScopedDevice {
 public:
  explicit ScopedDevice(int index) : index_(index) {
    if (const cudaError_t e = cudaGetDevice(&previous_); e != cudaSuccess) {
      SHARDLAB_CUDA_IGNORE(e);
      previous_ = -1;
    }
    if (previous_ != index_) (void)cudaSetDevice(index_);
  }
  ~ScopedDevice() {
    if (previous_ >= 0 && previous_ != index_) (void)cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int index_;
  int previous_ = -1;
};

// Spans timed on the GPU: begin() and end() record CUDA events on a stream, and
// resolve() turns finished pairs into host-clock spans in the recorder. The
// clocks are tied once, at construction (an event synchronised against now_ns()),
// so device spans and host spans share one timeline. Thread-safe.
class GpuTimer {
 public:
  GpuTimer(int device_index, Recorder* recorder);
  ~GpuTimer();
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;

  bool enabled() const { return recorder_ != nullptr; }
  // Returns a token for end(); -1 when recording is off.
  int begin(cudaStream_t stream);
  // `span` carries everything but the times, which come from the events.
  void end(int token, cudaStream_t stream, Span span) noexcept;
  // Moves spans whose end event has happened into the recorder, in begin order;
  // with wait, first waits for all of them.
  void resolve(bool wait);

 private:
  struct Pending {
    cudaEvent_t begin = nullptr;
    cudaEvent_t end = nullptr;
    Span span;
    bool ended = false;
  };
  cudaEvent_t take_event();
  void anchor();  // ties origin_ to now_ns()
  int device_index_;
  Recorder* recorder_;
  std::mutex mu_;
  std::mutex resolve_mu_;
  cudaEvent_t origin_ = nullptr;  // happened at host time origin_ns_
  int64_t origin_ns_ = 0;
  std::deque<Pending> pending_;  // token = index + base_
  size_t base_ = 0;
  std::vector<cudaEvent_t> free_events_;
};

class CudaBackend : public DeviceBackend {
 public:
  virtual int index() const = 0;
  virtual cudaStream_t stream() const = 0;  // the compute stream
  virtual GpuTimer& timer() = 0;
};

}  // namespace shardlab
