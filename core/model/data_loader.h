// A rank's data loader: while a step runs, a worker thread makes the batch the
// rank will ask for next (the same rows of the next step, as a PyTorch
// DataLoader worker with one batch of prefetch does), so making it leaves the
// step's critical path and the step only copies it in. For devices whose
// batches the host makes (the CPU); a GPU makes its own batches on the device.
#pragma once
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>

#include "core/model/layer_call.h"

namespace shardlab {

class DataLoader final : public Dataset {
 public:
  // `x_numel`, `y_numel`: values per row of the inputs and the targets (4 bytes
  // each: fp32 values or int32 token ids). Nothing is made ahead for `steps`
  // or later.
  DataLoader(const Dataset& inner, size_t x_numel, size_t y_numel, int steps);
  ~DataLoader() override;  // stops the worker (batches made ahead and never asked for are dropped)
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // A request met from a batch made ahead waits for it if the worker is still
  // at it, then copies it in; any other request is made here, as without a
  // loader. Either way the same request for the next step is queued. The
  // values are the same bits either way: both are the dataset's rows().
  bool load(DeviceBackend& dev, int step, int row_begin, int rows, void* x_dev,
            void* y_dev) const override;
  void rows(int step, int row_begin, int rows, void* x, void* y) const override {
    inner_.rows(step, row_begin, rows, x, y);
  }
  bool tokens() const override { return inner_.tokens(); }
  std::string describe() const override { return inner_.describe(); }

  // Requests met from a batch made ahead, and all requests (for tests).
  int served_ahead() const;
  int requests() const;

 private:
  using Key = std::tuple<int, int, int, bool>;  // step, first row, rows, with targets
  struct Made {
    std::vector<uint32_t> x, y;
    bool done = false;
  };
  void work();

  const Dataset& inner_;
  const size_t x_numel_, y_numel_;
  const int steps_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::map<Key, std::shared_ptr<Made>> made_;
  // In the worker's order; a request may take its batch out of made_ before
  // the worker reaches it, and then waits on the same Made.
  mutable std::deque<std::pair<Key, std::shared_ptr<Made>>> queue_;
  mutable int served_ahead_ = 0, requests_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace shardlab
