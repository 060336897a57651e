// Reading JSON that may be hostile (recordings, traces, checkpoint manifests):
// every value checked for type and range, every failure one line naming the
// file, where in it and what would be valid.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.h"

namespace shardlab {

// Names, summaries and dates longer than this are refused.
inline constexpr size_t kJsonMaxText = 4096;

// A value from the file inside a one-line message: control characters escaped,
// long values cut.
std::string shown(const std::string& s);
// "the string 'x'", "42", "an array": what was found instead.
std::string describe(const nlohmann::json& v);

// Every check goes through here: the file, where in it, what is wrong.
class JsonChecker {
 public:
  // `kind` names the file in messages: "recording", "trace", "checkpoint manifest".
  explicit JsonChecker(std::string file, std::string kind = "recording")
      : file_(std::move(file)), kind_(std::move(kind)) {}

  // Throws ConfigError "KIND 'FILE': WHERE: WHAT".
  [[noreturn]] void fail(const std::string& where, const std::string& what) const;

  // `v` must be an object with exactly these keys: `want` must all be there,
  // `optional` may be (fields added since a format began, so older files load).
  void keys(const nlohmann::json& v, const std::string& where, const std::vector<const char*>& want,
            const std::vector<const char*>& optional = {}) const;
  const nlohmann::json& array(const nlohmann::json& v, const std::string& where,
                              size_t min_size = 0,
                              size_t max_size = std::numeric_limits<size_t>::max()) const;
  int64_t integer(const nlohmann::json& v, const std::string& where, int64_t lo, int64_t hi) const;
  uint64_t unsigned_integer(const nlohmann::json& v, const std::string& where) const;
  // A finite number in [lo, hi]: NaN cannot even be written in JSON, and
  // infinities or overflowed literals are refused here.
  double number(const nlohmann::json& v, const std::string& where, double lo, double hi) const;
  bool boolean(const nlohmann::json& v, const std::string& where) const;
  // One line of text (it may end up in a status line or a message).
  std::string text(const nlohmann::json& v, const std::string& where,
                   bool allow_empty = true) const;

  // A name from a fixed list of N, e.g. a span kind: to_string(E) gives each.
  template <typename E, int N>
  E name(const nlohmann::json& v, const std::string& where, const char* what) const {
    if (!v.is_string())
      fail(where, std::string("expected a ") + what + " name, got " + describe(v));
    const std::string& s = v.get_ref<const std::string&>();
    std::string valid;
    for (int i = 0; i < N; ++i) {
      const char* n = to_string(static_cast<E>(i));
      if (s == n) return static_cast<E>(i);
      valid += std::string(i ? ", " : "") + n;
    }
    fail(where, shown(s) + " is not a " + what + " (valid: " + valid + ")");
  }

 private:
  std::string file_;
  std::string kind_;
};

// Where a value is, for messages: "config.optimizer", "ranks[2]".
std::string at(const std::string& where, const char* key);
std::string at(const std::string& where, size_t i);

}  // namespace shardlab
