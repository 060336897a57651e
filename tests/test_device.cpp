// Devices and placement without a GPU: the guarded CPU device (device memory
// unreadable outside kernels) runs every strategy exactly like the CPU, which
// is the check that strategies would run unchanged on a GPU; --device and
// --backend errors; the host-staging communicator.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/placement.h"
#include "core/comm/staging_comm.h"
#include "core/device/gpu.h"
#include "core/parallel/strategy.h"
#include "core/run/runner.h"
#include "test_util.h"

using namespace shardlab;
using shardlab::test::run_cli;

namespace {

RunConfig small(const std::string& strategy, int world) {
  RunConfig c;
  c.model = "mlp:4x64";
  c.strategy = strategy;
  c.world = world;
  c.batch = 16;
  c.steps = 4;
  if (strategy == "naive-mp" || strategy == "gpipe" || strategy == "1f1b") c.stages = world;
  if (strategy == "gpipe" || strategy == "1f1b") c.micro_batches = 2;
  return c;
}

}  // namespace

TEST_CASE("guarded device: every strategy gives the CPU's exact weights", "[device]") {
  for (const StrategyInfo& info : all_strategies()) {
    RunConfig c = small(info.name, info.name == "single" ? 1 : 2);
    const RunResult cpu = run_training(c);
    c.device = "cpu-guarded";
    const RunResult guarded = run_training(c);
    INFO(info.name);
    CHECK(guarded.placement.guarded);
    CHECK(guarded.placement.comm == CommKind::gloo_staged);
    CHECK(guarded.final_params == cpu.final_params);
    CHECK(guarded.losses == cpu.losses);
  }
}

TEST_CASE("guarded device: mixed precision, offload and recompute stay on device calls",
          "[device]") {
  std::vector<RunConfig> configs;
  for (const char* s : {"single", "ddp", "dp", "zero1", "zero2", "zero3", "fsdp"})
    for (const char* p : {"bf16", "fp16"}) {
      RunConfig c = small(s, std::string(s) == "single" ? 1 : 2);
      c.precision = p;
      configs.push_back(c);
    }
  RunConfig off = small("fsdp", 2);
  off.offload = true;
  configs.push_back(off);
  for (const char* s : {"gpipe", "1f1b"}) {
    RunConfig c = small(s, 2);
    c.recompute = true;
    configs.push_back(c);
  }
  for (RunConfig c : configs) {
    const RunResult cpu = run_training(c);
    c.device = "cpu-guarded";
    const RunResult guarded = run_training(c);
    INFO(c.strategy << " " << c.precision << (c.offload ? " offload" : "")
                    << (c.recompute ? " recompute" : ""));
    CHECK(guarded.final_params == cpu.final_params);
  }
}

TEST_CASE("guarded device: host access to device memory crashes, backend calls do not",
          "[device]") {
  auto guard = make_memory_guard();
  auto dev = make_guarded_cpu_backend(guard);
  Allocator alloc(*dev, nullptr);
  Tensor t = alloc.alloc("x", MemCategory::params, 1024);
  CHECK(dev->is_device_pointer(t.raw()));
  std::vector<float> host(1024, 2.0f), back(1024, 0.0f);
  dev->upload(t.raw(), DType::f32, host.data(), host.size());
  dev->scale(t.data<float>(), 1024, 0.5f);
  dev->download(back.data(), t.raw(), DType::f32, back.size());
  CHECK(back[7] == 1.0f);
  const pid_t pid = fork();
  if (pid == 0) {
    std::signal(SIGSEGV, SIG_DFL);          // die by the signal, not through Catch's handler
    volatile float v = t.data<float>()[3];  // host read of device memory: must fault
    (void)v;
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGSEGV);
}

