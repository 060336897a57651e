// A communicator per mesh axis: one Gloo group for every group of the mesh
// (the ranks that differ on one axis only), so that two tensor-parallel
// groups all-reduce at once without meeting, and each collective is recorded
// with its group and the run's ranks.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "core/comm/comm.h"
#include "core/mesh.h"

namespace shardlab {

// The CommGroup of `rank`'s group on `axis`: its id and ranks as in
// Mesh::groups(), named for messages ("tp group 2 (ranks 4, 5)").
CommGroup mesh_comm_group(const Mesh& mesh, int rank, MeshAxis axis);

class MeshGlooGroups {
 public:
  // Ranks as threads (`store` null: each group rendezvous in memory), or one
  // process per rank (`store`: the run's, keys under `prefix`/<group id>;
  // `only_rank`: this process's rank, whose groups alone are made).
  MeshGlooGroups(const Mesh& mesh, const GlooGroupOptions& options,
                 gloo::rendezvous::Store* store = nullptr, const std::string& prefix = "",
                 int only_rank = -1);
  ~MeshGlooGroups();
  // `rank`'s communicator on `axis`, its rank in it being its coordinate;
  // null for an axis of size 1 or one that spans the world (the run's own
  // communicator is that group).
  std::unique_ptr<Comm> connect(int rank, MeshAxis axis, Recorder* recorder, Allocator* alloc);

 private:
  Mesh mesh_;
  std::map<int, std::unique_ptr<GlooGroup>> groups_;  // by group id; never the world's
};

}  // namespace shardlab
