// Text for numbers on screen: bytes, durations and axis ticks, shared by every
// panel so units read the same everywhere.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "app/gui/logic/i18n.h"

namespace shardlab::gui {

std::string format_bytes(double bytes);  // "1.25 MiB", "512 B"
std::string format_time_ns(double ns);   // "3.20 ms", "850 µs", "12 ns"
std::string format_speed(double speed);  // "1/1000×", "1/3×", "1×"

// Tick positions for an axis over [lo, hi] with about `target` ticks, on
// 1-2-5 steps (values are in the caller's unit).
std::vector<double> nice_ticks(double lo, double hi, int target);

// Ticks for a bytes axis over [0, max]: round numbers in the unit that fits
// (KiB, MiB, ...), with their labels ("0.5 MiB", not "512.0 KiB" and "976.6 KiB").
struct ByteTick {
  double bytes;
  std::string label;
};
std::vector<ByteTick> byte_ticks(double max_bytes, int target);

// What the loss view's curve is, for the run's --model: mlp trains with MSE,
// gpt with cross-entropy over every position of every window; in `tr`'s language.
std::string loss_name(const std::string& model, const Tr& tr = Tr{});

}  // namespace shardlab::gui
