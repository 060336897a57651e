// Benchmark (not a test): frame time of the GUI's timeline with 8 ranks x 100k
// synthetic spans, at three zoom levels while panning. Run it under a display:
//   xvfb-run -a -s "-screen 0 1600x1000x24" build/shardlab_bench_gui [--ranks 8] [--spans 100000]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "app/gui/app.h"
#include "app/gui/window.h"
#include "strategies/registry.h"

#include <imgui.h>

using namespace shardlab;
using namespace shardlab::gui;

namespace {

// A DDP-like step per rank: forward per layer, loss, backward per layer with
// bucket all-reduces overlapping it on the comm lane, then the optimizer.
std::vector<Span> synth_rank(int rank, size_t n_spans, int layers) {
  std::vector<Span> out;
  out.reserve(n_spans + 64);
  int64_t t = 1000 * rank;  // ranks slightly skewed
  uint64_t rng = 88172645463325252ull + rank;
  auto jitter = [&](int64_t base) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return base + static_cast<int64_t>(rng % static_cast<uint64_t>(base / 2 + 1));
  };
  for (int step = 0; out.size() < n_spans; ++step) {
    auto add = [&](Lane lane, SpanKind k, int layer, int64_t b, int64_t e, int64_t bytes) {
      Span s;
      s.t_begin_ns = b;
      s.t_end_ns = e;
      s.rank = rank;
      s.lane = lane;
      s.kind = k;
      s.layer = layer;
      s.step = step;
      s.bytes = bytes;
      out.push_back(s);
    };
    for (int l = 0; l < layers; ++l) {
      const int64_t d = jitter(20000);
      add(Lane::compute, SpanKind::forward, l, t, t + d, 0);
      t += d + 500;
    }
    add(Lane::compute, SpanKind::loss, -1, t, t + 5000, 0);
    t += 5500;
    int64_t comm_free = t;
    for (int l = layers - 1; l >= 0; --l) {
      const int64_t d = jitter(40000);
      add(Lane::compute, SpanKind::backward, l, t, t + d, 0);
      t += d + 500;
      if (l % 2 == 0) {  // a bucket every two layers
        const int64_t b = std::max(comm_free, t);
        const int64_t c = jitter(60000);
        add(Lane::comm, SpanKind::all_reduce, l, b, b + c, 1 << 20);
        comm_free = b + c + 200;
      }
    }
    t = std::max(t, comm_free);
    add(Lane::compute, SpanKind::optimizer, -1, t, t + 15000, 0);
    t += 16000;
  }
  out.resize(n_spans);
  return out;
}

struct Stats {
  double mean, p50, p95, max;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  return {mean, v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 95 / 100)], v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  register_builtin_strategies();
  int ranks = 8, frames = 120;
  size_t spans = 100000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--ranks")) ranks = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--spans")) spans = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--frames")) frames = std::atoi(argv[i + 1]);
  }
  std::string error;
  WindowOptions wopt;
  wopt.vsync = false;
  auto win = Window::open(wopt, &error);
  if (!win) {
    std::fprintf(stderr, "shardlab_bench_gui: %s (run it under xvfb-run -a)\n", error.c_str());
    return 1;
  }
  RunConfig cfg;
  cfg.world = ranks;
  cfg.steps = 1;
  App app(cfg);
  reset_run_data(app.data, cfg, ranks, 0);
  const auto t_build0 = std::chrono::steady_clock::now();
  for (int r = 0; r < ranks; ++r) append(app.data, r, synth_rank(r, spans, 8), {});
  const double build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_build0)
          .count();
  app.state.view = View::timeline;
  std::printf("timeline: %d ranks x %zu spans = %zu spans, run length %.1f ms (ingest %.0f ms)\n",
              ranks, spans, app.data.span_count(), app.data.t_end / 1e6, build_ms);
  std::printf("window %dx%d, llvmpipe-class GL under xvfb; times per frame in ms\n",
              win->framebuffer_width(), win->framebuffer_height());
  std::printf("%-34s %8s %8s %8s %8s | %8s %8s\n", "zoom", "ui mean", "ui p50", "ui p95", "ui max",
              "frame", "fps");

  const double len = static_cast<double>(app.data.t_end);
  struct Zoom {
    const char* name;
    double window;
  };
  const Zoom zooms[] = {{"whole run (everything folded)", len},
                        {"1% of the run, panning", len * 0.01},
                        {"0.05% of the run (~1 step), panning", len * 0.0005}};
  for (const Zoom& z : zooms) {
    std::vector<double> ui, total;
    for (int f = 0; f < frames + 10; ++f) {
      const double start = z.window >= len ? 0 : (len - z.window) * (f % 100) / 100.0;
      app.state.timeline.vp.t_begin = start;
      app.state.timeline.vp.t_end = start + z.window;
      app.state.timeline.follow = false;
      const auto a = std::chrono::steady_clock::now();
      win->begin_frame(app.state.presenter);
      app.frame(1.0 / 60);
      const auto b = std::chrono::steady_clock::now();
      win->end_frame("", nullptr);
      const auto c = std::chrono::steady_clock::now();
      if (f < 10) continue;  // warm-up: fonts, GL objects
      // "ui" = building the frame (culling, folding, draw lists), what the app controls;
      // "frame" adds ImGui::Render, GL drawing by the software rasteriser, and the swap.
      ui.push_back(std::chrono::duration<double, std::milli>(b - a).count());
      total.push_back(std::chrono::duration<double, std::milli>(c - a).count());
    }
    const Stats s = stats(ui), t = stats(total);
    const ImDrawData* dd = ImGui::GetDrawData();
    std::printf("%-34s %8.2f %8.2f %8.2f %8.2f | %8.2f %8.0f   (%d vertices, %d lists)\n", z.name,
                s.mean, s.p50, s.p95, s.max, t.mean, 1000.0 / t.mean, dd ? dd->TotalVtxCount : 0,
                dd ? dd->CmdListsCount : 0);
  }
  return 0;
}
