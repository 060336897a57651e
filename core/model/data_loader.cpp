// The per-rank data loader (see data_loader.h).
#include "core/model/data_loader.h"

#include "core/device/device.h"

namespace shardlab {

DataLoader::DataLoader(const Dataset& inner, size_t x_numel, size_t y_numel, int steps)
    : inner_(inner), x_numel_(x_numel), y_numel_(y_numel), steps_(steps) {
  worker_ = std::thread([this] { work(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void DataLoader::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const auto [key, made] = queue_.front();
    queue_.pop_front();
    lock.unlock();
    const auto [step, first, rows, with_y] = key;
    made->x.resize(static_cast<size_t>(rows) * x_numel_);
    if (with_y) made->y.resize(static_cast<size_t>(rows) * y_numel_);
    inner_.rows(step, first, rows, made->x.data(), with_y ? made->y.data() : nullptr);
    lock.lock();
    made->done = true;
    cv_.notify_all();
  }
}

bool DataLoader::load(DeviceBackend& dev, int step, int row_begin, int rows, void* x_dev,
                      void* y_dev) const {
  const bool with_y = y_dev != nullptr;
  std::shared_ptr<Made> made;
  {
    std::unique_lock<std::mutex> lock(mu_);
    ++requests_;
    const auto it = made_.find(Key{step, row_begin, rows, with_y});
    if (it != made_.end()) {
      made = it->second;
      made_.erase(it);
      cv_.wait(lock, [&] { return made->done; });
      ++served_ahead_;
    }
  }
  if (made) {
    dev.copy(x_dev, made->x.data(), made->x.size() * 4, CopyKind::host_to_device);
    if (with_y) dev.copy(y_dev, made->y.data(), made->y.size() * 4, CopyKind::host_to_device);
  } else {
    inner_.load(dev, step, row_begin, rows, x_dev, y_dev);
  }
  if (step + 1 < steps_) {
    std::lock_guard<std::mutex> lock(mu_);
    const Key next{step + 1, row_begin, rows, with_y};
    auto [it, fresh] = made_.emplace(next, std::make_shared<Made>());
    if (fresh) queue_.emplace_back(next, it->second);
  }
  cv_.notify_all();
  return made != nullptr;
}

int DataLoader::served_ahead() const {
  std::lock_guard<std::mutex> lock(mu_);
  return served_ahead_;
}

int DataLoader::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

}  // namespace shardlab
