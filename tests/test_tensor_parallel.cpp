// Tensor parallelism on a device mesh (the tp axis): the MLP's layers cut in
// column-then-row pairs, each tp rank initialised with its slice of the whole
// model's seeded weights; every mesh ends with `single`'s weights, the tp
// group carries exactly the all-reduces Megatron's f and g say, and a model
// that cannot be cut is refused in one line.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <map>
#include <set>
#include <tuple>

#include "core/comm/meta_comm.h"
#include "core/device/meta_backend.h"
#include "core/mesh.h"
#include "core/model/layer_stack.h"
#include "core/model/param_source.h"
#include "core/parallel/model_state.h"
#include "core/parallel/pipeline.h"
#include "core/parallel/strategy.h"
#include "core/predict/meta_memory.h"
#include "core/run/runner.h"
#include "tests/run_util.h"

using namespace shardlab;
using shardlab::test::max_rel_diff;
using shardlab::test::run_cli;

namespace {
ModelSpec mlp(const std::string& name) {
  return ModelSpec::parse(name);
}
}  // namespace

TEST_CASE("tensor parallel: an mlp slice cuts column layers on rows, row layers on columns",
          "[tp]") {
  const ModelLayout full(mlp("mlp:3x8+bn"));
  const ModelLayout s(mlp("mlp:3x8+bn"), TensorSlice{2, 1});
  REQUIRE(s.tensor_parallel());
  REQUIRE(s.params().size() == full.params().size());
  // layers.0: column (weight [4, 8], bias and BatchNorm [4]); layers.1: row
  // (weight [8, 4], bias whole); layers.2, the odd last one: whole.
  CHECK(s.weight(0).shape == std::vector<int64_t>{4, 8});
  CHECK(s.weight(0).split_dim == 0);
  CHECK(s.bias(0).shape == std::vector<int64_t>{4});
  CHECK(s.bn_weight(0).shape == std::vector<int64_t>{4});
  CHECK(s.weight(1).shape == std::vector<int64_t>{8, 4});
  CHECK(s.weight(1).split_dim == 1);
  CHECK(s.bias(1).split_dim == -1);
  CHECK(s.bn_weight(1).split_dim == -1);
  CHECK(s.weight(2).shape == std::vector<int64_t>{8, 8});
  CHECK(s.running_mean(0).shape == std::vector<int64_t>{4});
  CHECK(s.running_mean(1).shape == std::vector<int64_t>{8});
  for (size_t i = 0; i < s.params().size(); ++i) {
    CHECK(s.params()[i].full_shape == full.params()[i].shape);
    CHECK(s.params()[i].full_offset == full.params()[i].offset);
  }
  CHECK(s.full_state_total() == full.state_total());
  // The boundary after the column layer carries this rank's 4 features.
  CHECK(s.act_numel(1) == 4);
  CHECK(s.act_numel(2) == 8);

  // The slices' runs cover every split value of the full vector exactly once,
  // and a replicated value once per slice.
  std::vector<int> seen(full.state_total(), 0);
  for (int r = 0; r < 2; ++r) {
    const ModelLayout slice(mlp("mlp:3x8+bn"), TensorSlice{2, r});
    size_t covered = 0;
    for_each_slice_run(slice, [&](size_t at, size_t full_at, size_t n) {
      CHECK(at == covered);  // in order, no gap
      covered += n;
      for (size_t i = 0; i < n; ++i) ++seen[full_at + i];
    });
    CHECK(covered == slice.state_total());
  }
  for (const auto* list : {&full.params(), &full.buffers()})
    for (const ParamInfo& p : *list) {
      const bool whole = [&] {
        for (const auto* sl : {&s.params(), &s.buffers()})
          for (const ParamInfo& q : *sl)
            if (q.name == p.name) return q.split_dim < 0;
        return true;
      }();
      for (size_t i = 0; i < p.numel; ++i) {
        INFO(p.name << "[" << i << "]");
        REQUIRE(seen[p.offset + i] == (whole ? 2 : 1));
      }
    }

  // SlicedParams reads each value from where the run says.
  std::vector<float> flat(full.state_total());
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<float>(i);
  const FlatParams source(flat);
  const SlicedParams sliced(source, s);
  REQUIRE(sliced.size() == s.state_total());
  std::vector<float> got(s.state_total());
  sliced.read(got.data(), 0, got.size());
  // layers.0.weight row 0 of slice 1 is the full weight's row 4.
  CHECK(got[s.weight(0).offset] == flat[full.weight(0).offset + 4 * 8]);
  // layers.1.weight row 2, column 0 of slice 1 is the full weight's [2, 4].
  CHECK(got[s.weight(1).offset + 2 * 4] == flat[full.weight(1).offset + 2 * 8 + 4]);
  CHECK(sliced.value(s.bias(1).offset + 3) == flat[full.bias(1).offset + 3]);
  // A read across runs matches the value-by-value reads.
  std::vector<float> part(7);
  sliced.read(part.data(), s.weight(1).offset + 2, part.size());
  for (size_t i = 0; i < part.size(); ++i) CHECK(part[i] == got[s.weight(1).offset + 2 + i]);
}

