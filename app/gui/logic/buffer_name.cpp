// Buffer-name parsing (see buffer_name.h). Tolerant on purpose: new strategies
// may prefix names ("fsdp.layers.3...") or add groups we do not know yet.
#include "app/gui/logic/buffer_name.h"

#include <cctype>
#include <optional>

namespace shardlab::gui {

namespace {

// Reads a non-negative integer at `pos`, advancing it; nullopt when no digit.
std::optional<int> read_int(std::string_view s, size_t& pos) {
  size_t p = pos;
  long long v = 0;
  while (p < s.size() && std::isdigit(static_cast<unsigned char>(s[p])) && v < 1000000000) {
    v = v * 10 + (s[p] - '0');
    ++p;
  }
  if (p == pos) return std::nullopt;
  pos = p;
  return static_cast<int>(v);
}

void skip_spaces(std::string_view s, size_t& pos) {
  while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// One "[...]" group's content.
void read_group(std::string_view g, BufferName& out) {
  const std::string s = lower(g);
  size_t pos = 0;
  skip_spaces(s, pos);
  auto starts = [&](std::string_view word) { return s.compare(pos, word.size(), word) == 0; };
  // The names' own words, parsed (i18n: none of them is shown).
  const HoldKind temp = [&] {
    if (starts("gather") || starts("unsharded")) return HoldKind::gathered;  // i18n: not shown
    if (starts("unreduced")) return HoldKind::unreduced;                     // i18n: not shown
    if (starts("replica")) return HoldKind::replica;                         // i18n: not shown
    return HoldKind::full;
  }();
  if (temp != HoldKind::full) {
    out.kind = temp;
    out.shard_index = 0;
    out.shard_count = 1;
    return;
  }
  if (starts("mb")) {  // i18n: not shown
    pos += 2;
    skip_spaces(s, pos);
    if (auto v = read_int(s, pos)) out.micro_batch = *v;
    return;
  }
  if (starts("shard")) {  // i18n: not shown
    pos += 5;
    skip_spaces(s, pos);
    auto a = read_int(s, pos);
    skip_spaces(s, pos);
    if (pos < s.size() && s[pos] == '/') {
      ++pos;
    } else if (s.compare(pos, 2, "of") == 0) {  // i18n: not shown
      pos += 2;
    }
    skip_spaces(s, pos);
    auto b = read_int(s, pos);
    out.kind = HoldKind::shard;
    if (a && b && *b > 0 && *a < *b) {
      out.shard_index = *a;
      out.shard_count = *b;
    } else if (a && b && *b > 0 && *a == *b) {
      out.shard_index = *b - 1;
      out.shard_count = *b;
    } else {
      out.shard_index = -1;
      out.shard_count = b && *b > 0 ? *b : 1;
    }
  }
}

}  // namespace

const char* to_string(HoldKind k) {
  switch (k) {
    case HoldKind::full:
      return "full";  // i18n: not shown (an identifier)
    case HoldKind::shard:
      return "shard";  // i18n: not shown (an identifier)
    case HoldKind::gathered:
      return "gathered";  // i18n: not shown (an identifier)
    case HoldKind::unreduced:
      return "unreduced";  // i18n: not shown (an identifier)
    case HoldKind::replica:
      return "replica";  // i18n: not shown (an identifier)
  }
  return "?";
}

double BufferName::fraction_begin() const {
  if (kind != HoldKind::shard || shard_index < 0) return 0.0;
  return static_cast<double>(shard_index) / shard_count;
}

double BufferName::fraction_end() const {
  if (kind != HoldKind::shard) return 1.0;
  if (shard_index < 0) return 1.0 / shard_count;
  return static_cast<double>(shard_index + 1) / shard_count;
}

BufferName parse_buffer_name(std::string_view name) {
  BufferName out;
  // Split off the [...] groups, wherever they are.
  std::string base;
  size_t i = 0;
  while (i < name.size()) {
    if (name[i] == '[') {
      const size_t close = name.find(']', i + 1);
      if (close == std::string_view::npos) break;  // unbalanced: keep what we have
      read_group(name.substr(i + 1, close - i - 1), out);
      i = close + 1;
    } else {
      base.push_back(name[i++]);
    }
  }
  out.base = base;
  const auto ends = [&](std::string_view suffix) {
    return base.size() >= suffix.size() &&
           base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  // i18n: not shown (suffixes parsed)
  if (ends(".grad") || base.find(".grad.") != std::string::npos)
    out.role = Role::grad;
  else if (base.find("exp_avg") != std::string::npos ||  // i18n: not shown
           base.find("momentum") != std::string::npos)
    out.role = Role::optimizer;

  // "layers.N" (or "layers.N-M") at a word boundary.
  const std::string_view b = out.base;
  // i18n: not shown (parsed)
  for (size_t p = b.find("layers."); p != std::string_view::npos; p = b.find("layers.", p + 1)) {
    if (p > 0 && (std::isalnum(static_cast<unsigned char>(b[p - 1])) || b[p - 1] == '_')) continue;
    size_t q = p + 7;
    auto first = read_int(b, q);
    if (!first) continue;
    int last = *first;
    if (q < b.size() && b[q] == '-') {
      size_t r = q + 1;
      if (auto l = read_int(b, r); l && *l >= *first) {
        last = *l;
        q = r;
      }
    }
    if (q < b.size() && b[q] != '.' && b[q] != '_') continue;  // "layers.3x" is not a layer
    out.layer = *first;
    out.layer_last = last;
    break;
  }
  return out;
}

BufferName parse_buffer_name(std::string_view name, const ParamLayers& params) {
  BufferName out = parse_buffer_name(name);
  if (out.layer >= 0) return out;
  const std::string& b = out.base;
  size_t best = 0;
  for (const auto& [param, layer] : params) {
    if (param.size() <= best || b.compare(0, param.size(), param) != 0) continue;
    if (b.size() > param.size() && b[param.size()] != '.') continue;  // "h.1" is not "h.10"
    best = param.size();
    out.layer = out.layer_last = layer;
  }
  return out;
}

}  // namespace shardlab::gui
