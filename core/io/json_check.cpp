// The checked JSON reader (json_check.h).
#include "core/io/json_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace shardlab {

using nlohmann::json;

// A value from the file inside a one-line message: control characters escaped,
// long values cut.
std::string shown(const std::string& s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 60; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += s[i];
    }
  }
  if (s.size() > 60) out += "...";
  return out + "'";
}

std::string describe(const json& v) {
  if (v.is_string()) return "the string " + shown(v.get_ref<const std::string&>());
  if (v.is_number() || v.is_boolean() || v.is_null()) return v.dump();
  return std::string("an ") + v.type_name();
}

void JsonChecker::fail(const std::string& where, const std::string& what) const {
  throw ConfigError(kind_ + " '" + file_ + "': " + (where.empty() ? "" : where + ": ") + what);
}

void JsonChecker::keys(const json& v, const std::string& where,
                       const std::vector<const char*>& want,
                       const std::vector<const char*>& optional) const {
  if (!v.is_object()) fail(where, "expected an object, got " + describe(v));
  for (const char* k : want)
    if (!v.contains(k)) fail(where, std::string("missing key '") + k + "'");
  std::string valid;
  for (const char* k : want) valid += std::string(valid.empty() ? "" : ", ") + k;
  for (const char* k : optional) valid += std::string(valid.empty() ? "" : ", ") + k;
  auto named = [](const std::vector<const char*>& list, const std::string& k) {
    return std::find_if(list.begin(), list.end(), [&](const char* w) { return k == w; }) !=
           list.end();
  };
  for (const auto& [k, _] : v.items())
    if (!named(want, k) && !named(optional, k))
      fail(where, "unknown key " + shown(k) + " (valid: " + valid + ")");
}

const json& JsonChecker::array(const json& v, const std::string& where, size_t min_size,
                               size_t max_size) const {
  if (!v.is_array()) fail(where, "expected an array, got " + describe(v));
  if (v.size() < min_size || v.size() > max_size)
    fail(where,
         "has " + std::to_string(v.size()) + " entries (valid: " +
             (min_size == max_size ? std::to_string(min_size)
                                   : std::to_string(min_size) + " to " + std::to_string(max_size)) +
             ")");
  return v;
}

int64_t JsonChecker::integer(const json& v, const std::string& where, int64_t lo,
                             int64_t hi) const {
  if (!v.is_number_integer()) fail(where, "expected an integer, got " + describe(v));
  bool ok;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    ok = hi >= 0 && u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo;
  } else {
    ok = v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  }
  if (!ok)
    fail(where, v.dump() + " is out of range (valid: " + std::to_string(lo) + " to " +
                    std::to_string(hi) + ")");
  return v.get<int64_t>();
}

uint64_t JsonChecker::unsigned_integer(const json& v, const std::string& where) const {
  if (!v.is_number_unsigned()) fail(where, "expected a non-negative integer, got " + describe(v));
  return v.get<uint64_t>();
}

double JsonChecker::number(const json& v, const std::string& where, double lo, double hi) const {
  if (!v.is_number()) fail(where, "expected a number, got " + describe(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    fail(where,
         v.dump() + " is out of range (valid: " + json(lo).dump() + " to " + json(hi).dump() + ")");
  return x;
}

bool JsonChecker::boolean(const json& v, const std::string& where) const {
  if (!v.is_boolean()) fail(where, "expected true or false, got " + describe(v));
  return v.get<bool>();
}

std::string JsonChecker::text(const json& v, const std::string& where, bool allow_empty) const {
  if (!v.is_string()) fail(where, "expected a string, got " + describe(v));
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() > kJsonMaxText)
    fail(where, "is " + std::to_string(s.size()) + " bytes long (valid: up to " +
                    std::to_string(kJsonMaxText) + ")");
  if (!allow_empty && s.empty()) fail(where, "is empty");
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) fail(where, shown(s) + " contains a control character");
  return s;
}

std::string at(const std::string& where, const char* key) {
  return where.empty() ? key : where + "." + key;
}
std::string at(const std::string& where, size_t i) {
  return where + "[" + std::to_string(i) + "]";
}

}  // namespace shardlab
