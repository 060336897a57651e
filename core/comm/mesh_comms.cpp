// A communicator per mesh axis (see mesh_comms.h).
#include "core/comm/mesh_comms.h"

namespace shardlab {

CommGroup mesh_comm_group(const Mesh& mesh, int rank, MeshAxis axis) {
  CommGroup g;
  g.id = mesh.group_id(rank, axis);
  if (g.id <= 0) return CommGroup{};  // the world (or no group: an axis of size 1)
  g.ranks = mesh.group_ranks(rank, axis);
  g.name = std::string(to_string(axis)) + " group " + std::to_string(g.id) + " (ranks ";
  for (size_t i = 0; i < g.ranks.size(); ++i)
    g.name += (i ? ", " : "") + std::to_string(g.ranks[i]);
  g.name += ")";
  return g;
}

MeshGlooGroups::MeshGlooGroups(const Mesh& mesh, const GlooGroupOptions& options,
                               gloo::rendezvous::Store* store, const std::string& prefix,
                               int only_rank)
    : mesh_(mesh) {
  for (const MeshGroup& g : mesh.groups()) {
    if (g.id == 0) continue;
    if (only_rank >= 0 && mesh.group_id(only_rank, g.axis) != g.id) continue;
    const int n = static_cast<int>(g.ranks.size());
    groups_[g.id] = store ? std::make_unique<GlooGroup>(n, options, *store,
                                                        prefix + "/" + std::to_string(g.id))
                          : std::make_unique<GlooGroup>(n, options);
  }
}

MeshGlooGroups::~MeshGlooGroups() = default;

std::unique_ptr<Comm> MeshGlooGroups::connect(int rank, MeshAxis axis, Recorder* recorder,
                                              Allocator* alloc) {
  const CommGroup g = mesh_comm_group(mesh_, rank, axis);
  if (g.id <= 0) return nullptr;
  const auto it = groups_.find(g.id);
  if (it == groups_.end())
    throw CommError("rank " + std::to_string(rank) + ": " + g.name +
                    " was not made in this process");
  return it->second->connect(mesh_.coord(rank, axis), recorder, alloc, g);
}

}  // namespace shardlab
