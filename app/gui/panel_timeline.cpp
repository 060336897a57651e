// The timeline: one row group per rank with a compute and a comm lane, spans
// coloured by kind, pipeline blocks labelled F3/B3/R3, the time a rank waits
// for a peer drawn and named as idle ("bubble" in a pipeline), send->recv
// lines, step markers, the playhead; wheel zooms, dragging pans, hover
// explains. Below: where each rank's time went in one step and, for pipeline
// runs, the measured bubble per stage beside (P-1)/(M+P-1).
#include <algorithm>
#include <cmath>
#include <string>

#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/format.h"
#include "app/gui/logic/projected_run.h"
#include "app/gui/logic/wait_logic.h"
#include "app/gui/panels.h"
#include "core/comm/cores.h"
#include "core/model/model.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/strategy.h"
#include "core/predict/pipeline_analysis.h"

namespace shardlab::gui {

namespace {

// Spans narrower than this fold into one block (tracy uses ~3 px as well).
constexpr float kMinSpanPx = 3.0f;
// Steps are classified (waits, idle) only while few enough, and wide enough, are in view.
constexpr int kMaxClassifiedSteps = 64;
constexpr float kMinClassifiedStepPx = 40;
// Flow lines drawn one by one up to this many; bundled beyond.
constexpr int kMaxSingleFlows = 120;

// Idle time: grey, hatched, the same in the lanes and in the breakdown.
constexpr Color kIdle = rgba(118, 118, 118);

// A lane's name: "compute" or "comm".
const char* lane_name(Lane lane, const Tr& tr) {
  return lane == Lane::compute ? tr("compute") : lane == Lane::comm ? tr("comm") : tr("disk");
}

// ImGui::TextUnformatted for a std::string.
void text(const std::string& t) {
  ImGui::TextUnformatted(t.c_str());
}

void span_tooltip(const Span& s, const CommWait* wait, const char* idle, const Tr& tr,
                  const HoldsLayer& holds) {
  ImGui::BeginTooltip();
  ImGui::TextUnformatted(kind_label(s.kind, tr));
  const std::string tag = micro_batch_tag(s, holds);
  if (!tag.empty()) {
    ImGui::SameLine();
    text(strf(tr("\xC2\xB7 %s (micro-batch %d)"), tag.c_str(), s.micro_batch));
  }
  if (s.layer >= 0) {
    ImGui::SameLine();
    text(strf(tr("\xC2\xB7 layer %d"), s.layer));
  }
  if (s.step >= 0)
    text(strf(tr("rank %d, %s lane, step %d"), s.rank, lane_name(s.lane, tr), s.step));
  else
    text(strf(tr("rank %d, %s lane, outside the training steps (set-up or tear-down)"), s.rank,
              lane_name(s.lane, tr)));
  text(strf(tr("starts at %s, lasts %s"), format_time_ns(s.t_begin_ns).c_str(),
            format_time_ns(s.t_end_ns - s.t_begin_ns).c_str()));
  if (s.bytes > 0) text(strf(tr("payload %s"), format_bytes(static_cast<double>(s.bytes)).c_str()));
  if (s.staleness > 0)
    text(strf(tr("computed with parameters %d updates old (asynchronous: --staleness)"),
              s.staleness));
  else if (s.staleness == 0)
    text(tr("computed with the latest update's parameters (staleness 0)"));
  if (s.made_ahead)
    text(tr(
        "made ahead by the rank's data loader while the previous step ran: this is the copy in"));
  if (s.peer >= 0)
    text(strf(s.kind == SpanKind::recv   ? tr("from rank %d")
              : s.kind == SpanKind::send ? tr("to rank %d")
                                         : tr("peer/root rank %d"),
              s.peer));
  if (wait) {
    const double w = static_cast<double>(wait->ready - s.t_begin_ns);
    const double m = static_cast<double>(s.t_end_ns - wait->ready);
    const std::string reason =
        strf(s.kind == SpanKind::recv   ? tr("until rank %d began sending")
             : s.kind == SpanKind::send ? tr("until rank %d posted its receive")
                                        : tr("until rank %d, the last, entered"),
             wait->peer);
    ImGui::Separator();
    text(strf(tr("%s %s (%s: idle, not communication),"), idle, format_time_ns(w).c_str(),
              reason.c_str()));
    text(strf(tr("then moving bytes %s"), format_time_ns(m).c_str()));
  }
  ImGui::EndTooltip();
}

void fold_tooltip(const LaneData& lane, const DrawSpan& b, const Tr& tr) {
  const Span& a = lane.spans[b.first];
  const Span& z = lane.spans[b.first + b.count - 1];
  ImGui::BeginTooltip();
  text(strf(tr("%u spans folded together (each narrower than %.0f px)"), b.count,
            static_cast<double>(kMinSpanPx)));
  text(strf(tr("from %s to %s, mostly %s"), format_time_ns(a.t_begin_ns).c_str(),
            format_time_ns(std::max(a.t_end_ns, z.t_end_ns)).c_str(), kind_label(b.kind, tr)));
  ImGui::TextDisabled("%s", tr("zoom in (mouse wheel) to see them one by one"));
  ImGui::EndTooltip();
}

void idle_tooltip(int rank, const Interval& iv, const char* idle, bool pipeline, const Tr& tr) {
  ImGui::BeginTooltip();
  text(strf(tr("%s: rank %d neither computes nor moves bytes for %s"), idle, rank,
            format_time_ns(static_cast<double>(iv.second - iv.first)).c_str()));
  ImGui::TextDisabled(
      "%s", pipeline ? tr("it waits for a neighbouring stage: the pipeline bubble")
                     : tr("it waits for a peer (a message, or the others in a collective)"));
  ImGui::EndTooltip();
}

void draw_arrow(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float thick, float head) {
  dl->AddLine(a, b, col, thick);
  const float dx = b.x - a.x, dy = b.y - a.y, len = std::sqrt(dx * dx + dy * dy);
  if (len < 1 || head <= 0) return;
  const float ux = dx / len, uy = dy / len, s = head;
  dl->AddTriangleFilled(b, ImVec2(b.x - ux * s - uy * s * 0.5f, b.y - uy * s + ux * s * 0.5f),
                        ImVec2(b.x - ux * s + uy * s * 0.5f, b.y - uy * s - ux * s * 0.5f), col);
}

// Idle: a grey wash with stripes, so it reads as "nothing here" next to the
// solid colours of work.
void draw_idle(ImDrawList* dl, ImVec2 a, ImVec2 b, bool hc) {
  hatch(dl, a, b, with_alpha(kIdle, hc ? 1.0f : 0.8f), 6);
}

// A legend entry with the idle stripes instead of a solid swatch.
void idle_legend_item(const char* label) {
  const float h = ImGui::GetTextLineHeight();
  if (ImGui::GetContentRegionAvail().x < h + 4 + ImGui::CalcTextSize(label).x) ImGui::NewLine();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 a(p.x, p.y + h * 0.15f), b(p.x + h * 0.7f, p.y + h * 0.85f);
  hatch(dl, a, b, with_alpha(kIdle, 1.0f), 3);
  dl->AddRect(a, b, with_alpha(kIdle, 1.0f));
  ImGui::Dummy(ImVec2(h * 0.8f, h));
  ImGui::SameLine(0, 4);
  ImGui::TextUnformatted(label);
  ImGui::SameLine(0, 14);
}

// The layers each pipeline stage holds ("L0-1"; interleaved "L0-1,4-5"); a
// parameter server's role of each rank ("server", "worker"); empty for other
// strategies.
std::vector<std::string> stage_layers(const RunConfig& cfg, int world, const Tr& tr) {
  std::vector<std::string> out;
  if (const StrategyInfo* info = find_strategy(cfg.strategy); info && info->server_ranks(cfg) > 0) {
    for (int r = 0; r < world; ++r)
      out.push_back(info->role(cfg, r) == RankRole::server ? tr("server") : tr("worker"));
    return out;
  }
  if (!is_pipeline_strategy(cfg.strategy)) return out;
  try {
    const std::vector<int> part = pipeline_partition(cfg, make_layout(cfg));
    std::vector<std::string> stage;
    int l = 0;
    for (int n : part) {
      std::string name = "L";
      name += std::to_string(l);
      if (n > 1) {
        name += '-';
        name += std::to_string(l + n - 1);
      }
      stage.push_back(std::move(name));
      l += n;
    }
    // On a mesh each rank names its stage's layers and its place on the
    // other axes ("L0-1 dp1 tp0").
    const Mesh mesh = run_mesh(cfg);
    if (mesh.world() != world) return {};
    for (int r = 0; r < world; ++r) {
      const int st = pipeline_stage_of(cfg, r);
      if (st < 0 || static_cast<size_t>(st) >= stage.size()) return {};
      std::string name = stage[static_cast<size_t>(st)];
      // Interleaved: every chunk's layers ("L0-1,4-5"), model stages c*P + st.
      const size_t V = static_cast<size_t>(pipeline_chunks(cfg)), P = stage.size() / V;
      for (size_t c = 1; c < V && c * P + st < stage.size(); ++c)
        name += "," + stage[c * P + static_cast<size_t>(st)].substr(1);
      for (const auto& [axis, size] : mesh.axes())
        if (axis != MeshAxis::pp && size > 1)
          name += " " + std::string(to_string(axis)) + std::to_string(mesh.coord(r, axis));
      out.push_back(std::move(name));
    }
  } catch (const std::exception&) {
    out.clear();  // a config the run would not have accepted: no layer names
  }
  return out;
}

}  // namespace

void link_combo(App& app, const char* id) {
  const Tr tr = app.tr();
  std::string& link = app.state.timeline.projected_link;
  ImGui::SetNextItemWidth(ImGui::CalcTextSize("nvlink-h100").x +  // i18n: not shown (a width)
                          ImGui::GetFrameHeight() * 1.5f);
  if (ImGui::BeginCombo(id, link.c_str())) {
    for (const std::string& name : link_choices(link))
      if (ImGui::Selectable(name.c_str(), name == link)) link = name;
    ImGui::EndCombo();
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "%s", tr("the link joining the devices: loopback (this machine, Gloo over TCP, measured "
                 "once), pcie4 (25 GB/s, 5 us), nvlink-h100 (450 GB/s, 2 us), eth100 (12.5 GB/s, "
                 "10 us), ib400 (50 GB/s, 2 us)"));
}

namespace {

// What every phase of drawing the rows shares: where they are, the view, the
// colours and the mouse. Filled once a frame by draw_timeline_rows.
struct RowsFrame {
  ImDrawList* dl = nullptr;
  Viewport vp;
  RowsLayout L;
  ImVec2 origin, end;
  float x_end = 0, lane_h = 0, font = 0, small = 0;
  float rows_top = 0, rows_bottom = 0;
  bool hc = false;
  const UiColors* ui = nullptr;
  ImVec2 mouse;
  bool hovered = false;
};

// What the mouse is over, found while the lanes are drawn, shown after.
struct RowsHover {
  const Span* span = nullptr;
  const LaneData* lane = nullptr;
  const CommWait* wait = nullptr;
  DrawSpan block;
  int idle_rank = -1;
  Interval idle{0, 0};
};

// One label a lane asks for, with how to draw it.
struct LaneLabel {
  LabelRequest req;
  std::string text;
  ImU32 col;
  bool on_stripes = false;  // over a wait's stripes: dark text would vanish
  // A pipeline block's spans [first, last), to see whether its label sits on
  // them or on the gaps between them; {0, 0} for other labels.
  std::pair<size_t, size_t> block_spans{0, 0};
};

// A rank's gutter text under its name, by lane: its stage's layers in lane 1,
// and where there are more lanes its mesh coordinates in lane 2.
std::vector<std::pair<int, std::string>> gutter_lines(const std::string& layers, int lanes) {
  const size_t cut = layers.find(' ');
  if (lanes < 3 || cut == std::string::npos) return {{1, layers}};
  return {{1, layers.substr(0, cut)}, {2, layers.substr(cut + 1)}};
}

// Lane backgrounds and gutter labels (rank, its layers, the lane names): first,
// so markers and spans draw over them.
void draw_row_gutters(App& app, const RunData& d, const RowsFrame& f,
                      const TimelineRowsOptions& opt, const std::vector<std::string>& lane_names,
                      const Tr& tr) {
  const UiColors& ui = *f.ui;
  const std::vector<std::string> layers = stage_layers(d.cfg, d.world, tr);
  const int lanes = static_cast<int>(lane_names.size());
  for (int r = 0; r < d.world; ++r) {
    const float y = f.origin.y + f.L.rank_y(r);
    for (int l = 0; l < lanes; ++l) {
      const float ly = f.origin.y + f.L.lane_y(r, l);
      f.dl->AddRectFilled(ImVec2(f.vp.x0, ly), ImVec2(f.x_end, ly + f.lane_h),
                          l % 2 ? ui.lane_bg_alt : ui.lane_bg);
    }
    f.dl->AddLine(ImVec2(f.origin.x, y - f.L.gap * 0.5f), ImVec2(f.x_end, y - f.L.gap * 0.5f),
                  ui.grid);
    const std::string rank_name = strf(tr("rank %d"), r);
    const char* name = rank_name.c_str();
    if (f.lane_h >= f.font) {
      f.dl->AddText(ImVec2(f.origin.x + 2, f.origin.y + text_y_in_lane(f.L, r, 0, f.font)), ui.text,
                    name);
      // The stage's layers, and on a mesh with lanes to spare its place on the
      // other axes under them ("L0-1", "dp0 tp1").
      if (static_cast<size_t>(r) < layers.size())
        for (const auto& [line, text] : gutter_lines(layers[r], lanes))
          f.dl->AddText(ImGui::GetFont(), f.small,
                        ImVec2(f.origin.x + 2, f.origin.y + text_y_in_lane(f.L, r, line, f.small)),
                        ui.text_dim, text.c_str());
    } else {  // short lanes (compare): one name between the two
      f.dl->AddText(ImVec2(f.origin.x + 2, y + f.lane_h - f.font * 0.5f), ui.text, name);
    }
    if (f.lane_h >= f.small) {
      for (int l = 0; l < lanes; ++l)
        f.dl->AddText(ImGui::GetFont(), f.small,
                      ImVec2(f.vp.x0 - ImGui::CalcTextSize(lane_names[l].c_str()).x * 0.85f - 6,
                             f.origin.y + text_y_in_lane(f.L, r, l, f.small)),
                      ui.text_dim, lane_names[l].c_str());
    }
    // A lesson may point at this rank's lanes (the measured run's rows only).
    if (opt.click_sets_playhead && &d == &app.data)
      mark_region(app, r, nullptr, -1, ImVec2(f.origin.x, f.origin.y + f.L.lane_y(r, 0)),
                  ImVec2(f.x_end, f.origin.y + f.L.lane_y(r, lanes - 1) + f.lane_h));
  }
}

// Step boundaries: a line per step through the rows, labelled in a band under
// the axis, where a short window cannot clip the labels. Returns the first and
// last step meeting the view (-1, -1: none).
std::pair<int, int> draw_step_lines(const RunData& d, const RowsFrame& f,
                                    const TimelineRowsOptions& opt, const Tr& tr) {
  int first_step = -1, last_step = -1;
  if (d.step_begin.empty()) return {first_step, last_step};
  const Viewport& vp = f.vp;
  float last_x = -1e9f;
  std::vector<std::pair<float, float>> boxes;
  std::vector<size_t> box_steps;
  for (size_t s = 0; s < d.step_begin.size(); ++s) {
    if (d.step_begin[s] < 0) continue;
    const double b = static_cast<double>(d.step_begin[s]);
    const double e = s + 1 < d.step_begin.size() && d.step_begin[s + 1] >= 0
                         ? static_cast<double>(d.step_begin[s + 1])
                         : static_cast<double>(d.t_end);
    if (e >= vp.t_begin && b <= vp.t_end) {
      if (first_step < 0) first_step = static_cast<int>(s);
      last_step = static_cast<int>(s);
    }
    if (!opt.show_steps) continue;
    const float x = vp.x_of(b);
    if (x < vp.x0 && vp.x_of(e) > vp.x0) {
      // The step the view starts inside keeps its name at the left edge.
      const std::string label = step_label(d, static_cast<int>(s), tr);
      boxes.push_back({vp.x0 + 3, ImGui::CalcTextSize(label.c_str()).x});
      box_steps.push_back(s);
      continue;
    }
    // Closer than a few pixels the lines are a grey wash (and thousands of
    // full-height lines are what a software rasteriser chokes on).
    if (x < vp.x0 || x > f.x_end || x - last_x < 6) continue;
    last_x = x;
    f.dl->AddLine(ImVec2(x, f.rows_top - f.L.steps_h), ImVec2(x, f.rows_bottom), f.ui->grid);
    const std::string label = step_label(d, static_cast<int>(s), tr);
    boxes.push_back({x + 3, ImGui::CalcTextSize(label.c_str()).x});
    box_steps.push_back(s);
  }
  // The left edge's name gives way to a step boundary right next to it.
  if (boxes.size() > 1 && boxes[0].first == vp.x0 + 3 &&
      boxes[1].first < boxes[0].first + boxes[0].second + 8) {
    boxes.erase(boxes.begin());
    box_steps.erase(box_steps.begin());
  }
  const std::vector<bool> keep = keep_apart(boxes, 8, f.x_end);
  for (size_t k = 0; k < boxes.size(); ++k) {
    if (!keep[k]) continue;
    const std::string label = step_label(d, static_cast<int>(box_steps[k]), tr);
    f.dl->AddText(ImVec2(boxes[k].first, f.rows_top - f.L.steps_h + (f.L.steps_h - f.font) * 0.5f),
                  f.ui->text_dim, label.c_str());
  }
  return {first_step, last_step};
}

// Interleaved: per layer, which of rank r's chunks holds it (-1: another
// rank's); empty for any other run.
std::vector<int> chunk_layout(const RunData& d, int r) {
  try {
    if (pipeline_chunks(d.cfg) > 1) return chunk_of_layers(d.cfg, r);
  } catch (const std::exception&) {
  }
  return {};
}

// Whether the rank whose layout `chunk_of` is holds a layer; none without one.
HoldsLayer holds_in(const std::vector<int>& chunk_of) {
  if (chunk_of.empty()) return {};
  return [&chunk_of](int, int layer) {
    return layer < static_cast<int>(chunk_of.size()) && chunk_of[layer] >= 0;
  };
}

// Labels left to right, none over another (place_labels), on the top layer.
void draw_lane_labels(const RowsFrame& f, const LaneData& lane, int l, float y0, float y1,
                      const std::vector<LaneLabel>& labels) {
  const UiColors& ui = *f.ui;
  f.dl->ChannelsSetCurrent(2);
  std::vector<size_t> order(labels.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t p, size_t q) { return labels[p].req.x0 < labels[q].req.x0; });
  std::vector<LabelRequest> sorted;
  for (size_t k : order) sorted.push_back(labels[k].req);
  const std::vector<LabelPlace> placed = place_labels(sorted, std::max(3.0f, f.font * 0.5f));
  const float ty = std::floor((y0 + y1 - f.font) * 0.5f);
  for (size_t k = 0; k < order.size(); ++k) {
    if (!placed[k].shown || f.lane_h < f.font) continue;
    const LaneLabel& label = labels[order[k]];
    const float x = std::floor(placed[k].x);
    // Outside its block, or over the stripes of a wait, dark text would
    // vanish: light text on a patch of the lane's own colour.
    // A block of narrow spans with gaps between them (several micro-batches
    // grouped, or a rank sharing a core) is no background for dark text either.
    const float w = ImGui::CalcTextSize(label.text.c_str()).x;
    const auto [bf, bl] = label.block_spans;
    const bool patch = !placed[k].inside || label.on_stripes ||
                       (bl > bf && covered_share(lane, bf, bl, f.vp, x, x + w) < 0.9f);
    if (patch) {
      f.dl->AddRectFilled(ImVec2(x - 1, ty), ImVec2(x + w + 1, ty + f.font),
                          l % 2 ? ui.lane_bg_alt : ui.lane_bg);
    }
    f.dl->AddText(ImVec2(x, ty), patch ? ui.text : label.col, label.text.c_str());
  }
  f.dl->ChannelsSetCurrent(0);
}

// One lane of one rank: its idle time (compute lane), the waits inside its comm
// spans, the spans themselves (folded where narrow), pipeline blocks outlined,
// then every label placed; notes what the mouse is over in `hover`.
// `chunk_of`: the rank's chunk_layout.
void draw_lane(const RunData& d, const RowsFrame& f, int r, int l, const std::vector<int>& chunk_of,
               const std::vector<WindowUse>& uses, const char* idle_word, const Tr& tr,
               RowsHover& hover) {
  const Viewport& vp = f.vp;
  const UiColors& ui = *f.ui;
  ImDrawList* dl = f.dl;
  const LaneData& lane = display_lane(d, r, l);
  const bool disk_lane = is_disk_lane(d, l);
  const bool comm_lane = l >= 1 && !disk_lane;  // the comm lane, or one axis's of it
  const float y0 = f.origin.y + f.L.lane_y(r, l) + 1, y1 = y0 + f.lane_h - 2;
  const bool mouse_in_lane =
      f.hovered && f.mouse.y >= y0 && f.mouse.y < y1 + 2 && f.mouse.x >= vp.x0;
  const auto text_w = [](const std::string& t) { return ImGui::CalcTextSize(t.c_str()).x; };
  auto wait_of = [&](uint32_t at) -> const CommWait* {
    // Waits are kept by the span's place in the rank's whole comm lane.
    if (disk_lane) return nullptr;  // a disk transfer is not a Comm's op
    const int64_t i = d.comm_axes.empty() ? at : comm_index_of(d.ranks[r], lane.spans[at]);
    if (i < 0) return nullptr;
    const uint32_t index = static_cast<uint32_t>(i);
    for (const WindowUse& u : uses)
      if (const CommWait* w = u.ranks[r].wait_of(index)) return w;
    return nullptr;
  };
  std::vector<LaneLabel> labels;

  // Idle first, under the spans: the compute lane shows where the rank
  // neither computed nor moved bytes (once, where two steps' windows overlap).
  const std::vector<Interval> idle =
      l == static_cast<int>(Lane::compute) ? merged_idle(uses, r) : std::vector<Interval>{};
  for (const Interval& iv : idle) {
    const float a = std::max(vp.x_of(static_cast<double>(iv.first)), vp.x0 - 2);
    const float b = std::min(vp.x_of(static_cast<double>(iv.second)), f.x_end + 2);
    if (b - a < 2) continue;
    draw_idle(dl, ImVec2(a, y0), ImVec2(b, y1), f.hc);
    if (mouse_in_lane && f.mouse.x >= a && f.mouse.x <= b) {
      hover.idle_rank = r;
      hover.idle = iv;
    }
  }

  std::vector<DrawSpan> blocks;
  visible_spans(lane, vp, kMinSpanPx, blocks);
  std::vector<PhaseRun> runs;
  // Interleaved: each block is labelled with its chunk ("F3.1"), and a
  // message by the layers this rank holds (rank P-1 sends activations on to
  // rank 0).
  const HoldsLayer holds = holds_in(chunk_of);
  const bool have_runs = l == static_cast<int>(Lane::compute) &&
                         phase_runs(lane, vp.t_begin, vp.t_end, 4000, runs, chunk_of) &&
                         !runs.empty();
  // Waiting for the peer, then moving bytes. Comm spans overlap (a stage posts
  // several recvs at once): waits are drawn in a first pass, so no wait covers
  // another span's moving bytes.
  if (comm_lane)
    for (const DrawSpan& b : blocks) {
      if (b.folded()) continue;
      const CommWait* w = wait_of(b.first);
      if (!w) continue;
      const Color base = kind_color(b.kind, f.hc);
      const ImVec2 a(std::max(b.x0, vp.x0 - 2), y0), z(std::min(b.x1, f.x_end + 2), y1);
      const float xr = std::clamp(vp.x_of(static_cast<double>(w->ready)), a.x, z.x);
      dl->AddRectFilled(a, ImVec2(xr, z.y), with_alpha(base, 0.18f));
      draw_idle(dl, a, ImVec2(xr, z.y), f.hc);
      dl->AddRect(a, ImVec2(xr, z.y), with_alpha(base, 0.8f));
    }
  size_t run_k = 0;
  for (const DrawSpan& b : blocks) {
    const Color base = kind_color(b.kind, f.hc);
    const ImVec2 a(std::max(b.x0, vp.x0 - 2), y0), z(std::min(b.x1, f.x_end + 2), y1);
    if (b.folded()) {
      // Folded: darker, with a bright top edge. (Hatching thousands of blocks
      // cost a software rasteriser ~200 ms a frame.)
      dl->AddRectFilled(a, z, scale_rgb(base, 0.55f));
      dl->AddRectFilled(a, ImVec2(z.x, a.y + 2), base);
      if (!have_runs) {
        char n[24];
        std::snprintf(n, sizeof n, "\xC3\x97%u", b.count);
        text_in_rect(dl, a, z, ui.text, n);
      }
      continue;
    }
    const Span& s = lane.spans[b.first];
    const CommWait* w = comm_lane ? wait_of(b.first) : nullptr;
    const float xr = w ? std::clamp(vp.x_of(static_cast<double>(w->ready)), a.x, z.x) : a.x;
    // Set-up and tear-down (step -1, e.g. the final weights going to rank
    // 0) are drawn faint: they are not part of a training step.
    const bool training = s.step >= 0;
    dl->AddRectFilled(ImVec2(xr, a.y), z, training ? base : with_alpha(base, 0.35f));
    if (z.x - a.x > 4) dl->AddRect(a, z, ui.outline);
    // Spans of a pipeline block are labelled once, for the whole block.
    while (run_k < runs.size() && runs[run_k].first + runs[run_k].count <= b.first) ++run_k;
    if (have_runs && run_k < runs.size() && runs[run_k].first <= b.first) continue;
    std::string lf = span_label(s, true, tr, holds);
    std::string sf = span_label(s, false, tr, holds);
    // After the last step, step -1 is the final weights' export to rank 0: say so.
    if (!training && !d.step_begin.empty() && d.step_begin.back() >= 0 &&
        s.t_begin_ns > d.step_begin.back()) {
      lf = strf(tr("final weights: %s"), lf.c_str());
      sf = strf(tr("final weights: %s"), sf.c_str());
    }
    const float wl = text_w(lf), ws = text_w(sf);
    // Labels go in the visible part of a span (the rest is clipped).
    const float la = std::max(a.x, vp.x0), lz = std::min(z.x, f.x_end);
    const bool long_fits = wl + 4 <= lz - la;
    labels.push_back({{la, lz, long_fits ? wl : ws, la},
                      long_fits ? lf : sf,
                      training ? ui.label_on_span : ui.text_dim,
                      w != nullptr});
  }

  // Pipeline blocks: an outline around each micro-batch's run of spans, and
  // its name inside, or just after it when the block is too narrow.
  for (const PhaseRun& run : runs) {
    const float a = vp.x_of(static_cast<double>(run.t_begin));
    const float z = vp.x_of(static_cast<double>(run.t_end));
    if (z - a >= 3 && z >= vp.x0 && a <= f.x_end)
      dl->AddRect(ImVec2(a, y0), ImVec2(z, y1), ui.outline, 0, 0, 1.5f);
  }
  size_t next_block = 0;
  for (const RunGroup& g : group_runs(runs, vp, f.font * 2.0f, 3, text_w)) {
    const PhaseRun& first = runs[g.first];
    const PhaseRun& last = runs[g.first + g.count - 1];
    // The visible part; under 2 px a run is a zoomed-out wash, not worth a name.
    const float a = std::max(vp.x_of(static_cast<double>(first.t_begin)), vp.x0);
    const float z = std::min(vp.x_of(static_cast<double>(last.t_end)), f.x_end);
    if (z - a < 2) continue;
    while (next_block < blocks.size() && blocks[next_block].x0 < z - 0.5f) ++next_block;
    float limit = f.x_end;
    if (next_block < blocks.size()) limit = std::min(limit, blocks[next_block].x0);
    if (g.first + g.count < runs.size())
      limit = std::min(limit, vp.x_of(static_cast<double>(runs[g.first + g.count].t_begin)));
    labels.push_back({{a, z, text_w(g.label), limit},
                      g.label,
                      ui.label_on_span,
                      false,
                      {first.first, last.first + last.count}});
  }

  // Idle gets its name where there is room.
  for (const Interval& iv : idle) {
    const float a = std::max(vp.x_of(static_cast<double>(iv.first)), vp.x0);
    const float b = std::min(vp.x_of(static_cast<double>(iv.second)), f.x_end);
    const float w = ImGui::CalcTextSize(idle_word).x;
    if (b - a < w + 8) continue;
    labels.push_back({{a, b, w, b}, idle_word, ui.text});
  }
  draw_lane_labels(f, lane, l, y0, y1, labels);

  if (mouse_in_lane) {
    const int k = hit_test(blocks, f.mouse.x, 2.0f);
    if (k >= 0) {
      hover.block = blocks[k];
      hover.lane = &lane;
      hover.span = &lane.spans[blocks[k].first];
      hover.wait = comm_lane && !blocks[k].folded() ? wait_of(blocks[k].first) : nullptr;
    }
  }
}

// send -> recv: from the send's start on the sender to the recv's end on the
// receiver; many in view are bundled into a few strokes.
void draw_flow_lines(const RunData& d, const RowsFrame& f) {
  f.dl->ChannelsSetCurrent(1);
  // Sends and recvs go between pipeline stages: the pp lane, on a mesh.
  const auto pp = std::find(d.comm_axes.begin(), d.comm_axes.end(), MeshAxis::pp);
  const int flow_lane =
      pp == d.comm_axes.end() ? 1 : 1 + static_cast<int>(pp - d.comm_axes.begin());
  std::vector<FlowLine> lines;
  flow_lines(d.flows, f.vp, kMaxSingleFlows, 16, lines);
  const bool bundled =
      !lines.empty() && lines.size() < d.flows.size() &&
      std::any_of(lines.begin(), lines.end(), [](const FlowLine& l) { return l.count > 1; });
  const ImU32 col = f.hc ? IM_COL32(255, 255, 255, 170) : IM_COL32(225, 228, 235, 95);
  for (const FlowLine& l : lines) {
    const float ya = f.origin.y + f.L.lane_y(l.from_rank, flow_lane) + f.lane_h * 0.5f;
    const float yb = f.origin.y + f.L.lane_y(l.to_rank, flow_lane) + f.lane_h * 0.5f;
    const float thick =
        bundled ? std::min(4.0f, 1.0f + std::log2(static_cast<float>(l.count)) * 0.5f) : 1.2f;
    draw_arrow(f.dl, ImVec2(l.xa, ya), ImVec2(l.xb, yb), col, thick, bundled ? 0 : 5);
  }
}

}  // namespace

