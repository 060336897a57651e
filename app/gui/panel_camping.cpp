// The camping-trip skin of the cluster view: ranks are hikers around a
// campfire, a layer's parameters are a piece of gear (tent, food, water), a
// shard is part of it. At each all-gather the hikers lend their pieces around
// the fire; borrowed copies are handed back (freed) after use. Same data as
// the cluster cards: allocation events and comm spans at the playhead.
#include <algorithm>
#include <cmath>
#include <string>

#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/cluster_logic.h"
#include "app/gui/logic/format.h"
#include "app/gui/panels.h"

namespace shardlab::gui {

namespace {

// One gear icon of `size` px centred at c; only the part [fb, fe] of its width
// is filled (a shard), the rest is a faint outline (what the others carry).
void draw_gear(ImDrawList* dl, Gear g, ImVec2 c, float size, Color col, double fb, double fe,
               float alpha, bool borrowed, ImU32 outline) {
  const float h = size * 0.5f;
  auto shape = [&](ImU32 fill, bool filled) {
    switch (g) {
      case Gear::tent:
        if (filled)
          dl->AddTriangleFilled(ImVec2(c.x, c.y - h), ImVec2(c.x + h, c.y + h),
                                ImVec2(c.x - h, c.y + h), fill);
        else
          dl->AddTriangle(ImVec2(c.x, c.y - h), ImVec2(c.x + h, c.y + h), ImVec2(c.x - h, c.y + h),
                          fill, 1.5f);
        if (filled)
          dl->AddLine(ImVec2(c.x, c.y - h * 0.2f), ImVec2(c.x, c.y + h), IM_COL32(0, 0, 0, 140),
                      1.5f);
        break;
      case Gear::food:
        if (filled) {
          dl->AddRectFilled(ImVec2(c.x - h, c.y - h * 0.7f), ImVec2(c.x + h, c.y + h), fill, 3);
          dl->AddLine(ImVec2(c.x - h, c.y), ImVec2(c.x + h, c.y), IM_COL32(0, 0, 0, 120), 1.5f);
        } else {
          dl->AddRect(ImVec2(c.x - h, c.y - h * 0.7f), ImVec2(c.x + h, c.y + h), fill, 3, 0, 1.5f);
        }
        break;
      case Gear::water:
        if (filled) {
          dl->AddCircleFilled(ImVec2(c.x, c.y + h * 0.3f), h * 0.7f, fill);
          dl->AddTriangleFilled(ImVec2(c.x, c.y - h), ImVec2(c.x + h * 0.62f, c.y),
                                ImVec2(c.x - h * 0.62f, c.y), fill);
        } else {
          dl->AddCircle(ImVec2(c.x, c.y + h * 0.3f), h * 0.7f, fill, 0, 1.5f);
          dl->AddLine(ImVec2(c.x, c.y - h), ImVec2(c.x + h * 0.62f, c.y), fill, 1.5f);
          dl->AddLine(ImVec2(c.x, c.y - h), ImVec2(c.x - h * 0.62f, c.y), fill, 1.5f);
        }
        break;
    }
  };
  shape(with_alpha(outline, 0.35f * alpha), false);
  dl->PushClipRect(ImVec2(c.x - h + static_cast<float>(fb) * size - 0.5f, c.y - h - 2),
                   ImVec2(c.x - h + static_cast<float>(fe) * size + 0.5f, c.y + h + 2), true);
  shape(with_alpha(col, (borrowed ? 0.55f : 1.0f) * alpha), true);
  dl->PopClipRect();
  if (borrowed) shape(with_alpha(outline, alpha), false);
}

void draw_hiker(ImDrawList* dl, ImVec2 feet, float s, ImU32 body, ImU32 pack) {
  const ImVec2 hip(feet.x, feet.y - s * 0.45f), neck(feet.x, feet.y - s * 0.85f);
  dl->AddRectFilled(ImVec2(neck.x - s * 0.32f, neck.y - s * 0.02f),
                    ImVec2(neck.x - s * 0.05f, hip.y + s * 0.05f), pack, 4);
  dl->AddLine(hip, neck, body, 3);
  dl->AddLine(hip, ImVec2(feet.x - s * 0.15f, feet.y), body, 3);
  dl->AddLine(hip, ImVec2(feet.x + s * 0.15f, feet.y), body, 3);
  dl->AddLine(ImVec2(neck.x, neck.y + s * 0.08f), ImVec2(neck.x + s * 0.22f, hip.y - s * 0.05f),
              body, 3);
  dl->AddCircleFilled(ImVec2(neck.x, neck.y - s * 0.1f), s * 0.1f, body);
  // A walking stick, so it reads as a hiker at any size.
  dl->AddLine(ImVec2(feet.x + s * 0.28f, feet.y), ImVec2(feet.x + s * 0.22f, neck.y),
              IM_COL32(150, 110, 60, 255), 2);
}

void draw_fire(ImDrawList* dl, ImVec2 c, float s, bool blazing, double t_wall) {
  dl->AddLine(ImVec2(c.x - s, c.y + s * 0.3f), ImVec2(c.x + s, c.y - s * 0.1f),
              IM_COL32(110, 70, 40, 255), s * 0.25f);
  dl->AddLine(ImVec2(c.x - s, c.y - s * 0.1f), ImVec2(c.x + s, c.y + s * 0.3f),
              IM_COL32(95, 60, 35, 255), s * 0.25f);
  if (!blazing) {
    for (int i = 0; i < 4; ++i)
      dl->AddCircleFilled(ImVec2(c.x - s * 0.4f + i * s * 0.27f, c.y), s * 0.12f,
                          IM_COL32(200, 60, 30, 200));
    return;
  }
  const float f = 1.0f + 0.12f * static_cast<float>(std::sin(t_wall * 9));
  dl->AddTriangleFilled(ImVec2(c.x - s * 0.7f, c.y), ImVec2(c.x + s * 0.7f, c.y),
                        ImVec2(c.x, c.y - s * 1.9f * f), IM_COL32(240, 110, 30, 230));
  dl->AddTriangleFilled(ImVec2(c.x - s * 0.45f, c.y), ImVec2(c.x + s * 0.45f, c.y),
                        ImVec2(c.x + s * 0.1f, c.y - s * 1.3f / f), IM_COL32(255, 200, 60, 240));
  dl->AddCircleFilled(ImVec2(c.x, c.y - s * 0.5f), s * 1.8f, IM_COL32(255, 160, 60, 28));
}

}  // namespace

void draw_camping(App& app) {
  AppState& s = app.state;
  const RunData& d = app.data;
  const bool hc = s.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  if (d.world == 0) {
    ImGui::TextWrapped("No run yet. Press Run (R): the ranks become hikers who share their gear.");
    return;
  }
  const int64_t t = static_cast<int64_t>(s.playhead.t);
  const int64_t fade = fade_ns_for(app);

  // What the picture says, in words, from the same numbers.
  std::vector<CardContents> cards;
  std::vector<std::vector<Holding>> holdings;
  double min_share = 1, max_share = 0;
  for (int r = 0; r < d.world; ++r) {
    holdings.push_back(holdings_at(d.ranks[r].residency, t, fade));
    cards.push_back(card_contents(holdings.back(), d.num_layers));
    min_share = std::min(min_share, cards.back().held_fraction[0]);
    max_share = std::max(max_share, cards.back().held_fraction[0]);
  }
  const std::vector<Piece> pieces = pieces_in_flight(d, t);
  ImGui::PushTextWrapPos(0);
  ImGui::TextUnformatted(
      "Camping trip: each hiker is a rank; each piece of gear is one layer's parameters (tent, "
      "food, "
      "water, by layer; colour = layer). A hiker carrying only part of an item holds a shard. When "
      "a "
      "layer is needed, the hikers meet at the campfire and lend each other their parts "
      "(all-gather); "
      "borrowed copies are striped and handed back after use (freed).");
  ImGui::PopTextWrapPos();
  char summary[256];
  if (max_share > 0.99 && d.world > 1)
    std::snprintf(summary, sizeof summary,
                  "Right now every hiker carries the complete gear (100%% each): %d full copies on "
                  "the trail. "
                  "That redundancy is what ZeRO and FSDP remove.",
                  d.world);
  else if (max_share - min_share > 0.01)
    std::snprintf(summary, sizeof summary,
                  "Right now each hiker carries %.0f%% to %.0f%% of the gear.", 100 * min_share,
                  100 * max_share);
  else
    std::snprintf(summary, sizeof summary, "Right now each hiker carries %.0f%% of the gear.",
                  100 * min_share);
  ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(ui.ok), "%s  (t = %s, step %d)", summary,
                     format_time_ns(s.playhead.t).c_str(), d.step_at(t));

