// What communicator implementations (Gloo, NCCL, host staging) share: the
// state behind a Work handle (finished with an error string, or completed by a
// function run in wait() on the waiter's thread), an op's description, and the
// wording of their errors.
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm.h"

namespace shardlab {

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  // The CommError message, "" on success. A string rather than an exception_ptr:
  // each waiter throws its own copy, so no exception object is shared by threads.
  std::string error;
  // Point-to-point ops complete in wait() (waitSend/waitRecv on the caller's
  // thread) and return their error; collectives leave this empty.
  std::function<std::string()> complete;

  // A send/recv whose Work is dropped unwaited is waited for here: Gloo drops a
  // posted send whose buffer is destroyed, and a destroyed recv buffer wedges the
  // connection for every later op. (std::async's future blocks for the same reason.)
  ~State() {
    // Its error is already recorded and the comm marked broken; a destructor
    // has no one to report to.
    if (complete) complete();
  }

  void finish(std::string e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      error = std::move(e);
      finished = true;
    }
    cv.notify_all();
  }
};

// A Work that is already finished (error "" = success).
inline Work finished_work(std::string error = "") {
  auto s = std::make_shared<Work::State>();
  s->finish(std::move(error));
  return Work(s);
}

// A Work completed in wait() by `complete`, which returns the error ("" = success).
inline Work deferred_work(std::function<std::string()> complete) {
  auto s = std::make_shared<Work::State>();
  s->complete = std::move(complete);
  return Work(s);
}

// One operation as a communicator records and reports it.
struct OpInfo {
  SpanKind kind = SpanKind::other;
  int64_t bytes = 0;  // this rank's payload, as recorded on the span
  CommMeta meta;
  int peer = -1;  // send/recv only
  int tag = -1;
  uint64_t flow_id = 0;
};

inline bool is_p2p(SpanKind kind) {
  return kind == SpanKind::send || kind == SpanKind::recv;
}

// "rank R: all_reduce of N bytes" (with the tag for send/recv).
std::string op_prefix(int rank, const OpInfo& op);
// Throws CommError unless 0 <= r < world ("... peer 5 is not a rank of a group of 4").
void check_rank(int rank, int world, const OpInfo& op, int r, const char* what);
// Throws CommError unless there is one count per rank.
void check_counts(int rank, int world, const char* name, const std::vector<size_t>& counts);

// Sends made by `rank` in Gloo's options-style broadcast. gloo/broadcast.cc is a
// binomial tree (not one-to-all): the root sends ceil(log2 W) times, inner ranks
// forward, leaves send nothing, W-1 sends in all. NCCL's broadcast is a chain,
// but counts the same, so the two backends' numbers compare like with like.
int64_t broadcast_tree_sends(int rank, int root, int world);

}  // namespace shardlab
