// Where a buffer lives and how to move bytes there. Only `cpu` exists today;
// the interface (streams, events, copies by direction) is what a CUDA device needs.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace shardlab {

enum class DeviceKind { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  std::string str() const {
    return kind == DeviceKind::cpu ? "cpu" : "cuda:" + std::to_string(index);
  }
  bool operator==(const Device&) const = default;
};

enum class CopyKind { host_to_device, device_to_host, device_to_device, host_to_host };

// An ordered queue of work on a device. On the CPU work runs when issued, so a
// stream is always idle; on a GPU it maps to a cudaStream_t.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual void synchronize() = 0;
};

// A marker recorded on a stream: another stream (or the host) can wait for it,
// and two events give a device-side duration.
class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream& stream) = 0;
  virtual void wait(Stream& stream) = 0;  // make `stream` wait for this event
  virtual void synchronize() = 0;         // block the host until it has happened
  virtual double elapsed_ms_since(const Event& start) const = 0;
};

// Raw memory and copies on one device. Accounting lives above it, in Allocator.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual Device device() const = 0;
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr, size_t bytes) = 0;
  // Host memory for offload pools (pinned on a GPU, plain on the CPU).
  virtual void* raw_alloc_host(size_t bytes) = 0;
  virtual void raw_free_host(void* ptr, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind) = 0;
  virtual Stream& compute_stream() = 0;
  virtual std::unique_ptr<Stream> create_stream() = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  virtual void synchronize() = 0;
};

std::unique_ptr<DeviceBackend> make_cpu_backend();

}  // namespace shardlab