  const ImVec2 o = ImGui::GetCursorScreenPos();
  const ImVec2 size = ImGui::GetContentRegionAvail();
  ImGui::InvisibleButton("camp", size);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->PushClipRect(o, ImVec2(o.x + size.x, o.y + size.y), true);
  const ImU32 sky_top = hc ? IM_COL32(0, 0, 0, 255) : IM_COL32(14, 20, 42, 255);
  const ImU32 sky_low = hc ? IM_COL32(0, 0, 30, 255) : IM_COL32(38, 46, 78, 255);
  const float horizon = o.y + size.y * 0.16f;
  dl->AddRectFilledMultiColor(o, ImVec2(o.x + size.x, horizon), sky_top, sky_top, sky_low, sky_low);
  dl->AddRectFilled(ImVec2(o.x, horizon), ImVec2(o.x + size.x, o.y + size.y),
                    hc ? IM_COL32(0, 40, 0, 255) : IM_COL32(34, 58, 38, 255));
  for (int i = 0; i < 40; ++i) {  // fixed pseudo-random stars
    const float sx = o.x + std::fmod(i * 137.5f, size.x);
    const float sy = o.y + std::fmod(i * 53.7f, size.y * 0.2f);
    dl->AddCircleFilled(ImVec2(sx, sy), 1.2f, IM_COL32(230, 230, 255, 180));
  }
  // Mountains on the horizon.
  for (int i = 0; i < 6; ++i) {
    const float mx = o.x + size.x * (i + 0.5f) / 6.0f, mh = size.y * (0.07f + 0.04f * (i % 3));
    dl->AddTriangleFilled(ImVec2(mx - size.x * 0.12f, horizon), ImVec2(mx, horizon - mh),
                          ImVec2(mx + size.x * 0.12f, horizon), IM_COL32(50, 60, 90, 255));
  }

