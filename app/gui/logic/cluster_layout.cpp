// The cluster view's geometry: one card per rank in rows, lanes inside each
// card, and the routes pieces travel between cards (see cluster_logic.h).
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

CardLayout card_layout(Rect card, float font, int rows) {
  CardLayout c;
  c.card = card;
  c.rows = std::max(1, rows);
  const float pad = std::max(6.0f, font * 0.4f);
  const float x0 = card.x0 + pad, x1 = card.x1 - pad;
  const float line = font * 1.2f;
  // Lines drop out, least needed first, when the card is too short for them
  // and a readable grid (presenter fonts on many cards).
  const float min_grid = static_cast<float>(c.rows) * std::max(3.0f, font * 0.35f);
  const float avail = card.h() - pad;
  bool footer = true, held = true;
  auto needed = [&] {
    return font * 1.3f + (held ? line : 0) + line + line + (footer ? 2 * line : 0) + min_grid;
  };
  if (needed() > avail) footer = false;
  if (needed() > avail) held = false;
  float y = card.y0 + pad * 0.5f;
  auto take = [&](float h) {
    Rect r{x0, y, x1, y + h};
    y += h;
    return r;
  };
  c.title = take(font * 1.3f);
  c.held = held ? take(line) : Rect{x0, y, x1, y};
  c.status = take(line);
  c.headers = take(line);
  const float bottom = card.y1 - pad * 0.5f;
  c.footer = footer ? Rect{x0, bottom - 2 * line, x1, bottom} : Rect{x0, bottom, x1, bottom};
  c.label_w = font * 2.6f;
  c.grid = Rect{x0 + c.label_w, y, x1, c.footer.y0 - pad * 0.3f};
  c.col_w = c.grid.w() / kCardColumns;
  c.row_h = std::clamp(c.grid.h() / static_cast<float>(c.rows), 3.0f, font * 4.5f);
  c.grid.y1 = c.grid.y0 + c.row_h * static_cast<float>(c.rows);
  return c;
}

ClusterLayout cluster_layout(int world, Rect area, float font, int per_row) {
  ClusterLayout L;
  L.world = std::max(1, world);
  L.font = font;
  L.ncols = per_row > 0 ? std::min(L.world, per_row) : std::min(L.world, 4);
  L.nrows = (L.world + L.ncols - 1) / L.ncols;
  L.lanes = L.ncols * (L.nrows > 1 ? 2 : 1);
  const float tag_h = font * 1.3f;
  // Lanes as tall as a small font, less when many rows would leave no room for cards.
  const float budget = area.h() * 0.3f - static_cast<float>(L.nrows) * tag_h;
  L.lane_h = std::max(
      4.0f, std::min(font * 1.3f, budget / static_cast<float>(std::max(1, L.nrows * L.lanes))));
  L.gutter = std::max(font * 0.8f, L.lane_h * 1.8f);
  const float corridor_h = static_cast<float>(L.lanes) * L.lane_h + L.lane_h * 0.6f + tag_h;
  const float card_w = (area.w() - L.gutter * static_cast<float>(L.ncols)) / L.ncols;
  const float card_h =
      std::max(font * 3, (area.h() - corridor_h * static_cast<float>(L.nrows)) / L.nrows);
  for (int r = 0; r < L.world; ++r) {
    const int col = r % L.ncols, row = r / L.ncols;
    const float x = area.x0 + L.gutter + static_cast<float>(col) * (card_w + L.gutter);
    const float y = area.y0 + static_cast<float>(row) * (card_h + corridor_h);
    L.cards.push_back({x, y, x + card_w, y + card_h});
  }
  for (int row = 0; row < L.nrows; ++row) {
    const float y = area.y0 + static_cast<float>(row) * (card_h + corridor_h) + card_h;
    L.corridors.push_back({area.x0, y, area.x1, y + corridor_h});
    L.tag_rows.push_back({area.x0, y + corridor_h - tag_h, area.x1, y + corridor_h});
  }
  return L;
}