bool draw_timeline_rows(App& app, const RunData& d, Viewport& shared_vp,
                        const TimelineRowsOptions& opt) {
  RowsFrame f;
  // Rows may be drawn shifted (compare: each run from its own first span); the
  // caller's viewport stays in its own coordinates.
  f.vp = shared_vp;
  f.vp.t_begin += opt.t_offset;
  f.vp.t_end += opt.t_offset;
  Viewport& vp = f.vp;
  f.hc = app.state.presenter.high_contrast;
  f.ui = &ui_colors(f.hc);
  f.dl = ImGui::GetWindowDrawList();
  f.font = ImGui::GetFontSize();
  f.small = f.font * 0.85f;
  const float lane_h_req = opt.lane_height > 0 ? opt.lane_height : f.font + 6;
  const int lanes = display_lanes(d);
  f.L = rows_layout(f.font, lane_h_req, d.world, opt.show_axis, opt.show_steps, lanes);
  f.lane_h = f.L.lane_h;
  const Tr tr = app.tr();
  // compute, comm; on a mesh compute, then "comm tp", "comm pp", ... by axis.
  std::vector<std::string> lane_names = {lane_name(Lane::compute, tr)};
  if (d.comm_axes.empty()) lane_names.push_back(lane_name(Lane::comm, tr));
  for (MeshAxis axis : d.comm_axes) lane_names.push_back(strf(tr("comm %s"), to_string(axis)));
  if (d.has_disk) lane_names.push_back(tr("disk"));  // --offload nvme:DIR's transfers
  float names_w = 0;
  for (const std::string& n : lane_names)
    names_w = std::max(names_w, ImGui::CalcTextSize(n.c_str()).x);
  // Left of the lane names: the rank's name, or its layers and coordinates.
  float left_w = ImGui::CalcTextSize((strf(tr("rank %d"), 10) + " ").c_str()).x;
  for (const std::string& layers : stage_layers(d.cfg, d.world, tr))
    for (const auto& [line, text] : gutter_lines(layers, lanes))
      left_w = std::max(left_w, (ImGui::CalcTextSize(text.c_str()).x + 8) * 0.85f);
  const float gutter = left_w + names_w * 0.85f + 14;
  f.origin = ImGui::GetCursorScreenPos();
  const float width = std::max(50.0f, ImGui::GetContentRegionAvail().x);
  const float height = opt.height > 0 ? opt.height : f.L.height();
  const bool pipeline = is_pipeline_strategy(d.cfg.strategy);
  const char* idle_word = idle_name(d.cfg.strategy, tr);

  // Input: zoom, pan, click to move the playhead, double-click to fit.
  ImGui::InvisibleButton(opt.id, ImVec2(width, height));
  vp.x0 = f.origin.x + gutter;
  vp.width = std::max(1.0f, width - gutter - 6);
  TimelineState& ts = app.state.timeline;
  const bool moved = zoom_pan(vp, ts);
  f.mouse = ImGui::GetIO().MousePos;
  f.hovered = ImGui::IsItemHovered();
  if (opt.click_sets_playhead && ImGui::IsItemDeactivated() && !ts.dragging && f.mouse.x >= vp.x0)
    app.set_playhead_on(d, vp.t_of(f.mouse.x));
  if (f.hovered && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
    fit(vp, d.steps_begin(), static_cast<double>(d.t_end));
    ts.follow = true;
    if (opt.click_sets_playhead) ts.one_step = false;
  }
  shared_vp = vp;
  shared_vp.t_begin -= opt.t_offset;
  shared_vp.t_end -= opt.t_offset;

  f.end = ImVec2(f.origin.x + width, f.origin.y + height);
  f.dl->PushClipRect(f.origin, f.end, true);
  f.x_end = vp.x0 + vp.width;
  if (opt.show_axis) {
    // Label the axis in the caller's time (compare: time since each run's first span).
    Viewport axis_vp = vp;
    axis_vp.t_begin -= opt.t_offset;
    axis_vp.t_end -= opt.t_offset;
    draw_time_axis(f.dl, axis_vp, f.origin.y, f.L.axis_h, *f.ui);
  }
  f.rows_top = f.origin.y + f.L.rows_top();
  f.rows_bottom = f.origin.y + f.L.height();

  draw_row_gutters(app, d, f, opt, lane_names, tr);
  const auto [first_step, last_step] = draw_step_lines(d, f, opt, tr);

  // Where each rank waited, per step in view (while few enough are).
  // (Narrow steps would show stripes too fine to read, at a cost per frame.)
  std::vector<WindowUse> uses;
  const int steps_in_view = last_step - first_step + 1;
  if (first_step >= 0 && steps_in_view <= kMaxClassifiedSteps &&
      vp.width / static_cast<float>(steps_in_view) >= kMinClassifiedStepPx)
    for (int s = first_step; s <= last_step; ++s) uses.push_back(step_use(d, s));

  f.dl->PushClipRect(ImVec2(vp.x0, f.rows_top), ImVec2(f.x_end, f.end.y), true);
  // Three layers: spans, then the send->recv lines over them, then the labels
  // over the lines (a line drawn across "recv B0 ←r1" made it unreadable).
  f.dl->ChannelsSplit(3);
  f.dl->ChannelsSetCurrent(0);
  RowsHover hover;
  for (int r = 0; r < d.world; ++r) {
    const std::vector<int> chunk_of = chunk_layout(d, r);
    for (int l = 0; l < lanes; ++l) draw_lane(d, f, r, l, chunk_of, uses, idle_word, tr, hover);
  }
  if (opt.show_flows && ts.show_flows) draw_flow_lines(d, f);
  f.dl->ChannelsMerge();
  f.dl->PopClipRect();

  if (opt.show_playhead && d.t_end > 0) {
    const float x = vp.x_of(app.playhead_on(d));
    if (x >= vp.x0 && x <= f.x_end) {
      f.dl->AddLine(ImVec2(x, f.origin.y), ImVec2(x, f.rows_bottom), f.ui->playhead, 2.0f);
      f.dl->AddTriangleFilled(ImVec2(x - 5, f.origin.y), ImVec2(x + 5, f.origin.y),
                              ImVec2(x, f.origin.y + 7), f.ui->playhead);
    }
  }
  f.dl->PopClipRect();

  if (!ts.dragging) {
    if (hover.span) {
      if (hover.block.folded())
        fold_tooltip(*hover.lane, hover.block, tr);
      else {
        const std::vector<int> chunk_of = chunk_layout(d, hover.span->rank);
        span_tooltip(*hover.span, hover.wait, idle_word, tr, holds_in(chunk_of));
      }
    } else if (hover.idle_rank >= 0) {
      idle_tooltip(hover.idle_rank, hover.idle, idle_word, pipeline, tr);
    }
  }
  return moved;
}