  const ImVec2 fire(o.x + size.x * 0.5f, o.y + size.y * 0.6f);
  bool gathering = false;
  for (const Piece& p : pieces)
    gathering |= p.kind == SpanKind::all_gather || p.kind == SpanKind::reduce_scatter ||
                 p.kind == SpanKind::all_reduce || p.kind == SpanKind::broadcast;
  const float font = ImGui::GetFontSize();
  draw_fire(dl, fire, std::min(size.x, size.y) * 0.045f, gathering, ImGui::GetTime());
  const char* fire_text =
      gathering ? "sharing at the campfire" : "campfire (nobody sharing right now)";
  const float fw = ImGui::CalcTextSize(fire_text).x;
  dl->AddText(ImVec2(fire.x - fw * 0.5f, fire.y + size.y * 0.05f),
              gathering ? ui.playhead : ui.text_dim, fire_text);

  // Two hikers face each other across the fire; more stand around it.
  const std::vector<Vec2> spots = ring_positions(d.world, {fire.x, fire.y}, size.x * 0.3f,
                                                 size.y * 0.27f, 1.5707963f + 3.1415927f / d.world);
  const float hiker = std::clamp(size.y * (d.world <= 2   ? 0.24f
                                           : d.world <= 4 ? 0.17f
                                                          : 0.12f),
                                 font * 3, font * 9);
  const int layers = std::max(1, cards.empty() ? 1 : cards[0].num_layers);
  const int per_row = std::min(layers, 3);
  const int grid_rows = (layers + per_row - 1) / per_row;
  // Items shrink to keep a hiker's gear about as tall as the hiker.
  const float item = std::clamp(std::min(hiker * 0.42f, hiker * 1.1f / (grid_rows * 1.4f)),
                                font * 0.8f, font * 2.8f);
  std::vector<ImVec2> item_pos(static_cast<size_t>(d.world) * layers);
  for (int r = 0; r < d.world; ++r) {
    const ImVec2 feet(spots[r].x, spots[r].y + hiker * 0.5f);
    draw_hiker(dl, feet, hiker, hc ? IM_COL32(255, 255, 255, 255) : IM_COL32(225, 215, 195, 255),
               hc ? IM_COL32(120, 120, 120, 255) : IM_COL32(120, 85, 55, 255));
    // The gear this hiker carries, in a grid on its far side from the fire.
    const float side = feet.x < fire.x ? -1.0f : 1.0f;
    const float grid_w = per_row * item * 1.15f;
    const float gx = side < 0 ? feet.x - hiker * 0.45f - grid_w : feet.x + hiker * 0.45f;
    const float gy = feet.y - hiker * 1.0f;
    const CardContents& c = cards[r];
    for (int l = 0; l < layers; ++l) {
      const ImVec2 pc(gx + (l % per_row + 0.5f) * item * 1.15f,
                      gy + (l / per_row + 0.5f) * item * 1.4f);
      item_pos[static_cast<size_t>(r) * layers + l] = pc;
      const Gear g = gear_of_layer(l);
      const Color lc = layer_color(l, hc);
      bool any = false;
      for (const SlotPiece& p : c.slots[0][l]) {
        if (is_temporary(p.kind)) continue;
        draw_gear(dl, g, pc, item, lc, p.begin, p.end, p.alpha, false, ui.text);
        any = true;
      }
      if (!any)
        draw_gear(dl, g, pc, item, lc, 0, 0, 1, false, ui.text);  // only the outline: not carried
      char lbl[16];
      std::snprintf(lbl, sizeof lbl, "L%d", l);
      const float small = font * 0.8f;
      dl->AddText(ImGui::GetFont(), small,
                  ImVec2(pc.x - ImGui::CalcTextSize(lbl).x * 0.4f, pc.y + item * 0.5f + 1),
                  ui.text_dim, lbl);
    }
    // Borrowed (gathered) copies: held out towards the fire, side by side, with
    // a caption so a still picture says what they are.
    int borrowed = 0;
    const float bx = feet.x + (fire.x - feet.x) * 0.3f, by = feet.y - hiker * 0.55f;
    for (int l = 0; l < layers; ++l)
      for (const SlotPiece& p : c.slots[0][l]) {
        if (!is_temporary(p.kind)) continue;
        const float dx = (borrowed % 3) * item * 1.2f * (feet.x < fire.x ? 1 : -1);
        const float dy = (borrowed / 3) * item * 1.3f;
        draw_gear(dl, gear_of_layer(l), ImVec2(bx + dx, by + dy), item, layer_color(l, hc), 0, 1,
                  p.alpha, true, ui.text);
        ++borrowed;
      }
    if (borrowed > 0) {
      const char* cap = "borrowed";
      dl->AddText(ImGui::GetFont(), font * 0.8f,
                  ImVec2(bx - ImGui::CalcTextSize(cap).x * 0.4f, by - item * 0.5f - font),
                  ui.text_dim, cap);
    }
    char name[96];
    std::snprintf(name, sizeof name, "hiker %d (rank %d): carries %.0f%% of the gear", r, r,
                  100 * c.held_fraction[0]);
    const float nw = ImGui::CalcTextSize(name).x;
    dl->AddText(ImVec2(feet.x - nw * 0.5f, feet.y + 4), ui.text, name);
  }