TEST_CASE("tensor parallel: meshes with a tp axis train the mlp to single's weights",
          "[tp][mesh]") {
  // The row layers' all-reduce sums T partial products where single sums one:
  // reduction-order noise, which AdamW's division by small gradients lets grow.
  for (const auto& [model, opt, tol] : {std::tuple{"mlp:4x32", OptimizerKind::sgd, 2e-5},
                                        std::tuple{"mlp:5x32", OptimizerKind::adamw, 1e-4},
                                        std::tuple{"mlp:4x32+bn", OptimizerKind::sgd, 2e-5}}) {
    const bool bn = std::string(model).find("+bn") != std::string::npos;
    RunConfig base = test::small_run(model, "single", 1, 16, 5, opt, 6);
    const RunResult ref = run_training(base);
    struct Case {
      std::string strategy, mesh;
      int M;
    };
    std::vector<Case> cases = {
        {"gpipe", "tp=2", 1},
        {"gpipe", "tp=4", 2},
        {"1f1b", "pp=2,tp=2", 4},
        {"naive-mp", "pp=2,tp=2", 1},
    };
    if (!bn) {  // replicas would keep their own BatchNorm statistics (refused)
      cases.push_back({"gpipe", "dp=2,tp=2", 2});
      cases.push_back({"1f1b", "dp=2,pp=2,tp=2", 2});
    }
    for (const Case& k : cases) {
      RunConfig c = base;
      c.strategy = k.strategy;
      c.mesh = k.mesh;
      c.world = parse_mesh(k.mesh, "").world();
      // BatchNorm normalises over one forward call's rows: single's whole batch.
      c.micro_batches = bn ? 1 : k.M;
      INFO(model << " " << to_string(opt) << " " << k.strategy << " --mesh " << k.mesh
                 << " M=" << k.M);
      const RunResult r = run_training(c);
      REQUIRE(r.final_params.size() == ref.final_params.size());
      REQUIRE(max_rel_diff(r.final_params, ref.final_params) < tol);
      for (int s = 0; s < c.steps; ++s) REQUIRE(r.losses[s] == Approx(ref.losses[s]).epsilon(1e-5));
    }
  }
}

TEST_CASE("tensor parallel: the tp group carries one all-reduce of [rows, D] per pair each way",
          "[tp][mesh]") {
  // mlp:4x32 on pp=2,tp=2, 2 micro-batches of 4 rows: stage 0 holds layers 0
  // (column) and 1 (row), stage 1 layers 2 and 3. Forward: each row layer's
  // g all-reduces its output. Backward: each column layer's f all-reduces its
  // input's gradient — but the model's first layer, whose input has none.
  RunConfig c = test::small_run("mlp:4x32", "gpipe", 4, 8, 3, OptimizerKind::adamw, 2);
  c.mesh = "pp=2,tp=2";
  c.micro_batches = 2;
  const Mesh mesh = run_mesh(c);
  const RunResult r = run_training(c);
  const int64_t one = 4 * 32 * 4;  // a micro-batch's [rows, D] in fp32
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    const int stage = mesh.coord(rank, MeshAxis::pp);
    int64_t forward = 0, backward = 0, sent = 0;
    for (const Span& s : r.recorders[rank]->snapshot().spans) {
      if (s.lane != Lane::comm || s.step != 1) continue;
      if (s.kind == SpanKind::all_reduce) {
        CHECK(s.group == mesh.group_id(rank, MeshAxis::tp));
        CHECK(s.bytes == one);
        (s.layer % 2 == 1 ? forward : backward) += s.bytes;
      }
      if (s.kind == SpanKind::send) {
        CHECK(s.group == mesh.group_id(rank, MeshAxis::pp));
        sent += s.bytes;
      }
    }
    CHECK(forward == 2 * one);                      // one row layer, two micro-batches
    CHECK(backward == (stage == 0 ? 0 : 2 * one));  // layer 0's input has no gradient
    CHECK(sent == 2 * one);  // the boundary after a row layer: whole [rows, D]
  }
  // The meta run predicts the same traffic on every rank.
  const MetaMemory m = predict_memory_meta(c);
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    CHECK(m.ranks[rank].bytes_sent_per_step == r.ranks[rank].bytes_sent_per_step);
    CHECK(m.ranks[rank].at_report.device.peak_total >= r.ranks[rank].memory.device.peak_total);
  }
  // Each tp rank holds half of each split layer: the stage's parameters halve
  // but for the row layer's bias, which both keep whole.
  const ModelLayout layout = make_layout(c);
  const int64_t stage_full = static_cast<int64_t>(layout.layer_begin(2));
  CHECK(r.ranks[0].memory.device.peak[static_cast<size_t>(MemCategory::params)] ==
        (stage_full / 2 + 32 / 2) * 4);
}