namespace {

// Below the rows: where each rank's time went in the step on screen, in bars
// and numbers, so the picture above has a reading. With `projected`, the same
// step of the run as on N dedicated devices, under the measured one's table:
// there nothing waits for a core, so its idle time is the bubble (or the wait
// for a peer) the schedule leaves, and its exposed time the link's.
// One table for the step in view: each rank's row as measured and, with "As on
// N devices" on, under it the same rank's row as projected, so the two read
// against each other and both stay above the fold with many ranks.
void draw_step_breakdown(App& app, const ProjectedRun* projected = nullptr) {
  const RunData& d = app.data;
  const bool hc = app.state.presenter.high_contrast;
  const bool live = app.run_active() && app.state.playhead.live;
  const int k = step_to_show(d, app.playhead_on(d), live);
  if (k < 0) return;
  const WindowUse u = step_use(d, k);
  if (u.duration() <= 0) return;
  WindowUse up;
  if (projected) up = step_use(projected->data, k);
  const bool with_projected =
      projected && up.duration() > 0 && static_cast<int>(up.ranks.size()) == d.world;
  const Tr tr = app.tr();
  const char* idle = idle_name(d.cfg.strategy, tr);
  const bool pipeline = is_pipeline_strategy(d.cfg.strategy);

  // Step 0's times are not typical, and every median step leaves it out.
  const bool warmup = is_warmup_step(d, k);
  const char* which =
      live ? (warmup ? tr("warm-up; the last finished one") : tr("the last finished one"))
           : (warmup ? tr("warm-up; the playhead's") : tr("the playhead's"));
  text(strf(tr("Step %d (%s), %s: where each rank's time went"), k, which,
            format_time_ns(static_cast<double>(u.duration())).c_str()));
  ImGui::SameLine();
  help_marker(
      tr("The step runs from the first compute span any rank begins in it to the last span any "
         "rank ends. A rank is computing while it has a compute span; moving bytes while a comm "
         "span of it is past its wait; otherwise idle. A recv waits until its sender begins the "
         "send, a send until its receiver has posted the recv, a collective until the last rank "
         "has entered it: that wait is idle, not communication. On loopback a few KiB move in "
         "microseconds; milliseconds of moving bytes mean the transport's thread or the "
         "receiving rank waited for a CPU core (more busy threads than cores)."));
  if (with_projected) {
    text(strf(tr("Step %d as on %d devices joined by %s, %s: where each rank's time went"), k,
              d.world, projected->link_label.c_str(),
              format_time_ns(static_cast<double>(up.duration())).c_str()));
    ImGui::SameLine();
    help_marker(
        tr("The run replayed on one dedicated device per rank: each op costs the CPU time its "
           "thread used, each transfer the link's time. No rank waits for a core here, so the "
           "idle time is what the schedule leaves: in a pipeline the bubble, waiting for a "
           "neighbouring stage's activation or gradient, which (P-1)/(M+P-1) describes; "
           "elsewhere the wait for a late peer. Moving bytes, exposed, is the link's time "
           "that no computation hides."));
  }
  // Computing blue, moving bytes red, both at once blue with a red band.
  const Color c_compute = kind_color(SpanKind::forward, hc),
              c_comm = kind_color(SpanKind::all_reduce, hc);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  auto part = [&](int which_part, ImVec2 a, ImVec2 b) {
    if (b.x <= a.x) return;
    if (which_part == 3) {
      draw_idle(dl, a, b, hc);
      return;
    }
    dl->AddRectFilled(a, b, which_part == 2 ? c_comm : c_compute);
    const float h = b.y - a.y;
    if (which_part == 1)
      dl->AddRectFilled(ImVec2(a.x, a.y + h * 0.3f), ImVec2(b.x, b.y - h * 0.3f), c_comm);
  };
  const char* names[3] = {tr("computing"), tr("moving bytes hidden behind compute"),
                          tr("moving bytes (exposed)")};
  for (int i = 0; i < 3; ++i) {
    const float h = ImGui::GetTextLineHeight();
    if (ImGui::GetContentRegionAvail().x < h + 4 + ImGui::CalcTextSize(names[i]).x)
      ImGui::NewLine();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    part(i, ImVec2(p.x, p.y + h * 0.15f), ImVec2(p.x + h * 0.7f, p.y + h * 0.85f));
    ImGui::Dummy(ImVec2(h * 0.8f, h));
    ImGui::SameLine(0, 4);
    ImGui::TextUnformatted(names[i]);
    ImGui::SameLine(0, 14);
  }
  const std::string idle_legend =
      strf(pipeline ? tr("%s (waiting for a neighbouring stage)") : tr("%s (for a peer)"), idle);
  idle_legend_item(idle_legend.c_str());
  ImGui::NewLine();

  const float font = ImGui::GetFontSize();
  const float bar_w = std::clamp(ImGui::GetContentRegionAvail().x * 0.28f, 60.0f, font * 22);
  const ImGuiTableFlags flags = ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_RowBg |
                                ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_NoHostExtendX;
  if (!ImGui::BeginTable("breakdown", 6, flags)) return;
  ImGui::TableSetupColumn(tr("rank"));
  ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed, bar_w);
  ImGui::TableSetupColumn(tr("computing"));
  ImGui::TableSetupColumn(tr("moving bytes, hidden"));
  ImGui::TableSetupColumn(tr("moving bytes, exposed"));
  ImGui::TableSetupColumn(idle);
  ImGui::TableHeadersRow();
  auto row = [&](const RankUse& s, double dur, const std::string& label, bool dim) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    if (dim)
      ImGui::TextDisabled("%s", label.c_str());
    else
      text(label);
    ImGui::TableNextColumn();
    const ImVec2 o = ImGui::GetCursorScreenPos();
    const float h = ImGui::GetTextLineHeight();
    float x = o.x;
    const int64_t parts[] = {s.computing - s.hidden, s.hidden, s.exposed, s.idle};
    for (int i = 0; i < 4; ++i) {
      const float w = static_cast<float>(std::max<int64_t>(0, parts[i]) / dur) * bar_w;
      part(i, ImVec2(x, o.y + h * 0.1f), ImVec2(x + w, o.y + h * 0.9f));
      x += w;
    }
    ImGui::Dummy(ImVec2(bar_w, h));
    for (int64_t ns : {s.computing - s.hidden, s.hidden, s.exposed, s.idle}) {
      ImGui::TableNextColumn();
      ImGui::Text("%s (%.0f%%)", format_time_ns(static_cast<double>(ns)).c_str(), 100.0 * ns / dur);
    }
  };
  for (int r = 0; r < d.world; ++r) {
    row(u.ranks[r], static_cast<double>(u.duration()), strf(tr("rank %d"), r), false);
    if (with_projected)
      row(up.ranks[r], static_cast<double>(up.duration()), strf(tr("on %d devices"), d.world),
          true);
  }
  ImGui::EndTable();
  // i18n: not shown (a lesson's region name)
  mark_region(app, -1, "breakdown", -1, ImGui::GetItemRectMin(), ImGui::GetItemRectMax());
}

