// The state behind a Work handle, which communicator implementations (Gloo,
// NCCL, host staging) create: finished with an error string, or completed by a
// function run in wait() on the waiter's thread. (What else they share is in
// core/comm/comm_common.h.)
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/comm.h"

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
  // Where the first wait() is marked (MarkKind::wait, naming op `op`); null
  // when the op is not recorded. Set once, at issue (track_issue).
  Recorder* recorder = nullptr;
  uint64_t op = 0;
  bool waited = false;  // guarded by mu: only the first wait is the program's

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

}  // namespace shardlab
