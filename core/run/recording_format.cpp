// Encodings of the recording format (recording_format.h).
#include "core/run/recording_format.h"

#include <cmath>
#include <cstdio>

namespace shardlab::recording_format {

using nlohmann::json;

namespace {
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string base64_encode(const unsigned char* p, size_t n) {
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{p[i + 2]} : 0);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < n ? kB64[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kB64[v & 63] : '=';
  }
  return out;
}

bool base64_decode(const std::string& s, std::vector<unsigned char>& out) {
  if (s.size() % 4 != 0) return false;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out.clear();
  out.reserve(s.size() / 4 * 3);
  for (size_t i = 0; i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    const int pad = last ? (s[i + 3] == '=') + (s[i + 2] == '=') : 0;
    if (pad == 1 && s[i + 2] == '=') return false;  // "x=y=" is not padding
    int v[4];
    for (int k = 0; k < 4 - pad; ++k)
      if ((v[k] = value(s[i + k])) < 0) return false;
    for (int k = 4 - pad; k < 4; ++k) v[k] = 0;
    const uint32_t x =
        (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out.push_back(static_cast<unsigned char>(x >> 16));
    if (pad < 2) out.push_back(static_cast<unsigned char>(x >> 8));
    if (pad < 1) out.push_back(static_cast<unsigned char>(x));
  }
  return true;
}

uint32_t crc32(const unsigned char* p, size_t n) {
  uint32_t table[256];
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

bool is_utc_date(const std::string& s) {
  const char* shape = "dddd-dd-ddTdd:dd:ddZ";
  if (s.size() != 20) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool digit = s[i] >= '0' && s[i] <= '9';
    if (shape[i] == 'd' ? !digit : s[i] != shape[i]) return false;
  }
  return true;
}

json pool_json(const PoolStats& p) {
  json current = json::object(), peak = json::object();
  for (int c = 0; c < kNumMemCategories; ++c) {
    current[to_string(static_cast<MemCategory>(c))] = p.current[c];
    peak[to_string(static_cast<MemCategory>(c))] = p.peak[c];
  }
  return {{"current", current},
          {"peak", peak},
          {"current_total", p.current_total},
          {"peak_total", p.peak_total},
          {"cached", p.cached}};
}

json loss_json(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

}  // namespace shardlab::recording_format
