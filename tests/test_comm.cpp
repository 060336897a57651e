// The Gloo communicator: every collective (blocking and async) against a
// serial reference, point-to-point matching, spans, byte counts and timeouts.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/comm/comm.h"
#include "core/device/memory.h"
#include "core/record/recorder.h"
#include "kernels/precision.h"

using namespace shardlab;
using namespace std::chrono_literals;

namespace {

// Catch2 assertions are not thread-safe, so rank threads collect failures as
// strings and the test thread asserts on them after joining.
class Failures {
 public:
  void check(bool ok, int rank, const std::string& what) {
    if (ok) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (list_.size() < 20) list_.push_back("rank " + std::to_string(rank) + ": " + what);
  }
  std::string joined() const {
    std::string out;
    for (const auto& f : list_) out += f + "\n";
    return out;
  }
  bool empty() const { return list_.empty(); }

 private:
  std::mutex mu_;
  std::vector<std::string> list_;
};

using RankBody = std::function<void(Comm&, Failures&)>;

// Connects `world` rank threads to one fresh group and runs `body` on each.
// A per-rank recorder/allocator may be passed; either may be null.
std::string run_ranks(int world, const RankBody& body,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(5000),
                      std::vector<Recorder*> recorders = {},
                      std::vector<Allocator*> allocators = {}) {
  GlooGroup group(world, GlooGroupOptions{timeout});
  Failures failures;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        Recorder* rec = recorders.empty() ? nullptr : recorders[r];
        Allocator* alloc = allocators.empty() ? nullptr : allocators[r];
        auto comm = group.connect(r, rec, alloc);
        body(*comm, failures);
      } catch (const std::exception& e) {
        failures.check(false, r, std::string("threw: ") + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return failures.joined();
}

// Small integers plus halves: every sum over up to 4 ranks is exact in f32.
float value(int rank, size_t i) {
  return static_cast<float>(rank + 1) * 0.5f + float(i % 13);
}

float sum_over_ranks(int world, size_t i) {
  float s = 0;
  for (int r = 0; r < world; ++r) s += value(r, i);
  return s;
}

std::vector<float> rank_data(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(rank, i);
  return v;
}

const std::vector<size_t> kSizes = {0, 1, 7, 1000, 4096 + 3};

// Chunk counts including empty chunks, for reduce_scatter and all_gather.
std::vector<std::vector<size_t>> count_patterns(int world) {
  std::vector<std::vector<size_t>> patterns;
  for (size_t n : kSizes) patterns.push_back(even_counts(n, world));
  std::vector<size_t> zeros(world, 0);
  for (int r = 0; r < world; r += 2) zeros[r] = 5 + r;  // every other rank empty
  patterns.push_back(zeros);
  std::vector<size_t> last_only(world, 0);
  last_only[world - 1] = 9;
  patterns.push_back(last_only);
  return patterns;
}

}  // namespace

TEST_CASE("even_counts gives the first total % world ranks one more", "[comm]") {
  REQUIRE(even_counts(10, 4) == std::vector<size_t>{3, 3, 2, 2});
  REQUIRE(even_counts(2, 4) == std::vector<size_t>{1, 1, 0, 0});
  REQUIRE(even_counts(0, 1) == std::vector<size_t>{0});
}

TEST_CASE("FailureBoard names the root cause first and who stalled", "[comm]") {
  FailureBoard board;
  REQUIRE_FALSE(board.any());
  REQUIRE(board.describe().empty());
  board.report(1, "boom");
  board.report(3, "out of memory");
  REQUIRE(board.any());
  REQUIRE(board.describe() == "rank 1 failed: boom");
  REQUIRE(board.summary() == "rank 1 failed: boom (then rank 3 stopped too)");
  board.note_issued(0, 5);
  board.note_issued(2, 4);
  REQUIRE(board.behind(5) == "rank 2 (it issued 4 collectives, this is #5)");
}

TEST_CASE("all_reduce sums every rank's buffer", "[comm]") {
  const int world = GENERATE(1, 2, 3, 4);
  const bool async = GENERATE(false, true);
  CAPTURE(world, async);
  const auto failures = run_ranks(world, [&](Comm& comm, Failures& f) {
    for (size_t n : kSizes) {
      auto buf = rank_data(comm.rank(), n);
      if (async) {
        Work w = comm.all_reduce_async(buf.data(), n, DType::f32);
        w.wait();
        f.check(w.done(), comm.rank(), "work not done after wait");
      } else {
        comm.all_reduce(buf.data(), n, DType::f32);
      }
      for (size_t i = 0; i < n; ++i) {
        if (buf[i] != sum_over_ranks(world, i)) {
          f.check(false, comm.rank(), "n=" + std::to_string(n) + " wrong at " + std::to_string(i));
          break;
        }
      }
    }
  });
  REQUIRE(failures == "");
}

TEST_CASE("reduce_scatter leaves each rank its chunk of the sum", "[comm]") {
  const int world = GENERATE(1, 2, 3, 4);
  const bool async = GENERATE(false, true);
  CAPTURE(world, async);
  const auto failures = run_ranks(world, [&](Comm& comm, Failures& f) {
    const int r = comm.rank();
    for (const auto& counts : count_patterns(world)) {
      const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      const size_t offset = std::accumulate(counts.begin(), counts.begin() + r, size_t{0});
      auto in = rank_data(r, total);
      std::vector<float> out(counts[r] + 1, -1.0f);  // one guard element past the chunk
      if (async) {
        comm.reduce_scatter_async(in.data(), out.data(), counts, DType::f32).wait();
      } else {
        comm.reduce_scatter(in.data(), out.data(), counts, DType::f32);
      }
      bool ok = out[counts[r]] == -1.0f;
      for (size_t i = 0; i < counts[r]; ++i) ok = ok && out[i] == sum_over_ranks(world, offset + i);
      f.check(ok, r, "wrong chunk for total " + std::to_string(total));
    }
  });
  REQUIRE(failures == "");
}

TEST_CASE("all_gather concatenates chunks in rank order", "[comm]") {
  const int world = GENERATE(1, 2, 3, 4);
  const bool async = GENERATE(false, true);
  CAPTURE(world, async);
  const auto failures = run_ranks(world, [&](Comm& comm, Failures& f) {
    const int r = comm.rank();
    for (const auto& counts : count_patterns(world)) {
      const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      std::vector<size_t> offsets(world, 0);
      for (int i = 1; i < world; ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
      // Chunk of rank q holds value(q, global index).
      std::vector<float> chunk(counts[r]);
      for (size_t i = 0; i < counts[r]; ++i) chunk[i] = value(r, offsets[r] + i);
      std::vector<float> out(total, -1.0f);
      if (async) {
        comm.all_gather_async(chunk.data(), out.data(), counts, DType::f32).wait();
      } else {
        comm.all_gather(chunk.data(), out.data(), counts, DType::f32);
      }
      bool ok = true;
      for (int q = 0; q < world; ++q) {
        for (size_t i = 0; i < counts[q]; ++i)
          ok = ok && out[offsets[q] + i] == value(q, offsets[q] + i);
      }
      f.check(ok, r, "wrong gather for total " + std::to_string(total));

      // In place: the input chunk already sits at its place in the output.
      std::vector<float> inplace(total, -1.0f);
      for (size_t i = 0; i < counts[r]; ++i) inplace[offsets[r] + i] = value(r, offsets[r] + i);
      comm.all_gather(inplace.data() + offsets[r], inplace.data(), counts, DType::f32);
      f.check(inplace == out, r, "in-place gather differs for total " + std::to_string(total));
    }
  });
  REQUIRE(failures == "");
}

TEST_CASE("broadcast copies the root's buffer to every rank", "[comm]") {
  const int world = GENERATE(1, 2, 3, 4);
  const bool async = GENERATE(false, true);
  CAPTURE(world, async);
  const auto failures = run_ranks(world, [&](Comm& comm, Failures& f) {
    for (int root = 0; root < world; ++root) {
      for (size_t n : kSizes) {
        auto buf = rank_data(comm.rank(), n);
        if (async) {
          comm.broadcast_async(buf.data(), n, DType::f32, root).wait();
        } else {
          comm.broadcast(buf.data(), n, DType::f32, root);
        }
        f.check(buf == rank_data(root, n), comm.rank(),
                "root " + std::to_string(root) + " n=" + std::to_string(n));
      }
    }
  });
  REQUIRE(failures == "");
}

TEST_CASE("reduce sums onto the root and leaves the others alone", "[comm]") {
  const int world = GENERATE(1, 2, 3, 4);
  const bool async = GENERATE(false, true);
  CAPTURE(world, async);
  const auto failures = run_ranks(world, [&](Comm& comm, Failures& f) {
    const int r = comm.rank();
    for (int root = 0; root < world; ++root) {
      for (size_t n : kSizes) {
        auto buf = rank_data(r, n);
        if (async) {
          comm.reduce_async(buf.data(), n, DType::f32, root).wait();
        } else {
          comm.reduce(buf.data(), n, DType::f32, root);
        }
        bool ok = true;
        for (size_t i = 0; i < n; ++i) {
          ok = ok && buf[i] == (r == root ? sum_over_ranks(world, i) : value(r, i));
        }
        f.check(ok, r, "root " + std::to_string(root) + " n=" + std::to_string(n));
      }
    }
  });
  REQUIRE(failures == "");
}

TEST_CASE("barrier waits for the slowest rank", "[comm]") {
  const int world = GENERATE(1, 2, 3, 4);
  CAPTURE(world);
  // One process, one steady clock: no rank may leave the barrier before the
  // slow rank has entered it.
  std::atomic<int64_t> slow_entered_ns{0};
  const auto failures = run_ranks(world, [&](Comm& comm, Failures& f) {
    const bool slow = comm.rank() == world - 1;
    if (slow) {
      std::this_thread::sleep_for(30ms);
      slow_entered_ns = now_ns();
    }
    comm.barrier_async().wait();
    const int64_t left = now_ns();
    const int64_t entered = slow_entered_ns.load();
    f.check(entered != 0 && left >= entered, comm.rank(),
            "left the barrier before the slow rank entered it");
  });
  REQUIRE(failures == "");
}

TEST_CASE("send and recv: ping-pong, simultaneous exchange, ring shift", "[comm]") {
  SECTION("ping-pong") {
    const auto failures = run_ranks(2, [&](Comm& comm, Failures& f) {
      std::vector<float> buf(1000);
      for (int round = 0; round < 10; ++round) {
        if (comm.rank() == 0) {
          buf = rank_data(round, buf.size());
          comm.send(buf.data(), buf.size() * 4, 1, 7);
          comm.recv(buf.data(), buf.size() * 4, 1, 7);
          f.check(buf == rank_data(round + 1, buf.size()), 0, "pong payload");
        } else {
          comm.recv(buf.data(), buf.size() * 4, 0, 7);
          f.check(buf == rank_data(round, buf.size()), 1, "ping payload");
          buf = rank_data(round + 1, buf.size());
          comm.send(buf.data(), buf.size() * 4, 0, 7);
        }
      }
    });
    REQUIRE(failures == "");
  }
  SECTION("both ranks send, then receive") {
    const auto failures = run_ranks(2, [&](Comm& comm, Failures& f) {
      const int peer = 1 - comm.rank();
      const size_t n = 1 << 20;  // large enough not to fit in socket buffers
      auto out = rank_data(comm.rank(), n);
      std::vector<float> in(n);
      Work s = comm.send_async(out.data(), n * 4, peer, 0);
      comm.recv(in.data(), n * 4, peer, 0);
      s.wait();
      f.check(in == rank_data(peer, n), comm.rank(), "exchanged payload");
    });
    REQUIRE(failures == "");
  }
  SECTION("ring shift on 3 and 4 ranks, zero-byte messages too") {
    for (int world : {3, 4}) {
      const auto failures = run_ranks(world, [&](Comm& comm, Failures& f) {
        const int next = (comm.rank() + 1) % world, prev = (comm.rank() + world - 1) % world;
        for (size_t n : kSizes) {
          auto out = rank_data(comm.rank(), n);
          std::vector<float> in(n, -1.0f);
          Work s = comm.send_async(out.data(), n * 4, next, 3);
          Work r = comm.recv_async(in.data(), n * 4, prev, 3);
          r.wait();
          s.wait();
          f.check(in == rank_data(prev, n), comm.rank(), "shift n=" + std::to_string(n));
        }
      });
      REQUIRE(failures == "");
    }
  }
}

TEST_CASE("outstanding async ops can be waited in reverse order", "[comm]") {
  const int world = GENERATE(2, 3);
  CAPTURE(world);
  const auto failures = run_ranks(world, [&](Comm& comm, Failures& f) {
    const int r = comm.rank();
    const size_t n = 1003;
    auto ar = rank_data(r, n);
    auto bc = rank_data(r, n);
    auto counts = even_counts(n, world);
    std::vector<float> chunk(counts[r]);
    for (size_t i = 0; i < counts[r]; ++i) {
      chunk[i] = value(r, std::accumulate(counts.begin(), counts.begin() + r, size_t{0}) + i);
    }
    std::vector<float> gathered(n);
    auto rs_in = rank_data(r, n);
    std::vector<float> rs_out(counts[r]);
    // Point-to-point with several tags, posted before the collectives.
    const int next = (r + 1) % world, prev = (r + world - 1) % world;
    std::vector<std::vector<float>> p2p_in(3, std::vector<float>(64));
    std::vector<std::vector<float>> p2p_out;
    for (int t = 0; t < 3; ++t) p2p_out.push_back(rank_data(r * 10 + t, 64));

    std::vector<Work> works;
    for (int t = 0; t < 3; ++t) works.push_back(comm.recv_async(p2p_in[t].data(), 256, prev, t));
    for (int t = 0; t < 3; ++t) works.push_back(comm.send_async(p2p_out[t].data(), 256, next, t));
    works.push_back(comm.all_reduce_async(ar.data(), n, DType::f32));
    works.push_back(comm.broadcast_async(bc.data(), n, DType::f32, world - 1));
    works.push_back(comm.all_gather_async(chunk.data(), gathered.data(), counts, DType::f32));
    works.push_back(comm.reduce_scatter_async(rs_in.data(), rs_out.data(), counts, DType::f32));
    works.push_back(comm.barrier_async());
    for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();

    bool ok = true;
    for (size_t i = 0; i < n; ++i) ok = ok && ar[i] == sum_over_ranks(world, i);
    f.check(ok, r, "all_reduce");
    f.check(bc == rank_data(world - 1, n), r, "broadcast");
    ok = true;
    for (size_t i = 0; i < n; ++i) {
      int owner = 0;
      size_t end = counts[0];
      while (i >= end) end += counts[++owner];
      ok = ok && gathered[i] == value(owner, i);
    }
    f.check(ok, r, "all_gather");
    const size_t off = std::accumulate(counts.begin(), counts.begin() + r, size_t{0});
    ok = true;
    for (size_t i = 0; i < counts[r]; ++i) ok = ok && rs_out[i] == sum_over_ranks(world, off + i);
    f.check(ok, r, "reduce_scatter");
    for (int t = 0; t < 3; ++t) f.check(p2p_in[t] == rank_data(prev * 10 + t, 64), r, "p2p tag");
  });
  REQUIRE(failures == "");
}

TEST_CASE("spans carry kind, bytes, meta, and matching flow ids", "[comm]") {
  Recorder rec0(0), rec1(1);
  const auto failures = run_ranks(2,
                                  [&](Comm& comm, Failures&) {
                                    std::vector<float> buf(100, 1.0f);
                                    comm.all_reduce(buf.data(), 100, DType::f32, CommMeta{3, 1});
                                    comm.all_gather(buf.data(), buf.data(), {50, 50}, DType::f32);
                                    if (comm.rank() == 0) {
                                      comm.send(buf.data(), 40, 1, 0, CommMeta{5, 2});
                                      comm.send(buf.data(), 12, 1, 1, CommMeta{5, 3});
                                    } else {
                                      comm.recv(buf.data(), 40, 0, 0, CommMeta{5, 2});
                                      comm.recv(buf.data(), 12, 0, 1, CommMeta{5, 3});
                                    }
                                  },
                                  5000ms, {&rec0, &rec1});
  REQUIRE(failures == "");

  const auto s0 = rec0.snapshot().spans;
  const auto s1 = rec1.snapshot().spans;
  REQUIRE(s0.size() == 4);
  REQUIRE(s1.size() == 4);
  for (const auto* spans : {&s0, &s1}) {
    const Span& ar = (*spans)[0];
    CHECK(ar.kind == SpanKind::all_reduce);
    CHECK(ar.lane == Lane::comm);
    CHECK(ar.bytes == 400);
    CHECK(ar.layer == 3);
    CHECK(ar.micro_batch == 1);
    CHECK(ar.t_end_ns >= ar.t_begin_ns);
    CHECK((*spans)[1].kind == SpanKind::all_gather);
    CHECK((*spans)[1].bytes == 400);
  }
  for (int m = 0; m < 2; ++m) {
    const Span& send = s0[2 + m];
    const Span& recv = s1[2 + m];
    CHECK(send.kind == SpanKind::send);
    CHECK(recv.kind == SpanKind::recv);
    CHECK(send.peer == 1);
    CHECK(recv.peer == 0);
    CHECK(send.bytes == (m == 0 ? 40 : 12));
    CHECK(recv.bytes == send.bytes);
    CHECK(send.micro_batch == 2 + m);
    const uint64_t expected = (uint64_t{1} << 48) | (uint64_t{2} << 32) | uint64_t(m + 1);
    CHECK(send.flow_id == expected);
    CHECK(recv.flow_id == expected);
  }
}

TEST_CASE("stats count wire bytes by each algorithm's definition", "[comm]") {
  const int world = 4;
  std::vector<CommStats> stats(world);
  const auto failures = run_ranks(world, [&](Comm& comm, Failures&) {
    const int r = comm.rank();
    std::vector<float> buf(4096, 1.0f), out(4096);
    comm.all_reduce(buf.data(), 4096, DType::f32);  // 2 * 3/4 * 16384 = 24576
    stats[r] = comm.stats();
    // Uneven chunks: rank r sends every chunk but its own, in W-1 steps.
    const std::vector<size_t> counts = {10, 0, 30, 40};
    comm.reduce_scatter(buf.data(), out.data(), counts, DType::f32);
    const auto after_rs = comm.stats();
    stats[r].bytes_sent = after_rs.bytes_sent - stats[r].bytes_sent;
    stats[r].ops = after_rs.ops;
    if (r == 0) comm.send(buf.data(), 100, 1, 0);
    if (r == 1) comm.recv(buf.data(), 100, 0, 0);
    comm.barrier();
    if (r == 0) stats[r].bytes_sent += comm.stats().bytes_sent - after_rs.bytes_sent;
  });
  REQUIRE(failures == "");
  // Rank r never sends chunk r (it is the last to receive it).
  const std::vector<int64_t> own = {40, 0, 120, 160};
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    CHECK(stats[r].ops == 2);
    CHECK(stats[r].bytes_sent == 320 - own[r] + (r == 0 ? 100 : 0));
  }
}

TEST_CASE("all_reduce counts ring bytes", "[comm]") {
  std::vector<int64_t> sent(4);
  const auto failures = run_ranks(4, [&](Comm& comm, Failures&) {
    std::vector<float> buf(4096, 1.0f);
    comm.all_reduce(buf.data(), 4096, DType::f32);
    sent[comm.rank()] = comm.stats().bytes_sent;
  });
  REQUIRE(failures == "");
  for (int64_t s : sent) CHECK(s == 24576);
}

TEST_CASE("reduce_scatter scratch is an accounted comm buffer", "[comm]") {
  auto backend = make_cpu_backend();
  Allocator a0(*backend, nullptr), a1(*backend, nullptr);
  const auto failures =
      run_ranks(2,
                [&](Comm& comm, Failures&) {
                  std::vector<float> in(1000, 1.0f), out(500);
                  comm.reduce_scatter(in.data(), out.data(), {500, 500}, DType::f32);
                },
                5000ms, {}, {&a0, &a1});
  REQUIRE(failures == "");
  for (Allocator* a : {&a0, &a1}) {
    const auto& pool = a->stats().device;
    CHECK(pool.peak[static_cast<int>(MemCategory::comm_buffers)] == 2000);
  }
}

TEST_CASE("bf16 and fp16 all_reduce, reduce and reduce_scatter sum in 2 bytes", "[comm]") {
  const int world = GENERATE(2, 3);
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(world, to_string(dt));
    const auto to16 = [dt](float f) {
      return dt == DType::bf16 ? kernels::float_to_bf16(f) : kernels::float_to_fp16(f);
    };
    const auto from16 = [dt](uint16_t h) {
      return dt == DType::bf16 ? kernels::bf16_to_float(h) : kernels::fp16_to_float(h);
    };
    // Small integers and halves are exact in both formats, so sums are exact too.
    const auto value = [](int r, size_t i) { return static_cast<float>(r + 1) + 0.5f * (i % 4); };
    const auto failures = run_ranks(world, [&](Comm& comm, Failures& f) {
      const int r = comm.rank();
      const size_t n = 13;
      std::vector<uint16_t> buf(n), in(n);
      for (size_t i = 0; i < n; ++i) buf[i] = in[i] = to16(value(r, i));
      comm.all_reduce(buf.data(), n, dt);
      for (size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int k = 0; k < world; ++k) want += value(k, i);
        f.check(from16(buf[i]) == want, r, "all_reduce element " + std::to_string(i));
      }
      const auto counts = even_counts(n, world);
      const size_t offset = std::accumulate(counts.begin(), counts.begin() + r, size_t{0});
      std::vector<uint16_t> out(counts[r]);
      comm.reduce_scatter(in.data(), out.data(), counts, dt);
      for (size_t i = 0; i < counts[r]; ++i) {
        float want = 0;
        for (int k = 0; k < world; ++k) want += value(k, offset + i);
        f.check(from16(out[i]) == want, r, "reduce_scatter element " + std::to_string(i));
      }
      std::vector<uint16_t> red(n);
      for (size_t i = 0; i < n; ++i) red[i] = to16(value(r, i));
      comm.reduce(red.data(), n, dt, 0);
      if (r == 0) {
        float want = 0;
        for (int k = 0; k < world; ++k) want += value(k, 5);
        f.check(from16(red[5]) == want, r, "reduce element 5");
      } else {
        f.check(from16(red[5]) == value(r, 5), r, "reduce changed a non-root buffer");
      }
    });
    REQUIRE(failures == "");
  }
}

