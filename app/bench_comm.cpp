// `shardlab bench comm`: times all_reduce, all_gather and reduce_scatter over the
// Gloo comm for a range of sizes and world sizes, with memcpy as a yardstick.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "app/args.h"
#include "app/commands.h"
#include "core/comm/comm.h"
#include "core/predict/memory_estimate.h"

namespace shardlab::app {
namespace {

constexpr const char* kUsage =
    "usage: shardlab bench step [options]   (see shardlab bench step --help)\n"
    "       shardlab bench strategies [options]   (every strategy on one device; --help)\n"
    "       shardlab bench gpu [options]   (the workloads compared with PyTorch on a GPU; --help)\n"
    "       shardlab bench comm [--sizes 4K..64M | --sizes 4K,1M,...] [--worlds 2,4]\n"
    "                           [--iters N] [--timeout-ms MS] [--force]\n"
    "  Times f32 all_reduce, all_gather and reduce_scatter over Gloo TCP on 127.0.0.1\n"
    "  (ranks are threads of this process) and a plain memcpy of the same size.\n"
    "  --sizes       a range A..B (each step x4) or a comma list; suffixes K, M, G (KiB...)\n"
    "                and multiples of 4 bytes; default 4K..64M\n"
    "  --worlds      comma list of world sizes, 1..64; default 2,4\n"
    "  --iters       timed iterations per row; default: 20 for small sizes, down to 3 for\n"
    "                the largest\n"
    "  --timeout-ms  timeout of every collective; default 30000\n"
    "  --force       run sizes the memory check says will not fit (it refuses, exit 2,\n"
    "                sizes whose buffers exceed MemAvailable or SHARDLAB_MEMORY_LIMIT)\n"
    "  time = median over iterations of the slowest rank (barrier before each one);\n"
    "  algbw = bytes / time; busbw as in nccl-tests: all_reduce algbw*2(W-1)/W,\n"
    "  all_gather and reduce_scatter algbw*(W-1)/W, bytes being the full buffer.\n";

struct Options {
  std::vector<size_t> sizes;
  std::vector<int> worlds = {2, 4};
  int iters = 0;  // 0 = by size
  int timeout_ms = 30000;
  bool force = false;
};

// Host memory one world of bench_world holds at its largest size: every rank's
// two buffers and Gloo's own (ring chunks and the reduce-scatter scratch,
// measured under 1.3 x size / world), and rank 0's memcpy yardstick (two more).
int64_t bench_bytes(size_t max_bytes, int world) {
  const double b = static_cast<double>(max_bytes);
  const double need = world * (2 * b + 2 * b / world) + 2 * b;
  return need >= 9e18 ? INT64_MAX : static_cast<int64_t>(need);
}

std::optional<long long> parse_int(const std::string& s) {
  if (s.empty()) return std::nullopt;
  size_t used = 0;
  try {
    const long long v = std::stoll(s, &used);
    if (used != s.size()) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// "4096", "4K", "64M", "1G" (binary multiples); must be a positive multiple of 4.
std::optional<size_t> parse_size(std::string s) {
  size_t mult = 1;
  if (!s.empty()) {
    const char suffix = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
    if (suffix == 'K') mult = size_t{1} << 10;
    if (suffix == 'M') mult = size_t{1} << 20;
    if (suffix == 'G') mult = size_t{1} << 30;
    if (mult != 1) s.pop_back();
  }
  const auto v = parse_int(s);
  if (!v || *v <= 0 || *v > (1ll << 40) / static_cast<long long>(mult)) return std::nullopt;
  const size_t bytes = static_cast<size_t>(*v) * mult;
  if (bytes % 4 != 0) return std::nullopt;
  return bytes;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t end = s.find(sep, start);
    parts.push_back(s.substr(start, end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

std::optional<std::vector<size_t>> parse_sizes(const std::string& s) {
  std::vector<size_t> sizes;
  if (const size_t dots = s.find(".."); dots != std::string::npos) {
    const auto lo = parse_size(s.substr(0, dots));
    const auto hi = parse_size(s.substr(dots + 2));
    if (!lo || !hi || *lo > *hi) return std::nullopt;
    for (size_t b = *lo; b <= *hi; b *= 4) sizes.push_back(b);
    return sizes;
  }
  for (const auto& part : split(s, ',')) {
    const auto b = parse_size(part);
    if (!b) return std::nullopt;
    sizes.push_back(*b);
  }
  return sizes;
}

std::optional<std::vector<int>> parse_worlds(const std::string& s) {
  std::vector<int> worlds;
  for (const auto& part : split(s, ',')) {
    const auto w = parse_int(part);
    if (!w || *w < 1 || *w > 64) return std::nullopt;
    worlds.push_back(static_cast<int>(*w));
  }
  return worlds;
}

std::string human_size(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && u < 3 && static_cast<size_t>(v) % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g %s", v, units[u]);
  return buf;
}

// Big sizes take long enough that a few iterations give a stable median.
int iters_for(size_t bytes, const Options& opt) {
  if (opt.iters > 0) return opt.iters;
  if (bytes <= (size_t{256} << 10)) return 20;
  if (bytes <= (size_t{4} << 20)) return 10;
  if (bytes <= (size_t{16} << 20)) return 5;
  return 3;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void print_row(size_t bytes, const char* op, const std::string& world, double seconds,
               double bus_factor) {
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  std::printf("%10s  %-15s %5s %12.2f %11.3f %11.3f\n", human_size(bytes).c_str(), op,
              world.c_str(), seconds * 1e6, algbw, algbw * bus_factor);
  std::fflush(stdout);
}

double time_memcpy(size_t bytes, int iters) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);  // touched once, so no page faults are timed
  std::memcpy(dst.data(), src.data(), bytes);
  std::vector<double> t;
  for (int i = 0; i < std::max(iters, 5); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    t.push_back(seconds_since(t0));
    // Keep the copy from being optimised away.
    if (dst[bytes / 2] != 1) std::fprintf(stderr, "memcpy check failed\n");
  }
  return median(t);
}

enum Op { kAllReduce, kAllGather, kReduceScatter, kNumOps };
const char* kOpNames[kNumOps] = {"all_reduce", "all_gather", "reduce_scatter"};

// Runs every size for one world size; rank 0 prints each size's rows as soon
// as all ranks have timed it. Returns false after a communication failure.
bool bench_world(int world, const Options& opt) {
  GlooGroup group(world, GlooGroupOptions{std::chrono::milliseconds(opt.timeout_ms)});
  const size_t max_bytes = *std::max_element(opt.sizes.begin(), opt.sizes.end());
  // times[op][rank][iter] for the current size; written by each rank, read by
  // rank 0 after the thread barrier.
  std::vector<std::vector<std::vector<double>>> times(kNumOps,
                                                      std::vector<std::vector<double>>(world));
  std::barrier sync(world);
  std::mutex error_mu;
  std::string error;

  auto rank_main = [&](int rank) {
    try {
      auto comm = group.connect(rank, nullptr, nullptr);
      std::vector<float> a, b;
      try {
        a.assign(max_bytes / 4, 0.0f);  // zeros never overflow
        b.assign(max_bytes / 4, 0.0f);
      } catch (const std::bad_alloc&) {
        throw std::runtime_error("rank " + std::to_string(rank) + " could not allocate its two " +
                                 human_size(max_bytes) + " buffers: out of memory");
      }
      for (size_t bytes : opt.sizes) {
        const size_t n = bytes / 4;
        const auto counts = even_counts(n, world);
        const int iters = iters_for(bytes, opt);
        for (int op = 0; op < kNumOps; ++op) {
          auto run_once = [&] {
            switch (op) {
              case kAllReduce:
                comm->all_reduce(a.data(), n, DType::f32);
                break;
              case kAllGather:
                comm->all_gather(a.data(), b.data(), counts, DType::f32);
                break;
              case kReduceScatter:
                comm->reduce_scatter(a.data(), b.data(), counts, DType::f32);
                break;
            }
          };
          auto& t = times[op][rank];
          t.clear();
          comm->barrier();
          run_once();  // warm-up: first-touch of buffers and connections
          for (int i = 0; i < iters; ++i) {
            comm->barrier();
            const auto t0 = std::chrono::steady_clock::now();
            run_once();
            t.push_back(seconds_since(t0));
          }
        }
        sync.arrive_and_wait();
        if (rank == 0) {
          const double bus[kNumOps] = {2.0 * (world - 1) / world, double(world - 1) / world,
                                       double(world - 1) / world};
          for (int op = 0; op < kNumOps; ++op) {
            std::vector<double> slowest(iters, 0.0);
            for (int r = 0; r < world; ++r) {
              const auto& t = times[op][r];
              if (t.size() != static_cast<size_t>(iters)) return;  // a rank failed; reported below
              for (int i = 0; i < iters; ++i) slowest[i] = std::max(slowest[i], t[i]);
            }
            print_row(bytes, kOpNames[op], std::to_string(world), median(slowest), bus[op]);
          }
          print_row(bytes, "memcpy", "-", time_memcpy(bytes, iters), 1.0);
        }
        sync.arrive_and_wait();  // rank 0 has read times before they are cleared
      }
    } catch (const std::exception& e) {
      group.failures().report(rank, e.what());
      {
        std::lock_guard<std::mutex> lock(error_mu);
        if (error.empty()) error = e.what();
      }
      sync.arrive_and_drop();  // the other ranks must not wait for this one
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  if (!error.empty()) {
    std::fprintf(stderr, "error: bench comm with %d ranks: %s\n", world, error.c_str());
    return false;
  }
  return true;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "error: bench needs what to benchmark (valid: comm, step, strategies, gpu)\n");
    return 2;
  }
  const std::string what = argv[1];
  if (what == "step") return bench_step(argc - 1, argv + 1);
  if (what == "strategies") return bench_strategies(argc - 1, argv + 1);
  if (what == "gpu") return bench_gpu(argc - 1, argv + 1);
  if (what == "--help" || what == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (what != "comm") {
    std::fprintf(stderr, "error: unknown benchmark '%s' (valid: comm, step, strategies, gpu)\n",
                 what.c_str());
    return 2;
  }

  // The shared parser: unknown options, stray words and missing values are refused
  // as everywhere else; the values are checked here, each with its own range.
  const Args a(argc - 1, argv + 1, "bench comm", {"sizes", "worlds", "iters", "timeout-ms"},
               {"force"});
  if (a.help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Options opt;
  const std::string sizes_text = a.str("sizes", "4K..64M");
  const auto sizes = parse_sizes(sizes_text);
  if (!sizes || sizes->empty())
    throw ConfigError("--sizes '" + sizes_text +
                      "' is not a range like 4K..64M or a list like 4K,1M of positive multiples "
                      "of 4 bytes");
  opt.sizes = *sizes;
  if (auto w = a.get("worlds")) {
    const auto worlds = parse_worlds(*w);
    if (!worlds)
      throw ConfigError("--worlds '" + *w + "' is not a list like 2,4 of values in 1..64");
    opt.worlds = *worlds;
  }
  if (auto v = a.get("iters")) {
    const auto n = parse_int(*v);
    if (!n || *n < 1 || *n > 100000)
      throw ConfigError("--iters '" + *v + "' must be an integer in 1..100000");
    opt.iters = static_cast<int>(*n);
  }
  if (auto v = a.get("timeout-ms")) {
    const auto n = parse_int(*v);
    if (!n || *n < 1 || *n > 3600000)
      throw ConfigError("--timeout-ms '" + *v + "' must be an integer in 1..3600000");
    opt.timeout_ms = static_cast<int>(*n);
  }
  opt.force = a.has("force");

  // Every world's buffers are made for its largest size at once: refuse now what
  // cannot fit, rather than after the smaller sizes or never (swapping).
  if (!opt.force) {
    const size_t max_bytes = *std::max_element(opt.sizes.begin(), opt.sizes.end());
    int worst = opt.worlds[0];
    for (int w : opt.worlds)
      if (bench_bytes(max_bytes, w) > bench_bytes(max_bytes, worst)) worst = w;
    const int64_t need = bench_bytes(max_bytes, worst);
    const MemoryLimit limit = host_memory_limit();
    if (limit.bytes >= 0 && need > limit.bytes) {
      std::fprintf(stderr,
                   "error: bench comm --sizes up to %s with --worlds %d needs about %s but %s is "
                   "available (%s); use smaller --sizes or fewer --worlds, or --force to try "
                   "anyway\n",
                   human_size(max_bytes).c_str(), worst,
                   bytes_string(static_cast<double>(need)).c_str(),
                   bytes_string(static_cast<double>(limit.bytes)).c_str(), limit.source.c_str());
      return 2;
    }
  }

  std::printf(
      "Gloo TCP on 127.0.0.1, ranks as threads, f32. time: median over iterations of the\n"
      "slowest rank; busbw per nccl-tests (all_reduce x2(W-1)/W, gathers x(W-1)/W).\n\n");
  std::printf("%10s  %-15s %5s %12s %11s %11s\n", "size", "op", "world", "time_us", "algbw_GB/s",
              "busbw_GB/s");
  for (size_t i = 0; i < opt.worlds.size(); ++i) {
    if (i > 0) std::printf("\n");
    if (!bench_world(opt.worlds[i], opt)) return 1;
  }
  return 0;
}

}  // namespace shardlab::app
