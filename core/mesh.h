// The device mesh: the run's ranks laid out on named axes (data, pipeline,
// tensor parallel), each rank's coordinates, and the groups of ranks that
// differ on one axis only — the ranks one axis's communicator joins. A value:
// parsed from --mesh and --mesh-order, held by the run's configuration.
#pragma once
#include <array>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace shardlab {

enum class MeshAxis : uint8_t { dp, pp, tp };
inline constexpr MeshAxis kMeshAxes[] = {MeshAxis::dp, MeshAxis::pp, MeshAxis::tp};
const char* to_string(MeshAxis axis);  // "dp", "pp", "tp"
// Bytes (or any figure) per axis, indexed by MeshAxis.
using SentByAxis = std::array<double, std::size(kMeshAxes)>;

// One group of a mesh: the ranks that share every coordinate but `axis`'s, in
// the order of their coordinate on it (a rank's place in the group is its
// coordinate). Group 0 is the whole world; an axis that spans the world (a
// one-axis mesh) has that one group.
struct MeshGroup {
  int id = 0;
  MeshAxis axis = MeshAxis::dp;
  std::vector<int> ranks;  // global ranks, by coordinate on `axis`
};

class Mesh {
 public:
  Mesh() = default;
  // Axes outermost first: the last one's coordinate varies fastest with the rank.
  explicit Mesh(std::vector<std::pair<MeshAxis, int>> axes);

  int world() const;
  const std::vector<std::pair<MeshAxis, int>>& axes() const { return axes_; }
  bool has(MeshAxis axis) const;
  int size(MeshAxis axis) const;  // 1 for an axis the mesh does not have
  int coord(int rank, MeshAxis axis) const;  // 0 for an axis the mesh does not have
  // The global ranks of `rank`'s group on `axis`, by coordinate.
  std::vector<int> group_ranks(int rank, MeshAxis axis) const;
  // Every group of every axis, ids from 0: the world first (id 0), then each
  // axis outermost first, its groups by their lowest rank. An axis of size 1
  // has no group; one that spans the world is group 0.
  std::vector<MeshGroup> groups() const;
  // The id of `rank`'s group on `axis` (as in groups()); -1 for an axis of size 1.
  int group_id(int rank, MeshAxis axis) const;
  // "dp=2,pp=2,tp=2": the axes outermost first.
  std::string text() const;
  // "rank 5 = (dp 0, pp 1, tp 1)"
  std::string describe(int rank) const;

  bool operator==(const Mesh& o) const { return axes_ == o.axes_; }

 private:
  std::vector<std::pair<MeshAxis, int>> axes_;
};

// Megatron's layout: tensor parallel innermost (its ranks are neighbours, on
// one node), then data parallel, pipeline outermost (its stages cross nodes).
inline constexpr const char* kDefaultMeshOrder = "pp,dp,tp";

// --mesh "dp=2,pp=2,tp=2" (axes in any order, each at most once, sizes >= 1)
// laid out by `order`, the axes outermost first ("pp,dp,tp"; empty: the
// default). Throws ConfigError naming the bad part and what would be valid.
Mesh parse_mesh(const std::string& text, const std::string& order = "");
// The mesh of one axis over `world` ranks (today's strategies: ddp's dp=W).
Mesh one_axis_mesh(MeshAxis axis, int world);

}  // namespace shardlab
