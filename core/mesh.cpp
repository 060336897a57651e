// The device mesh: parsing --mesh and --mesh-order, coordinates and groups.
#include "core/mesh.h"

#include <algorithm>
#include <stdexcept>

#include "core/config.h"

namespace shardlab {

const char* to_string(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::dp:
      return "dp";
    case MeshAxis::pp:
      return "pp";
    case MeshAxis::tp:
      return "tp";
  }
  return "?";
}

namespace {

bool axis_named(const std::string& name, MeshAxis& out) {
  for (MeshAxis a : kMeshAxes)
    if (name == to_string(a)) {
      out = a;
      return true;
    }
  return false;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (;;) {
    const size_t end = s.find(sep, begin);
    out.push_back(s.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return out;
    begin = end + 1;
  }
}

}  // namespace

Mesh::Mesh(std::vector<std::pair<MeshAxis, int>> axes) : axes_(std::move(axes)) {}

int Mesh::world() const {
  int w = 1;
  for (const auto& [axis, n] : axes_) w *= n;
  return w;
}

bool Mesh::has(MeshAxis axis) const {
  return std::any_of(axes_.begin(), axes_.end(), [&](const auto& a) { return a.first == axis; });
}

int Mesh::size(MeshAxis axis) const {
  for (const auto& [a, n] : axes_)
    if (a == axis) return n;
  return 1;
}

int Mesh::coord(int rank, MeshAxis axis) const {
  // The last axis varies fastest: divide by the sizes of the axes inside this one.
  int inner = 1;
  for (auto it = axes_.rbegin(); it != axes_.rend(); ++it) {
    if (it->first == axis) return (rank / inner) % it->second;
    inner *= it->second;
  }
  return 0;
}

std::vector<int> Mesh::group_ranks(int rank, MeshAxis axis) const {
  int inner = 1;
  for (auto it = axes_.rbegin(); it != axes_.rend() && it->first != axis; ++it) inner *= it->second;
  const int n = size(axis);
  const int first = rank - coord(rank, axis) * inner;
  std::vector<int> ranks(n);
  for (int c = 0; c < n; ++c) ranks[c] = first + c * inner;
  return ranks;
}

std::vector<MeshGroup> Mesh::groups() const {
  const int w = world();
  std::vector<int> all(w);
  for (int r = 0; r < w; ++r) all[r] = r;
  std::vector<MeshGroup> out{{0, axes_.empty() ? MeshAxis::dp : axes_.front().first, all}};
  for (const auto& [axis, n] : axes_) {
    if (n == 1) continue;
    if (n == w) {
      out.front().axis = axis;
      continue;
    }
    for (int r = 0; r < w; ++r)
      if (coord(r, axis) == 0)
        out.push_back({static_cast<int>(out.size()), axis, group_ranks(r, axis)});
  }
  return out;
}

int Mesh::group_id(int rank, MeshAxis axis) const {
  const int n = size(axis);
  if (n == 1) return -1;
  if (n == world()) return 0;
  const int lowest = group_ranks(rank, axis).front();
  for (const MeshGroup& g : groups())
    if (g.id != 0 && g.axis == axis && g.ranks.front() == lowest) return g.id;
  return -1;
}

std::string Mesh::text() const {
  std::string s;
  for (const auto& [axis, n] : axes_)
    s += (s.empty() ? "" : ",") + std::string(to_string(axis)) + "=" + std::to_string(n);
  return s;
}

std::string Mesh::describe(int rank) const {
  std::string s = "rank " + std::to_string(rank) + " = (";
  for (size_t i = 0; i < axes_.size(); ++i)
    s += (i ? ", " : "") + std::string(to_string(axes_[i].first)) + " " +
         std::to_string(coord(rank, axes_[i].first));
  return s + ")";
}

Mesh parse_mesh(const std::string& text, const std::string& order_text) {
  const std::string valid = " (valid: axes dp, pp and tp, each at most once, as axis=size with "
                            "size >= 1, separated by commas: dp=2,pp=2,tp=2)";
  if (text.empty()) throw ConfigError("--mesh is empty" + valid);
  std::vector<std::pair<MeshAxis, int>> given;
  for (const std::string& part : split(text, ',')) {
    const size_t eq = part.find('=');
    MeshAxis axis{};
    if (eq == std::string::npos || !axis_named(part.substr(0, eq), axis))
      throw ConfigError("--mesh " + text + ": '" + part + "' is not an axis=size" + valid);
    const std::string num = part.substr(eq + 1);
    long n = 0;
    const bool digits = !num.empty() && num.size() <= 7 &&
                        std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) n = std::stol(num);
    if (!digits || n < 1)
      throw ConfigError("--mesh " + text + ": the size of " + to_string(axis) + ", '" + num +
                        "', is not a whole number >= 1" + valid);
    for (const auto& g : given)
      if (g.first == axis)
        throw ConfigError("--mesh " + text + ": " + to_string(axis) + " is given twice" + valid);
    given.emplace_back(axis, static_cast<int>(n));
  }
  const std::string order = order_text.empty() ? kDefaultMeshOrder : order_text;
  const std::string order_valid = " (valid: dp, pp and tp, each once, outermost first; default " +
                                  std::string(kDefaultMeshOrder) + ")";
  std::vector<MeshAxis> layout;
  for (const std::string& name : split(order, ',')) {
    MeshAxis axis{};
    if (!axis_named(name, axis))
      throw ConfigError("--mesh-order " + order + ": '" + name + "' is not an axis" + order_valid);
    if (std::find(layout.begin(), layout.end(), axis) != layout.end())
      throw ConfigError("--mesh-order " + order + ": " + to_string(axis) + " is given twice" +
                        order_valid);
    layout.push_back(axis);
  }
  if (layout.size() != std::size(kMeshAxes))
    throw ConfigError("--mesh-order " + order + " does not name every axis" + order_valid);
  std::vector<std::pair<MeshAxis, int>> axes;
  for (MeshAxis a : layout)
    for (const auto& g : given)
      if (g.first == a) axes.push_back(g);
  int64_t world = 1;  // checked as it grows: three sizes' product can pass an int
  for (const auto& g : given) {
    world *= g.second;
    if (world > kMaxPredictWorld)
      throw ConfigError("--mesh " + text + " has more than " + std::to_string(kMaxPredictWorld) +
                        " ranks (valid: a product of sizes up to " +
                        std::to_string(kMaxPredictWorld) + ")");
  }
  return Mesh(std::move(axes));
}

Mesh one_axis_mesh(MeshAxis axis, int world) {
  return Mesh({{axis, world}});
}

}  // namespace shardlab