TEST_CASE("staging communicator: collectives on device memory match host buffers", "[device]") {
  const int world = 3;
  GlooGroup group(world, GlooGroupOptions{std::chrono::milliseconds(20000)});
  auto guard = make_memory_guard();
  std::vector<std::vector<float>> sums(world), gathered(world), scattered(world);
  std::vector<std::string> errors(world);
  auto body = [&](int rank) {
    try {
      auto dev = make_guarded_cpu_backend(guard);
      Allocator alloc(*dev, nullptr);
      auto comm = make_staging_comm(group.connect(rank, nullptr, &alloc), *dev, &alloc, nullptr);
      const std::vector<size_t> counts = {3, 2, 2};  // uneven
      std::vector<float> h(7);
      for (int i = 0; i < 7; ++i) h[i] = static_cast<float>(rank * 10 + i);
      Tensor a = alloc.alloc("a", MemCategory::comm_buffers, 7);
      dev->upload(a.raw(), DType::f32, h.data(), 7);
      comm->all_reduce(a.raw(), 7, DType::f32);
      sums[rank].resize(7);
      dev->download(sums[rank].data(), a.raw(), DType::f32, 7);
      // All-gather from this rank's slot of the output buffer (ZeRO's aliasing).
      Tensor g = alloc.alloc("g", MemCategory::comm_buffers, 7);
      const size_t off = rank == 0 ? 0 : (rank == 1 ? 3 : 5);
      std::vector<float> mine(counts[rank], static_cast<float>(rank + 1));
      dev->upload(static_cast<float*>(g.raw()) + off, DType::f32, mine.data(), mine.size());
      comm->all_gather(static_cast<float*>(g.raw()) + off, g.raw(), counts, DType::f32);
      gathered[rank].resize(7);
      dev->download(gathered[rank].data(), g.raw(), DType::f32, 7);
      // Reduce-scatter into a separate device buffer.
      Tensor in = alloc.alloc("in", MemCategory::comm_buffers, 7);
      Tensor out = alloc.alloc("out", MemCategory::comm_buffers, counts[rank]);
      std::vector<float> ones(7, 1.0f);
      dev->upload(in.raw(), DType::f32, ones.data(), 7);
      comm->reduce_scatter(in.raw(), out.raw(), counts, DType::f32);
      scattered[rank].resize(counts[rank]);
      dev->download(scattered[rank].data(), out.raw(), DType::f32, counts[rank]);
      // A host pointer goes straight through.
      float vote = 1;
      comm->all_reduce(&vote, 1, DType::f32);
      if (vote != world) errors[rank] = "host all_reduce gave " + std::to_string(vote);
    } catch (const std::exception& e) {
      errors[rank] = e.what();
      group.failures().report(rank, e.what());
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(errors[r].empty());
    for (int i = 0; i < 7; ++i) CHECK(sums[r][i] == static_cast<float>(30 + 3 * i));
    CHECK(gathered[r] == std::vector<float>{1, 1, 1, 2, 2, 3, 3});
    for (float v : scattered[r]) CHECK(v == static_cast<float>(world));
  }
}

TEST_CASE("placement: devices and backends, with one-line errors", "[device]") {
  RunConfig c = small("ddp", 2);
  CHECK(plan_placement(c).comm == CommKind::gloo);
  c.device = "auto";
  if (cuda_device_count() == 0) {
    CHECK(plan_placement(c).kind == DeviceKind::cpu);
    c.device = "cuda";
    try {
      plan_placement(c);
      FAIL("--device cuda without a GPU must fail");
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      CHECK(m.find("--device cuda") != std::string::npos);
      CHECK(m.find("valid") != std::string::npos);
      CHECK(m.find('\n') == std::string::npos);
    }
  }
  c.device = "cpu";
  c.backend = "nccl";
  CHECK_THROWS_AS(plan_placement(c), ConfigError);
  c.backend = "mpi";
  CHECK_THROWS_WITH(plan_placement(c), Catch::Contains("'mpi'") && Catch::Contains("valid"));
  c.backend = "auto";
  c.device = "tpu";
  CHECK_THROWS_WITH(plan_placement(c), Catch::Contains("'tpu'") && Catch::Contains("cpu-guarded"));
}

TEST_CASE("cli: --device errors are one line with exit code 2", "[device]") {
  auto r = run_cli("run --steps 1 --device tpu");
  CHECK(r.code == 2);
  CHECK(r.out.find("--device 'tpu'") != std::string::npos);
  if (cuda_device_count() == 0) {
    r = run_cli("run --steps 1 --device cuda");
    CHECK(r.code == 2);
    CHECK(r.out.find("no usable GPU") != std::string::npos);
    r = run_cli("run --steps 2 --device auto --model mlp:2x32");
    CHECK(r.code == 0);
    CHECK(r.out.find("CPU threads") != std::string::npos);
  }
  r = run_cli("run --steps 2 --device cpu-guarded --model mlp:2x32 --json");
  CHECK(r.code == 0);
  CHECK(r.out.find("\"backend\":\"gloo+host-staging\"") != std::string::npos);
}

TEST_CASE("device clock: compute spans are timed by the device, comm spans by the host",
          "[device]") {
  // What a GPU backend does: begin() marks its stream, end() hands the span over,
  // and the times arrive later (here: at once, shifted, to show they are the clock's).
  struct FakeClock : DeviceClock {
    Recorder* rec = nullptr;
    int begun = 0;
    int begin() override { return begun++; }
    void end(int token, Span span) override {
      span.t_begin_ns = 1000 + token;
      span.t_end_ns = 2000 + token;
      rec->add_span(span);
    }
  };
  Recorder rec(0);
  FakeClock clock;
  clock.rec = &rec;
  rec.set_device_clock(&clock);
  rec.set_step(4);
  { ScopedSpan s(&rec, Lane::compute, SpanKind::forward, 2); }
  { ScopedSpan s(&rec, Lane::comm, SpanKind::all_reduce); }
  rec.set_device_clock(nullptr);
  { ScopedSpan s(&rec, Lane::compute, SpanKind::backward, 2); }
  const auto snap = rec.snapshot();
  REQUIRE(snap.spans.size() == 3);
  CHECK(clock.begun == 1);
  CHECK(snap.spans[0].t_begin_ns == 1000);
  CHECK(snap.spans[0].step == 4);  // taken when the span ended, not when the clock resolved it
  CHECK(snap.spans[0].layer == 2);
  CHECK(snap.spans[1].lane == Lane::comm);
  CHECK(snap.spans[1].t_begin_ns > 2000);  // host clock
  CHECK(snap.spans[2].t_begin_ns > 2000);
  Recorder off(1, false);
  off.set_device_clock(&clock);
  { ScopedSpan s(&off, Lane::compute, SpanKind::forward); }
  CHECK(clock.begun == 1);  // recording off: the device is not asked
}
