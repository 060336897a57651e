// Cluster view: ranks as cards holding their named buffers at the playhead,
// one row per layer and one column per model state; shards fill part of a
// slot, gathered copies are striped and fade when freed, and during
// collectives the pieces travel between the cards.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/cluster_logic.h"
#include "app/gui/logic/format.h"
#include "app/gui/panels.h"

namespace shardlab::gui {

namespace {

constexpr const char* kColumnTitles[kCardColumns] = {"params", "grads", "optimizer state"};
constexpr const char* kShortTitles[kCardColumns] = {"params", "grads", "optimizer"};
constexpr const char* kTinyTitles[kCardColumns] = {"P", "G", "O"};

// Where one card's slots are on screen.
struct CardGeom {
  ImVec2 min, max;
  float grid_x = 0, grid_y = 0, col_w = 0, row_h = 0, slot_pad = 0;
  int rows = 0;
  ImVec2 slot_min(int col, int row) const {
    return ImVec2(grid_x + col * col_w + slot_pad, grid_y + row * row_h + 1);
  }
  ImVec2 slot_max(int col, int row) const {
    return ImVec2(grid_x + (col + 1) * col_w - slot_pad, grid_y + (row + 1) * row_h - 1);
  }
  // The centre of the part [fb, fe] of a slot.
  ImVec2 piece_center(int col, int row, double fb, double fe) const {
    const ImVec2 a = slot_min(col, row), b = slot_max(col, row);
    const float x = a.x + static_cast<float>((fb + fe) * 0.5) * (b.x - a.x);
    return ImVec2(x, (a.y + b.y) * 0.5f);
  }
};

std::string activity(const RunData& d, int rank, int64_t t) {
  std::string out;
  for (int l = 0; l < 2; ++l)
    for (const Span* s : active_spans(d.ranks[rank].lanes[l], t)) {
      if (!out.empty()) out += ", ";
      out += kind_label(s->kind);
      if (s->layer >= 0) out += " L" + std::to_string(s->layer);
      if (s->micro_batch >= 0) out += " mb" + std::to_string(s->micro_batch);
      if (s->bytes > 0) out += " " + format_bytes(static_cast<double>(s->bytes));
      const double p = static_cast<double>(t - s->t_begin_ns) /
                       std::max<int64_t>(1, s->t_end_ns - s->t_begin_ns);
      char pct[16];
      std::snprintf(pct, sizeof pct, " (%.0f%%)", 100 * p);
      out += pct;
    }
  return out.empty() ? "idle" : out;
}

}  // namespace

// Gathered copies fade over ~0.4 s of wall time at the current replay speed,
// kept between 1% and 10% of a step: visible in a still picture, gone before
// the next layer's copy arrives.
int64_t fade_ns_for(const App& app) {
  const RunData& d = app.data;
  const double step = d.cfg.steps > 0 ? static_cast<double>(d.t_end) / d.cfg.steps : 1e6;
  return static_cast<int64_t>(
      std::clamp(app.state.playhead.speed * 0.4e9, step * 0.01, step * 0.1));
}

void draw_cluster(App& app) {
  AppState& s = app.state;
  const RunData& d = app.data;
  const bool hc = s.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  if (d.world == 0) {
    ImGui::TextWrapped(
        "No run yet. Press Run (R): each rank becomes a card showing the buffers it holds.");
    return;
  }
  const int64_t t = static_cast<int64_t>(s.playhead.t);
  const int64_t fade = fade_ns_for(app);

  const std::vector<Piece> pieces = pieces_in_flight(d, t);
  ImGui::Text("At the playhead: t = %s, step %d.", format_time_ns(s.playhead.t).c_str(),
              d.step_at(t));
  if (!pieces.empty()) {
    ImGui::SameLine();
    ImGui::TextColored(
        ImGui::ColorConvertU32ToFloat4(ui.playhead), "In flight: %zu piece%s (%s%s).",
        pieces.size(), pieces.size() == 1 ? "" : "s", kind_label(pieces[0].kind),
        pieces[0].layer >= 0 ? (", layer " + std::to_string(pieces[0].layer)).c_str() : "");
  }
  ImGui::SameLine(0, 16);
  help_marker(
      "Each card is a rank; each row a layer (colour = layer); each column a model state: "
      "parameters (P), gradients (G), optimizer state (O). What a card shows is read from the "
      "rank's allocation events at the playhead, by buffer name: full layers, shards "
      "('[shard i/N]') and gathered copies ('[gathered]'). Pieces move along dotted routes while "
      "a collective runs on the sending rank. Hover a slot for its buffers.");
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
      ImGui::Dummy(ImVec2(font * 2, font));
      ImGui::SameLine(0, 4);
      ImGui::TextUnformatted(text);
      ImGui::SameLine(0, 18);
    };
    swatch(0, "full layer, held for good");
    swatch(1, "shard (part of a layer)");
    swatch(2, "temporary full copy (gathered, unreduced, replica; fades when freed)");
    swatch(3, "piece in flight (during a collective)");
    ImGui::NewLine();
  }

  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const int ncols = std::min(d.world, 4);
  const int nrows = (d.world + ncols - 1) / ncols;
  const float gap = font;
  const float card_w = (avail.x - gap * (ncols - 1)) / ncols;
  const float card_h = (avail.y - gap * (nrows - 1)) / nrows;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGui::InvisibleButton("cluster_canvas", avail);
  const bool hovered = ImGui::IsItemHovered();
  const ImVec2 mouse = ImGui::GetIO().MousePos;

  std::vector<CardGeom> geoms(d.world);
  std::vector<Holding> hover_list;
  std::string hover_title;
  for (int r = 0; r < d.world; ++r) {
    const std::vector<Holding> holdings = holdings_at(d.ranks[r].residency, t, fade);
    const CardContents c = card_contents(holdings, d.num_layers);
    CardGeom& g = geoms[r];
    g.min =
        ImVec2(origin.x + (r % ncols) * (card_w + gap), origin.y + (r / ncols) * (card_h + gap));
    g.max = ImVec2(g.min.x + card_w, g.min.y + card_h);
    dl->AddRectFilled(g.min, g.max, ui.card_bg, 6);
    dl->AddRect(g.min, g.max, ui.card_border, 6, 0, 1.5f);

    float y = g.min.y + 6;
    const float x = g.min.x + 8;
    char title[64];
    std::snprintf(title, sizeof title, "rank %d", r);
    dl->AddText(ImGui::GetFont(), font * 1.15f, ImVec2(x, y), ui.text, title);
    y += font * 1.3f;
    char held[160];
    std::snprintf(held, sizeof held,
                  "holds params %.0f%% \xC2\xB7 grads %.0f%% \xC2\xB7 optimizer state %.0f%%",
                  100 * c.held_fraction[0], 100 * c.held_fraction[1], 100 * c.held_fraction[2]);
    if (c.any_on_host) std::strncat(held, " (in host memory)", sizeof held - std::strlen(held) - 1);
    if (ImGui::CalcTextSize(held).x > card_w - 16)
      std::snprintf(held, sizeof held, "holds P %.0f%% \xC2\xB7 G %.0f%% \xC2\xB7 O %.0f%%",
                    100 * c.held_fraction[0], 100 * c.held_fraction[1], 100 * c.held_fraction[2]);
    dl->PushClipRect(g.min, g.max, true);
    dl->AddText(ImVec2(x, y), ui.text_dim, held);
    y += font + 2;
    const std::string act = "now: " + activity(d, r, t);
    dl->AddText(ImVec2(x, y), ui.text_dim, act.c_str());
    y += font + 6;

    // Column headers, then one row per layer.
    const float label_w = font * 2.6f;
    g.grid_x = x + label_w;
    g.col_w = (g.max.x - 8 - g.grid_x) / kCardColumns;
    g.slot_pad = std::min(6.0f, g.col_w * 0.05f);
    // The longest column titles that fit (big presenter fonts, many cards).
    const char* const* titles = kColumnTitles;
    for (const char* const* set : {kColumnTitles, kShortTitles, kTinyTitles}) {
      titles = set;
      bool fits = true;
      for (int col = 0; col < kCardColumns; ++col)
        fits &= ImGui::CalcTextSize(set[col]).x < g.col_w - 4;
      if (fits) break;
    }
    for (int col = 0; col < kCardColumns; ++col) {
      const float w = ImGui::CalcTextSize(titles[col]).x;
      dl->AddText(ImVec2(g.grid_x + col * g.col_w + (g.col_w - w) * 0.5f, y), ui.text, titles[col]);
    }
    y += font + 3;
    g.grid_y = y;
    g.rows = c.num_layers + (c.has_unlayered ? 1 : 0);
    const float footer = font * 2 + 8;
    g.row_h = std::clamp((g.max.y - footer - y) / std::max(1, g.rows), 3.0f, font * 4.5f);
    for (int row = 0; row < g.rows; ++row) {
      const bool unlayered = row == c.num_layers;
      char lbl[16];
      std::snprintf(lbl, sizeof lbl, unlayered ? "flat" : "L%d", row);
      if (g.row_h >= font * 0.8f)
        dl->AddText(ImVec2(x, g.grid_y + row * g.row_h + (g.row_h - font) * 0.5f), ui.text_dim,
                    lbl);
      const Color lc = unlayered ? rgba(160, 160, 160) : layer_color(row, hc);
      for (int col = 0; col < kCardColumns; ++col) {
        const ImVec2 a = g.slot_min(col, row), b = g.slot_max(col, row);
        dl->AddRect(a, b, ui.grid);
        for (const SlotPiece& p : c.slots[col][row]) {
          const ImVec2 pa(a.x + static_cast<float>(p.begin) * (b.x - a.x), a.y);
          const ImVec2 pb(a.x + static_cast<float>(p.end) * (b.x - a.x), b.y);
          if (is_temporary(p.kind)) {
            dl->AddRectFilled(pa, pb, with_alpha(lc, 0.35f * p.alpha));
            hatch(dl, pa, pb, with_alpha(lc, p.alpha), 5);
            dl->AddRect(pa, pb, with_alpha(ui.text, p.alpha));
          } else if (p.on_host) {
            // Offloaded to host memory: a pale fill with a bold edge, and "host".
            dl->AddRectFilled(pa, pb, with_alpha(lc, 0.3f * p.alpha));
            dl->AddRect(pa, pb, with_alpha(lc, p.alpha), 0, 0, 2.0f);
            text_in_rect(dl, pa, pb, ui.text, "host");
          } else {
            dl->AddRectFilled(pa, pb, with_alpha(lc, p.alpha));
            if (p.kind == HoldKind::shard) dl->AddRect(pa, pb, ui.outline);
          }
        }
        if (hovered && mouse.x >= a.x && mouse.x < b.x && mouse.y >= a.y && mouse.y < b.y) {
          hover_title = "rank " + std::to_string(r) + ", " +
                        (unlayered ? std::string("no layer") : "layer " + std::to_string(row)) +
                        ", " + kColumnTitles[col];
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
    std::string other;
    for (MemCategory cat :
         {MemCategory::activations, MemCategory::comm_buffers, MemCategory::temporary}) {
      if (!other.empty()) other += " \xC2\xB7 ";
      other += std::string(category_label(cat)) + " " +
               format_bytes(static_cast<double>(c.bytes[static_cast<int>(cat)]));
    }
    if (ImGui::CalcTextSize(other.c_str()).x > card_w - 16) {
      // Narrow cards: the short names.
      char shortened[128];
      std::snprintf(
          shortened, sizeof shortened, "act %s \xC2\xB7 comm %s \xC2\xB7 temp %s",
          format_bytes(static_cast<double>(c.bytes[static_cast<int>(MemCategory::activations)]))
              .c_str(),
          format_bytes(static_cast<double>(c.bytes[static_cast<int>(MemCategory::comm_buffers)]))
              .c_str(),
          format_bytes(static_cast<double>(c.bytes[static_cast<int>(MemCategory::temporary)]))
              .c_str());
      other = shortened;
    }
    const int64_t states = c.bytes[0] + c.bytes[1] + c.bytes[2];
    const std::string line1 = "model states " + format_bytes(static_cast<double>(states));
    dl->AddText(ImVec2(x, g.max.y - footer + 4), ui.text, line1.c_str());
    dl->AddText(ImVec2(x, g.max.y - footer + 4 + font + 1), ui.text_dim, other.c_str());
    dl->PopClipRect();
  }

  // Pieces in flight, over every card; routes and labels only while few enough to read.
  const bool annotate = pieces.size() <= 4;
  for (const Piece& p : pieces) {
    const CardGeom& ga = geoms[p.from];
    const CardGeom& gb = geoms[p.to];
    ImVec2 a, b;
    float w, h;
    if (p.column >= 0 && p.layer >= 0 && p.layer < ga.rows && p.layer < gb.rows) {
      a = ga.piece_center(p.column, p.layer, p.frac_begin, p.frac_end);
      b = gb.piece_center(p.column, p.layer, p.frac_begin, p.frac_end);
      w = std::max(8.0f,
                   static_cast<float>(p.frac_end - p.frac_begin) * (ga.col_w - 2 * ga.slot_pad));
      h = std::max(6.0f, ga.row_h - 2);
    } else {
      a = ImVec2((ga.min.x + ga.max.x) * 0.5f, (ga.min.y + ga.max.y) * 0.5f);
      b = ImVec2((gb.min.x + gb.max.x) * 0.5f, (gb.min.y + gb.max.y) * 0.5f);
      w = h = font;
    }
    const float arc = font * 2.0f * (p.from < p.to ? 1 : -1);
    const Vec2 pos = travel_position({a.x, a.y}, {b.x, b.y}, p.progress, arc);
    const Color c = p.layer >= 0 ? layer_color(p.layer, hc) : rgba(200, 200, 200);
    // The route, faint and dotted, so a still picture shows where the piece goes.
    for (float k = 0; k <= 1.0f; k += annotate ? 0.04f : 0.08f) {
      const Vec2 q = travel_position({a.x, a.y}, {b.x, b.y}, k, arc);
      dl->AddCircleFilled(ImVec2(q.x, q.y), 1.6f, with_alpha(ui.text, annotate ? 0.5f : 0.3f));
    }
    if (annotate) dl->AddCircle(b, 5, with_alpha(ui.text, 0.8f), 0, 1.5f);
    const ImVec2 pa(pos.x - w * 0.5f, pos.y - h * 0.5f), pb(pos.x + w * 0.5f, pos.y + h * 0.5f);
    dl->AddRectFilled(ImVec2(pa.x + 3, pa.y + 3), ImVec2(pb.x + 3, pb.y + 3),
                      IM_COL32(0, 0, 0, 120), 2);
    dl->AddRectFilled(pa, pb, c, 2);
    dl->AddRect(pa, pb, ui.text, 2, 0, 2);
    if (annotate) {
      char tag[48];
      std::snprintf(tag, sizeof tag, "%s \xE2\x86\x92 rank %d", kind_short(p.kind), p.to);
      dl->AddText(ImVec2(pb.x + 4, pa.y - font), ui.text, tag);
    }
  }

  if (!hover_title.empty()) {
    ImGui::BeginTooltip();
    ImGui::TextUnformatted(hover_title.c_str());
    if (hover_list.empty()) ImGui::TextDisabled("nothing held here");
    for (const Holding& h : hover_list)
      ImGui::Text("%s  %s  (%s, %s pool)%s", h.res->name.c_str(),
                  format_bytes(static_cast<double>(h.res->bytes)).c_str(),
                  category_label(h.res->category), to_string(h.res->pool),
                  h.alpha < 1 ? "  freed, fading" : "");
    ImGui::EndTooltip();
  }
}

}  // namespace shardlab::gui
