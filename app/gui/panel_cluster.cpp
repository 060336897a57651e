// Cluster view: ranks as cards holding their named buffers at the playhead,
// one row per layer and one column per model state; shards fill part of a
// slot, gathered copies are striped and fade when freed, and during
// collectives the pieces travel in corridors between the cards, from a ringed
// source slot to a dashed destination slot.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/cluster_logic.h"
#include "app/gui/logic/format.h"
#include "app/gui/panels.h"

namespace shardlab::gui {

namespace {

ImVec2 iv(Vec2 v) {
  return ImVec2(v.x, v.y);
}

// A slot's rectangle (or the part [fb, fe] of it) inside a card's grid.
ImVec2 slot_min(const CardLayout& g, int col, int row, double fb = 0) {
  const float pad = std::min(6.0f, g.col_w * 0.05f);
  const float x0 = g.grid.x0 + col * g.col_w + pad, x1 = g.grid.x0 + (col + 1) * g.col_w - pad;
  return ImVec2(x0 + static_cast<float>(fb) * (x1 - x0), g.grid.y0 + row * g.row_h + 1);
}
ImVec2 slot_max(const CardLayout& g, int col, int row, double fe = 1) {
  const float pad = std::min(6.0f, g.col_w * 0.05f);
  const float x0 = g.grid.x0 + col * g.col_w + pad, x1 = g.grid.x0 + (col + 1) * g.col_w - pad;
  return ImVec2(x0 + static_cast<float>(fe) * (x1 - x0), g.grid.y0 + (row + 1) * g.row_h - 1);
}

// Text clipped to a rectangle (a card's line), so long lines never run into a neighbour.
void text_clipped(ImDrawList* dl, const Rect& r, ImU32 col, const std::string& text,
                  float size = 0) {
  if (r.h() <= 0) return;
  // A line a little too wide for a narrow card (presenter sizes) shrinks, down
  // to three quarters of its size, before it is clipped.
  const float base = size > 0 ? size : ImGui::GetFontSize();
  const float w = ImGui::CalcTextSize(text.c_str()).x * base / ImGui::GetFontSize();
  const float fs = w > r.w() && w > 0 ? std::max(base * 0.75f, base * r.w() / w) : base;
  dl->PushClipRect(ImVec2(r.x0, r.y0), ImVec2(r.x1, r.y1), true);
  dl->AddText(ImGui::GetFont(), fs, ImVec2(r.x0, r.y0 + (base - fs) * 0.5f), col, text.c_str());
  dl->PopClipRect();
}

// The longest wording that fits `w` pixels, else the last one.
std::string fitting(const std::vector<std::string>& options, float w) {
  for (const std::string& o : options)
    if (ImGui::CalcTextSize(o.c_str()).x <= w) return o;
  return options.back();
}

void dashed_rect(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float dash, float thick) {
  auto line = [&](ImVec2 p, ImVec2 q) {
    const float len = std::hypot(q.x - p.x, q.y - p.y);
    for (float d = 0; d < len; d += 2 * dash) {
      const float e = std::min(len, d + dash);
      dl->AddLine(ImVec2(p.x + (q.x - p.x) * d / len, p.y + (q.y - p.y) * d / len),
                  ImVec2(p.x + (q.x - p.x) * e / len, p.y + (q.y - p.y) * e / len), col, thick);
    }
  };
  line(a, ImVec2(b.x, a.y));
  line(ImVec2(b.x, a.y), b);
  line(b, ImVec2(a.x, b.y));
  line(ImVec2(a.x, b.y), a);
}

}  // namespace

// Gathered copies fade over ~0.4 s of wall time at the current replay speed,
// kept between 1% and 10% of a step: visible in a still picture, gone before
// the next layer's copy arrives.
int64_t fade_ns_for(const App& app, const RunData& d) {
  const double step = d.cfg.steps > 0 ? static_cast<double>(d.t_end) / d.cfg.steps : 1e6;
  return static_cast<int64_t>(
      std::clamp(app.state.playhead.speed * 0.4e9, step * 0.01, step * 0.1));
}

void draw_clock_choice(App& app) {
  const Tr tr = app.tr();
  AppState& s = app.state;
  const int world = app.data.world;
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(tr("clock:"));
  ImGui::SameLine();
  if (ImGui::RadioButton(tr("measured here"), !s.projected_clock)) s.projected_clock = false;
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s", tr("replay the run as it ran on this machine (ranks may share cores)"));
  ImGui::SameLine();
  const std::string as_on = strf(tr("as on %d devices"), world) + "###as_on_clock";
  if (ImGui::RadioButton(as_on.c_str(), s.projected_clock)) s.projected_clock = true;
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "%s", tr("replay the run as on one dedicated device per rank, joined by the link beside: "
                 "each span costs its thread's CPU time, each transfer what the link says. "
                 "Switching clocks keeps the playhead in its step."));
  ImGui::SameLine();
  link_combo(app, "##clock_link");
  if (s.projected_clock && !app.projection.ok()) {
    ImGui::SameLine(0, 12);
    ImGui::TextDisabled("%s", projection_reason(app.projection, tr).c_str());
  }
}