TEST_CASE("tensor parallel: a model or mesh that cannot be cut is refused in one line, exit 2",
          "[tp][mesh][cli]") {
  auto refused = [&](const std::string& args, const std::string& part) {
    test::expect_refused("run --batch 8 --steps 1 " + args, part);
  };
  refused("--model mlp:4x30 --strategy gpipe --world 4 --mesh tp=4",
          "tp=4 does not divide the width 30 of mlp:4x30");
  refused("--model mlp:1x32 --strategy gpipe --world 2 --mesh tp=2",
          "mlp:1x32 has one layer, which tensor parallelism would not split");
  refused("--model gpt:2x32x2 --strategy gpipe --world 4 --mesh tp=4",
          "tp=4 does not divide the 2 heads of gpt:2x32x2");
  refused("--model gpt:2x32x2 --seq 9 --strategy gpipe --world 2 --mesh tp=2 --sequence-parallel",
          "--sequence-parallel: tp=2 does not divide --seq 9");
  refused("--model gpt:2x32x2 --strategy gpipe --world 2 --mesh pp=2 --sequence-parallel",
          "--mesh pp=2 has no tp axis");
  refused("--model mlp:4x32 --strategy gpipe --world 2 --mesh tp=2 --sequence-parallel",
          "--sequence-parallel is invalid for model mlp:4x32");
}