  // Pieces on their way, passing close to the fire.
  for (const Piece& p : pieces) {
    if (p.layer < 0 || p.layer >= layers) continue;
    const ImVec2 a = item_pos[static_cast<size_t>(p.from) * layers + p.layer];
    const ImVec2 b = item_pos[static_cast<size_t>(p.to) * layers + p.layer];
    // Two legs: to the fire, then on to the receiver.
    auto along = [&](float e) {
      if (e < 0.5f) {
        const float k = e * 2;
        return ImVec2(a.x + (fire.x - a.x) * k, a.y + (fire.y - item - a.y) * k);
      }
      const float k = (e - 0.5f) * 2;
      return ImVec2(fire.x + (b.x - fire.x) * k, fire.y - item + (b.y - fire.y + item) * k);
    };
    for (float k = 0; k <= 1.0f; k += 0.03f)
      dl->AddCircleFilled(along(k), 1.5f, with_alpha(ui.text, 0.45f));
    const ImVec2 pos = along(ease_in_out(p.progress));
    const Color col = p.column == 1 ? rgba(230, 230, 230) : layer_color(p.layer, hc);
    draw_gear(dl, gear_of_layer(p.layer), pos, item * 0.9f, col, p.frac_begin, p.frac_end, 1, false,
              ui.text);
  }
  bool grads_moving = false;
  for (const Piece& p : pieces) grads_moving |= p.column == 1;
  if (grads_moving) {
    const char* note =
        "white pieces = gradients being summed (reduce-scatter / all-reduce); coloured = "
        "parameters";
    dl->AddText(ImVec2(o.x + 8, o.y + size.y - font - 6), ui.text_dim, note);
  }
  dl->PopClipRect();
}

}  // namespace shardlab::gui
