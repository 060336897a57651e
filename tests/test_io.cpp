// I/O tests: safetensors round trips, byte layout and error messages; Chrome trace
// export structure (processes, threads, spans, memory counters, send->recv flows).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/io/safetensors.h"
#include "core/record/recorder.h"
#include "core/record/trace.h"
#include "tests/st_bytes.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace shardlab;
using shardlab::test::raw;
using shardlab::test::st_file;
using shardlab::test::TempDir;
using shardlab::test::u64_le;
using shardlab::test::write_bytes;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The SafetensorsError message from loading `path`; fails the test if it loads.
std::string load_error(const std::string& path) {
  try {
    load_safetensors(path);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  FAIL("loading '" << path << "' did not throw SafetensorsError");
  return {};
}

std::string save_error(const std::string& path, const std::vector<NamedTensor>& tensors) {
  try {
    save_safetensors(path, tensors);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  FAIL("saving '" << path << "' did not throw SafetensorsError");
  return {};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("safetensors round trip keeps names, shapes, bits and metadata", "[io]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const float nan_payload = std::bit_cast<float>(0x7fc01234u);
  std::vector<NamedTensor> tensors = {
      {"layers.0.weight",
       {2, 3},
       {1.0f, -0.0f, std::numeric_limits<float>::infinity(), nan_payload,
        std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()}},
      {"layers.0.bias", {3}, {0.1f, 0.2f, 0.3f}},
      {"scale", {}, {42.5f}},
      {"empty", {0, 4}, {}},
      {"embed.weight", {1, 1, 2}, {-7.25f, 3.0e-38f}},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"strategy", "fsdp"}};
  save_safetensors(path, tensors, meta);
  CHECK_FALSE(fs::exists(path + ".tmp"));

  std::map<std::string, std::string> meta_back;
  const auto back = load_safetensors(path, meta_back);
  CHECK(meta_back == meta);
  REQUIRE(back.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    INFO("tensor " << tensors[i].name);
    CHECK(back[i].name == tensors[i].name);  // saved order survives the JSON object
    CHECK(back[i].shape == tensors[i].shape);
    CHECK(same_bits(back[i].data, tensors[i].data));
  }
  CHECK(load_safetensors(path).size() == tensors.size());

  // Without metadata there is no "__metadata__" key at all.
  save_safetensors(path, {tensors[1]});
  const std::string bytes = read_bytes(path);
  CHECK(bytes.find("__metadata__") == std::string::npos);
  CHECK(load_safetensors(path, meta_back).size() == 1);
  CHECK(meta_back.empty());
}

TEST_CASE("safetensors byte layout: LE header length, padded JSON, aligned contiguous data",
          "[io]") {
  TempDir dir;
  const std::string path = dir.file("layout.safetensors");
  const std::vector<NamedTensor> tensors = {{"a", {2}, {1.5f, -2.0f}},
                                            {"bb", {3}, {4.f, 5.f, 6.f}}};
  save_safetensors(path, tensors, {{"k", "v"}});
  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  CHECK((8 + n) % 8 == 0);
  REQUIRE(bytes.size() == 8 + n + 5 * sizeof(float));

  const std::string header = bytes.substr(8, n);
  CHECK(header.front() == '{');
  const size_t close = header.find_last_of('}');
  CHECK(header.find_first_not_of(' ', close + 1) == std::string::npos);  // only space padding
  CHECK(close + 1 + 7 >= header.size());                                 // at most 7 of it

  const json h = json::parse(header);
  CHECK(h["__metadata__"] == json{{"k", "v"}});
  CHECK(h["a"]["dtype"] == "F32");
  CHECK(h["a"]["shape"] == json::array({2}));
  CHECK(h["a"]["data_offsets"] == json::array({0, 8}));
  CHECK(h["bb"]["data_offsets"] == json::array({8, 20}));
  float first;
  std::memcpy(&first, bytes.data() + 8 + n, sizeof first);
  CHECK(first == 1.5f);
}

TEST_CASE("safetensors reads a hand-written file with F32, F16 and BF16", "[io]") {
  TempDir dir;
  const std::string path = dir.file("hand.safetensors");
  // Keys out of data order and no padding (as some writers do): both must be accepted.
  const std::string header = R"({"half":{"dtype":"F16","shape":[2,2],"data_offsets":[8,16]},)"
                             R"("full":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("brain":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
                             R"("__metadata__":{"source":"hand"}})";
  const std::string data = raw(std::vector<float>{1.5f, -2.0f}) +
                           // 1.0, -2.0, smallest subnormal 2^-24, +inf
                           raw(std::vector<uint16_t>{0x3C00, 0xC000, 0x0001, 0x7C00}) +
                           // 1.0, 3.140625, -0.0
                           raw(std::vector<uint16_t>{0x3F80, 0x4049, 0x8000});
  write_bytes(path, st_file(header, data));

  std::map<std::string, std::string> meta;
  const auto t = load_safetensors(path, meta);
  CHECK(meta == std::map<std::string, std::string>{{"source", "hand"}});
  REQUIRE(t.size() == 3);
  CHECK(t[0].name == "full");
  CHECK(t[0].data == std::vector<float>{1.5f, -2.0f});
  CHECK(t[1].name == "half");
  CHECK(t[1].shape == std::vector<int64_t>{2, 2});
  REQUIRE(t[1].data.size() == 4);
  CHECK(t[1].data[0] == 1.0f);
  CHECK(t[1].data[1] == -2.0f);
  CHECK(t[1].data[2] == std::ldexp(1.0f, -24));
  CHECK(std::isinf(t[1].data[3]));
  CHECK(t[2].name == "brain");
  REQUIRE(t[2].data.size() == 3);
  CHECK(t[2].data[0] == 1.0f);
  CHECK(t[2].data[1] == 3.140625f);
  CHECK(std::signbit(t[2].data[2]));
}

TEST_CASE("safetensors load errors name the file and the problem", "[io]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const std::string f32x2 = raw(std::vector<float>{1.f, 2.f});
  auto expect = [&](const std::string& bytes, const std::string& problem) {
    write_bytes(path, bytes);
    const std::string msg = load_error(path);
    INFO(msg);
    CHECK(msg.find("'" + path + "'") != std::string::npos);
    CHECK(msg.find(problem) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  };

  SECTION("missing file") {
    const std::string missing = dir.file("nope.safetensors");
    CHECK(load_error(missing) == "cannot open '" + missing + "': No such file or directory");
  }
  SECTION("directory") {
    CHECK(load_error(dir.path.string()).find("Is a directory") != std::string::npos);
  }
  SECTION("shorter than the length field") {
    expect("abc", "too short");
  }
  SECTION("header length past the end") {
    expect(u64_le(1000) + "{}", "runs past the end");
  }
  SECTION("invalid JSON") {
    expect(st_file(R"({"a": {"dtype": )", ""), "not valid JSON");
  }
  SECTION("header not an object") {
    expect(st_file("[1, 2]", ""), "not a JSON object");
  }
  SECTION("unsupported dtype") {
    expect(st_file(R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", f32x2),
           "unsupported dtype 'F64'");
  }
  SECTION("unknown dtype") {
    expect(st_file(R"({"x":{"dtype":"Q7","shape":[1],"data_offsets":[0,8]}})", f32x2),
           "unsupported dtype 'Q7'");
  }
  SECTION("missing dtype") {
    expect(st_file(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", f32x2), "\"dtype\"");
  }
  SECTION("negative dimension") {
    expect(st_file(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f32x2),
           "\"shape\"");
  }
  SECTION("offsets not a pair") {
    expect(st_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", f32x2),
           "\"data_offsets\"");
  }
  SECTION("offsets past the data") {
    expect(st_file(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", f32x2),
           "outside the data section");
  }
  SECTION("offsets reversed") {
    expect(st_file(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", f32x2),
           "outside the data section");
  }
  SECTION("shape does not match the byte count") {
    expect(st_file(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f32x2),
           "data_offsets span 8 bytes");
  }
  SECTION("overlapping tensors") {
    expect(st_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   f32x2),
           "overlap");
  }
  SECTION("metadata value not a string") {
    expect(st_file(R"({"__metadata__":{"epoch":3}})", ""), "__metadata__");
  }
  SECTION("truncated data section") {
    save_safetensors(path, {{"w", {4}, {1.f, 2.f, 3.f, 4.f}}});
    std::string bytes = read_bytes(path);
    bytes.resize(bytes.size() - 4);
    expect(bytes, "outside the data section");
  }
}

TEST_CASE("safetensors save rejects bad input and unwritable paths", "[io]") {
  TempDir dir;
  const std::string path = dir.file("out.safetensors");
  std::string msg = save_error(path, {{"w", {2, 2}, {1.f, 2.f, 3.f}}});
  CHECK(msg.find("cannot write '" + path + "'") == 0);
  CHECK(msg.find("[2, 2] (4 elements) but 3 values") != std::string::npos);

  msg = save_error(path, {{"w", {1}, {1.f}}, {"w", {1}, {2.f}}});
  CHECK(msg.find("duplicate tensor name 'w'") != std::string::npos);

  msg = save_error(path, {{"__metadata__", {1}, {1.f}}});
  CHECK(msg.find("__metadata__") != std::string::npos);

  const std::string nodir = dir.file("no_such_dir/out.safetensors");
  CHECK(save_error(nodir, {{"w", {1}, {1.f}}}) ==
        "cannot write '" + nodir + "': No such file or directory");
  CHECK_FALSE(fs::exists(path));  // nothing half-written was left behind
}

// ---------------------------------------------------------------- trace export

namespace {

constexpr int64_t kT0 = 5'000'000;  // ns; every time below is kT0 + offset

Span make_span(Lane lane, SpanKind kind, int64_t begin_us, int64_t end_us, int layer = -1,
               int mb = -1, int64_t bytes = 0, int peer = -1, uint64_t flow = 0) {
  Span s;
  s.t_begin_ns = kT0 + begin_us * 1000;
  s.t_end_ns = kT0 + end_us * 1000;
  s.lane = lane;
  s.kind = kind;
  s.layer = layer;
  s.micro_batch = mb;
  s.step = 0;
  s.bytes = bytes;
  s.peer = peer;
  s.flow_id = flow;
  return s;
}

AllocEvent make_alloc(int64_t t_us, int64_t delta, MemCategory c, Pool pool = Pool::device) {
  AllocEvent a;
  a.t_ns = kT0 + t_us * 1000;
  a.delta_bytes = delta;
  a.category = c;
  a.pool = pool;
  a.name = "buf";
  return a;
}

// Three ranks: a pipeline-ish pattern with sends 0->1 (flow 7) and 1->2 (flow 8), an
// unmatched recv (flow 9) and a send without a flow id, which must produce no arrows.
std::vector<Recorder::Snapshot> sample_ranks() {
  std::vector<Recorder::Snapshot> r(3);
  r[0].spans = {make_span(Lane::compute, SpanKind::forward, 1, 5, 0, 0),
                make_span(Lane::comm, SpanKind::send, 5, 9, -1, 0, 4096, 1, 7),
                make_span(Lane::compute, SpanKind::backward, 10, 20, 1)};
  r[0].allocs = {make_alloc(1, 1024, MemCategory::params),
                 make_alloc(2, 512, MemCategory::activations),
                 make_alloc(3, 2048, MemCategory::optimizer_state, Pool::host),
                 make_alloc(4, 256, MemCategory::temporary),
                 make_alloc(4, -256, MemCategory::temporary),  // same ts: one sample
                 make_alloc(6, -512, MemCategory::activations),
                 make_alloc(30, -1024, MemCategory::params)};
  r[1].spans = {make_span(Lane::comm, SpanKind::recv, 4, 10, -1, 0, 4096, 0, 7),
                make_span(Lane::compute, SpanKind::forward, 10, 12, 2, 0),
                make_span(Lane::comm, SpanKind::send, 12, 13, -1, 0, 4096, 2, 8),
                make_span(Lane::comm, SpanKind::send, 14, 15, -1, 1, 4096, 2, 0)};
  r[1].allocs = {make_alloc(0, 64, MemCategory::comm_buffers)};
  r[2].spans = {make_span(Lane::comm, SpanKind::recv, 12, 14, -1, 0, 4096, 1, 8),
                make_span(Lane::comm, SpanKind::recv, 15, 16, -1, 1, 4096, 1, 9),
                make_span(Lane::compute, SpanKind::all_reduce, 16, 18)};
  return r;
}

std::vector<json> events_with(const json& trace, const std::string& ph) {
  std::vector<json> out;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == ph) out.push_back(e);
  return out;
}

struct Ids {
  int pid = -1;
  std::map<std::string, int> tid;  // thread name -> tid
};

// Rank -> pid and thread ids, read from the metadata events the way a viewer does.
std::map<int, Ids> rank_ids(const json& trace) {
  std::map<int, Ids> out;
  std::map<int, int> rank_of_pid;
  for (const auto& e : events_with(trace, "M"))
    if (e["name"] == "process_name") {
      const std::string name = e["args"]["name"];
      REQUIRE(name.rfind("rank ", 0) == 0);
      const int rank = std::stoi(name.substr(5));
      REQUIRE(out.count(rank) == 0);
      out[rank].pid = e["pid"].get<int>();
      rank_of_pid[e["pid"].get<int>()] = rank;
    }
  for (const auto& e : events_with(trace, "M"))
    if (e["name"] == "thread_name") {
      const int pid = e["pid"].get<int>();
      REQUIRE(rank_of_pid.count(pid) == 1);
      auto& tids = out[rank_of_pid[pid]].tid;
      const std::string name = e["args"]["name"];
      REQUIRE(tids.count(name) == 0);
      tids[name] = e["tid"].get<int>();
    }
  return out;
}

const json* find_x(const json& trace, int pid, const std::string& name) {
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == pid && e["name"] == name) return &e;
  return nullptr;
}

}  // namespace

TEST_CASE("trace: one process per rank with compute and communication threads", "[io]") {
  const json meta = {{"strategy", "pipeline"}, {"world_size", 3}};
  const json trace = json::parse(trace_to_json(sample_ranks(), kT0, meta).dump());
  CHECK(trace["displayTimeUnit"] == "ms");
  CHECK(trace["metadata"] == meta);

  const auto ids = rank_ids(trace);
  REQUIRE(ids.size() == 3);
  std::set<int> pids;
  for (const auto& [rank, id] : ids) {
    INFO("rank " << rank);
    pids.insert(id.pid);
    REQUIRE(id.tid.size() == 2);
    REQUIRE(id.tid.count("compute") == 1);
    REQUIRE(id.tid.count("communication") == 1);
    CHECK(id.tid.at("compute") != id.tid.at("communication"));
  }
  CHECK(pids.size() == 3);

  int process_sort = 0, thread_sort = 0;
  for (const auto& e : events_with(trace, "M")) {
    if (e["name"] == "process_sort_index") ++process_sort;
    if (e["name"] == "thread_sort_index") ++thread_sort;
  }
  CHECK(process_sort == 3);
  CHECK(thread_sort == 6);

  CHECK(trace_to_json({}, 0)["traceEvents"].empty());
}

TEST_CASE("trace: spans become X events on their lane with readable names and args", "[io]") {
  const auto ranks = sample_ranks();
  const json trace = json::parse(trace_to_json(ranks, kT0).dump());
  const auto ids = rank_ids(trace);
  CHECK(events_with(trace, "X").size() == 10);

  // Named as the app labels them ("F0 L0", "send F0 →r1"); kind, layer and micro-batch in args.
  const json* fwd = find_x(trace, ids.at(0).pid, "F0 L0");
  REQUIRE(fwd);
  CHECK((*fwd)["tid"] == ids.at(0).tid.at("compute"));
  CHECK((*fwd)["cat"] == "forward");
  CHECK((*fwd)["ts"].get<double>() == Approx(1.0));
  CHECK((*fwd)["dur"].get<double>() == Approx(4.0));
  CHECK((*fwd)["args"] == json{{"kind", "forward"}, {"layer", 0}, {"micro_batch", 0}, {"step", 0}});

  const json* send = find_x(trace, ids.at(0).pid, "send F0 \xE2\x86\x92r1");
  REQUIRE(send);
  CHECK((*send)["tid"] == ids.at(0).tid.at("communication"));
  CHECK((*send)["args"]["bytes"] == 4096);
  CHECK((*send)["args"]["peer"] == 1);
  CHECK_FALSE((*send)["args"].contains("layer"));

  const json* bwd = find_x(trace, ids.at(0).pid, "B L1");
  REQUIRE(bwd);
  CHECK_FALSE((*bwd)["args"].contains("micro_batch"));
  CHECK_FALSE((*bwd)["args"].contains("peer"));
  REQUIRE(find_x(trace, ids.at(2).pid, "AR"));
}

TEST_CASE("trace: memory counters follow the allocations per pool", "[io]") {
  const json trace = json::parse(trace_to_json(sample_ranks(), kT0).dump());
  const int pid0 = rank_ids(trace).at(0).pid;
  std::vector<json> device, host;
  for (const auto& e : events_with(trace, "C")) {
    if (e["pid"] != pid0) continue;
    if (e["name"] == "memory (device)") device.push_back(e);
    if (e["name"] == "memory (host)") host.push_back(e);
  }
  auto by_ts = [](const json& a, const json& b) { return a["ts"] < b["ts"]; };
  std::sort(device.begin(), device.end(), by_ts);
  std::sort(host.begin(), host.end(), by_ts);

  // Zero at t0, then one sample per distinct allocation time (t=4 us has two events).
  REQUIRE(device.size() == 6);
  std::vector<int64_t> params, activations, temporary;
  std::vector<double> ts;
  for (const auto& e : device) {
    REQUIRE(e["args"].size() == 6);
    for (const char* c :
         {"params", "grads", "optimizer_state", "activations", "comm_buffers", "temporary"})
      REQUIRE(e["args"].contains(c));
    CHECK(e["args"]["optimizer_state"] == 0);  // host bytes stay out of the device pool
    params.push_back(e["args"]["params"].get<int64_t>());
    activations.push_back(e["args"]["activations"].get<int64_t>());
    temporary.push_back(e["args"]["temporary"].get<int64_t>());
    ts.push_back(e["ts"].get<double>());
  }
  CHECK(ts == std::vector<double>{0, 1, 2, 4, 6, 30});
  CHECK(params == std::vector<int64_t>{0, 1024, 1024, 1024, 1024, 0});
  CHECK(activations == std::vector<int64_t>{0, 0, 512, 512, 0, 0});
  CHECK(temporary == std::vector<int64_t>{0, 0, 0, 0, 0, 0});

  REQUIRE(host.size() == 2);
  CHECK(host[0]["args"]["optimizer_state"] == 0);
  CHECK(host[1]["args"]["optimizer_state"] == 2048);
  CHECK(host[1]["ts"].get<double>() == Approx(3.0));

  // Rank 1 has a single allocation at t0 exactly, so no separate zero sample.
  const int pid1 = rank_ids(trace).at(1).pid;
  int rank1_samples = 0;
  for (const auto& e : events_with(trace, "C"))
    if (e["pid"] == pid1) {
      ++rank1_samples;
      CHECK(e["name"] == "memory (device)");
      CHECK(e["args"]["comm_buffers"] == 64);
    }
  CHECK(rank1_samples == 1);
}

TEST_CASE("trace: send/recv pairs become one flow each, bound inside their slices", "[io]") {
  const json trace = json::parse(trace_to_json(sample_ranks(), kT0).dump());
  const auto ids = rank_ids(trace);
  std::map<uint64_t, std::vector<json>> starts, finishes;
  for (const auto& e : events_with(trace, "s")) starts[e["id"].get<uint64_t>()].push_back(e);
  for (const auto& e : events_with(trace, "f")) finishes[e["id"].get<uint64_t>()].push_back(e);
  CHECK(events_with(trace, "t").empty());

  std::set<uint64_t> start_ids, finish_ids;
  for (const auto& [id, v] : starts) start_ids.insert(id);
  for (const auto& [id, v] : finishes) finish_ids.insert(id);
  CHECK(start_ids == std::set<uint64_t>{7, 8});
  CHECK(finish_ids == start_ids);

  // The flow event must sit inside the slice it binds to, on the same pid/tid.
  auto inside = [&](const json& flow, int rank, const std::string& slice) {
    const json* x = find_x(trace, ids.at(rank).pid, slice);
    REQUIRE(x);
    CHECK(flow["pid"] == (*x)["pid"]);
    CHECK(flow["tid"] == (*x)["tid"]);
    CHECK(flow["ts"].get<double>() > (*x)["ts"].get<double>());
    CHECK(flow["ts"].get<double>() < (*x)["ts"].get<double>() + (*x)["dur"].get<double>());
  };
  for (uint64_t id : {uint64_t{7}, uint64_t{8}}) {
    INFO("flow " << id);
    REQUIRE(starts[id].size() == 1);
    REQUIRE(finishes[id].size() == 1);
    const json& s = starts[id][0];
    const json& f = finishes[id][0];
    CHECK(f["bp"] == "e");
    CHECK(s["cat"] == f["cat"]);  // viewers match flow ends by id, cat and name
    CHECK(s["name"] == f["name"]);
    CHECK(s["ts"].get<double>() < f["ts"].get<double>());
  }
  inside(starts[7][0], 0, "send F0 \xE2\x86\x92r1");
  inside(finishes[7][0], 1, "recv F0 \xE2\x86\x90r0");
  inside(starts[8][0], 1, "send F0 \xE2\x86\x92r2");
  inside(finishes[8][0], 2, "recv F0 \xE2\x86\x90r1");
}

TEST_CASE("write_trace writes parseable JSON and reports unwritable paths", "[io]") {
  TempDir dir;
  const auto ranks = sample_ranks();
  const std::string path = dir.file("trace.json");
  write_trace(path, ranks, kT0, {{"run", "test"}});
  const std::string text = read_bytes(path);
  CHECK(text.find('\n') == std::string::npos);  // compact
  CHECK(json::parse(text) == json::parse(trace_to_json(ranks, kT0, {{"run", "test"}}).dump()));

  const std::string bad = dir.file("no_such_dir/trace.json");
  try {
    write_trace(bad, ranks, kT0);
    FAIL("write_trace to a missing directory did not throw");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) ==
          "cannot write trace to '" + bad + "': No such file or directory");
  }
}