TEST_CASE("tensor parallel: a gpt slice holds q, k and v of its heads, and the projections' inputs",
          "[tp][gpt]") {
  ModelSpec spec = ModelSpec::parse("gpt:1x4x2");
  spec.seq = 3;
  spec.vocab = 5;
  const ModelLayout full(spec);
  const ModelLayout s(spec, TensorSlice{2, 1});
  auto find = [](const ModelLayout& m, const std::string& name) -> const ParamInfo& {
    for (const ParamInfo& p : m.params())
      if (p.name == name) return p;
    FAIL("no " << name);
    throw std::logic_error("unreachable");
  };
  const ParamInfo& qkv = find(s, "transformer.h.0.attn.c_attn.weight");
  CHECK(qkv.shape == std::vector<int64_t>{6, 4});
  CHECK(qkv.split_parts == 3);
  CHECK(find(s, "transformer.h.0.attn.c_proj.weight").shape == std::vector<int64_t>{4, 2});
  CHECK(find(s, "transformer.h.0.mlp.c_fc.weight").shape == std::vector<int64_t>{8, 4});
  CHECK(find(s, "transformer.h.0.mlp.c_proj.weight").shape == std::vector<int64_t>{4, 8});
  // The vocabulary of 5 is padded to 6: slice 1 holds ids 3 and 4, then a
  // row of padding; the tied lm_head the same rows.
  for (const char* name : {"transformer.wte.weight", "lm_head.weight"}) {
    INFO(name);
    CHECK(find(s, name).shape == std::vector<int64_t>{3, 4});
    CHECK(find(s, name).full_shape == std::vector<int64_t>{5, 4});
    CHECK(find(s, name).split_pad == 1);
  }
  CHECK(find(s, "lm_head.weight").tied_to == 0);
  CHECK(s.act_shape(s.num_layers()) == std::vector<int64_t>{3, 3});  // [T, this slice's vocabulary]
  // Slice 1 of c_attn holds rows 2-3 of q, of k and of v: full rows 2, 3, 6, 7, 10, 11.
  std::vector<float> flat(full.state_total());
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<float>(i);
  const FlatParams source(flat);
  const SlicedParams sliced(source, s);
  const size_t base = find(full, "transformer.h.0.attn.c_attn.weight").offset;
  const int rows[] = {2, 3, 6, 7, 10, 11};
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) {
      INFO("row " << i << " col " << j);
      CHECK(sliced.value(qkv.offset + static_cast<size_t>(i * 4 + j)) ==
            flat[base + static_cast<size_t>(rows[i] * 4 + j)]);
    }
  // The vocabulary slice reads ids 3 and 4, and zeros for the padding, also in
  // a read that runs on past it into wpe.
  const ParamInfo& wte = find(s, "transformer.wte.weight");
  std::vector<float> got(wte.numel + 4);
  sliced.read(got.data(), wte.offset, got.size());
  for (size_t i = 0; i < 8; ++i)
    CHECK(got[i] == flat[find(full, "transformer.wte.weight").offset + 12 + i]);
  for (size_t i = 8; i < 12; ++i) CHECK(got[i] == 0.0f);
  for (size_t i = 12; i < 16; ++i)
    CHECK(got[i] == flat[find(full, "transformer.wpe.weight").offset + i - 12]);
  // Slice 0's runs and slice 1's cover every full value of wte once.
  size_t covered = 0;
  for (int r = 0; r < 2; ++r)
    for_each_slice_run(ModelLayout(spec, TensorSlice{2, r}), [&](size_t, size_t full_at, size_t n) {
      if (full_at < static_cast<size_t>(5 * 4)) covered += n;
    });
  CHECK(covered == 5u * 4u);
}

TEST_CASE("tensor parallel: the gpt on tp meshes trains to single's weights", "[tp][gpt][mesh]") {
  for (const char* attention : {"naive", "flash"}) {
    RunConfig base = test::small_run("gpt:2x32x4", "single", 1, 8, 5, OptimizerKind::adamw, 5);
    base.seq = 8;
    base.attention = attention;
    const RunResult ref = run_training(base);
    struct Case {
      std::string strategy, mesh;
      int M;
    };
    for (const Case& k : {Case{"gpipe", "tp=2", 1}, Case{"gpipe", "tp=4", 2},
                          Case{"1f1b", "pp=2,tp=2", 2}, Case{"gpipe", "dp=2,tp=2", 2}}) {
      RunConfig c = base;
      c.strategy = k.strategy;
      c.mesh = k.mesh;
      c.world = parse_mesh(k.mesh, "").world();
      c.micro_batches = k.M;
      INFO(attention << " " << k.strategy << " --mesh " << k.mesh << " M=" << k.M);
      const RunResult r = run_training(c);
      REQUIRE(r.final_params.size() == ref.final_params.size());
      REQUIRE(max_rel_diff(r.final_params, ref.final_params) < 1e-4);
      for (int s = 0; s < c.steps; ++s) REQUIRE(r.losses[s] == Approx(ref.losses[s]).epsilon(1e-5));
    }
  }
}

TEST_CASE(
    "vocabulary parallel: the 719-character vocabulary, padded, trains as single for 10 steps",
    "[tp][gpt][mesh]") {
  // SGD: AdamW divides by each gradient's own size, so a gradient that is 0
  // up to rounding (c_attn's key bias: softmax ignores a shift shared by every
  // key) takes steps of ±lr whose signs are the rounding's; 10 such steps part
  // runs by 1e-3 whatever the strategy. SGD keeps the rounding at its size.
  RunConfig base = test::small_run("gpt:1x32x4", "single", 1, 8, 3, OptimizerKind::sgd, 10);
  base.seq = 8;
  const ModelLayout whole = make_layout(base);
  REQUIRE(whole.spec().vocab == 719);  // prime: every tp > 1 pads
  const RunResult ref = run_training(base);
  for (const int tp : {2, 4}) {
    const ModelLayout last(whole.spec(), TensorSlice{tp, tp - 1});
    CHECK(last.params()[0].split_pad == 1);  // 720 rows: 360 or 180 a rank
    CHECK(last.params()[0].shape[0] == 720 / tp);
    RunConfig c = base;
    c.strategy = "gpipe";
    c.mesh = "tp=" + std::to_string(tp);
    c.world = tp;
    INFO("tp " << tp);
    const RunResult r = run_training(c);
    // The export holds the 719 real rows: the padding never leaves the ranks.
    REQUIRE(r.final_params.size() == ref.final_params.size());
    CHECK(max_rel_diff(r.final_params, ref.final_params) < 1e-6);
    for (int s = 0; s < c.steps; ++s) CHECK(r.losses[s] == Approx(ref.losses[s]).epsilon(1e-6));
  }
}