ClusterLayout cluster_layout_fitting(int world, Rect area, float font, int rows, int per_row) {
  // Grown (the view then scrolls) until every card has a readable grid under
  // its title, status and column headers.
  const float min_row = std::max(6.0f, font * 0.55f);
  for (int i = 0;; ++i) {
    ClusterLayout L = cluster_layout(world, area, font, per_row);
    const CardLayout c = card_layout(L.cards[0], font, rows);
    const bool fits = c.row_h >= min_row && c.card.contains(c.grid);
    if (fits || i >= 40) return L;
    area.y1 = area.y0 + area.h() * 1.12f + font;
  }
}

float ClusterLayout::lane_y(int row, int lane) const {
  const Rect& c = corridors[static_cast<size_t>(std::clamp(row, 0, nrows - 1))];
  return c.y0 + lane_h * 0.6f + (static_cast<float>(lane) + 0.5f) * lane_h;
}

float ClusterLayout::gutter_x(int col) const {
  return cards[static_cast<size_t>(col)].x0 - gutter * 0.5f;
}

std::vector<Vec2> piece_route(const ClusterLayout& L, int from, int to, float x_from, float x_to) {
  const Rect& a = L.cards[static_cast<size_t>(from)];
  const Rect& b = L.cards[static_cast<size_t>(to)];
  const int row_a = from / L.ncols, row_b = to / L.ncols;
  const float edge = L.lane_h * 0.5f;  // the piece waits just below a card, never on it
  const float ya = L.lane_y(row_a, from % L.ncols);
  std::vector<Vec2> r{{x_from, a.y1 + edge}, {x_from, ya}};
  if (row_a == row_b) {
    r.push_back({x_to, ya});
  } else {
    // Along the corridor to the gutter left of the destination's column, along
    // the gutter to the destination row's corridor, on an arrivals lane.
    const float gx = L.gutter_x(to % L.ncols);
    const float yb = L.lane_y(row_b, L.ncols + from % L.ncols);
    r.push_back({gx, ya});
    r.push_back({gx, yb});
    r.push_back({x_to, yb});
  }
  r.push_back({x_to, b.y1 + edge});
  // Drop zero-length legs, so the corners are real corners.
  std::vector<Vec2> out;
  for (const Vec2& p : r)
    if (out.empty() || std::abs(out.back().x - p.x) + std::abs(out.back().y - p.y) > 0.01f)
      out.push_back(p);
  return out;
}

float route_length(const std::vector<Vec2>& route) {
  float len = 0;
  for (size_t i = 1; i < route.size(); ++i)
    len += std::hypot(route[i].x - route[i - 1].x, route[i].y - route[i - 1].y);
  return len;
}

Vec2 point_along(const std::vector<Vec2>& route, float distance) {
  if (route.empty()) return {};
  float left = std::max(0.0f, distance);
  for (size_t i = 1; i < route.size(); ++i) {
    const float seg = std::hypot(route[i].x - route[i - 1].x, route[i].y - route[i - 1].y);
    if (left <= seg && seg > 0) {
      const float k = left / seg;
      return {route[i - 1].x + (route[i].x - route[i - 1].x) * k,
              route[i - 1].y + (route[i].y - route[i - 1].y) * k};
    }
    left -= seg;
  }
  return route.back();
}

Vec2 piece_size(const ClusterLayout& L, double frac_begin, double frac_end, float col_w) {
  const float h = L.lane_h * 0.8f;
  // As wide as the part of the layer it carries, within what a gutter lets pass.
  // One row of cards: pieces never enter a gutter, so they may be wider.
  const float widest = L.nrows == 1 ? std::min(col_w, h * 5) : std::min(col_w, L.gutter * 0.9f);
  const float w = std::clamp(static_cast<float>(frac_end - frac_begin) * col_w, h, widest);
  return {std::max(w, std::min(h, widest)), h};
}

}  // namespace shardlab::gui
