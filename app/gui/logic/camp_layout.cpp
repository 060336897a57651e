// The camping trip's geometry: a hiker per rank round the fire (or along a
// trail for a pipeline), each carrying gear for every layer, sized to fit the
// area and its captions (see cluster_logic.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <tuple>

#include "app/gui/logic/cluster_logic.h"
#include "app/gui/logic/palette.h"
#include "app/gui/logic/timeline_logic.h"
#include "core/parallel/strategy.h"

namespace shardlab::gui {

Vec2 HikerLayout::gear_center(int layer) const {
  const float cell_w = gear_cell;
  const int col = layer % per_row, row = layer / per_row;
  const float row_h = item * 1.25f + label_h;  // icon, then its small label below
  return {gear.x0 + (static_cast<float>(col) + 0.5f) * cell_w,
          gear.y0 + static_cast<float>(row) * row_h + item * 0.6f};
}

Vec2 HikerLayout::hand_center(int slot) const {
  const int per = std::max(1, static_cast<int>(std::floor(hands.w() / (item * 1.15f) + 0.01f)));
  return {hands.x0 + (static_cast<float>(slot % per) + 0.5f) * item * 1.15f,
          hands.y0 + label_h + (static_cast<float>(slot / per) + 0.5f) * item * 1.15f};
}

namespace {

// Places one hiker's block in `cell` at figure size s; side: where its gear goes.
HikerLayout place_hiker(Rect cell, float s, float item, int layers, int per_row, int hand_slots,
                        int hand_per_row, float font, float caption_w, int caption_lines,
                        float side, float hand_min, bool compact) {
  HikerLayout h;
  h.size = s;
  h.item = item;
  h.per_row = per_row;
  h.side = side;
  h.label_h = compact ? 0.0f : font * 0.9f;
  const int gear_rows = (layers + per_row - 1) / per_row;
  // A gear cell is wide enough for its label ("c1") as well as for the icon.
  h.gear_cell = std::max(item * 1.25f, h.label_h * 1.6f);
  const float gear_w = static_cast<float>(per_row) * h.gear_cell;
  const float gear_h = static_cast<float>(gear_rows) * (item * 1.25f + h.label_h);
  const int hand_rows = (hand_slots + hand_per_row - 1) / hand_per_row;
  const float hand_w = std::max(static_cast<float>(hand_per_row) * item * 1.15f, hand_min);
  const float hand_h = h.label_h + static_cast<float>(hand_rows) * item * 1.15f;
  const float fig_w = s * 0.7f;
  const float gap = font * 0.4f;
  const float main_w = gear_w + gap + fig_w + gap + hand_w;
  const float main_h = std::max({s, gear_h, hand_h});
  const float tag_h = compact ? 0.0f : font * 1.25f;
  const float cap_h = static_cast<float>(caption_lines) * font * 1.2f;
  const float block_w = std::max(main_w, caption_w);
  const float block_h = tag_h + main_h + gap + cap_h;
  const float bx = (cell.x0 + cell.x1 - block_w) * 0.5f;
  const float by = (cell.y0 + cell.y1 - block_h) * 0.5f;
  h.block = {bx, by, bx + block_w, by + block_h};
  h.tag = {bx, by, bx + block_w, by + tag_h};
  const float my = by + tag_h;
  const float mx = bx + (block_w - main_w) * 0.5f;
  // side < 0: [gear][figure][hands]; side > 0: [hands][figure][gear].
  const float gx = side < 0 ? mx : mx + hand_w + gap + fig_w + gap;
  const float fx = side < 0 ? mx + gear_w + gap : mx + hand_w + gap;
  const float hx = side < 0 ? mx + gear_w + gap + fig_w + gap : mx;
  h.gear = {gx, my, gx + gear_w, my + gear_h};
  h.figure = {fx, my + main_h - s, fx + fig_w, my + main_h};
  h.hands = {hx, my, hx + hand_w, my + hand_h};
  h.feet = {fx + s * 0.37f, my + main_h};
  const float cy = my + main_h + gap;
  h.caption = {bx, cy, bx + block_w, cy + cap_h};
  return h;
}

}  // namespace

namespace {

// Where each hiker may stand: in one row (the fire in the middle of it), or in
// two rows above and below the fire. On a trail there is no fire and the
// second row walks back, right to left.
std::vector<Rect> camp_cells(int world, Rect area, float font, bool trail, int nrows, Rect& fire) {
  world = std::max(1, world);
  nrows = world > 2 ? std::clamp(nrows, 1, 2) : 1;
  const int top = (world + nrows - 1) / nrows;
  const float fire_s = std::min(area.w(), area.h()) * 0.05f;
  const float fire_h = trail ? 0.0f : fire_s * 2.6f + font * 1.4f;
  const float fire_w = trail ? 0.0f : std::max(fire_s * 3.0f, font * 10.0f);
  const float cx = (area.x0 + area.x1) * 0.5f, cy = (area.y0 + area.y1) * 0.5f;
  fire = trail
             ? Rect{}
             : Rect{cx - fire_w * 0.5f, cy - fire_h * 0.5f, cx + fire_w * 0.5f, cy + fire_h * 0.5f};
  std::vector<Rect> cells(static_cast<size_t>(world));
  if (nrows == 1) {
    // Left of the fire the first half, right of it the rest (a trail: all in a row).
    const int left = trail ? world : (world + 1) / 2;
    const float lw = trail ? area.w() : fire.x0 - area.x0;
    const float rw = area.x1 - fire.x1;
    for (int r = 0; r < world; ++r) {
      Rect& c = cells[static_cast<size_t>(r)];
      if (r < left) {
        const float w = lw / static_cast<float>(left);
        c = {area.x0 + w * r, area.y0, area.x0 + w * (r + 1), area.y1};
      } else {
        const float w = rw / static_cast<float>(world - left);
        c = {fire.x1 + w * (r - left), area.y0, fire.x1 + w * (r - left + 1), area.y1};
      }
    }
    return cells;
  }
  for (int r = 0; r < world; ++r) {
    const int row = r < top ? 0 : 1;
    const int in_row = row == 0 ? top : world - top;
    // The second row runs right to left, so ranks go round the fire (and the
    // trail snakes back): rank top is under rank top - 1.
    const int k = row == 0 ? r : in_row - 1 - (r - top);
    const float y0 = row == 0 ? area.y0 : (trail ? cy : fire.y1);
    const float y1 = row == 0 ? (trail ? cy : fire.y0) : area.y1;
    const float w = area.w() / static_cast<float>(in_row);
    cells[static_cast<size_t>(r)] = {area.x0 + w * k, y0, area.x0 + w * (k + 1), y1};
  }
  return cells;
}

}  // namespace

CampLayout camp_layout_fitting(int world, int layers, Rect area, float font,
                               const CaptionSize& caption, int hand_slots, bool trail) {
  for (int i = 0;; ++i) {
    CampLayout L = camp_layout(world, layers, area, font, caption, hand_slots, trail);
    if (L.fits || i >= 30) return L;
    area.y1 = area.y0 + area.h() * 1.12f + font;
  }
}

CampLayout camp_layout(int world, int layers, Rect area, float font, const CaptionSize& caption,
                       int hand_slots, bool trail) {
  world = std::max(1, world);
  layers = std::max(1, layers);
  hand_slots = std::max(1, hand_slots);
  const float cx = (area.x0 + area.x1) * 0.5f;
  const int hand_per_row = std::min(hand_slots, 3);
  // For each arrangement (and gear grid width), the biggest figure whose block
  // fits every cell, gear growing with it; when even the smallest figure does
  // not fit (many hikers, big presenter fonts), the gear may shrink below the
  // font size. The arrangement with the biggest gear wins.
  CampLayout best;
  float best_score = -1;
  // Compact (no name under each icon, arrival tags only in the "now" line) is
  // the last resort, for many hikers or layers at big presenter fonts.
  for (bool compact : {false, true}) {
    for (int nrows : world > 2 ? std::vector<int>{2, 1} : std::vector<int>{1}) {
      Rect fire;
      const std::vector<Rect> cells = camp_cells(world, area, font, trail, nrows, fire);
      float wrap = area.w();
      for (const Rect& c : cells) wrap = std::min(wrap, c.w() * 0.9f);
      const auto [caption_w, caption_lines] = caption(wrap);
      for (int per_row = layers; per_row >= 1; --per_row) {
        // Of the grids with the same number of rows, only the narrowest.
        if (per_row > 1 &&
            (layers + per_row - 1) / per_row == (layers + per_row - 2) / (per_row - 1))
          continue;  // as many gear rows as a narrower grid: no gain
        auto fits_all = [&](float size, float item, float hmin) {
          for (const Rect& c : cells) {
            const HikerLayout h =
                place_hiker(c, size, item, layers, per_row, hand_slots, hand_per_row, font,
                            caption_w, caption_lines, 1, hmin, compact);
            if (h.block.w() > c.w() * 0.98f || h.block.h() > c.h() * 0.98f) return false;
          }
          return true;
        };
        float s = font * 1.5f, item_min = font * 0.5f, hand_min = font * 2.0f, score = 0;
        bool found = false;
        for (const auto& [imin, hmin] : {std::pair{1.1f, 4.5f}, {0.75f, 3.0f}, {0.5f, 2.0f}}) {
          for (float size = font * 14; size >= font * 1.5f; size *= 0.93f)
            if (fits_all(size, std::max(size * 0.36f, font * imin), font * hmin)) {
              s = size, item_min = font * imin, hand_min = font * hmin, found = true;
              // Two rows round the fire read best: they win a near tie.
              score = std::max(size * 0.36f, font * imin) * (nrows == 2 ? 1.15f : 1.0f);
              break;
            }
          if (found) break;
        }
        if (!found && (compact || best_score >= 0)) continue;
        CampLayout L;
        L.area = area;
        L.trail = trail;
        L.fire = fire;
        L.caption_wrap = wrap;
        L.fits = found;
        L.compact = compact;
        const float item = std::max(s * 0.36f, item_min);
        for (const Rect& c : cells) {
          // Gear on the side away from the fire (or, on a trail, behind the hiker).
          const float side = trail ? -1.0f : ((c.x0 + c.x1) * 0.5f < cx ? -1.0f : 1.0f);
          L.hikers.push_back(place_hiker(c, s, item, layers, per_row, hand_slots, hand_per_row,
                                         font, caption_w, caption_lines, side, hand_min, compact));
        }
        // A layout that fits beats one that does not, whatever its size.
        const float rank_score = score + (found ? 1e6f : 0.0f);
        if (rank_score > best_score) {
          best_score = rank_score;
          best = std::move(L);
        }
      }
    }
    if (best.fits && !best.hikers.empty()) break;
  }
  return best;
}

}  // namespace shardlab::gui
