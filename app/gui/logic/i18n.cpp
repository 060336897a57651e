// Looks the app's words up in the table of app/gui/logic/strings_zh.cpp.
#include "app/gui/logic/i18n.h"

#include <cstdarg>
#include <cstdio>
#include <string_view>
#include <unordered_map>

namespace shardlab::gui {

namespace {

const std::unordered_map<std::string_view, const char*>& index() {
  static const std::unordered_map<std::string_view, const char*> m = [] {
    std::unordered_map<std::string_view, const char*> out;
    for (const auto& [en, zh] : string_table()) out.emplace(en, zh);
    return out;
  }();
  return m;
}

}  // namespace

const char* Tr::operator()(const char* en) const {
  if (lang == lesson::Lang::en) return en;
  const auto& m = index();
  const auto it = m.find(en);
  return it == m.end() ? en : it->second;
}

std::string Tr::join(const std::vector<std::string>& parts) const {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += i + 1 == parts.size() ? (zh() ? " 和 " : " and ") : (zh() ? "、" : ", ");
    out += parts[i];
  }
  return out;
}

std::string strf(const char* fmt, ...) {
  va_list a, b;
  va_start(a, fmt);
  va_copy(b, a);
  const int n = std::vsnprintf(nullptr, 0, fmt, a);
  va_end(a);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, b);
  va_end(b);
  return out;
}

bool has_translation(const char* en) {
  return index().count(en) > 0;
}

}  // namespace shardlab::gui
