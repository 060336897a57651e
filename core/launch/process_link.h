// What the rank threads of one process share in memory, as messages between
// processes when each rank is its own process: loss shares and end-of-run
// reports on a second Gloo group ("control", never recorded or counted), clock
// offsets measured at rendezvous, and failures and progress as keys in the
// run's store, read by a watchdog that ends a process whose rank is stuck.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/comm.h"
#include "core/launch/check_store.h"
#include "core/parallel/run_result.h"
#include "core/parallel/strategy.h"

namespace shardlab {

// One rank of a run whose ranks are processes (shardlab launch, torchrun,
// mpirun): this process runs `rank` alone and reaches its peers through
// `store`, which every process of the run can reach (core/launch/rdzv.h). What the
// threads of one process share in memory travels as messages on a second Gloo
// group ("control", never recorded or counted): each step's loss shares, the
// ranks' reports at the end, failures (a "failed/<rank>" key in the store).
struct ProcessContext {
  int rank = 0;
  int local_rank = 0;  // this process's place on its host: its GPU with --device cuda
  CheckStore* store = nullptr;
  std::string bind_host = "127.0.0.1";  // where this process's Gloo device listens
  // How long a rank waits for its own thread after a peer reported a failure,
  // before the watchdog ends the process (a rank stuck outside a collective).
  std::chrono::milliseconds watchdog_grace{2000};
};

class ProcessLink {
 public:
  ProcessLink(const ProcessContext& process, int world, const GlooGroupOptions& options);
  // The run's store behind a lock (Gloo's Redis store is not thread-safe, and
  // the rank thread and the watchdog both use it): every group connects through it.
  CheckStore& store();
  // The training group's failure board: this rank's failure is published
  // through it, and it names the peers' failures from the store.
  void attach(FailureBoard& train_board);
  ~ProcessLink();
  ProcessLink(const ProcessLink&) = delete;
  ProcessLink& operator=(const ProcessLink&) = delete;

  // On the rank's thread, before the training group connects: joins the
  // control group, measures every rank's clock against rank 0's (the best of
  // several round trips), fills result.clock_offset_ns/clock_rtt_ns for every
  // rank, and returns rank 0's t0 read on this process's clock.
  int64_t connect_and_align(RunResult& result);
  // This rank has started step `step` (named when its communication breaks).
  void note_step(int step);
  // `row[r]` becomes rank r's share of this step's loss, for every r.
  void gather_shares(LossShare* row, int rank);
  // Every rank's report, from every process, into `ranks`.
  void gather_reports(std::vector<RankReport>& ranks, int rank, int steps);
  // Every rank's spans and allocation events into result.recorders (this
  // process's own stay; the others' placeholders are replaced), their times
  // moved onto this process's clock with the offsets measured at rendezvous:
  // every process ends with the whole run's record, as a threaded run does.
  void gather_records(RunResult& result, int rank);

  // The watchdog: when a peer has published a failure and this rank's thread
  // has not returned within the grace period, it ends the process with one line.
  void start_watchdog();
  void stop_watchdog();

  // Why this rank's communication broke, from the store, once per run: the
  // first peer that failed for a reason of its own ("rank 2 failed: …"), else
  // the peers that went silent: after saying "stalled" itself, this rank waits
  // up to a second for every other rank to say "stalled" or "failed", or for
  // its watchdog to say "alive"; it names those whose process does not answer
  // (killed, crashed) and those alive but outside any communication for half
  // the timeout or more (stuck); "" when every rank stalled together.
  std::string describe_peers();

 private:
  std::string key_failed(int rank) const;
  std::string key_stalled(int rank) const;
  std::string key_alive(int rank) const;
  // The watchdog's answer to a peer whose communication broke: this process
  // lives, in which step, and how long its rank has been outside any op.
  void answer_alive();
  std::string read_key(const std::string& key);
  std::string first_failure();
  // The watchdog's question (no key written): has a peer failed, and why.
  std::string peer_failure_for_watchdog();
  bool has_key(const std::string& key);
  void watch();

  const ProcessContext process_;
  const int world_;
  const GlooGroupOptions options_;
  std::unique_ptr<CheckStore> locked_;
  std::unique_ptr<GlooGroup> control_group_;
  std::unique_ptr<Comm> control_;
  std::atomic<int> step_{-1};
  FailureBoard* train_board_ = nullptr;
  std::atomic<bool> answered_{false};
  std::mutex describe_mu_;  // describe_peers runs once; later calls read its answer
  bool stalled_published_ = false;
  std::optional<std::string> described_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace shardlab
