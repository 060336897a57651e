// One JSON form of a run's settings, written and read by recordings, traces and
// checkpoint manifests alike (config_json.h).
#include "core/io/config_json.h"

#include <algorithm>
#include <limits>

#include "core/run_options.h"

namespace shardlab {

using nlohmann::json;

namespace {

OptimizerConfig optimizer_from_json(const JsonChecker& ck, const json& o, const std::string& ow) {
  OptimizerConfig c;
  ck.keys(o, ow, {"kind", "lr", "beta1", "beta2", "eps", "weight_decay"});
  const std::string kind = ck.text(o["kind"], at(ow, "kind"));
  if (kind != "adamw" && kind != "sgd")
    ck.fail(at(ow, "kind"), shown(kind) + " is not an optimizer (valid: adamw, sgd)");
  c.kind = kind == "sgd" ? OptimizerKind::sgd : OptimizerKind::adamw;
  const double fmax = std::numeric_limits<float>::max();
  c.lr = static_cast<float>(ck.number(o["lr"], at(ow, "lr"), 0, fmax));
  c.beta1 = static_cast<float>(ck.number(o["beta1"], at(ow, "beta1"), 0, 1));
  c.beta2 = static_cast<float>(ck.number(o["beta2"], at(ow, "beta2"), 0, 1));
  c.eps = static_cast<float>(ck.number(o["eps"], at(ow, "eps"), 0, fmax));
  c.weight_decay =
      static_cast<float>(ck.number(o["weight_decay"], at(ow, "weight_decay"), 0, fmax));
  return c;
}

}  // namespace

json config_json(const RunConfig& c) {
  const OptimizerConfig& o = c.optimizer;
  json j = {{"model", c.model},
            {"strategy", c.strategy},
            {"world", c.world},
            {"batch", c.batch},
            {"steps", c.steps},
            {"optimizer",
             {{"kind", to_string(o.kind)},
              {"lr", o.lr},
              {"beta1", o.beta1},
              {"beta2", o.beta2},
              {"eps", o.eps},
              {"weight_decay", o.weight_decay}}},
            {"seed", c.seed},
            {"device", c.device},
            {"backend", c.backend},
            {"timeout_ms", c.timeout_ms},
            {"record", c.record}};
  // The strategy options, each under its row's key (core/run_options.h).
  for (const OptionRow& r : option_rows()) {
    // Only when set, like seq and data: files written before the option
    // (--mesh) lack it, and read back the same.
    if (r.only_when_set && !option_set(c, r.id)) continue;
    switch (r.kind) {
      case OptionKind::integer:
        j[r.json_key] = c.*r.integer;
        break;
      case OptionKind::number:
        j[r.json_key] = c.*r.number;
        break;
      case OptionKind::on_flag:
      case OptionKind::off_flag:
        j[r.json_key] = c.*r.boolean;
        if (r.flag_value && !(c.*r.flag_value).empty()) j[r.flag_value_key] = c.*r.flag_value;
        break;
      case OptionKind::choice:
        j[r.json_key] = c.*r.text;
        break;
      case OptionKind::text:
        j[r.json_key] = c.*r.text;
        break;
      case OptionKind::int_list:
        j[r.json_key] = c.*r.list;
        break;
    }
  }
  // A gpt's context and text decide its vocabulary and activations.
  if (c.seq != 0) j["seq"] = c.seq;
  if (!c.attention.empty()) j["attention"] = c.attention;  // gpt: what the run resolved
  if (c.tf32) j["tf32"] = true;  // absent: exact fp32 (and in recordings made before --tf32)
  if (!c.data.empty()) j["data"] = c.data;
  return j;
}

RunConfig config_from_json(const JsonChecker& ck, const json& j, const std::string& w,
                           const std::vector<const char*>& required) {
  // Every key this build writes is known; those not required take RunConfig's default.
  std::vector<const char*> known = {"model",     "strategy", "world",  "batch",     "steps",
                                    "optimizer", "seed",     "device", "backend",   "timeout_ms",
                                    "record",    "seq",      "data",   "attention", "tf32"};
  for (const OptionRow& r : option_rows()) {
    known.push_back(r.json_key);
    if (r.flag_value_key) known.push_back(r.flag_value_key);
  }
  std::vector<const char*> optional;
  for (const char* k : known)
    if (std::find_if(required.begin(), required.end(),
                     [&](const char* q) { return std::string(q) == k; }) == required.end())
      optional.push_back(k);
  ck.keys(j, w, required, optional);
  RunConfig c;
  const int max_int = std::numeric_limits<int>::max();
  if (j.contains("model")) c.model = ck.text(j["model"], at(w, "model"), false);
  if (j.contains("seq")) c.seq = static_cast<int>(ck.integer(j["seq"], at(w, "seq"), 1, 1 << 20));
  if (j.contains("data")) c.data = ck.text(j["data"], at(w, "data"), false);
  if (j.contains("attention")) {
    c.attention = ck.text(j["attention"], at(w, "attention"));
    if (c.attention != "naive" && c.attention != "flash")
      ck.fail(at(w, "attention"),
              shown(c.attention) + " is not an attention (valid: " + kAttentionValues + ")");
  } else if (c.model.rfind("gpt:", 0) == 0) {
    c.attention = "naive";  // recordings made before --attention ran the materialised one
  }
  if (j.contains("strategy")) c.strategy = ck.text(j["strategy"], at(w, "strategy"), false);
  if (j.contains("world"))
    c.world = static_cast<int>(ck.integer(j["world"], at(w, "world"), 1, kMaxRunWorld));
  if (j.contains("batch"))
    c.batch = static_cast<int>(ck.integer(j["batch"], at(w, "batch"), 1, max_int));
  if (j.contains("steps"))
    c.steps = static_cast<int>(ck.integer(j["steps"], at(w, "steps"), 1, 10'000'000));
  if (j.contains("optimizer"))
    c.optimizer = optimizer_from_json(ck, j["optimizer"], at(w, "optimizer"));
  if (j.contains("seed")) c.seed = ck.unsigned_integer(j["seed"], at(w, "seed"));
  if (j.contains("device")) c.device = ck.text(j["device"], at(w, "device"));
  if (j.contains("backend")) c.backend = ck.text(j["backend"], at(w, "backend"));
  if (j.contains("timeout_ms"))
    c.timeout_ms = static_cast<int>(ck.integer(j["timeout_ms"], at(w, "timeout_ms"), 1, max_int));
  if (j.contains("record")) c.record = ck.boolean(j["record"], at(w, "record"));
  // The strategy options, each as its row's kind (core/run_options.h); validate()
  // below checks their ranges as it does the command line's.
  for (const OptionRow& r : option_rows()) {
    if (!j.contains(r.json_key)) continue;
    const json& v = j[r.json_key];
    const std::string where = at(w, r.json_key);
    switch (r.kind) {
      case OptionKind::integer:
        c.*r.integer = static_cast<int>(ck.integer(v, where, -max_int, max_int));
        break;
      case OptionKind::number:
        c.*r.number = ck.number(v, where, 0, 1e12);
        break;
      case OptionKind::on_flag:
      case OptionKind::off_flag:
        c.*r.boolean = ck.boolean(v, where);
        if (r.flag_value && j.contains(r.flag_value_key))
          c.*r.flag_value = ck.text(j[r.flag_value_key], at(w, r.flag_value_key));
        break;
      case OptionKind::choice:
      case OptionKind::text:
        c.*r.text = ck.text(v, where);
        break;
      case OptionKind::int_list: {
        const json& list = ck.array(v, where, 0, 4096);
        for (size_t i = 0; i < list.size(); ++i)
          (c.*r.list).push_back(
              static_cast<int>(ck.integer(list[i], at(where, i), -1'000'000, 1'000'000)));
        break;
      }
    }
  }
  if (j.contains("tf32")) c.tf32 = ck.boolean(j["tf32"], at(w, "tf32"));
  // Device and backend are checked on their own: a GPU recording must open on a
  // laptop without GPUs, so whether they fit this machine is the caller's question.
  if (c.device != "cpu" && c.device != "cuda" && c.device != "auto" && c.device != "cpu-guarded")
    ck.fail(at(w, "device"),
            shown(c.device) + " is not a device (valid: cpu, cuda, auto, cpu-guarded)");
  if (c.backend != "auto" && c.backend != "gloo" && c.backend != "nccl")
    ck.fail(at(w, "backend"), shown(c.backend) + " is not a backend (valid: auto, gloo, nccl)");
  return c;
}

}  // namespace shardlab
