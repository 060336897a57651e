// The NCCL communicator directly: every operation on device buffers and on host
// buffers (staged), uneven and in-place forms, point-to-point, and a dropped
// Work. World 1 on any GPU machine; every GPU (up to 4) where there are more.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "../test_util.h"
#include "core/comm/nccl_group.h"
#include "core/device/gpu.h"
#include "core/device/memory.h"

using namespace shardlab;

namespace {

std::vector<float> down(DeviceBackend& dev, const Tensor& t, size_t n) {
  std::vector<float> v(n);
  dev.download(v.data(), t.raw(), DType::f32, n);
  return v;
}

// Runs `body(rank, comm, dev, alloc)` on `world` rank threads; returns each rank's error.
template <typename Body>
std::vector<std::string> on_ranks(int world, Body body) {
  FailureBoard board;
  auto group = make_nccl_group(world, std::chrono::milliseconds(60000), board);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto dev = make_cuda_backend(r, nullptr);
        Allocator alloc(*dev, nullptr);
        {
          auto comm = group->connect(r, *dev, nullptr, &alloc);
          body(r, *comm, *dev, alloc);
        }
        dev->synchronize();
      } catch (const std::exception& e) {
        errors[r] = e.what();
        board.report(r, e.what());
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void check_all_ops(int world) {
  std::vector<std::vector<std::string>> problems(world);
  auto errors = on_ranks(world, [&](int r, Comm& comm, DeviceBackend& dev, Allocator& alloc) {
    auto expect = [&](bool ok, const std::string& what) {
      if (!ok) problems[r].push_back(what);
    };
    const float w = static_cast<float>(world);
    // all_reduce on device memory, then on a host float (staged).
    Tensor a = alloc.alloc("a", MemCategory::comm_buffers, 1000);
    std::vector<float> h(1000);
    for (int i = 0; i < 1000; ++i) h[i] = static_cast<float>(r + i);
    dev.upload(a.raw(), DType::f32, h.data(), 1000);
    comm.all_reduce(a.raw(), 1000, DType::f32);
    auto got = down(dev, a, 1000);
    for (int i = 0; i < 1000; i += 97)
      expect(got[i] == w * (w - 1) / 2 + w * i, "all_reduce device");
    float vote = 1;
    comm.all_reduce(&vote, 1, DType::f32);
    expect(vote == w, "all_reduce host");
    // broadcast from the last rank, reduce onto rank 0.
    Tensor b = alloc.alloc("b", MemCategory::comm_buffers, 10);
    std::vector<float> hb(10, static_cast<float>(r + 1));
    dev.upload(b.raw(), DType::f32, hb.data(), 10);
    comm.broadcast(b.raw(), 10, DType::f32, world - 1);
    expect(down(dev, b, 10)[9] == w, "broadcast");
    dev.upload(b.raw(), DType::f32, hb.data(), 10);
    comm.reduce(b.raw(), 10, DType::f32, 0);
    const float red = down(dev, b, 10)[3];
    expect(r == 0 ? red == w * (w + 1) / 2 : red == static_cast<float>(r + 1), "reduce");
    // all_gather and reduce_scatter, equal and uneven counts, in place (ZeRO's form).
    for (bool even : {true, false}) {
      std::vector<size_t> counts(world, 4);
      if (!even)
        for (int k = 0; k < world; ++k) counts[k] = 3 + static_cast<size_t>(k % 2);
      size_t total = 0, off = 0;
      for (int k = 0; k < world; ++k) {
        if (k < r) off += counts[k];
        total += counts[k];
      }
      Tensor full = alloc.alloc("full", MemCategory::comm_buffers, total);
      std::vector<float> mine(counts[r], static_cast<float>(10 * r));
      dev.upload(static_cast<float*>(full.raw()) + off, DType::f32, mine.data(), mine.size());
      comm.all_gather(static_cast<float*>(full.raw()) + off, full.raw(), counts, DType::f32);
      auto g = down(dev, full, total);
      size_t pos = 0;
      for (int k = 0; k < world; ++k)
        for (size_t i = 0; i < counts[k]; ++i)
          expect(g[pos++] == static_cast<float>(10 * k), even ? "all_gather" : "all_gather uneven");
      std::vector<float> ones(total, 1.0f);
      dev.upload(full.raw(), DType::f32, ones.data(), total);
      Tensor out = alloc.alloc("out", MemCategory::comm_buffers, counts[r]);
      comm.reduce_scatter(full.raw(), out.raw(), counts, DType::f32);
      for (float v : down(dev, out, counts[r]))
        expect(v == w, even ? "reduce_scatter" : "reduce_scatter uneven");
    }
    // bf16 all_reduce: summed in fp32 by NCCL, exact for small integers.
    Tensor hb16 = alloc.alloc("h", MemCategory::comm_buffers, 8, DType::bf16);
    std::vector<float> twos(8, 2.0f);
    dev.upload(hb16.raw(), DType::bf16, twos.data(), 8);
    comm.all_reduce(hb16.raw(), 8, DType::bf16);
    std::vector<float> back(8);
    dev.download(back.data(), hb16.raw(), DType::bf16, 8);
    expect(back[5] == 2 * w, "all_reduce bf16");
    // Point-to-point between ranks 0 and 1, in the order NCCL pairs them.
    if (world >= 2 && r < 2) {
      Tensor s = alloc.alloc("s", MemCategory::comm_buffers, 16);
      Tensor q = alloc.alloc("q", MemCategory::comm_buffers, 16);
      std::vector<float> hs(16, static_cast<float>(100 + r));
      dev.upload(s.raw(), DType::f32, hs.data(), 16);
      const int peer = 1 - r;
      if (r == 0) {
        comm.send(s.raw(), 64, peer, 7);
        comm.recv(q.raw(), 64, peer, 8);
      } else {
        comm.recv(q.raw(), 64, peer, 7);
        comm.send(s.raw(), 64, peer, 8);
      }
      expect(down(dev, q, 16)[15] == static_cast<float>(100 + peer), "send/recv");
    }
    comm.barrier();
    // A Work dropped without wait() must neither hang nor break the next op.
    { Work dropped = comm.all_reduce_async(a.raw(), 1000, DType::f32); }
    comm.all_reduce(&vote, 1, DType::f32);
    expect(vote == w * w, "after a dropped Work");
    expect(comm.stats().ops > 0, "stats");
  });
  for (int r = 0; r < world; ++r) {
    INFO("world " << world << " rank " << r);
    CHECK(errors[r].empty());
    for (const std::string& p : problems[r]) FAIL_CHECK(p);
  }
}

}  // namespace

TEST_CASE("nccl: every operation at world 1", "[cuda][nccl]") {
  check_all_ops(1);
}

TEST_CASE("nccl: every operation on every GPU (up to 4)", "[cuda][nccl]") {
  const int world = std::min(cuda_device_count(), 4);
  if (world < 2) {
    WARN("one GPU: NCCL needs one GPU per rank, so only world 1 ran");
    return;
  }
  check_all_ops(world);
}