TEST_CASE("tensor parallel: a gpt block all-reduces b·s·h twice forward and twice backward",
          "[tp][gpt][mesh]") {
  RunConfig c = test::small_run("gpt:2x32x2", "gpipe", 2, 4, 3, OptimizerKind::adamw, 2);
  c.seq = 8;
  c.mesh = "tp=2";
  c.micro_batches = 2;
  const RunResult r = run_training(c);
  const int64_t one = 2 * 8 * 32 * 4;  // a micro-batch's [rows, T, C] in fp32
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    std::map<int, int> per_block, gathers;
    for (const Span& s : r.recorders[rank]->snapshot().spans) {
      if (s.lane != Lane::comm || s.step != 1) continue;
      if (s.kind == SpanKind::all_gather) {
        // The cross-entropy's 3 floats a token from each of the 2 slices.
        CHECK(s.bytes == 2 * (2 * 8) * 3 * 4);
        ++gathers[s.layer];
        continue;
      }
      REQUIRE(s.kind == SpanKind::all_reduce);
      CHECK(s.bytes == one);
      ++per_block[s.layer];
    }
    // Per micro-batch (2): blocks (layers 1 and 2) 2 forward + 2 backward; the
    // vocabulary-parallel embedding (layer 0) sums its slices forward, and the
    // head (layer 3) ln_f's input gradient backward.
    CHECK(per_block == std::map<int, int>{{0, 2}, {1, 8}, {2, 8}, {3, 2}});
    CHECK(gathers == std::map<int, int>{{3, 2}});
  }
}

TEST_CASE("sequence parallel: the gpt trains to single's weights and plain tp's",
          "[tp][sp][gpt][mesh]") {
  for (const char* attention : {"naive", "flash"}) {
    RunConfig base = test::small_run("gpt:2x32x4", "single", 1, 8, 5, OptimizerKind::adamw, 5);
    base.seq = 8;
    base.attention = attention;
    const RunResult ref = run_training(base);
    struct Case {
      std::string strategy, mesh;
      int M;
    };
    for (const Case& k : {Case{"gpipe", "tp=2", 1}, Case{"gpipe", "tp=4", 2},
                          Case{"1f1b", "pp=2,tp=2", 2}, Case{"gpipe", "dp=2,tp=2", 2}}) {
      RunConfig c = base;
      c.strategy = k.strategy;
      c.mesh = k.mesh;
      c.world = parse_mesh(k.mesh, "").world();
      c.micro_batches = k.M;
      INFO(attention << " " << k.strategy << " --mesh " << k.mesh << " M=" << k.M);
      const RunResult plain = run_training(c);
      c.sequence_parallel = true;
      const RunResult sp = run_training(c);
      REQUIRE(sp.final_params.size() == ref.final_params.size());
      CHECK(max_rel_diff(sp.final_params, ref.final_params) < 1e-4);
      CHECK(max_rel_diff(sp.final_params, plain.final_params) < 1e-4);
      for (int s = 0; s < c.steps; ++s) CHECK(sp.losses[s] == Approx(ref.losses[s]).epsilon(1e-5));
    }
  }
}

