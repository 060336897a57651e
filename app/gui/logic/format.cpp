// Number formatting for the GUI (see format.h).
#include "app/gui/logic/format.h"

#include <cmath>
#include <cstdio>
#include <exception>

#include "core/model/model.h"

namespace shardlab::gui {

std::string format_bytes(double bytes) {
  // i18n: units stay as they are
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", v);
  else
    std::snprintf(buf, sizeof buf, std::fabs(v) < 10 ? "%.2f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string format_time_ns(double ns) {
  char buf[32];
  const double a = std::fabs(ns);
  if (a >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3g s", ns / 1e9);
  else if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3g ms", ns / 1e6);
  else if (a >= 1e3)
    std::snprintf(buf, sizeof buf, "%.3g \xC2\xB5s", ns / 1e3);  // µs
  else
    std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  return buf;
}

std::string format_speed(double speed) {
  char buf[32];
  if (speed >= 0.999)
    std::snprintf(buf, sizeof buf, "%.3g\xC3\x97", speed);  // ×
  else
    std::snprintf(buf, sizeof buf, "1/%.0f\xC3\x97", 1.0 / speed);
  return buf;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> out;
  if (!(hi > lo) || target < 1) return out;
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    out.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  return out;
}

std::vector<ByteTick> byte_ticks(double max_bytes, int target) {
  std::vector<ByteTick> out;
  // i18n: units stay as they are
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double unit = 1;
  while (max_bytes / unit >= 1024 && u < 4) {
    unit *= 1024;
    ++u;
  }
  for (double v : nice_ticks(0, max_bytes / unit, target)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g %s", v, units[u]);
    out.push_back({v * unit, v == 0 ? "0" : buf});
  }
  return out;
}

std::string loss_name(const std::string& model, const Tr& tr) {
  try {
    if (ModelSpec::parse(model).family == "gpt")
      return tr("cross-entropy over every position of the global batch");
  } catch (const std::exception&) {
    // A model this build does not know: say nothing wrong about it.
    return tr("over the global batch");
  }
  return tr("MSE over the global batch");
}

}  // namespace shardlab::gui
