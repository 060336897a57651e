// The device mesh as a value: parsing, Megatron's layout, coordinates and groups.
#include <catch2/catch.hpp>

#include <set>

#include "core/config.h"
#include "core/mesh.h"

using namespace shardlab;
using Catch::Matchers::Contains;

TEST_CASE("mesh: tp innermost, pp outermost by default, as Megatron lays out ranks", "[mesh]") {
  const Mesh m = parse_mesh("dp=2,pp=2,tp=2");
  CHECK(m.text() == "pp=2,dp=2,tp=2");
  CHECK(m.world() == 8);
  // rank = tp + 2*dp + 4*pp
  CHECK(m.coord(5, MeshAxis::pp) == 1);
  CHECK(m.coord(5, MeshAxis::dp) == 0);
  CHECK(m.coord(5, MeshAxis::tp) == 1);
  CHECK(m.group_ranks(5, MeshAxis::tp) == std::vector<int>{4, 5});
  CHECK(m.group_ranks(5, MeshAxis::dp) == std::vector<int>{5, 7});
  CHECK(m.group_ranks(5, MeshAxis::pp) == std::vector<int>{1, 5});
  CHECK(m.describe(5) == "rank 5 = (pp 1, dp 0, tp 1)");
  // An axis the mesh lacks: size 1, coordinate 0, no group.
  const Mesh two = parse_mesh("tp=2,dp=3");
  CHECK(two.text() == "dp=3,tp=2");
  CHECK(two.size(MeshAxis::pp) == 1);
  CHECK(two.coord(3, MeshAxis::pp) == 0);
  CHECK(two.group_id(3, MeshAxis::pp) == -1);
}

TEST_CASE("mesh: --mesh-order lays the axes out as given, outermost first", "[mesh]") {
  const Mesh m = parse_mesh("dp=2,pp=2,tp=2", "tp,pp,dp");
  CHECK(m.text() == "tp=2,pp=2,dp=2");
  CHECK(m.group_ranks(0, MeshAxis::dp) == std::vector<int>{0, 1});
  CHECK(m.group_ranks(0, MeshAxis::tp) == std::vector<int>{0, 4});
}

TEST_CASE("mesh: every axis's groups partition the world; ids are the world, then each axis",
          "[mesh]") {
  const Mesh m = parse_mesh("dp=2,pp=2,tp=2");
  const std::vector<MeshGroup> groups = m.groups();
  REQUIRE(groups.size() == 1 + 4 + 4 + 4);
  CHECK(groups[0].ranks.size() == 8);
  for (size_t i = 0; i < groups.size(); ++i) CHECK(groups[i].id == static_cast<int>(i));
  for (MeshAxis axis : kMeshAxes) {
    std::set<int> seen;
    for (const MeshGroup& g : groups) {
      if (g.id == 0 || g.axis != axis) continue;
      CHECK(g.ranks.size() == 2);
      for (size_t c = 0; c < g.ranks.size(); ++c) {
        const int r = g.ranks[c];
        CHECK(seen.insert(r).second);
        CHECK(m.coord(r, axis) == static_cast<int>(c));
        CHECK(m.group_id(r, axis) == g.id);
        CHECK(m.group_ranks(r, axis) == g.ranks);
      }
    }
    CHECK(seen.size() == 8);
  }
  // One axis over the world is the world's group.
  const Mesh dp = one_axis_mesh(MeshAxis::dp, 4);
  CHECK(dp.groups().size() == 1);
  CHECK(dp.group_id(3, MeshAxis::dp) == 0);
  CHECK(dp.groups()[0].axis == MeshAxis::dp);
}

TEST_CASE("mesh: a bad --mesh or --mesh-order is refused in one line naming it", "[mesh]") {
  auto refused = [](const std::string& mesh, const std::string& order, const std::string& what) {
    try {
      parse_mesh(mesh, order);
      FAIL("accepted --mesh " << mesh << " --mesh-order " << order);
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Contains(what));
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
      CHECK_THAT(e.what(), Contains("valid"));
    }
  };
  refused("", "", "--mesh is empty");
  refused("dp=2,xp=2", "", "'xp=2' is not an axis=size");
  refused("dp2", "", "'dp2' is not an axis=size");
  refused("dp=0", "", "'0', is not a whole number >= 1");
  refused("dp=-1", "", "'-1', is not a whole number >= 1");
  refused("dp=2x", "", "'2x'");
  refused("dp=", "", "''");
  refused("dp=2,dp=2", "", "dp is given twice");
  refused("dp=2,", "", "'' is not an axis=size");
  refused("dp=1000,pp=1000,tp=1000", "", "more than 1000000 ranks");
  refused("dp=9999999,pp=9999999,tp=9999999", "", "more than 1000000 ranks");
  refused("dp=2", "dp,pp", "does not name every axis");
  refused("dp=2", "dp,pp,pp", "pp is given twice");
  refused("dp=2", "dp,pp,mp", "'mp' is not an axis");
}