TEST_CASE("sequence parallel: reduce-scatters and all-gathers in place of the all-reduces",
          "[tp][sp][gpt][mesh]") {
  RunConfig c = test::small_run("gpt:2x32x2", "gpipe", 2, 4, 3, OptimizerKind::adamw, 2);
  c.seq = 8;
  c.mesh = "tp=2";
  c.micro_batches = 2;
  c.sequence_parallel = true;
  const RunResult r = run_training(c);
  const int64_t one = 2 * 8 * 32 * 4;  // a micro-batch's [rows, T, C] in fp32, every token
  using Count = std::map<std::pair<int, SpanKind>, int>;
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    Count n;
    for (const Span& s : r.recorders[rank]->snapshot().spans) {
      if (s.lane != Lane::comm || s.step != 1) continue;
      ++n[{s.layer, s.kind}];
      // A LayerNorm's weight or bias gradient (C values), the cross-entropy's
      // 3 floats a token from each slice, else every token's activation.
      const bool loss = s.layer == 3 && s.kind == SpanKind::all_gather && s.bytes != one;
      CHECK(s.bytes == (s.kind == SpanKind::all_reduce ? 32 * 4 : loss ? 2 * 16 * 3 * 4 : one));
    }
    // Per micro-batch (2 of them): the embedding reduce-scatters its slices'
    // sum and its backward gathers its output's gradient; a block gathers
    // before c_attn and c_fc and reduce-scatters after each c_proj (forward),
    // gathers g twice and the LayerNorm outputs again, reduce-scatters the two
    // input gradients and sums its LayerNorms' weight and bias gradients
    // (backward); the head gathers ln_f's output, the loss its slices' stats,
    // and backward reduce-scatters ln_f's input gradient and sums ln_f's.
    const Count want = {{{0, SpanKind::all_gather}, 2},     {{0, SpanKind::reduce_scatter}, 2},
                        {{1, SpanKind::all_gather}, 12},    {{1, SpanKind::reduce_scatter}, 8},
                        {{1, SpanKind::all_reduce}, 8},     {{2, SpanKind::all_gather}, 12},
                        {{2, SpanKind::reduce_scatter}, 8}, {{2, SpanKind::all_reduce}, 8},
                        {{3, SpanKind::all_gather}, 4},     {{3, SpanKind::reduce_scatter}, 2},
                        {{3, SpanKind::all_reduce}, 4}};
    CHECK(n == want);
  }
  // Each tp rank keeps half of the tokens between the tensor-parallel regions.
  const ModelLayout whole = make_layout(c);
  const ModelLayout slice(whole.spec(), TensorSlice{2, 0});
  CHECK(slice.act_shape(1) == std::vector<int64_t>{4, 32});
  CHECK(whole.act_shape(1) == std::vector<int64_t>{8, 32});
}

TEST_CASE("tensor and sequence parallel: a block slice keeps Korthikanti's share",
          "[tp][sp][gpt][memory]") {
  // s·b·h·(8 + 24/t + 2·a·s/(h·t)) without dropout under tensor parallelism,
  // s·b·h·(32 + 2·a·s/h)/t with sequence parallelism (twice that in fp32),
  // plus the LayerNorms' fp32 statistics (split too with sequence parallelism).
  for (const bool flash : {false, true})
    for (const int t : {2, 4})
      for (const bool sp : {false, true}) {
        ModelSpec spec = ModelSpec::parse("gpt:2x64x4");
        spec.seq = 32;
        spec.vocab = 65;
        spec.flash_attention = flash;
        spec.sequence_parallel = sp;
        const ModelLayout m(spec, TensorSlice{t, 1});
        const int b = 3;
        const std::unique_ptr<DeviceBackend> dev = make_meta_backend(Device{});
        Allocator alloc(*dev, nullptr);
        const std::unique_ptr<Comm> tp = make_meta_comm(1, t, nullptr, ScratchPlacement::device);
        LayerStack block(m, 1, 2, alloc, nullptr, MetaParams(m.state_total()), DType::f32,
                         tp.get());
        const Tensor x =
            alloc.alloc("x", MemCategory::temporary, {b, static_cast<int64_t>(m.act_numel(1))});
        const size_t act = static_cast<size_t>(MemCategory::activations);
        const int64_t before = alloc.stats().device.current[act];
        block.forward(x.raw(), b);
        const int64_t measured = alloc.stats().device.current[act] - before;
        const BlockActivations f = block_activations(32, b, 64, 4, "fp32", flash, t, sp);
        INFO("flash " << flash << " tp " << t << " sp " << sp << ": measured " << measured
                      << ", formula " << f.total() << " (" << f.formula << ")");
        CHECK(static_cast<double>(measured) == f.total());
        const BlockActivations whole = block_activations(32, b, 64, 4, "fp32", flash);
        CHECK(f.total() < whole.total());
      }
}