// Pipeline runs: per stage, the measured bubble beside (P-1)/(M+P-1), and the
// activations in flight at the peak beside the schedule's expectation.
void draw_stage_table(App& app) {
  const RunData& d = app.data;
  if (!is_pipeline_strategy(d.cfg.strategy)) return;
  TimelineState& ts = app.state.timeline;
  const RunResult* result = app.shown_result();  // a live run's, or an opened file's
  const Tr tr = app.tr();
  ImGui::Spacing();
  if (!result || app.run_active()) {
    ImGui::TextDisabled("%s", tr("Per stage: the measured bubble beside (P-1)/(M+P-1) shows here "
                                 "when the run has finished."));
    return;
  }
  if (ts.stage_rows_of != result || ts.stage_rows_version != d.version) {
    ts.stage_rows = stage_rows(*result);
    ts.stage_rows_of = result;
    ts.stage_rows_version = d.version;
  }
  if (ts.stage_rows.empty()) return;
  const RunConfig& c = result->cfg;
  const int P = static_cast<int>(ts.stage_rows.size());
  const int M = micro_batches_run(c);
  // A single step is measured as it is.
  const std::string over =
      c.steps > 1 ? strf(tr("over steps 1..%d"), c.steps - 1) : std::string(tr("in step 0"));
  text(strf(M == 1 ? tr("Per stage, %s: P = %d stages, M = %d micro-batch")
                   : tr("Per stage, %s: P = %d stages, M = %d micro-batches"),
            over.c_str(), P, M));
  ImGui::SameLine();
  help_marker(
      tr("measured bubble: the share of each step (first to last compute span of any stage) a "
         "stage is not computing, averaged over the steps after the first. The formula "
         "(P-1)/(M+P-1) assumes equal stages and free communication; "
         "on a machine with fewer cores than ranks, waiting for a core adds to the measured one. "
         "Activations in flight: the stage's peak activation bytes (allocator) divided by what "
         "one micro-batch keeps until its backward."));
  const ImGuiTableFlags flags = ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_RowBg |
                                ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_NoHostExtendX;
  if (!ImGui::BeginTable("stages", 7, flags)) return;
  ImGui::TableSetupColumn(tr("stage"));
  ImGui::TableSetupColumn(tr("layers"));
  ImGui::TableSetupColumn(tr("bubble, measured (not computing)"));
  // The run's own formula: (P−1)/(M+P−1) for 1f1b, (P−1)/(3M+P−1) for zb-h1.
  const std::string formula = c.schedule.empty() ? strategy_info(c.strategy).bubble_formula
                                                 : std::string(tr("the schedule's"));
  ImGui::TableSetupColumn(formula.c_str());
  ImGui::TableSetupColumn(tr("peak activations"));
  ImGui::TableSetupColumn(tr("in flight, measured"));
  ImGui::TableSetupColumn(tr("expected"));
  ImGui::TableHeadersRow();
  for (const StageRow& s : ts.stage_rows) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("%d", s.stage);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(s.layers.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%.1f%%", 100 * s.bubble_measured);
    ImGui::TableNextColumn();
    ImGui::Text("%.1f%%", 100 * s.bubble_formula);
    ImGui::TableNextColumn();
    text(strf(tr("%s (predicted %s)"),
              format_bytes(static_cast<double>(s.peak_activation_bytes)).c_str(),
              format_bytes(static_cast<double>(s.predicted_peak_activation_bytes)).c_str()));
    ImGui::TableNextColumn();
    text(strf(c.recompute ? tr("%.1f \xC3\x97 %s (inputs)") : "%.1f \xC3\x97 %s",
              s.in_flight_measured,
              format_bytes(static_cast<double>(s.kept_per_micro_batch)).c_str()));
    ImGui::TableNextColumn();
    ImGui::Text("%d", s.in_flight_expected);
  }
  ImGui::EndTable();
  // i18n: not shown (a lesson's region name)
  mark_region(app, -1, "bubble", -1, ImGui::GetItemRectMin(), ImGui::GetItemRectMax());
}

