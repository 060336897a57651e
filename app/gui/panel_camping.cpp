// The camping-trip skin of the cluster view: ranks are hikers around a
// campfire, a layer's parameters are a piece of gear (tent, food, water), a
// shard is part of it. At each all-gather the hikers lend their pieces around
// the fire; borrowed copies are handed back (freed) after use. On a pipeline
// the hikers walk one trail and pass notes (activations forward, gradients
// back). Same data as the cluster cards: allocation events and comm spans.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <imgui.h>

#include "app/gui/draw_util.h"
#include "app/gui/logic/cluster_logic.h"
#include "app/gui/logic/format.h"
#include "app/gui/panels.h"
#include "core/parallel/strategy.h"

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
  // The head's top is the figure's: s above the feet (it used to reach into the
  // tag line above the figure, under the arrival tag's text).
  const ImVec2 hip(feet.x, feet.y - s * 0.45f), neck(feet.x, feet.y - s * 0.8f);
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

namespace {

// A note (a pipeline message: activations forward, gradients back), paper with
// a folded corner and its label.
void draw_note(ImDrawList* dl, ImVec2 c, float w, float h, const char* label, ImU32 paper,
               ImU32 ink, float alpha) {
  const ImVec2 a(c.x - w * 0.5f, c.y - h * 0.5f), b(c.x + w * 0.5f, c.y + h * 0.5f);
  const float fold = h * 0.3f;
  dl->AddRectFilled(ImVec2(a.x + 2, a.y + 2), ImVec2(b.x + 2, b.y + 2),
                    IM_COL32(0, 0, 0, static_cast<int>(90 * alpha)), 2);
  dl->AddRectFilled(a, b, with_alpha(paper, alpha), 2);
  dl->AddTriangleFilled(ImVec2(b.x - fold, a.y), ImVec2(b.x, a.y), ImVec2(b.x, a.y + fold),
                        IM_COL32(150, 150, 150, static_cast<int>(255 * alpha)));
  dl->AddRect(a, b, with_alpha(ink, alpha), 2, 0, 1.5f);
  const ImVec2 sz = ImGui::CalcTextSize(label);
  const float fs =
      std::min(ImGui::GetFontSize(), ImGui::GetFontSize() * (w - 4) / std::max(1.0f, sz.x));
  const float tw = sz.x * fs / ImGui::GetFontSize();
  dl->AddText(ImGui::GetFont(), fs, ImVec2(c.x - tw * 0.5f, c.y - fs * 0.5f),
              with_alpha(ink, alpha), label);
}

// Whether the UTF-8 character starting at s[i] is a Chinese one (an
// ideograph, CJK punctuation or a full-width form: three bytes from U+3000).
bool wide_at(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  return c >= 0xE3 && c <= 0xEF && i + 2 < s.size();
}

// Words broken into lines no wider than `w` pixels. Chinese has no spaces:
// a line may also break between two Chinese characters, though not before
// Chinese punctuation (，。、；：）) nor after an opening one (（).
std::vector<std::string> wrap_words(const std::string& text, float w) {
  // The pieces a line may break between, each with whether a space came before it.
  std::vector<std::pair<std::string, bool>> words;
  bool space = false;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == ' ') {
      space = true;
      ++i;
      continue;
    }
    const bool wide = wide_at(text, i);
    const size_t len = wide ? 3 : 1;
    const std::string ch = text.substr(i, len);
    // Chinese punctuation that closes stays with what is before it.
    const bool closing =
        wide && (ch == "\xEF\xBC\x8C" || ch == "\xE3\x80\x82" || ch == "\xE3\x80\x81" ||
                 ch == "\xEF\xBC\x9B" || ch == "\xEF\xBC\x9A" || ch == "\xEF\xBC\x89");
    const bool after_open =
        !words.empty() && words.back().first.size() >= 3 &&
        words.back().first.compare(words.back().first.size() - 3, 3, "\xEF\xBC\x88") == 0;
    const bool prev_wide = !words.empty() && !space && words.back().first.size() >= 3 &&
                           wide_at(words.back().first, words.back().first.size() - 3);
    // A new piece after a space, at a Chinese character, or after one.
    const bool starts = words.empty() || space || ((wide || prev_wide) && !closing && !after_open);
    if (starts)
      words.push_back({ch, space});
    else
      words.back().first += ch;
    space = false;
    i += len;
  }
  std::vector<std::string> lines;
  std::string line;
  for (const auto& [word, spaced] : words) {
    const std::string tryline = line.empty() ? word : line + (spaced ? " " : "") + word;
    if (!line.empty() && ImGui::CalcTextSize(tryline.c_str()).x > w) {
      lines.push_back(line);
      line = word;
    } else {
      line = tryline;
    }
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

void text_in(ImDrawList* dl, const Rect& r, ImU32 col, const std::string& text, bool centred,
             float size = 0, float min_shrink = 0.6f) {
  if (r.h() <= 0) return;
  float fs = size > 0 ? size : ImGui::GetFontSize();
  float tw = ImGui::CalcTextSize(text.c_str()).x * fs / ImGui::GetFontSize();
  if (size > 0 && tw > r.w() && tw > 0) {  // small labels shrink to fit rather than clip
    fs = std::max(fs * r.w() / tw, fs * min_shrink);
    tw = ImGui::CalcTextSize(text.c_str()).x * fs / ImGui::GetFontSize();
  }
  const float x = centred ? std::max(r.x0, (r.x0 + r.x1 - tw) * 0.5f) : r.x0;
  dl->PushClipRect(ImVec2(r.x0, r.y0), ImVec2(r.x1, r.y1), true);
  dl->AddText(ImGui::GetFont(), fs, ImVec2(x, r.y0), col, text.c_str());
  dl->PopClipRect();
}

}  // namespace

