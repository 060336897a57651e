// Live files for runs of one process per rank (see live_stream.h): JSON lines
// {"s":[span row]}, {"a":[alloc row]}, {"l":[step, loss]}, rows in the
// recording's column order.
#include "core/record/live_stream.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace shardlab {
namespace {

using nlohmann::json;

template <typename E, int N>
E enum_named(const std::string& s, const char* what) {
  for (int i = 0; i < N; ++i)
    if (s == to_string(static_cast<E>(i))) return static_cast<E>(i);
  throw std::runtime_error(std::string("'") + s + "' is not a " + what);
}

}  // namespace

std::string live_file(const std::string& dir, int rank) {
  return dir + "/rank" + std::to_string(rank) + ".live";
}

LiveWriter::LiveWriter(const std::string& path, std::shared_ptr<Recorder> recorder, int64_t t0_ns)
    : path_(path), rec_(std::move(recorder)), t0_ns_(t0_ns) {
  // O_NOFOLLOW|O_EXCL: a fresh file of our own, never written through a link.
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd_ < 0)
    throw std::runtime_error("cannot create live file '" + path + "': " + std::strerror(errno));
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      lock.unlock();
      flush();
      lock.lock();
    }
  });
}

LiveWriter::~LiveWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  flush();
  ::close(fd_);
}

void LiveWriter::note_loss(int step, double loss) {
  std::lock_guard<std::mutex> lock(mu_);
  losses_.emplace_back(step, loss);
}

void LiveWriter::flush() {
  std::vector<Span> spans;
  std::vector<AllocEvent> allocs;
  rec_->spans_since(spans_done_, spans);
  rec_->allocs_since(allocs_done_, allocs);
  spans_done_ += spans.size();
  allocs_done_ += allocs.size();
  std::vector<std::pair<int, double>> losses;
  {
    std::lock_guard<std::mutex> lock(mu_);
    losses.swap(losses_);
  }
  std::string out;
  for (const Span& s : spans)
    out += json{{"s",
                 {s.t_begin_ns - t0_ns_, s.t_end_ns - t0_ns_, to_string(s.lane), to_string(s.kind),
                  s.layer, s.micro_batch, s.step, s.bytes, s.peer, s.flow_id, s.made_ahead, s.group,
                  s.staleness}}}
               .dump() +
           "\n";
  for (const AllocEvent& a : allocs)
    out += json{{"a",
                 {a.t_ns - t0_ns_, a.delta_bytes, a.buffer_id, to_string(a.category),
                  to_string(a.pool), a.name}}}
               .dump(-1, ' ', false, json::error_handler_t::replace) +
           "\n";
  for (const auto& [step, loss] : losses)
    // NaN and infinities are not JSON: the run stops on them anyway (LossDiverged).
    if (std::isfinite(loss)) out += json{{"l", {step, loss}}}.dump() + "\n";
  // One write per flush: the file is O_APPEND, and a watcher reads whole lines.
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::write(fd_, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a full disk costs the live view, never the run
    done += static_cast<size_t>(n);
  }
}

LiveReader::LiveReader(std::string dir, int world)
    : dir_(std::move(dir)), offset_(world, 0), partial_(world), lines_(world, 0) {
  for (int r = 0; r < world; ++r) recs_.push_back(std::make_shared<Recorder>(r, true));
}

bool LiveReader::poll(std::vector<double>& losses) {
  bool changed = false;
  for (size_t r = 0; r < recs_.size(); ++r) {
    const std::string path = live_file(dir_, static_cast<int>(r));
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;  // that rank has not started yet
    std::string text;
    char buf[1 << 16];
    if (::lseek(fd, offset_[r], SEEK_SET) == offset_[r]) {
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    offset_[r] += static_cast<int64_t>(text.size());
    text = partial_[r] + text;
    const size_t last = text.rfind('\n');
    partial_[r] = last == std::string::npos ? text : text.substr(last + 1);
    if (last == std::string::npos) continue;
    size_t begin = 0;
    while (begin <= last) {
      const size_t end = text.find('\n', begin);
      const std::string line = text.substr(begin, end - begin);
      begin = end + 1;
      ++lines_[r];
      try {
        const json j = json::parse(line);
        if (j.contains("s")) {
          const json& v = j["s"];
          Span s;
          s.rank = static_cast<int>(r);
          s.t_begin_ns = v.at(0).get<int64_t>();
          s.t_end_ns = v.at(1).get<int64_t>();
          s.lane = enum_named<Lane, kNumLanes>(v.at(2).get<std::string>(), "lane");
          s.kind = enum_named<SpanKind, kNumSpanKinds>(v.at(3).get<std::string>(), "span kind");
          s.layer = v.at(4).get<int>();
          s.micro_batch = v.at(5).get<int>();
          s.step = v.at(6).get<int>();
          s.bytes = v.at(7).get<int64_t>();
          s.peer = v.at(8).get<int>();
          s.flow_id = v.at(9).get<uint64_t>();
          if (v.size() > 10) s.made_ahead = v.at(10).get<bool>();
          if (v.size() > 11) s.group = v.at(11).get<int>();
          if (v.size() > 12) s.staleness = v.at(12).get<int>();
          recs_[r]->add_span(s);
        } else if (j.contains("a")) {
          const json& v = j["a"];
          AllocEvent a;
          a.t_ns = v.at(0).get<int64_t>();
          a.delta_bytes = v.at(1).get<int64_t>();
          a.buffer_id = v.at(2).get<uint64_t>();
          a.category =
              enum_named<MemCategory, kNumMemCategories>(v.at(3).get<std::string>(), "category");
          a.pool = enum_named<Pool, kNumPools>(v.at(4).get<std::string>(), "pool");
          a.name = v.at(5).get<std::string>();
          recs_[r]->add_alloc(std::move(a));
        } else if (j.contains("l")) {
          const int step = j["l"].at(0).get<int>();
          if (step < 0 || step > (1 << 30)) throw std::runtime_error("step out of range");
          if (static_cast<size_t>(step) >= losses.size()) losses.resize(step + 1, 0.0);
          losses[static_cast<size_t>(step)] = j["l"].at(1).get<double>();
        } else {
          throw std::runtime_error("not a span, allocation or loss");
        }
      } catch (const std::exception& e) {
        throw std::runtime_error("live file '" + path + "' line " + std::to_string(lines_[r]) +
                                 ": " + e.what());
      }
      changed = true;
    }
  }
  return changed;
}

}  // namespace shardlab
