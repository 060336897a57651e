// The meta device: a DeviceBackend that holds no memory. Strategies and layers
// run on it unchanged under the real Allocator, so what that allocator counts
// is a prediction of a real run's memory made by the real code (no twin to keep).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/device/device.h"
#include "core/record/recorder.h"

namespace shardlab {

// One entry of a meta run's ordered operation list, in the rank's program
// order: a compute span with the matrix FLOPs its kernels would do, a
// communication op where it was issued (bytes of this rank's payload, peer for
// send/recv), or where the program waited for one (`id` names it). The input
// a projection onto a modelled cluster needs for a run that never ran.
struct MetaOp {
  enum class What : uint8_t { compute, issue, wait };
  What what = What::compute;
  SpanKind kind = SpanKind::other;
  int step = -1;  // -1: setup or export
  int layer = -1;
  int micro_batch = -1;
  int64_t bytes = 0;
  int64_t flops = 0;
  int peer = -1;
  uint64_t id = 0;  // a communication op's id on this rank (issue and wait)
};

// A rank's operation list, appended by its meta device's clock (compute spans)
// and its meta communicator (issues and waits).
class OpLog {
 public:
  void add(const MetaOp& op) {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back(op);
  }
  std::vector<MetaOp> take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(ops_);
  }

 private:
  std::mutex mu_;
  std::vector<MetaOp> ops_;
};

// Stands for `stands_for` (cpu or cuda:N): reports that device, so pools,
// scratch placement and 2-byte math (native_2byte_math) choose as they would
// there. Device blocks are fake addresses in a reserved, non-canonical range
// (any dereference faults at once), aligned as the real device aligns; kernels
// do nothing; download() and all_finite() see zeros: loss 0, finite, no fp16
// overflow. Host blocks (raw_alloc_host) are real memory, because host code
// reads them (the allocator zeroes them, offloaded optimizers step them).
std::unique_ptr<DeviceBackend> make_meta_backend(Device stands_for);

// The matrix FLOPs a meta device's kernels would have done so far: every GEMM
// (2·rows·in·out a product; a linear's backward two of them, one without an
// input gradient) and attention's batched products (4·B·T²·C forward, 8 backward,
// flash 10: it recomputes the scores). Elementwise kernels are not counted.
int64_t meta_flops(const DeviceBackend& meta);

// A DeviceClock for a meta rank (Recorder::set_device_clock): each compute
// span gets the FLOPs counted between its begin and end, goes to `log`, then
// to `rec` as any span. `meta` must be a meta device.
std::unique_ptr<DeviceClock> make_meta_flop_clock(const DeviceBackend& meta, Recorder& rec,
                                                  OpLog& log);

// True for an address the meta devices handed out (any rank's).
bool is_meta_pointer(const void* p);

}  // namespace shardlab