void draw_camping(App& app, const RunData& d) {
  const Tr tr = app.tr();
  AppState& s = app.state;
  const bool hc = s.presenter.high_contrast;
  const UiColors& ui = ui_colors(hc);
  if (d.world == 0) {
    ImGui::TextWrapped(
        "%s", tr("No run yet. Press Run (R): the ranks become hikers who share their gear."));
    return;
  }
  draw_clock_choice(app);
  const int64_t t = static_cast<int64_t>(s.playhead.t);
  const int64_t fade = fade_ns_for(app, d);
  const bool pipeline = is_pipeline(d.cfg.strategy);

  std::vector<CardContents> cards;
  std::vector<std::vector<Holding>> holdings;
  for (int r = 0; r < d.world; ++r) {
    holdings.push_back(holdings_at(d.ranks[r].residency, t, fade, d.param_layers));
    mark_gather_progress(holdings.back(), d.ranks[r].lane(Lane::comm), t);
    cards.push_back(card_contents(holdings.back(), d.num_layers));
  }
  const int layers = std::max(1, cards[0].num_layers);
  const Naming naming = camping_naming(layers);
  const std::vector<Piece> pieces = pieces_in_flight(d, t);

  const char* intro =
      pipeline
          ? tr("Camping trip, pipeline: each hiker is a rank and carries the gear (parameters) of "
               "its "
               "own stage's layers for the whole trip. The hikers walk one trail: a hiker's result "
               "is a note passed on to the next hiker (F3: micro-batch 3's activations), and a "
               "note "
               "passed back (B3: its gradient) on the way home. Notes a hiker keeps are "
               "activations "
               "waiting for their backward.")
          : tr("Camping trip: each hiker is a rank; each piece of gear is one layer's parameters "
               "(colour and letter = layer). A hiker carrying only part of an item holds a shard "
               "(a1 "
               "= part 1 of layer a). When a layer is needed, the hikers meet at the campfire and "
               "lend each other their parts (all-gather); borrowed copies are striped and handed "
               "back after use (freed). White pieces are gradients being summed (reduce-scatter, "
               "all-reduce).");
  // Big presenter fonts leave little room: the explanation moves into the (?).
  const float font = ImGui::GetFontSize();
  const bool roomy = ImGui::GetContentRegionAvail().y > font * 34;
  ImGui::PushTextWrapPos(0);
  if (roomy) ImGui::TextUnformatted(intro);
  const std::string now = strf(tr("Now: %s"), now_line(d, pieces, t, naming, tr).c_str());
  ImGui::PushStyleColor(ImGuiCol_Text,
                        ImGui::ColorConvertU32ToFloat4(pieces.empty() ? ui.ok : ui.playhead));
  ImGui::TextUnformatted(now.c_str());
  ImGui::PopStyleColor();
  ImGui::PopTextWrapPos();
  ImGui::TextDisabled(
      "%s",
      strf(tr("t = %s, step %d"), format_time_ns(s.playhead.t).c_str(), d.step_at(t)).c_str());
  ImGui::SameLine(0, 16);
  help_marker(intro);

  // The scene fills the view; where it cannot fit without overlaps (big
  // presenter fonts in a small window) it grows and scrolls instead.
  ImGui::BeginChild("camp_scroll", ImGui::GetContentRegionAvail(), false);
  const ImVec2 o = ImGui::GetCursorScreenPos();
  ImVec2 size = ImGui::GetContentRegionAvail();
  const float horizon = o.y + size.y * 0.08f;
  auto area_for = [&](float w) {
    return Rect{o.x + font * 0.5f, horizon + font * 0.3f, o.x + w - font * 0.5f,
                o.y + size.y - font * 0.3f};
  };
  // Captions, wrapped to whatever width the layout tries: their size decides
  // how big everything else can be.
  std::vector<std::string> carries(d.world);
  for (int r = 0; r < d.world; ++r)
    carries[r] = strf(tr("carries %s"), carries_text(cards[r], d.world, naming, tr).c_str());
  auto wrap_captions = [&](float wrap) {
    std::vector<std::vector<std::string>> out(d.world);
    for (int r = 0; r < d.world; ++r) {
      out[r].push_back(strf(tr("hiker %d (rank %d)"), r, r));
      for (std::string& l : wrap_words(carries[r], wrap)) out[r].push_back(std::move(l));
    }
    return out;
  };
  const CaptionSize caption_size = [&](float wrap) {
    float w = 0;
    int lines = 1;
    for (const std::vector<std::string>& c : wrap_captions(wrap)) {
      for (const std::string& l : c) w = std::max(w, ImGui::CalcTextSize(l.c_str()).x + 2);
      lines = std::max(lines, static_cast<int>(c.size()));
    }
    return std::pair{w, lines};
  };
  // The gear drawn per hiker: every layer (outlines for what others carry),
  // or on a pipeline only its own stage's layers.
  std::vector<std::vector<int>> shown(d.world);
  size_t most = 1;
  for (int r = 0; r < d.world; ++r) {
    for (int l = 0; l < layers; ++l) {
      bool held = false;
      for (const SlotPiece& p : cards[r].slots[0][l]) held |= !is_temporary(p.kind);
      if (!pipeline || held) shown[r].push_back(l);
    }
    most = std::max(most, shown[r].size());
  }
  // What a hiker may hold out at once: borrowed gear, dp's whole replica, or notes.
  const int hand_slots = pipeline                        ? 4
                         : is_controller(d.cfg.strategy) ? std::min(layers, 6)
                                                         : std::min(layers, 3);
  CampLayout L = camp_layout_fitting(d.world, static_cast<int>(most), area_for(size.x), font,
                                     caption_size, hand_slots, pipeline);
  if (L.area.y1 > o.y + size.y - font * 0.3f + 0.5f) {  // it scrolls: room for the scrollbar
    size.x -= ImGui::GetStyle().ScrollbarSize;
    L = camp_layout_fitting(d.world, static_cast<int>(most), area_for(size.x), font, caption_size,
                            hand_slots, pipeline);
  }
  const Rect area = L.area;
  size.y = std::max(size.y, L.area.y1 + font * 0.3f - o.y);
  const std::vector<std::vector<std::string>> captions = wrap_captions(L.caption_wrap);
  ImGui::InvisibleButton("camp", size);  // i18n: not shown
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->PushClipRect(o, ImVec2(o.x + size.x, o.y + size.y), true);
  const ImU32 sky_top = hc ? IM_COL32(0, 0, 0, 255) : IM_COL32(14, 20, 42, 255);
  const ImU32 sky_low = hc ? IM_COL32(0, 0, 30, 255) : IM_COL32(38, 46, 78, 255);
  dl->AddRectFilledMultiColor(o, ImVec2(o.x + size.x, horizon), sky_top, sky_top, sky_low, sky_low);
  const Color ground = hc ? rgba(0, 40, 0) : rgba(34, 58, 38);
  dl->AddRectFilled(ImVec2(o.x, horizon), ImVec2(o.x + size.x, o.y + size.y), ground);
  for (int i = 0; i < 40; ++i) {  // fixed pseudo-random stars
    const float sx = o.x + std::fmod(i * 137.5f, size.x);
    const float sy = o.y + std::fmod(i * 53.7f, size.y * 0.07f);
    dl->AddCircleFilled(ImVec2(sx, sy), 1.2f, IM_COL32(230, 230, 255, 180));
  }
  for (int i = 0; i < 6; ++i) {  // mountains on the horizon
    const float mx = o.x + size.x * (i + 0.5f) / 6.0f, mh = size.y * (0.03f + 0.02f * (i % 3));
    dl->AddTriangleFilled(ImVec2(mx - size.x * 0.12f, horizon), ImVec2(mx, horizon - mh),
                          ImVec2(mx + size.x * 0.12f, horizon), IM_COL32(50, 60, 90, 255));
  }

  bool sharing = false;
  for (const Piece& p : pieces) sharing |= p.kind != SpanKind::send;
  struct Caption {
    Rect box;
    std::string text;
    ImU32 color = 0;
  };
  std::optional<Caption> fire_caption;
  if (!L.trail) {
    // The fire and its glow (1.3 s below the centre, 2.3 s above) stay above
    // the caption: in a shallow scene (presenter scale) the caption sat on the fire.
    const float caption_top = L.fire.y1 - font * 1.3f;
    float fs = std::min(L.fire.h() * 0.3f, L.fire.w() * 0.25f);
    fs = std::max(2.0f, std::min(fs, (caption_top - L.fire.y0) / 3.6f));
    const ImVec2 fire((L.fire.x0 + L.fire.x1) * 0.5f,
                      std::min(L.fire.y0 + L.fire.h() * 0.55f, caption_top - 1.3f * fs));
    draw_fire(dl, fire, fs, sharing, ImGui::GetTime());
    // The caption is drawn after the pieces in flight (below), over them.
    fire_caption = {
        Rect{L.fire.x0 - font * 3, L.fire.y1 - font * 1.3f, L.fire.x1 + font * 3, L.fire.y1},
        sharing ? tr("sharing at the campfire") : tr("campfire (nobody sharing)"),
        sharing ? ui.playhead : ui.text_dim};
  } else {
    // The trail through every hiker's feet, in rank order; where it changes
    // rows it turns at the right edge, clear of the hikers.
    const ImU32 trail = IM_COL32(140, 110, 70, 200);
    const float tw = std::max(3.0f, font * 0.3f);
    for (int r = 0; r + 1 < d.world; ++r) {
      const Vec2 a = L.hikers[r].feet, b = L.hikers[r + 1].feet;
      if (std::abs(a.y - b.y) < 1) {
        dl->AddLine(ImVec2(a.x, a.y + 2), ImVec2(b.x, b.y + 2), trail, tw);
        continue;
      }
      const float ex = area.x1 - font;
      dl->AddLine(ImVec2(a.x, a.y + 2), ImVec2(ex, a.y + 2), trail, tw);
      dl->AddLine(ImVec2(ex, a.y + 2), ImVec2(ex, b.y + 2), trail, tw);
      dl->AddLine(ImVec2(ex, b.y + 2), ImVec2(b.x, b.y + 2), trail, tw);
    }
  }

  // Per hiker: tag line, figure, gear, what it holds out, caption.
  std::map<int, std::pair<std::string, std::string>> tags;  // long, brief
  const std::string sep = tr.zh() ? "\xEF\xBC\x9B" : "; ";
  for (const ArrivalTag& a : arrival_tags(pieces, naming, tr)) {
    auto& [line, brief] = tags[a.to];
    line += (line.empty() ? "" : sep) + a.text;
    brief += (brief.empty() ? "" : sep) + a.brief;
  }
  for (int r = 0; r < d.world; ++r) {
    const HikerLayout& h = L.hikers[r];
    const CardContents& c = cards[r];
    mark_region(app, r, nullptr, -1, ImVec2(h.block.x0, h.block.y0),
                ImVec2(h.block.x1, h.block.y1));
    draw_hiker(dl, ImVec2(h.feet.x, h.feet.y), h.size,
               hc ? IM_COL32(255, 255, 255, 255) : IM_COL32(225, 215, 195, 255),
               hc ? IM_COL32(120, 120, 120, 255) : IM_COL32(120, 85, 55, 255));
    const float small = std::max(font * 0.85f, std::min(font, h.label_h * 0.95f));
    for (size_t i = 0; i < shown[r].size(); ++i) {
      const int l = shown[r][i];
      const Vec2 gc = h.gear_center(static_cast<int>(i));
      const ImVec2 pc(gc.x, gc.y);
      const Gear g = gear_of_layer(l);
      const Color lc = layer_color(l, hc);
      bool any = false;
      for (const SlotPiece& p : c.slots[0][l]) {
        if (is_temporary(p.kind)) continue;
        draw_gear(dl, g, pc, h.item, lc, p.begin, p.end, p.alpha, false, ui.text);
        any = true;
      }
      if (!any) draw_gear(dl, g, pc, h.item, lc, 0, 0, 1, false, ui.text);  // outline: not carried
      // Its name under it (never on it): the part carried, or the layer.
      std::string lbl = layer_name(l, naming);
      for (const SlotPiece& p : c.slots[0][l])
        if (p.kind == HoldKind::shard && d.world > 1 && naming.letters) {
          lbl = part_name(l, static_cast<int>(std::lround(p.begin * d.world)), naming);
          break;
        }
      if (!L.compact)
        text_in(dl,
                Rect{pc.x - h.gear_cell * 0.5f, pc.y + h.item * 0.62f, pc.x + h.gear_cell * 0.5f,
                     pc.y + h.item * 0.62f + h.label_h},
                any ? ui.text : ui.text_dim, lbl, true, small);
    }
    // Held out towards the others: borrowed gear, or the notes it keeps.
    const Rect label_r{h.hands.x0, h.hands.y0, h.hands.x1, h.hands.y0 + h.label_h};
    int slot = 0;
    if (pipeline) {
      const std::vector<int> notes = notes_held(holdings[r], &d, r, t);
      if (!notes.empty())
        text_in(dl, label_r, ui.text_dim,
                strf(notes.size() == 1 ? tr("%d note kept") : tr("%d notes kept"),
                     static_cast<int>(notes.size())),
                true, small);
      for (size_t i = 0; i < notes.size(); ++i) {
        const bool more = slot == hand_slots - 1 && notes.size() > i + 1;
        const Vec2 hcn = h.hand_center(slot++);
        const std::string lbl =
            more ? "+" + std::to_string(notes.size() - i) : "F" + std::to_string(notes[i]);
        draw_note(dl, ImVec2(hcn.x, hcn.y), h.item * 1.05f, h.item * 0.75f, lbl.c_str(),
                  IM_COL32(245, 240, 220, 255), IM_COL32(30, 30, 30, 255), 1);
        if (more) break;
      }
    } else {
      // One item per borrowed layer (its weight and bias are one piece of gear).
      std::vector<std::pair<int, const SlotPiece*>> borrowed;
      for (int l = 0; l < layers; ++l) {
        const SlotPiece* most = nullptr;
        for (const SlotPiece& p : c.slots[0][l])
          if (is_temporary(p.kind) && (!most || p.alpha > most->alpha)) most = &p;
        if (most) borrowed.push_back({l, most});
      }
      // Over at most two hand slots: the word shrinks further rather than lose a letter.
      if (!borrowed.empty()) text_in(dl, label_r, ui.text_dim, tr("borrowed"), true, small, 0.45f);
      for (size_t i = 0; i < borrowed.size(); ++i) {
        const Vec2 hcn = h.hand_center(slot);
        if (slot == hand_slots - 1 && borrowed.size() > i + 1) {
          // "+2" in its hand slot, shrunk rather than cut where the icons are small.
          text_in(dl,
                  Rect{hcn.x - h.item * 0.575f, hcn.y - font * 0.5f, hcn.x + h.item * 0.575f,
                       hcn.y + font * 0.6f},
                  ui.text, "+" + std::to_string(borrowed.size() - i), true, font);
          break;
        }
        const auto [l, p] = borrowed[i];
        // Filled only as far as the lending has gone (a prefetch waits its turn):
        // its own part, and each other hiker's part as far as it has come.
        const int parts = p->gather_progress >= 1.0f ? 1 : d.world;  // whole: one draw
        for (int j = 0; j < parts; ++j) {
          const double f = parts == 1 || j == r ? 1.0 : p->gather_progress;
          draw_gear(dl, gear_of_layer(l), ImVec2(hcn.x, hcn.y), h.item, layer_color(l, hc),
                    double(j) / parts, (j + f) / parts, p->alpha, true, ui.text);
        }
        ++slot;
      }
    }
    for (size_t i = 0; i < captions[r].size(); ++i) {
      const float y = h.caption.y0 + static_cast<float>(i) * font * 1.2f;
      text_in(dl, Rect{h.caption.x0, y, h.caption.x1, y + font * 1.2f},
              i == 0 ? ui.text : ui.text_dim, captions[r][i], true);
    }
  }

  // Pieces on their way: gear through the fire, notes along the trail.
  const ImVec2 fire_c((L.fire.x0 + L.fire.x1) * 0.5f, L.fire.y0 + L.fire.h() * 0.3f);
  for (const Piece& p : pieces) {
    const HikerLayout& ha = L.hikers[p.from];
    const HikerLayout& hb = L.hikers[p.to];
    const bool note = p.kind == SpanKind::send || p.layer < 0 || p.column < 0;
    Vec2 a = ha.hand_center(0), b = hb.hand_center(0);
    if (note) {  // handed from one hiker's hand to the next one's
      a = {ha.feet.x, ha.feet.y - ha.size * 0.55f};
      b = {hb.feet.x, hb.feet.y - hb.size * 0.55f};
    }
    if (!note && p.column == 0 && p.layer < layers && !pipeline) a = ha.gear_center(p.layer);
    // Gear goes round by the fire; notes go straight, arcing over the trail.
    auto along = [&](float e) {
      if (note || L.trail) {
        const Vec2 q = travel_position(a, b, e, 0);
        return ImVec2(q.x, q.y - std::sin(3.14159265f * e) * font * 2.5f);
      }
      if (e < 0.5f) {
        const float k = e * 2;
        return ImVec2(a.x + (fire_c.x - a.x) * k, a.y + (fire_c.y - a.y) * k);
      }
      const float k = (e - 0.5f) * 2;
      return ImVec2(fire_c.x + (b.x - fire_c.x) * k, fire_c.y + (b.y - fire_c.y) * k);
    };
    for (float k = 0; k <= 1.0f; k += 0.03f)
      dl->AddCircleFilled(along(k), std::max(1.5f, font * 0.1f), with_alpha(ui.text, 0.45f));
    const ImVec2 end = along(1.0f);
    const float ah = font * 0.4f;
    dl->AddTriangleFilled(ImVec2(end.x, end.y + ah), ImVec2(end.x - ah, end.y - ah),
                          ImVec2(end.x + ah, end.y - ah), with_alpha(ui.text, 0.7f));
    const ImVec2 pos = along(ease_in_out(p.progress));
    if (note) {
      std::string lbl = message_label(p);
      if (lbl.empty())
        lbl = p.kind == SpanKind::gather ? tr("out")
              : p.layer >= 0             ? "dy"  // i18n: a symbol (the output's gradient)
                                         : tr("batch");
      draw_note(dl, pos, std::max(ha.item * 1.2f, ImGui::CalcTextSize(lbl.c_str()).x + 8),
                ha.item * 0.8f, lbl.c_str(), IM_COL32(255, 250, 230, 255),
                IM_COL32(20, 20, 20, 255), 1);
    } else {
      const Color col = p.column == 1 ? rgba(230, 230, 230) : layer_color(p.layer, hc);
      draw_gear(dl, gear_of_layer(std::max(0, p.layer)), pos, ha.item * 0.9f, col, p.frac_begin,
                p.frac_end, 1, false, ui.text);
    }
  }
  // The campfire's caption over the pieces passing through it, on a patch of
  // the ground's colour (a piece in flight once covered "sharing at the campfire").
  if (fire_caption) {
    const Caption& c = *fire_caption;
    const float w = std::min(ImGui::CalcTextSize(c.text.c_str()).x, c.box.w());
    const float x = std::max(c.box.x0, (c.box.x0 + c.box.x1 - w) * 0.5f);
    dl->AddRectFilled(ImVec2(x - 3, c.box.y0), ImVec2(x + w + 3, c.box.y0 + font),
                      with_alpha(ground, 0.85f), 3);
    text_in(dl, c.box, c.color, c.text, true);
  }
  // Arrival tags last, on a patch of the ground's colour: a piece passing under
  // one does not hide whom it comes from.
  for (const auto& [r, texts] : tags) {
    const HikerLayout& h = L.hikers[r];
    if (L.compact) break;
    const auto& [line, brief] = texts;
    const std::string& text = ImGui::CalcTextSize(line.c_str()).x <= h.tag.w() ? line : brief;
    const float w = std::min(ImGui::CalcTextSize(text.c_str()).x, h.tag.w());
    const float x = std::max(h.tag.x0, (h.tag.x0 + h.tag.x1 - w) * 0.5f);
    dl->AddRectFilled(ImVec2(x - 3, h.tag.y0), ImVec2(x + w + 3, h.tag.y0 + font),
                      with_alpha(ground, 0.85f), 3);
    text_in(dl, h.tag, ui.playhead, text, true);
  }
  dl->PopClipRect();
  ImGui::EndChild();
}

}  // namespace shardlab::gui