void draw_cluster(App& app, const RunData& d) {
  const Tr tr = app.tr();
  AppState& s = app.state;
  const bool hc = s.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  if (d.world == 0) {
    ImGui::TextWrapped("%s", tr("No run yet. Press Run (R): each rank becomes a card showing the "
                                "buffers it holds."));
    return;
  }
  draw_clock_choice(app);
  const int64_t t = static_cast<int64_t>(s.playhead.t);
  const int64_t fade = fade_ns_for(app, d);
  const Naming naming;

  const std::vector<Piece> pieces = pieces_in_flight(d, t);
  // The column titles, longest first: the longest set that fits a card is drawn.
  const std::array<const char*, kCardColumns> long_titles{tr("params"), tr("grads"),
                                                          tr("optimizer state")};
  const std::array<const char*, kCardColumns> short_titles{tr("params"), tr("grads"),
                                                           tr("optimizer")};
  const std::array<const char*, kCardColumns> tiny_titles{"P", "G", "O"};
  ImGui::TextUnformatted(strf(tr("At the playhead: t = %s, step %d."),
                              format_time_ns(s.playhead.t).c_str(), d.step_at(t))
                             .c_str());
  ImGui::SameLine(0, 16);
  help_marker(
      tr("Each card is a rank; each row a layer (colour = layer); each column a model state: "
         "parameters (P), gradients (G), optimizer state (O). What a card shows is read from the "
         "rank's allocation events at the playhead, by buffer name: full layers, shards "
         "('[shard i/N]') and gathered copies ('[gathered]'). While a collective runs, its pieces "
         "leave the source slot (ringed), travel in the corridor below the cards and enter the "
         "destination slot (dashed). Hover a slot for its buffers."));
  {
    const std::string now = strf(tr("Now: %s"), now_line(d, pieces, t, naming, tr).c_str());
    ImGui::PushStyleColor(ImGuiCol_Text,
                          ImGui::ColorConvertU32ToFloat4(pieces.empty() ? ui.text : ui.playhead));
    ImGui::TextWrapped("%s", now.c_str());
    ImGui::PopStyleColor();
  }
  const float font = ImGui::GetFontSize();
  {
    // Legend drawn as the slots themselves look.
    ImDrawList* dl = ImGui::GetWindowDrawList();
    auto swatch = [&](int kind, const char* text) {
      if (ImGui::GetContentRegionAvail().x < font * 2.5f + ImGui::CalcTextSize(text).x)
        ImGui::NewLine();
      const ImVec2 p = ImGui::GetCursorScreenPos();
      const ImVec2 a(p.x, p.y + 2), b(p.x + font * 2, p.y + font - 1);
      const Color c = layer_color(2, hc);
      if (kind == 0) dl->AddRectFilled(a, b, c);
      if (kind == 1) {
        dl->AddRect(a, b, ui.grid);
        dl->AddRectFilled(a, ImVec2((a.x + b.x) * 0.5f, b.y), c);
      }
      if (kind == 2) {
        dl->AddRectFilled(a, b, with_alpha(c, 0.35f));
        hatch(dl, a, b, c, 4);
        dl->AddRect(a, b, ui.text);
      }
      if (kind == 3) {
        dl->AddRectFilled(ImVec2(a.x + font * 0.6f, a.y), ImVec2(a.x + font * 1.4f, b.y), c);
        dl->AddRect(ImVec2(a.x + font * 0.6f, a.y), ImVec2(a.x + font * 1.4f, b.y), ui.text, 0, 0,
                    2);
      }
      if (kind == 4) {
        dl->AddRectFilled(a, b, with_alpha(c, 0.3f));
        dl->AddRect(a, b, c, 0, 0, 2.0f);
        dashed_rect(dl, ImVec2(a.x + 2, a.y + 2), ImVec2(b.x - 2, b.y - 2), ui.text, 2, 1);
      }
      ImGui::Dummy(ImVec2(font * 2, font));
      ImGui::SameLine(0, 4);
      ImGui::TextUnformatted(text);
      ImGui::SameLine(0, 18);
    };
    // The long words teach; when they would take several lines (presenter
    // fonts), the short ones leave the room to the cards.
    const std::vector<std::pair<const char*, const char*>> items{
        {tr("full layer, held for good"), tr("full layer")},
        {tr("shard (part of a layer)"), tr("shard")},
        {tr("temporary full copy (gathered, unreduced, replica; fades when freed)"),
         tr("temporary copy")},
        {tr("in host memory (CPU offload)"), tr("host memory")},
        {tr("piece in flight (in the corridor, source \xE2\x86\x92 destination)"),
         tr("in flight")}};
    float long_w = 0;
    for (const auto& [l, sh] : items) long_w += ImGui::CalcTextSize(l).x + font * 3;
    const bool brief = long_w > ImGui::GetContentRegionAvail().x * 1.05f;
    const int kinds[] = {0, 1, 2, 4, 3};
    for (size_t i = 0; i < items.size(); ++i) {
      if (kinds[i] == 4 && !d.has_host_memory) continue;
      swatch(kinds[i], brief ? items[i].second : items[i].first);
    }
    ImGui::NewLine();
  }
  // A mesh: how its grid reads.
  if (!d.rank_coords.empty()) {
    const bool tp =
        std::find(d.comm_axes.begin(), d.comm_axes.end(), MeshAxis::tp) != d.comm_axes.end();
    const std::string outer = to_string(d.comm_axes.front());
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::ColorConvertU32ToFloat4(ui.text_dim));
    ImGui::TextWrapped("%s", (tp ? strf(tr("mesh %s: a row of cards per %s coordinate; outlined "
                                           "in red, each tp group (its ranks split every layer "
                                           "between them: a bar shows where a rank's slice "
                                           "lies in the layer, a block per column-parallel "
                                           "weight, a stripe per row of a row-parallel one)"),
                                        d.cfg.mesh.c_str(), outer.c_str())
                                 : strf(tr("mesh %s: a row of cards per %s coordinate"),
                                        d.cfg.mesh.c_str(), outer.c_str()))
                                 .c_str());
    ImGui::PopStyleColor();
  }

  // The cards fill the view; where they cannot fit readably (big presenter
  // fonts in a small window) the canvas grows and scrolls instead of overlapping.
  ImGui::BeginChild("cluster_scroll", ImGui::GetContentRegionAvail(), false);
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImVec2 avail = ImGui::GetContentRegionAvail();
  int rows = std::max(1, d.num_layers);
  for (int r = 0; r < d.world; ++r)
    for (const Residency& res : d.ranks[r].residency)
      // i18n: not shown (a buffer name's part)
      if (res.name.find("layers.") == std::string::npos) {
        rows = std::max(1, d.num_layers) + 1;  // a "flat" row may appear
        break;
      }
  // A mesh is drawn as its grid: a row of cards per coordinate of its
  // outermost axis (Megatron's order: a pipeline stage a row).
  const int per_row = d.mesh_row_ranks <= 6 ? d.mesh_row_ranks : 0;
  ClusterLayout L = cluster_layout_fitting(
      d.world, Rect{origin.x, origin.y, origin.x + avail.x, origin.y + avail.y}, font, rows,
      per_row);
  if (L.corridors.back().y1 > origin.y + avail.y + 0.5f) {  // room for the scrollbar
    avail.x -= ImGui::GetStyle().ScrollbarSize;
    L = cluster_layout_fitting(d.world,
                               Rect{origin.x, origin.y, origin.x + avail.x, origin.y + avail.y},
                               font, rows, per_row);
  }
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGui::InvisibleButton("cluster_canvas",  // i18n: not shown
                         ImVec2(avail.x, std::max(avail.y, L.corridors.back().y1 - origin.y)));
  const bool hovered = ImGui::IsItemHovered();
  const ImVec2 mouse = ImGui::GetIO().MousePos;

  std::vector<CardLayout> geoms(d.world);
  std::vector<Holding> hover_list;
  std::string hover_title;
  for (int r = 0; r < d.world; ++r) {
    std::vector<Holding> holdings = holdings_at(d.ranks[r].residency, t, fade, d.param_layers);
    mark_gather_progress(holdings, d.ranks[r].lane(Lane::comm), t);
    const CardContents c =
        card_contents(holdings, d.num_layers,
                      static_cast<size_t>(r) < d.rank_slices.size() ? &d.rank_slices[r] : nullptr);
    const Rect& cr = L.cards[r];
    CardLayout& g = geoms[r];
    g = card_layout(cr, font, c.num_layers + (c.has_unlayered ? 1 : 0));
    const ImVec2 cmin(cr.x0, cr.y0), cmax(cr.x1, cr.y1);
    dl->AddRectFilled(cmin, cmax, ui.card_bg, 6);
    dl->AddRect(cmin, cmax, ui.card_border, 6, 0, 1.5f);
    mark_region(app, r, nullptr, -1, cmin, cmax);

    // On a mesh the title says where the rank sits: "rank 5 · pp1 dp0 tp1".
    const std::string title =
        static_cast<size_t>(r) < d.rank_coords.size()
            ? strf(tr("rank %d"), r) + " \xC2\xB7 " + d.rank_coords[static_cast<size_t>(r)]
            : strf(tr("rank %d"), r);
    text_clipped(dl, g.title, ui.text, title, font * 1.15f);
    if (g.held.h() > 0) {
      const double p = 100 * c.held_fraction[0], gr = 100 * c.held_fraction[1],
                   o = 100 * c.held_fraction[2];
      const std::string held =
          strf(tr("holds params %.0f%% \xC2\xB7 grads %.0f%% \xC2\xB7 optimizer state %.0f%%%s"), p,
               gr, o, c.any_on_host ? tr(" (in host memory)") : "");
      const std::string held_short =
          strf(tr("holds P %.0f%% \xC2\xB7 G %.0f%% \xC2\xB7 O %.0f%%%s"), p, gr, o,
               c.any_on_host ? tr(" (host)") : "");
      const std::string held_tiny =
          strf("P %.0f%% G %.0f%% O %.0f%%%s", p, gr, o,
               c.any_on_host ? (std::string(" ") + tr("host")).c_str() : "");
      // Narrow cards (presenter scale, many ranks): one number when the three agree.
      const bool same =
          c.held_fraction[0] == c.held_fraction[1] && c.held_fraction[1] == c.held_fraction[2];
      const std::string held_one =
          same ? strf("PGO %.0f%%", p) : strf("P %.0f%%", p);  // i18n: symbols, as in Chinese
      text_clipped(dl, g.held, ui.text_dim,
                   fitting({held, held_short, held_tiny, held_one}, g.held.w()));
    }
    const std::string now_status = rank_status(d, pieces, r, t, naming, 0, tr);
    const std::string status = strf(tr("now: %s"), now_status.c_str());
    // The last resort on a narrow card: the first of its doings ("AR L0 → all").
    const std::string tiny_status = rank_status(d, pieces, r, t, naming, 2, tr);
    const bool busy = now_status != tr("idle");
    const auto text_w = [](const std::string& x) { return ImGui::CalcTextSize(x.c_str()).x; };
    const std::string short_status =
        strf(tr("now: %s"), rank_status(d, pieces, r, t, naming, 1, tr).c_str());
    const std::string tiny_first =
        tiny_status.substr(0, tiny_status.find(tr.zh() ? "\xEF\xBC\x9B" : ";"));
    text_clipped(dl, g.status, busy ? ui.text : ui.text_dim,
                 fit_parts(fitting({status, short_status, tiny_status, tiny_first}, g.status.w()),
                           g.status.w(), text_w, tr));

    // Column titles: the longest set that fits, with "host" where a column is offloaded.
    std::array<bool, kCardColumns> col_host{};
    for (int col = 0; col < kCardColumns; ++col)
      for (const auto& row : c.slots[col])
        for (const SlotPiece& p : row) col_host[col] = col_host[col] || p.on_host;
    std::array<std::string, kCardColumns> titles;
    for (const std::array<const char*, kCardColumns>& set :
         {long_titles, short_titles, tiny_titles}) {
      bool fits = true;
      for (int col = 0; col < kCardColumns; ++col) {
        titles[col] = col_host[col] ? strf(tr("%s (host)"), set[col]) : std::string(set[col]);
        fits &= ImGui::CalcTextSize(titles[col].c_str()).x < g.col_w - 4;
      }
      if (fits) break;
    }
    for (int col = 0; col < kCardColumns; ++col) {
      const float w = std::min(ImGui::CalcTextSize(titles[col].c_str()).x, g.col_w);
      const Rect cell{g.grid.x0 + col * g.col_w + (g.col_w - w) * 0.5f, g.headers.y0,
                      g.grid.x0 + (col + 1) * g.col_w, g.headers.y1};
      text_clipped(dl, cell, col_host[col] ? ui.playhead : ui.text, titles[col]);
    }
    for (int row = 0; row < g.rows; ++row) {
      const bool unlayered = row == c.num_layers;
      const std::string lbl = unlayered ? std::string(tr("flat")) : "L" + std::to_string(row);
      // gpt: the row's kind under its number where the row has room for two lines.
      const std::string kind = unlayered || row >= static_cast<int>(d.layer_kinds.size())
                                   ? std::string()
                                   : layer_kind_caption(d.layer_kinds[row], tr);
      const bool two = !kind.empty() && g.row_h >= font * 2.4f;
      const float lx = g.card.x0 + std::max(6.0f, font * 0.4f);
      const float ly = g.grid.y0 + row * g.row_h + (g.row_h - font * (two ? 2.1f : 1.0f)) * 0.5f;
      if (g.row_h >= font * 0.8f) dl->AddText(ImVec2(lx, ly), ui.text_dim, lbl.c_str());
      if (two)
        text_clipped(dl, Rect{lx, ly + font * 1.1f, g.grid.x0 - 2, ly + font * 2.1f}, ui.text_dim,
                     kind, font * 0.85f);
      const Color lc = unlayered ? rgba(160, 160, 160) : layer_color(row, hc);
      for (int col = 0; col < kCardColumns; ++col) {
        const ImVec2 a = slot_min(g, col, row), b = slot_max(g, col, row);
        dl->AddRect(a, b, ui.grid);
        for (const SlotPiece& p : c.slots[col][row]) {
          const ImVec2 pa(a.x + static_cast<float>(p.begin) * (b.x - a.x), a.y);
          const ImVec2 pb(a.x + static_cast<float>(p.end) * (b.x - a.x), b.y);
          if (is_temporary(p.kind) && p.gather_progress < 1.0f) {
            // Set aside, still arriving: a dashed outline of the whole copy; its
            // own part striped, each other rank's part as far as it has come.
            const float part = (pb.x - pa.x) / static_cast<float>(d.world);
            for (int j = 0; j < d.world; ++j) {
              const float f = j == r ? 1.0f : p.gather_progress;
              if (f <= 0) continue;
              const ImVec2 qa(pa.x + static_cast<float>(j) * part, pa.y);
              const ImVec2 qb(qa.x + f * part, pb.y);
              dl->AddRectFilled(qa, qb, with_alpha(lc, 0.35f * p.alpha));
              hatch(dl, qa, qb, with_alpha(lc, p.alpha), 5);
            }
            dashed_rect(dl, pa, pb, with_alpha(ui.text, p.alpha), 3, 1);
          } else if (is_temporary(p.kind)) {
            dl->AddRectFilled(pa, pb, with_alpha(lc, 0.35f * p.alpha));
            hatch(dl, pa, pb, with_alpha(lc, p.alpha), 5);
            dl->AddRect(pa, pb, with_alpha(ui.text, p.alpha));
          } else if (p.on_host) {
            // Offloaded to host memory: a pale fill, a bold edge, a dashed inner
            // edge (readable at any width) and "host" where it fits.
            dl->AddRectFilled(pa, pb, with_alpha(lc, 0.3f * p.alpha));
            dl->AddRect(pa, pb, with_alpha(lc, p.alpha), 0, 0, 2.0f);
            if (pb.x - pa.x > 6 && pb.y - pa.y > 6)
              dashed_rect(dl, ImVec2(pa.x + 2, pa.y + 2), ImVec2(pb.x - 2, pb.y - 2),
                          with_alpha(ui.text, 0.8f * p.alpha), 3, 1);
            if (!text_in_rect(dl, pa, pb, ui.text, tr("host")))
              text_in_rect(dl, pa, pb, ui.text, "H");
          } else {
            dl->AddRectFilled(pa, pb, with_alpha(lc, p.alpha));
            if (p.kind == HoldKind::shard) dl->AddRect(pa, pb, ui.outline);
          }
        }
        if (hovered && mouse.x >= a.x && mouse.x < b.x && mouse.y >= a.y && mouse.y < b.y) {
          hover_title = unlayered ? strf(tr("rank %d, no layer, %s"), r, long_titles[col])
                                  : strf(tr("rank %d, layer %d, %s"), r, row, long_titles[col]);
          for (const Holding& h : holdings) {
            const int hc_col = card_column(h.res->category, h.name);
            const bool in_row =
                unlayered ? h.name.layer < 0 : (h.name.layer <= row && row <= h.name.layer_last);
            if (hc_col == col && in_row) hover_list.push_back(h);
          }
        }
      }
    }
    // Footer: what else the rank holds.
    if (g.footer.h() > 0) {
      auto bytes = [&](MemCategory cat) {
        return format_bytes(static_cast<double>(c.bytes[static_cast<int>(cat)]));
      };
      const std::string other_long = strf(
          "%s %s \xC2\xB7 %s %s \xC2\xB7 %s %s", category_label(MemCategory::activations, tr),
          bytes(MemCategory::activations).c_str(), category_label(MemCategory::comm_buffers, tr),
          bytes(MemCategory::comm_buffers).c_str(), category_label(MemCategory::temporary, tr),
          bytes(MemCategory::temporary).c_str());
      const std::string act_short = strf(tr("act %s"), bytes(MemCategory::activations).c_str());
      const std::string other_short = strf(
          tr("act %s \xC2\xB7 comm %s \xC2\xB7 temp %s"), bytes(MemCategory::activations).c_str(),
          bytes(MemCategory::comm_buffers).c_str(), bytes(MemCategory::temporary).c_str());
      const int64_t states = c.bytes[0] + c.bytes[1] + c.bytes[2];
      const float lh = g.footer.h() * 0.5f;
      const std::string states_text = format_bytes(static_cast<double>(states));
      text_clipped(dl, Rect{g.footer.x0, g.footer.y0, g.footer.x1, g.footer.y0 + lh}, ui.text,
                   fitting({strf(tr("model states %s"), states_text.c_str()),
                            strf(tr("states %s"), states_text.c_str()), states_text},
                           g.footer.w()));
      text_clipped(dl, Rect{g.footer.x0, g.footer.y0 + lh, g.footer.x1, g.footer.y1}, ui.text_dim,
                   fitting({other_long, other_short, act_short}, g.footer.w()));
    }
  }

  // A mesh's tp groups outlined: the ranks that split every layer between them
  // (neighbours in a row, in Megatron's order; other orders are not outlined).
  for (size_t g = 1; g < d.group_ranks.size(); ++g) {
    const std::vector<int>& ranks = d.group_ranks[g];
    if (d.rank_coords.empty() || d.group_axes[g] != MeshAxis::tp || ranks.size() < 2) continue;
    bool neighbours = true;
    for (size_t k = 1; k < ranks.size(); ++k)
      neighbours &= ranks[k] == ranks[k - 1] + 1 && ranks[k] / L.ncols == ranks[0] / L.ncols;
    if (!neighbours || ranks.back() >= d.world) continue;
    const Rect& a = L.cards[static_cast<size_t>(ranks.front())];
    const Rect& b = L.cards[static_cast<size_t>(ranks.back())];
    const float m = std::min(L.gutter * 0.4f, font * 0.4f);
    const float right = L.corridors.front().x1 - 1;  // the last column has no gutter after it
    dl->AddRect(ImVec2(a.x0 - m, a.y0 - m * 0.5f),
                ImVec2(std::min(b.x1 + m, right), b.y1 + m * 0.5f),
                kind_color(SpanKind::all_reduce, hc), 8, 0, 2.0f);
  }

  // Pieces in flight: each leaves its source slot (ringed), goes down into the
  // corridor under the cards, along its sender's lane, and up into the
  // destination (dashed outline). Pieces of one sender and collective move
  // together, so a multicast reads as one piece dropping copies at each card.
  struct Placed {
    const Piece* p;
    std::vector<Vec2> route;
    float length;
  };
  std::vector<Placed> placed;
  auto piece_x = [&](const CardLayout& g, const Piece& p) {
    if (p.column < 0 || p.layer < 0 || p.layer >= g.rows) return (g.card.x0 + g.card.x1) * 0.5f;
    const ImVec2 a = slot_min(g, p.column, p.layer, p.frac_begin);
    const ImVec2 b = slot_max(g, p.column, p.layer, p.frac_end);
    return (a.x + b.x) * 0.5f;
  };
  for (const Piece& p : pieces) {
    std::vector<Vec2> route =
        piece_route(L, p.from, p.to, piece_x(geoms[p.from], p), piece_x(geoms[p.to], p));
    const float len = route_length(route);
    placed.push_back({&p, std::move(route), len});
  }
  // Routes first (under every piece), each with an arrowhead into its destination.
  for (const Placed& q : placed) {
    const Color c = q.p->layer >= 0 ? layer_color(q.p->layer, hc) : rgba(200, 200, 200);
    for (size_t i = 1; i < q.route.size(); ++i)
      dl->AddLine(iv(q.route[i - 1]), iv(q.route[i]), with_alpha(c, 0.55f), 1.5f);
    // Where it comes from and where it goes, inside the cards.
    const Piece& p = *q.p;
    if (p.column >= 0 && p.layer >= 0 && p.layer < geoms[p.from].rows &&
        p.layer < geoms[p.to].rows) {
      dl->AddRect(slot_min(geoms[p.from], p.column, p.layer, p.frac_begin),
                  slot_max(geoms[p.from], p.column, p.layer, p.frac_end), ui.playhead, 2, 0, 2.5f);
      const ImVec2 a = slot_min(geoms[p.to], p.column, p.layer, p.frac_begin);
      const ImVec2 b = slot_max(geoms[p.to], p.column, p.layer, p.frac_end);
      dashed_rect(dl, ImVec2(a.x + 1, a.y + 1), ImVec2(b.x - 1, b.y - 1), ui.playhead, 4, 2);
    }
  }
  std::map<std::tuple<int, int, int, int>, float> group_len;  // (from, kind, layer, column)
  for (const Placed& q : placed) {
    float& m = group_len[{q.p->from, static_cast<int>(q.p->kind), q.p->layer, q.p->column}];
    m = std::max(m, q.length);
  }
  for (const Placed& q : placed) {
    const Piece& p = *q.p;
    const float longest = group_len[{p.from, static_cast<int>(p.kind), p.layer, p.column}];
    const Vec2 pos = point_along(q.route, std::min(q.length, ease_in_out(p.progress) * longest));
    const Vec2 sz = piece_size(L, p.frac_begin, p.frac_end, geoms[p.from].col_w);
    const Color c = p.layer >= 0 ? layer_color(p.layer, hc) : rgba(200, 200, 200);
    const ImVec2 pa(pos.x - sz.x * 0.5f, pos.y - sz.y * 0.5f),
        pb(pos.x + sz.x * 0.5f, pos.y + sz.y * 0.5f);
    dl->AddRectFilled(pa, pb, c, 2);
    dl->AddRect(pa, pb, ui.text, 2, 0, 1.5f);
  }
  // Arrowheads last, so a piece waiting at its destination does not hide one.
  for (const Placed& q : placed) {
    const Color c = q.p->layer >= 0 ? layer_color(q.p->layer, hc) : rgba(200, 200, 200);
    const Vec2 tip{q.route.back().x, L.cards[q.p->to].y1 + 1};
    const float ah = std::max(5.0f, L.lane_h * 0.45f);
    dl->AddTriangleFilled(ImVec2(tip.x, tip.y), ImVec2(tip.x - ah * 0.7f, tip.y + ah),
                          ImVec2(tip.x + ah * 0.7f, tip.y + ah), c);
    dl->AddTriangle(ImVec2(tip.x, tip.y), ImVec2(tip.x - ah * 0.7f, tip.y + ah),
                    ImVec2(tip.x + ah * 0.7f, tip.y + ah), ui.text, 1);
  }
  // One tag per receiving card, under it: "AG L2 <- ranks 1, 2".
  {
    std::map<int, std::pair<std::string, std::string>> per_card;  // long, brief
    const std::string sep = tr.zh() ? "\xEF\xBC\x9B" : "; ";
    for (const ArrivalTag& a : arrival_tags(pieces, naming, tr)) {
      auto& [line, brief] = per_card[a.to];
      line += (line.empty() ? "" : sep) + a.text;
      brief += (brief.empty() ? "" : sep) + a.brief;
    }
    for (const auto& [to, lines] : per_card) {
      const Rect& card = L.cards[to];
      const Rect& row = L.tag_rows[to / L.ncols];
      text_clipped(dl, Rect{card.x0, row.y0, card.x1, row.y1}, ui.playhead,
                   fitting({lines.first, lines.second}, card.w()));
    }
  }

  if (!hover_title.empty()) {
    ImGui::BeginTooltip();
    ImGui::TextUnformatted(hover_title.c_str());
    if (hover_list.empty()) ImGui::TextDisabled("%s", tr("nothing held here"));
    for (const Holding& h : hover_list)
      ImGui::TextUnformatted(strf(tr("%s  %s  (%s, %s pool)%s"), h.res->name.c_str(),
                                  format_bytes(static_cast<double>(h.res->bytes)).c_str(),
                                  category_label(h.res->category, tr),
                                  h.res->pool == Pool::host ? tr("host") : tr("device"),
                                  h.alpha < 1 ? tr("  freed, fading") : "")
                                 .c_str());
    ImGui::EndTooltip();
  }
  ImGui::EndChild();
}

}  // namespace shardlab::gui