TEST_CASE("bad arguments throw CommError", "[comm]") {
  const auto failures = run_ranks(2, [&](Comm& comm, Failures& f) {
    std::vector<uint16_t> buf(8);
    bool threw = false;
    try {
      comm.broadcast(buf.data(), 8, DType::f32, 5);
    } catch (const CommError&) {
      threw = true;
    }
    f.check(threw, comm.rank(), "bad root did not throw");
    // The comm still works after rejected calls.
    std::vector<float> x(3, 1.0f);
    comm.all_reduce(x.data(), 3, DType::f32);
    f.check(x[0] == 2.0f, comm.rank(), "all_reduce after rejected calls");
  });
  REQUIRE(failures == "");
}

TEST_CASE("a rank that never arrives makes the collective time out, naming it", "[comm]") {
  GlooGroup group(2, GlooGroupOptions{500ms});
  std::string message;
  std::chrono::milliseconds took{};
  std::atomic<bool> rank0_done{false};
  std::string later_error;
  std::thread t1([&] {
    auto comm = group.connect(1, nullptr, nullptr);
    group.failures().report(1, "boom");
    while (!rank0_done) std::this_thread::sleep_for(5ms);  // stay connected, never call
  });
  std::thread t0([&] {
    auto comm = group.connect(0, nullptr, nullptr);
    std::vector<float> buf(1024, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->all_reduce(buf.data(), buf.size(), DType::f32);
    } catch (const CommError& e) {
      message = e.what();
    }
    took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
    // The comm refuses further work instead of hanging; queued work fails too.
    Work a = comm->all_reduce_async(buf.data(), buf.size(), DType::f32);
    Work b = comm->barrier_async();
    for (Work* w : {&a, &b}) {
      try {
        w->wait();
      } catch (const CommError& e) {
        later_error = e.what();
      }
    }
    rank0_done = true;
  });
  t0.join();
  t1.join();
  INFO(message);
  REQUIRE_FALSE(message.empty());
  CHECK(message.find("rank 0: all_reduce of 4096 bytes") != std::string::npos);
  CHECK(message.find("timed out after 500 ms") != std::string::npos);
  CHECK(message.find("rank 1 failed: boom") != std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
  CHECK(took >= 400ms);
  CHECK(took < 2000ms);
  CHECK(later_error.find("earlier op failed") != std::string::npos);
}

TEST_CASE("a recv from a silent peer times out naming the peer", "[comm]") {
  GlooGroup group(2, GlooGroupOptions{300ms});
  std::string message;
  std::atomic<bool> rank0_done{false};
  std::thread t1([&] {
    auto comm = group.connect(1, nullptr, nullptr);
    group.failures().report(1, "stuck in forward");
    while (!rank0_done) std::this_thread::sleep_for(5ms);
  });
  std::thread t0([&] {
    auto comm = group.connect(0, nullptr, nullptr);
    std::vector<float> buf(16);
    try {
      comm->recv(buf.data(), 64, 1, 2);
    } catch (const CommError& e) {
      message = e.what();
    }
    rank0_done = true;
  });
  t0.join();
  t1.join();
  INFO(message);
  CHECK(message.find("waiting for rank 1") != std::string::npos);
  CHECK(message.find("rank 1 failed: stuck in forward") != std::string::npos);
}

TEST_CASE("a failure anywhere in the run wakes a send its peer will never receive", "[comm]") {
  // Rank 0 stops at a step boundary (reports, and never posts the receive):
  // rank 1's send returns at once instead of waiting out the 20 s timeout.
  GlooGroup group(2, GlooGroupOptions{20000ms});
  std::string message;
  double seconds = 0;
  std::atomic<bool> rank1_done{false};
  std::thread t0([&] {
    auto comm = group.connect(0, nullptr, nullptr);
    std::this_thread::sleep_for(300ms);  // rank 1 is blocked in its send by now
    group.failures().report(0, "stopped: another rank's loss was not finite");
    while (!rank1_done) std::this_thread::sleep_for(5ms);
  });
  std::thread t1([&] {
    auto comm = group.connect(1, nullptr, nullptr);
    std::vector<float> buf(1 << 16, 1.0f);  // more than a socket buffer holds
    const auto t = std::chrono::steady_clock::now();
    try {
      comm->send(buf.data(), buf.size() * 4, 0, 7);
    } catch (const CommError& e) {
      message = e.what();
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    rank1_done = true;
  });
  t1.join();
  t0.join();
  INFO(message);
  CHECK(seconds < 5);
  CHECK(message.find("aborted after") != std::string::npos);
  CHECK(message.find("waiting for rank 0") != std::string::npos);
  CHECK(message.find("rank 0 failed: stopped: another rank's loss was not finite") !=
        std::string::npos);
}

TEST_CASE("destroying a comm with unwaited work does not hang", "[comm]") {
  GlooGroup group(2, GlooGroupOptions{5000ms});
  std::string late_wait_error[2], barrier_error[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> buf(16, 1.0f);
      Work unmatched;  // outlives the comm
      {
        auto comm = group.connect(r, nullptr, nullptr);
        // Never matched by the peer, never waited on before the comm goes away.
        unmatched = comm->recv_async(buf.data(), 64, 1 - r, 42);
        try {
          // Matched but dropped without a wait: the drop waits, so the
          // connection stays usable.
          if (r == 0) {
            comm->send_async(buf.data(), 64, 1, 0);
            comm->recv_async(buf.data(), 64, 1, 0);
          } else {
            comm->recv_async(buf.data(), 64, 0, 0);
            comm->send_async(buf.data(), 64, 0, 0);
          }
          comm->barrier();
        } catch (const CommError& e) {
          barrier_error[r] = e.what();
        }
      }
      try {
        unmatched.wait();
      } catch (const CommError& e) {
        late_wait_error[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : barrier_error) CHECK(e == "");
  for (const auto& e : late_wait_error) CHECK(e.find("never waited on") != std::string::npos);
}