// The schedule rows the playhead's step shows (empty: not a pipeline).
std::vector<ScheduleRow> shown_schedule(const App& app, int* step = nullptr) {
  const RunData& d = app.data;
  const bool live = app.run_active() && app.state.playhead.live;
  const double t = app.playhead_on(d);
  const int k = step_to_show(d, t, live);
  if (step) *step = k;
  return schedule_rows(d, k, t);
}

// The width the schedule's longest line takes unwrapped (0: nothing to show).
float schedule_text_width(const App& app, const std::vector<ScheduleRow>& rows) {
  const Tr tr = app.tr();
  const float space = ImGui::CalcTextSize(" ").x;
  float widest = 0;
  for (const ScheduleRow& row : rows) {
    float w = ImGui::CalcTextSize(strf(tr("stage %d:"), row.stage).c_str()).x;
    for (const ScheduleCell& c : row.cells) w += space + ImGui::CalcTextSize(c.text.c_str()).x;
    widest = std::max(widest, w);
  }
  return widest;
}

// The step's order per stage as the schedule language writes it ('shardlab
// schedule'), read off the recording, the playhead's action highlighted: the
// text and the picture above are the same thing.
void draw_schedule_text(App& app, const std::vector<ScheduleRow>& rows, int k) {
  const RunData& d = app.data;
  if (rows.empty()) return;
  const Tr tr = app.tr();
  const UiColors& ui = ui_colors(app.state.presenter.high_contrast);
  ImGui::Spacing();
  text(strf(tr("The order each stage ran, %s, as a schedule:"), step_label(d, k, tr).c_str()));
  ImGui::SameLine();
  help_marker(
      tr("Read from the recording: F3 is micro-batch 3's forward through the stage's "
         "layers, B3 its backward. The playhead's action is highlighted, the done ones "
         "are bright. 'shardlab schedule NAME' prints a named schedule in the same "
         "language, and checks one you write."));
  const float space = ImGui::CalcTextSize(" ").x;
  const float right = ImGui::GetWindowContentRegionMax().x;
  for (const ScheduleRow& row : rows) {
    const std::string head = strf(tr("stage %d:"), row.stage);
    const float indent = ImGui::GetCursorPosX() + ImGui::CalcTextSize(head.c_str()).x + space;
    ImGui::TextUnformatted(head.c_str());
    for (const ScheduleCell& c : row.cells) {
      const ImVec2 size = ImGui::CalcTextSize(c.text.c_str());
      ImGui::SameLine(0, space);
      if (ImGui::GetCursorPosX() + size.x > right) {  // wrap under the first action
        ImGui::NewLine();
        ImGui::SetCursorPosX(indent);
      }
      const ImVec2 at = ImGui::GetCursorScreenPos();
      if (c.current)
        ImGui::GetWindowDrawList()->AddRectFilled(
            ImVec2(at.x - 2, at.y), ImVec2(at.x + size.x + 2, at.y + size.y), ui.playhead, 3.0f);
      ImGui::PushStyleColor(ImGuiCol_Text,
                            c.current ? ui.card_bg : (c.done ? ui.text : ui.text_dim));
      ImGui::TextUnformatted(c.text.c_str());
      ImGui::PopStyleColor();
    }
  }
}

}  // namespace

