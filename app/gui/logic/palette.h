// Colours of span kinds, memory categories and layers, as packed RGBA in Dear
// ImGui's byte order (R lowest), so the view logic can pick colours without ImGui.
#pragma once
#include <cstdint>

#include "app/gui/logic/i18n.h"
#include "core/record/recorder.h"

namespace shardlab::gui {

using Color = uint32_t;

constexpr Color rgba(int r, int g, int b, int a = 255) {
  return static_cast<Color>(r) | static_cast<Color>(g) << 8 | static_cast<Color>(b) << 16 |
         static_cast<Color>(a) << 24;
}
Color with_alpha(Color c, float alpha);  // alpha in 0..1 replaces c's alpha
Color scale_rgb(Color c, float f);       // darker (< 1) or lighter (> 1), alpha kept

// `high_contrast` is the presenter theme: saturated colours for a projector.
Color kind_color(SpanKind kind, bool high_contrast = false);
Color category_color(MemCategory c, bool high_contrast = false);
// Distinct hues for neighbouring layers (golden-ratio hue steps).
Color layer_color(int layer, bool high_contrast = false);

// Short names used as labels on spans: "AR" for all_reduce, "F" for forward ...
// (the collectives' abbreviations stay as they are in Chinese).
const char* kind_short(SpanKind kind, const Tr& tr = Tr{});
// Names for people: "all-reduce", "optimizer state" ..., in `tr`'s language.
const char* kind_label(SpanKind kind, const Tr& tr = Tr{});
const char* category_label(MemCategory c, const Tr& tr = Tr{});

}  // namespace shardlab::gui
