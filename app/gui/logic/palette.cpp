// Colour and label tables (see palette.h).
#include "app/gui/logic/palette.h"

#include <algorithm>
#include <cmath>

#include "core/record/span_label.h"

namespace shardlab::gui {

namespace {
int channel(Color c, int shift) {
  return static_cast<int>((c >> shift) & 0xFF);
}

Color from_hsv(float h, float s, float v) {
  h = h - std::floor(h);
  const float i = std::floor(h * 6), f = h * 6 - i;
  const float p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  float r = v, g = t, b = p;
  switch (static_cast<int>(i) % 6) {
    case 1:
      r = q, g = v, b = p;
      break;
    case 2:
      r = p, g = v, b = t;
      break;
    case 3:
      r = p, g = q, b = v;
      break;
    case 4:
      r = t, g = p, b = v;
      break;
    case 5:
      r = v, g = p, b = q;
      break;
    default:
      break;
  }
  return rgba(static_cast<int>(r * 255), static_cast<int>(g * 255), static_cast<int>(b * 255));
}
}  // namespace

Color with_alpha(Color c, float alpha) {
  const int a = static_cast<int>(std::clamp(alpha, 0.0f, 1.0f) * 255.0f + 0.5f);
  return (c & 0x00FFFFFFu) | static_cast<Color>(a) << 24;
}

Color scale_rgb(Color c, float f) {
  auto s = [&](int shift) { return std::clamp(static_cast<int>(channel(c, shift) * f), 0, 255); };
  return rgba(s(0), s(8), s(16), channel(c, 24));
}

Color kind_color(SpanKind kind, bool hc) {
  switch (kind) {
    case SpanKind::forward:
      return hc ? rgba(60, 140, 255) : rgba(79, 140, 230);
    case SpanKind::backward:
      return hc ? rgba(0, 200, 120) : rgba(46, 165, 115);
    case SpanKind::weight:  // a backward's second half: B's green, lighter and yellower
      return hc ? rgba(190, 255, 60) : rgba(150, 195, 70);
    case SpanKind::loss:
      return hc ? rgba(255, 220, 0) : rgba(225, 190, 60);
    case SpanKind::optimizer:
      return hc ? rgba(255, 140, 0) : rgba(235, 135, 50);
    case SpanKind::all_reduce:
      return hc ? rgba(255, 60, 60) : rgba(215, 75, 75);
    case SpanKind::reduce_scatter:
      return hc ? rgba(255, 70, 220) : rgba(200, 85, 180);
    case SpanKind::all_gather:
      return hc ? rgba(170, 110, 255) : rgba(150, 105, 230);
    case SpanKind::broadcast:
      return hc ? rgba(210, 150, 90) : rgba(170, 125, 85);
    case SpanKind::reduce:
      return hc ? rgba(230, 50, 120) : rgba(175, 55, 95);
    case SpanKind::send:
      return hc ? rgba(0, 220, 255) : rgba(40, 175, 200);
    case SpanKind::recv:
      return hc ? rgba(140, 240, 255) : rgba(105, 205, 225);
    case SpanKind::barrier:
      return hc ? rgba(200, 200, 200) : rgba(140, 140, 140);
    case SpanKind::copy_h2d:
      return hc ? rgba(190, 220, 0) : rgba(150, 170, 45);
    case SpanKind::copy_d2h:
      return hc ? rgba(230, 255, 100) : rgba(195, 205, 95);
    case SpanKind::scatter:
      return hc ? rgba(255, 170, 200) : rgba(215, 140, 165);
    case SpanKind::gather:
      return hc ? rgba(255, 120, 160) : rgba(190, 105, 135);
    case SpanKind::data:
      return hc ? rgba(210, 190, 150) : rgba(150, 135, 105);
    case SpanKind::disk_read:  // the disk lane: browns, apart from the copies' greens
      return hc ? rgba(230, 160, 90) : rgba(170, 110, 60);
    case SpanKind::disk_write:
      return hc ? rgba(255, 200, 140) : rgba(205, 150, 95);
    case SpanKind::other:
      return hc ? rgba(180, 180, 180) : rgba(120, 120, 120);
    default:
      break;  // a kind added after this table: grey until it gets a colour
  }
  return rgba(128, 128, 128);
}

Color category_color(MemCategory c, bool hc) {
  switch (c) {
    case MemCategory::params:
      return hc ? rgba(60, 140, 255) : rgba(79, 140, 230);
    case MemCategory::grads:
      return hc ? rgba(0, 200, 120) : rgba(46, 165, 115);
    case MemCategory::optimizer_state:
      return hc ? rgba(255, 140, 0) : rgba(235, 135, 50);
    case MemCategory::activations:
      return hc ? rgba(255, 70, 220) : rgba(195, 90, 180);
    case MemCategory::comm_buffers:
      return hc ? rgba(255, 60, 60) : rgba(215, 75, 75);
    case MemCategory::temporary:
      return hc ? rgba(200, 200, 200) : rgba(150, 150, 150);
  }
  return rgba(128, 128, 128);
}

Color layer_color(int layer, bool hc) {
  if (layer < 0) return rgba(150, 150, 150);
  return from_hsv(0.58f + 0.618034f * static_cast<float>(layer), hc ? 0.8f : 0.55f,
                  hc ? 1.0f : 0.9f);
}

const char* kind_short(SpanKind kind, const Tr& tr) {
  // The traces' abbreviations (span_label.h), the words among them in the
  // reader's language; the letters (F, B, AR, RS, H2D, ...) read the same in each.
  switch (kind) {
    case SpanKind::loss:
      return tr("loss");
    case SpanKind::optimizer:
      return tr("opt");
    case SpanKind::send:
      return tr("send");
    case SpanKind::recv:
      return tr("recv");
    case SpanKind::barrier:
      return tr("bar");
    case SpanKind::data:
      return tr("data");
    case SpanKind::disk_read:
      return tr("read");
    case SpanKind::disk_write:
      return tr("write");
    case SpanKind::other:
      return "?";
    default:
      return kind_abbrev(kind);
  }
}

const char* kind_label(SpanKind kind, const Tr& tr) {
  return tr(span_kind_row(kind).label);  // each label has its entry (tests/test_i18n.cpp)
}

const char* category_label(MemCategory c, const Tr& tr) {
  switch (c) {
    case MemCategory::params:
      return tr("params");
    case MemCategory::grads:
      return tr("grads");
    case MemCategory::optimizer_state:
      return tr("optimizer state");
    case MemCategory::activations:
      return tr("activations");
    case MemCategory::comm_buffers:
      return tr("comm buffers");
    case MemCategory::temporary:
      return tr("temporary");
  }
  return "?";
}

}  // namespace shardlab::gui
