// The device mesh as a value: parsing, Megatron's layout, coordinates and groups.
#include <catch2/catch.hpp>

#include <set>
#include <stdexcept>
#include <thread>

#include "core/comm/comm_common.h"
#include "core/comm/mesh_comms.h"
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

TEST_CASE("mesh: every axis's groups partition the world, ids are the world then each axis",
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

TEST_CASE("mesh: each axis's groups all-reduce at once without meeting, spans name the group and "
          "the run's ranks",
          "[mesh][comm]") {
  const Mesh mesh = parse_mesh("dp=2,tp=2");  // rank = tp + 2*dp
  const int world = mesh.world();
  GlooGroupOptions options;
  options.timeout = std::chrono::milliseconds(20000);
  MeshGlooGroups groups(mesh, options);
  std::vector<std::shared_ptr<Recorder>> recs;
  for (int r = 0; r < world; ++r) recs.push_back(std::make_shared<Recorder>(r, true));
  std::vector<float> tp_sum(world), dp_sum(world), got(world, -1);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Comm> tp = groups.connect(r, MeshAxis::tp, recs[r].get(), nullptr);
        std::unique_ptr<Comm> dp = groups.connect(r, MeshAxis::dp, recs[r].get(), nullptr);
        // (Checked here without Catch, which is not thread-safe: after the join.)
        if (!tp || !dp) throw std::runtime_error("no tp or dp communicator");
        if (tp->rank() != mesh.coord(r, MeshAxis::tp)) throw std::runtime_error("tp rank");
        if (dp->world() != 2) throw std::runtime_error("dp world");
        float x = static_cast<float>(r + 1);
        tp->all_reduce(&x, 1, DType::f32);
        tp_sum[r] = x;
        float y = static_cast<float>(10 * (r + 1));
        dp->all_reduce(&y, 1, DType::f32);
        dp_sum[r] = y;
        // Within each tp group: its rank 0 sends to its rank 1.
        float msg = static_cast<float>(100 + r);
        if (tp->rank() == 0)
          tp->send(&msg, sizeof msg, 1, 7);
        else
          tp->recv(&got[r], sizeof(float), 0, 7);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) CHECK(errors[r].empty());
  // tp groups {0,1} and {2,3}; dp groups {0,2} and {1,3}.
  CHECK(tp_sum == std::vector<float>{3, 3, 7, 7});
  CHECK(dp_sum == std::vector<float>{40, 60, 40, 60});
  CHECK(got[1] == 100);
  CHECK(got[3] == 102);
  for (int r = 0; r < world; ++r) {
    std::set<int> seen_groups;
    for (const Span& s : recs[r]->snapshot().spans) {
      if (s.lane != Lane::comm) continue;
      seen_groups.insert(s.group);
      if (s.kind == SpanKind::all_reduce)
        CHECK((s.group == mesh.group_id(r, MeshAxis::tp) ||
               s.group == mesh.group_id(r, MeshAxis::dp)));
      if (s.kind == SpanKind::send || s.kind == SpanKind::recv) {
        CHECK(s.group == mesh.group_id(r, MeshAxis::tp));
        CHECK(s.peer == (r % 2 == 0 ? r + 1 : r - 1));  // the run's rank, not the group's
        CHECK(s.flow_id == p2p_flow_id(r - r % 2, r - r % 2 + 1, 1));
      }
    }
    CHECK(seen_groups.size() == 2);
    CHECK(seen_groups.count(0) == 0);
  }
}

TEST_CASE("mesh: a group's comm names the group and the run's ranks in its errors", "[mesh][comm]") {
  const Mesh mesh = parse_mesh("dp=2,tp=2");
  const CommGroup g = mesh_comm_group(mesh, 3, MeshAxis::tp);
  CHECK(g.name == "tp group " + std::to_string(mesh.group_id(3, MeshAxis::tp)) + " (ranks 2, 3)");
  CHECK(g.global(0) == 2);
  const FailureBoard board;
  const CommErrors errors(1, std::chrono::milliseconds(5), board, g);
  OpInfo op{SpanKind::recv, 4, {}, 0, 7};
  const std::string msg = errors.timed_out(op, 0);
  CHECK_THAT(msg, Contains("rank 3 in " + g.name + ": recv of 4 bytes"));
  CHECK_THAT(msg, Contains("waiting for rank 2"));
  // The world's: no group named.
  CHECK(mesh_comm_group(one_axis_mesh(MeshAxis::dp, 4), 1, MeshAxis::dp).id == 0);
}
