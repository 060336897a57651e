// Watching a run whose ranks are processes while it runs: each process appends
// what its recorder gained (spans, allocations) and the losses to its own file
// as JSON lines; the app reads the files as they grow.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/record/recorder.h"

namespace shardlab {

// "DIR/rank<R>.live"
std::string live_file(const std::string& dir, int rank);

// One process's side: every 100 ms (and at the end) appends the spans and
// allocations `recorder` gained since the last time, with times relative to
// `t0_ns` (rank 0's clock zero), and the losses noted since. Each append is one
// write() of whole lines, so a reader never sees half a record unless it reads
// while the write is under way (it keeps an unfinished last line for later).
class LiveWriter {
 public:
  // Throws std::runtime_error naming the file when it cannot be created.
  LiveWriter(const std::string& path, std::shared_ptr<Recorder> recorder, int64_t t0_ns);
  ~LiveWriter();  // stops the thread, appends what is left
  LiveWriter(const LiveWriter&) = delete;
  LiveWriter& operator=(const LiveWriter&) = delete;

  void note_loss(int step, double loss);  // any thread

 private:
  void flush();
  std::string path_;
  int fd_ = -1;
  std::shared_ptr<Recorder> rec_;
  int64_t t0_ns_;
  size_t spans_done_ = 0, allocs_done_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::pair<int, double>> losses_;
  std::thread thread_;
};

// The app's side: reads every rank's file from where it stopped, into one
// recorder per rank (times on a clock whose zero is the run's start) and the
// losses by step.
class LiveReader {
 public:
  LiveReader(std::string dir, int world);
  // The recorders the views read while the run goes on.
  const std::vector<std::shared_ptr<Recorder>>& recorders() const { return recs_; }
  // Reads what is new; returns true when anything was. Throws std::runtime_error
  // "live file 'F' line N: ..." for a line that is not ours.
  bool poll(std::vector<double>& losses);

 private:
  std::string dir_;
  std::vector<std::shared_ptr<Recorder>> recs_;
  std::vector<int64_t> offset_;
  std::vector<std::string> partial_;
  std::vector<int> lines_;
};

}  // namespace shardlab
