// The timeline: one row group per rank with a compute and a comm lane, spans
// coloured by kind and labelled (F3/B3 for micro-batches), send->recv flow
// lines, step markers, the playhead; wheel zooms, dragging pans, hover explains.
#include <algorithm>
#include <cmath>
#include <string>

#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/format.h"
#include "app/gui/panels.h"

namespace shardlab::gui {

namespace {

// Spans narrower than this fold into one block (tracy uses ~3 px as well).
constexpr float kMinSpanPx = 3.0f;

void span_tooltip(const Span& s) {
  ImGui::BeginTooltip();
  ImGui::Text("%s", kind_label(s.kind));
  if (s.layer >= 0) {
    ImGui::SameLine();
    ImGui::Text("\xC2\xB7 layer %d", s.layer);
  }
  if (s.micro_batch >= 0) {
    ImGui::SameLine();
    ImGui::Text("\xC2\xB7 micro-batch %d", s.micro_batch);
  }
  ImGui::Text("rank %d, %s lane, step %d", s.rank, to_string(s.lane), s.step);
  ImGui::Text("starts at %s, lasts %s", format_time_ns(s.t_begin_ns).c_str(),
              format_time_ns(s.t_end_ns - s.t_begin_ns).c_str());
  if (s.bytes > 0) ImGui::Text("payload %s", format_bytes(static_cast<double>(s.bytes)).c_str());
  if (s.peer >= 0)
    ImGui::Text("%s rank %d",
                s.kind == SpanKind::recv   ? "from"
                : s.kind == SpanKind::send ? "to"
                                           : "peer/root",
                s.peer);
  ImGui::EndTooltip();
}

void fold_tooltip(const LaneData& lane, const DrawSpan& b) {
  const Span& a = lane.spans[b.first];
  const Span& z = lane.spans[b.first + b.count - 1];
  ImGui::BeginTooltip();
  ImGui::Text("%u spans folded together (each narrower than %.0f px)", b.count, kMinSpanPx);
  ImGui::Text("from %s to %s, mostly %s", format_time_ns(a.t_begin_ns).c_str(),
              format_time_ns(std::max(a.t_end_ns, z.t_end_ns)).c_str(), kind_label(b.kind));
  ImGui::TextDisabled("zoom in (mouse wheel) to see them one by one");
  ImGui::EndTooltip();
}

void draw_arrow(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col) {
  dl->AddLine(a, b, col, 1.5f);
  const float dx = b.x - a.x, dy = b.y - a.y, len = std::sqrt(dx * dx + dy * dy);
  if (len < 1) return;
  const float ux = dx / len, uy = dy / len, s = 6;
  dl->AddTriangleFilled(b, ImVec2(b.x - ux * s - uy * s * 0.5f, b.y - uy * s + ux * s * 0.5f),
                        ImVec2(b.x - ux * s + uy * s * 0.5f, b.y - uy * s - ux * s * 0.5f), col);
}

}  // namespace

bool draw_timeline_rows(App& app, const RunData& d, Viewport& shared_vp,
                        const TimelineRowsOptions& opt) {
  // Rows may be drawn shifted (compare: each run from its own first span); the
  // caller's viewport stays in its own coordinates.
  Viewport vp = shared_vp;
  vp.t_begin += opt.t_offset;
  vp.t_end += opt.t_offset;
  const bool hc = app.state.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const float lane_h = opt.lane_height > 0 ? opt.lane_height : font + 6;
  const float axis_h = opt.show_axis ? font + 8 : 0;
  const float gutter =
      ImGui::CalcTextSize("rank 00 ").x + ImGui::CalcTextSize("compute").x * 0.85f + 14;
  const float gap = std::max(3.0f, lane_h * 0.3f);
  const float steps_h = opt.show_steps ? font + 2 : 0;  // a strip under the rows for "step k"
  const float rows_h = d.world * (2 * lane_h + gap);
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float width = std::max(50.0f, ImGui::GetContentRegionAvail().x);
  const float height = opt.height > 0 ? opt.height : axis_h + rows_h + steps_h;

  ImGui::InvisibleButton(opt.id, ImVec2(width, height));
  vp.x0 = origin.x + gutter;
  vp.width = std::max(1.0f, width - gutter - 6);
  TimelineState& ts = app.state.timeline;
  const bool moved = zoom_pan(vp, ts);
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const bool hovered = ImGui::IsItemHovered();
  if (opt.click_sets_playhead && ImGui::IsItemDeactivated() && !ts.dragging && mouse.x >= vp.x0)
    app.set_playhead(vp.t_of(mouse.x));
  if (hovered && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
    fit(vp, d.steps_begin(), static_cast<double>(d.t_end));
    ts.follow = true;
  }
  shared_vp = vp;
  shared_vp.t_begin -= opt.t_offset;
  shared_vp.t_end -= opt.t_offset;

  const ImVec2 end(origin.x + width, origin.y + height);
  dl->PushClipRect(origin, end, true);
  const float x_end = vp.x0 + vp.width;
  if (opt.show_axis) {
    // Label the axis in the caller's time (compare: time since each run's first span).
    Viewport axis_vp = vp;
    axis_vp.t_begin -= opt.t_offset;
    axis_vp.t_end -= opt.t_offset;
    draw_time_axis(dl, axis_vp, origin.y, axis_h, ui);
  }
  const float rows_top = origin.y + axis_h;

  // Lane backgrounds and labels first, so markers and spans draw over them.
  for (int r = 0; r < d.world; ++r) {
    const float y = rows_top + r * (2 * lane_h + gap);
    for (int l = 0; l < 2; ++l) {
      const float ly = y + l * lane_h;
      dl->AddRectFilled(ImVec2(vp.x0, ly), ImVec2(x_end, ly + lane_h),
                        l ? ui.lane_bg_alt : ui.lane_bg);
    }
    char name[32];
    std::snprintf(name, sizeof name, "rank %d", r);
    dl->AddText(ImVec2(origin.x + 2, y + (lane_h - font) * 0.5f), ui.text, name);
    dl->AddLine(ImVec2(origin.x, y - gap * 0.5f), ImVec2(x_end, y - gap * 0.5f), ui.grid);
    const float small = font * 0.85f;
    dl->AddText(
        ImGui::GetFont(), small,
        ImVec2(vp.x0 - ImGui::CalcTextSize("compute").x * 0.85f - 6, y + (lane_h - small) * 0.5f),
        ui.text_dim, "compute");
    dl->AddText(ImGui::GetFont(), small,
                ImVec2(vp.x0 - ImGui::CalcTextSize("comm").x * 0.85f - 6,
                       y + lane_h + (lane_h - small) * 0.5f),
                ui.text_dim, "comm");
  }

  // Step boundaries: a faint line per step, labelled where there is room.
  if (opt.show_steps) {
    float last_label_end = -1e9f, last_x = -1e9f;
    for (size_t s = 0; s < d.step_begin.size(); ++s) {
      if (d.step_begin[s] < 0) continue;
      const float x = vp.x_of(static_cast<double>(d.step_begin[s]));
      // Closer than a few pixels the lines are a grey wash (and thousands of
      // full-height lines are what a software rasteriser chokes on).
      if (x < vp.x0 || x > x_end || x - last_x < 6) continue;
      last_x = x;
      dl->AddLine(ImVec2(x, rows_top), ImVec2(x, rows_top + rows_h), ui.grid);
      char label[32];
      std::snprintf(label, sizeof label, "step %zu", s);
      const float w = ImGui::CalcTextSize(label).x;
      dl->AddLine(ImVec2(x, rows_top + rows_h), ImVec2(x, rows_top + rows_h + steps_h),
                  ui.text_dim);
      if (x + 3 > last_label_end + 8 && x + 3 + w < x_end) {
        dl->AddText(ImVec2(x + 3, rows_top + rows_h), ui.text_dim, label);
        last_label_end = x + 3 + w;
      }
    }
  }

  dl->PushClipRect(ImVec2(vp.x0, rows_top), ImVec2(x_end, end.y), true);
  std::vector<DrawSpan> blocks;
  const Span* hover_span = nullptr;
  const LaneData* hover_lane = nullptr;
  DrawSpan hover_block;
  for (int r = 0; r < d.world; ++r) {
    const float y = rows_top + r * (2 * lane_h + gap);
    for (int l = 0; l < 2; ++l) {
      const LaneData& lane = d.ranks[r].lanes[l];
      const float y0 = y + l * lane_h + 1, y1 = y + (l + 1) * lane_h - 1;
      blocks.clear();
      visible_spans(lane, vp, kMinSpanPx, blocks);
      for (const DrawSpan& b : blocks) {
        const Color base = kind_color(b.kind, hc);
        const ImVec2 a(std::max(b.x0, vp.x0 - 2), y0), z(std::min(b.x1, x_end + 2), y1);
        if (b.folded()) {
          // Folded: darker, with a bright top edge. (Hatching thousands of blocks
          // cost a software rasteriser ~200 ms a frame.)
          dl->AddRectFilled(a, z, scale_rgb(base, 0.55f));
          dl->AddRectFilled(a, ImVec2(z.x, a.y + 2), base);
          char n[24];
          std::snprintf(n, sizeof n, "\xC3\x97%u", b.count);
          text_in_rect(dl, a, z, ui.text, n);
        } else {
          dl->AddRectFilled(a, z, base);
          if (z.x - a.x > 4) dl->AddRect(a, z, ui.outline);
          const Span& s = lane.spans[b.first];
          const std::string lf = span_label(s, true);
          if (!text_in_rect(dl, a, z, ui.label_on_span, lf.c_str()))
            text_in_rect(dl, a, z, ui.label_on_span, span_label(s, false).c_str());
        }
      }
      if (hovered && mouse.y >= y0 && mouse.y < y1 + 2 && mouse.x >= vp.x0) {
        const int k = hit_test(blocks, mouse.x, 2.0f);
        if (k >= 0) {
          hover_block = blocks[k];
          hover_lane = &lane;
          hover_span = &lane.spans[blocks[k].first];
        }
      }
    }
  }

  // send -> recv: from the send's start on the sender to the recv's end on the receiver.
  if (opt.show_flows && ts.show_flows) {
    const ImU32 flow_col = hc ? IM_COL32(255, 255, 255, 220) : IM_COL32(235, 235, 240, 170);
    int drawn = 0;
    for (const Flow& f : d.flows) {
      const float xa = vp.x_of(static_cast<double>(f.t_send)),
                  xb = vp.x_of(static_cast<double>(f.t_recv));
      if (std::max(xa, xb) < vp.x0 || std::min(xa, xb) > x_end) continue;
      const float ya = rows_top + f.from_rank * (2 * lane_h + gap) + lane_h * 1.5f;
      const float yb = rows_top + f.to_rank * (2 * lane_h + gap) + lane_h * 1.5f;
      draw_arrow(dl, ImVec2(xa, ya), ImVec2(xb, yb), flow_col);
      if (++drawn > 4000) break;  // beyond this the lines are a solid wash anyway
    }
  }
  dl->PopClipRect();

  if (opt.show_playhead && d.t_end > 0) {
    const float x = vp.x_of(app.state.playhead.t);
    if (x >= vp.x0 && x <= x_end) {
      dl->AddLine(ImVec2(x, origin.y), ImVec2(x, rows_top + rows_h), ui.playhead, 2.0f);
      dl->AddTriangleFilled(ImVec2(x - 5, origin.y), ImVec2(x + 5, origin.y),
                            ImVec2(x, origin.y + 7), ui.playhead);
    }
  }
  dl->PopClipRect();

  if (hover_span && !ts.dragging) {
    if (hover_block.folded())
      fold_tooltip(*hover_lane, hover_block);
    else
      span_tooltip(*hover_span);
  }
  return moved;
}

namespace {

// Below the rows: where each rank's time went in the playhead's step, in words
// and bars, so the picture above has a reading.
void draw_step_breakdown(App& app) {
  const RunData& d = app.data;
  const bool hc = app.state.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  const int at = d.step_at(static_cast<int64_t>(app.state.playhead.t));
  // Following a live run, the newest step is still half done: show the one before.
  const bool live = app.run_active() && app.state.playhead.live && at > 0;
  const int k = live ? at - 1 : std::max(0, at);
  if (static_cast<size_t>(k) >= d.step_begin.size() || d.step_begin[k] < 0) return;
  const int64_t from = d.step_begin[k];
  // Ranks drift apart a little: look up to the start of the step after next.
  const int64_t to =
      static_cast<size_t>(k + 2) < d.step_begin.size() ? d.step_begin[k + 2] : d.t_end;
  std::vector<StepBreakdown> b;
  int64_t longest = 1;
  for (const RankData& r : d.ranks) {
    b.push_back(step_breakdown(r, k, from, to));
    longest = std::max(longest, b.back().duration());
  }
  ImGui::Separator();
  if (live)
    ImGui::Text("Step %d (the last finished one): where each rank's time went", k);
  else if (at < 0)
    ImGui::Text(
        "Step 0 (the playhead is still in the setup before it): where each rank's time went");
  else
    ImGui::Text("Step %d (the playhead's step): where each rank's time went", k);
  ImGui::SameLine(0, 16);
  const Color c_compute = kind_color(SpanKind::forward, hc),
              c_hidden = kind_color(SpanKind::all_gather, hc),
              c_comm = kind_color(SpanKind::all_reduce, hc), c_idle = rgba(110, 110, 110);
  legend_item(c_compute, "computing");
  legend_item(c_hidden, "communicating while computing (hidden)");
  legend_item(c_comm, "communicating only (exposed)");
  legend_item(c_idle, "neither (waiting)");
  ImGui::NewLine();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const float label_w = ImGui::CalcTextSize("rank 00 ").x + 8;
  const float bar_w = std::max(50.0f, ImGui::GetContentRegionAvail().x * 0.45f);
  for (int r = 0; r < d.world; ++r) {
    const StepBreakdown& s = b[r];
    const ImVec2 o = ImGui::GetCursorScreenPos();
    char name[16];
    std::snprintf(name, sizeof name, "rank %d", r);
    dl->AddText(o, ui.text, name);
    float x = o.x + label_w;
    const int64_t parts[] = {s.compute_only(), s.overlap, s.comm_only(), s.idle()};
    const Color cols[] = {c_compute, c_hidden, c_comm, c_idle};
    for (int i = 0; i < 4; ++i) {
      const float w =
          static_cast<float>(static_cast<double>(std::max<int64_t>(0, parts[i])) / longest) * bar_w;
      dl->AddRectFilled(ImVec2(x, o.y + 2), ImVec2(x + w, o.y + font), cols[i]);
      x += w;
    }
    const double dur = static_cast<double>(std::max<int64_t>(1, s.duration()));
    char text[256];
    std::snprintf(
        text, sizeof text,
        "%s: computing %s (%.0f%%), communicating %s of which %s hidden behind compute, waiting %s",
        format_time_ns(static_cast<double>(s.duration())).c_str(),
        format_time_ns(static_cast<double>(s.compute)).c_str(), 100 * s.compute / dur,
        format_time_ns(static_cast<double>(s.comm)).c_str(),
        format_time_ns(static_cast<double>(s.overlap)).c_str(),
        format_time_ns(static_cast<double>(s.idle())).c_str());
    dl->AddText(ImVec2(o.x + label_w + bar_w + 10, o.y), ui.text_dim, text);
    ImGui::Dummy(ImVec2(label_w + bar_w, font + 4));
  }
}

}  // namespace

void draw_timeline(App& app) {
  AppState& s = app.state;
  const RunData& d = app.data;
  if (d.world == 0 && !s.form_error.empty()) {
    ImGui::TextWrapped(
        "Nothing recorded yet. The settings above cannot run (see the red line); fix them, then "
        "Run (R).");
    return;
  }
  if (d.world == 0) {
    ImGui::TextWrapped(
        "Nothing recorded yet. Press Run (R) to train the configuration above: every rank is a "
        "thread, talking to the others through Gloo. Each rank's spans appear here while it runs.");
    return;
  }
  // Legend: only the kinds this run produced, so it stays short and true.
  for (int k = 0; k < kNumSpanKinds; ++k)
    if (d.kinds_seen[k])
      legend_item(kind_color(static_cast<SpanKind>(k), s.presenter.high_contrast),
                  kind_label(static_cast<SpanKind>(k)));
  ImGui::NewLine();
  if (ImGui::Button("All steps (F)")) {
    fit(s.timeline.vp, d.steps_begin(), static_cast<double>(d.t_end));
    s.timeline.follow = true;
  }
  ImGui::SameLine();
  if (ImGui::Button("With setup")) {
    fit(s.timeline.vp, d.view_begin(), static_cast<double>(d.t_end));
    s.timeline.follow = false;
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "the whole run, including the setup before step 0 (e.g. replicating the weights)");
  ImGui::SameLine();
  if (ImGui::Button("One step")) {
    const int st = std::max(0, d.step_at(static_cast<int64_t>(s.playhead.t)));
    if (static_cast<size_t>(st) < d.step_begin.size()) {
      const double b = static_cast<double>(d.step_begin[st]);
      const double e = static_cast<size_t>(st + 1) < d.step_begin.size()
                           ? static_cast<double>(d.step_begin[st + 1])
                           : static_cast<double>(d.t_end);
      fit(s.timeline.vp, b, e);
      s.timeline.follow = false;
    }
  }
  ImGui::SameLine();
  ImGui::Checkbox("send\xE2\x86\x92recv lines", &s.timeline.show_flows);
  ImGui::SameLine(0, 20);
  ImGui::TextDisabled(
      "%zu spans \xC2\xB7 wheel: zoom \xC2\xB7 drag: pan \xC2\xB7 click: move playhead \xC2\xB7 "
      "double-click: fit \xC2\xB7 "
      "F3/B3 = forward/backward of micro-batch 3, L = layer",
      d.span_count());

  const float font = ImGui::GetFontSize();
  const float breakdown_h = (font + 4) * d.world + font * 3;
  const float avail = ImGui::GetContentRegionAvail().y - breakdown_h;
  const float axis_h = font + 8;
  // Lanes grow to use the height, within reason; many ranks scroll instead.
  const float per_rank = (avail - axis_h - 4) / std::max(1, d.world);
  const float lane_h = std::clamp(per_rank / 2.3f, font + 2, font * 4.0f);
  const float rows_h = axis_h + d.world * (2 * lane_h + std::max(3.0f, lane_h * 0.3f)) + font + 4;
  TimelineRowsOptions opt;
  opt.lane_height = lane_h;
  ImGui::BeginChild("timeline_rows", ImVec2(0, std::min(rows_h, std::max(avail, font * 6))), false,
                    ImGuiWindowFlags_NoScrollWithMouse);
  if (draw_timeline_rows(app, d, s.timeline.vp, opt)) s.timeline.follow = false;
  ImGui::EndChild();
  draw_step_breakdown(app);
}

}  // namespace shardlab::gui