void draw_timeline(App& app) {
  AppState& s = app.state;
  const RunData& d = app.data;
  const Tr tr = app.tr();
  if (d.world == 0 && !s.form_error.empty()) {
    ImGui::TextWrapped("%s", tr("Nothing recorded yet. The settings above cannot run (see the red "
                                "line); fix them, then Run (R)."));
    return;
  }
  if (d.world == 0) {
    ImGui::TextWrapped(
        "%s", tr("Nothing recorded yet. Press Run (R) to train the configuration above: every "
                 "rank is a thread, talking to the others through Gloo. Each rank's spans appear "
                 "here while it runs."));
    return;
  }
  const bool hc = s.presenter.high_contrast;
  const bool pipeline = is_pipeline_strategy(d.cfg.strategy);
  // Legend: only the kinds this run produced, so it stays short and true.
  for (int k = 0; k < kNumSpanKinds; ++k)
    if (d.kinds_seen[k])
      legend_item(kind_color(static_cast<SpanKind>(k), hc),
                  kind_label(static_cast<SpanKind>(k), tr));
  idle_legend_item(pipeline ? tr("bubble (idle)") : tr("waiting (idle)"));
  ImGui::NewLine();

  const bool live = app.run_active() && s.playhead.live;
  auto show_step = [&](int step) {
    const auto [b, e] = step_range(d, step);
    if (!(e > b)) return;
    app.set_playhead_on(d, b + (e - b) * 0.5);
    s.timeline.one_step = true;
    s.timeline.follow = true;
    fit_steps(s.timeline.vp, d, true, app.playhead_on(d), false);
  };
  if (ImGui::Button(tr("All steps (F)"))) {
    s.timeline.one_step = false;
    s.timeline.follow = true;
    fit_steps(s.timeline.vp, d, false, app.playhead_on(d), live);
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "%s", strf(tr("every training step; from step 1 when step 0, the warm-up, took over %.0fx "
                      "a later step (on a GPU: loading cuBLAS and the kernels), which would "
                      "squeeze the others into a sliver. 'With setup' shows it."),
                   kWarmupDwarfs)
                  .c_str());
  ImGui::SameLine();
  if (ImGui::Button(tr("With setup"))) {
    fit(s.timeline.vp, d.view_begin(), static_cast<double>(d.t_end));
    s.timeline.follow = false;
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "%s",
        tr("the whole run, including the setup before step 0 (e.g. replicating the weights)"));
  ImGui::SameLine();
  const int shown = step_to_show(d, app.playhead_on(d), live);
  if (ImGui::Button(tr("One step"))) show_step(shown);
  ImGui::SameLine();
  if (ImGui::ArrowButton("prev_step", ImGuiDir_Left) && shown > 0)  // i18n: not shown
    show_step(shown - 1);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tr("the step before"));
  ImGui::SameLine();
  if (ImGui::ArrowButton("next_step", ImGuiDir_Right) &&  // i18n: not shown
      shown + 1 < static_cast<int>(d.step_begin.size()))
    show_step(shown + 1);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tr("the step after"));
  ImGui::SameLine();
  ImGui::Checkbox(tr("send\xE2\x86\x92recv lines"), &s.timeline.show_flows);
  ImGui::SameLine();
  const std::string as_on = strf(tr("As on %d devices"), d.world) + "###as_on";
  if (ImGui::Checkbox(as_on.c_str(), &s.timeline.projected) && s.timeline.projected)
    s.timeline.follow = true;  // widened below to take in the projected rows
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "%s", tr("also draw the run as on one dedicated device per rank, joined by the link "
                 "beside, under the rows measured here, on the same time scale: each compute span "
                 "costs its thread's CPU time (what it would take on a core of its own), each "
                 "transfer what the link's bandwidth and latency say"));
  if (s.timeline.projected) {
    ImGui::SameLine();
    link_combo(app, "##timeline_link");
  }
  ImGui::SameLine(0, 20);
  const char* hint =
      pipeline ? tr("F3/B3/R3 = forward/backward/recompute of micro-batch 3 \xC2\xB7 wheel: zoom "
                    "\xC2\xB7 drag: pan \xC2\xB7 click: playhead")
               : tr("wheel: zoom \xC2\xB7 drag: pan \xC2\xB7 click: playhead \xC2\xB7 "
                    "double-click: fit \xC2\xB7 L = layer");
  // Big fonts: a line of its own for the hint would cost the lanes room.
  if (ImGui::GetContentRegionAvail().x >= ImGui::CalcTextSize(hint).x)
    ImGui::TextDisabled("%s", hint);
  else
    help_marker(hint);

  const float font = ImGui::GetFontSize();
  const float line = ImGui::GetTextLineHeightWithSpacing();
  const int table_lines =
      (d.world + 4) + (pipeline ? d.world + 3 : 0) + (s.timeline.projected ? d.world + 1 : 0);
  // "As on N devices": a caption over each run's rows, the projected run's
  // rows (with their own band of step names) under the measured ones.
  const bool both = s.timeline.projected;
  const ProjectedRun& pr = app.projection;
  const bool show_projected = both && pr.ok();
  const int ranks_drawn = show_projected ? 2 * d.world : d.world;
  const float extra_h = !both ? 0 : show_projected ? 2 * line + font + 4 : 2 * line;
  const float rows_h = rows_height(ImGui::GetContentRegionAvail().y - extra_h, font, ranks_drawn,
                                   line * table_lines + font, line * 1.6f, display_lanes(d)) +
                       extra_h;
  TimelineRowsOptions opt;
  opt.lane_height =
      lane_height_for(rows_h - extra_h, font, ranks_drawn, true, true, display_lanes(d));
  ImGui::BeginChild("timeline_rows", ImVec2(0, rows_h), false, ImGuiWindowFlags_NoScrollWithMouse);
  if (both) {
    const RunResult* result = app.shown_result();
    const std::string caption = result && !app.run_active()
                                    ? measured_caption(*result, cores_available(), tr)
                                    : std::string(tr("measured here"));
    ImGui::TextUnformatted(caption.c_str());
  }
  if (draw_timeline_rows(app, d, s.timeline.vp, opt)) s.timeline.follow = false;
  if (show_projected) {
    // One time scale: the projected rows are shifted so that the step in view
    // (one step: the playhead's; all steps: the first) starts at the same x in
    // both, and the widths compare directly.
    const double ph = app.playhead_on(d);
    const int step = std::max(
        0, s.timeline.one_step ? step_to_show(d, ph, live)
                               : d.step_at(static_cast<int64_t>(all_steps_begin(d, ph, live))));
    TimelineRowsOptions po = opt;
    po.id = "projected_rows";  // i18n: not shown (an ImGui id)
    po.show_axis = false;
    po.t_offset = projected_offset(d, pr.data, step);
    if (s.timeline.follow) {
      // A slower link can make the projected run the longer one: keep it in view.
      const auto [pb, pe] =
          s.timeline.one_step ? step_range(pr.data, step)
                              : std::pair{all_steps_begin(pr.data, app.playhead_on(pr.data), false),
                                          static_cast<double>(pr.data.t_end)};
      Viewport& vp = s.timeline.vp;
      const double margin = (vp.t_end - vp.t_begin) * 0.02;
      if (pe - po.t_offset > vp.t_end) vp.t_end = pe - po.t_offset + margin;
      if (pb - po.t_offset < vp.t_begin) vp.t_begin = pb - po.t_offset - margin;
    }
    ImGui::TextUnformatted(projected_caption(pr, tr).c_str());
    if (draw_timeline_rows(app, pr.data, s.timeline.vp, po)) s.timeline.follow = false;
  } else if (both) {
    ImGui::TextDisabled("%s", projection_reason(pr, tr).c_str());
  }
  ImGui::EndChild();
  ImGui::BeginChild("timeline_below", ImVec2(0, 0), false);
  draw_step_breakdown(app, show_projected ? &pr : nullptr);
  // The schedule's text beside the stage table when its lines fit there
  // unwrapped (both in view without scrolling), else under it.
  ImGui::BeginGroup();
  draw_stage_table(app);
  ImGui::EndGroup();
  const float gap = 3 * ImGui::GetStyle().ItemSpacing.x;
  const float room = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x -
                     ImGui::GetItemRectMax().x - gap;
  int shown_step = -1;
  const std::vector<ScheduleRow> rows = shown_schedule(app, &shown_step);  // once a frame
  if (const float need = schedule_text_width(app, rows); need > 0 && need <= room)
    ImGui::SameLine(0, gap);
  ImGui::BeginGroup();
  draw_schedule_text(app, rows, shown_step);
  ImGui::EndGroup();
  ImGui::EndChild();
}

}  // namespace shardlab::gui
