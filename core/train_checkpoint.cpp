// Checkpoints that resume bit for bit (see train_checkpoint.h).
#include "core/train_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/json_file.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/placement.h"
#include "core/runner.h"
#include "core/safetensors.h"
#include "core/strategy.h"

namespace shardlab {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "shardlab-checkpoint";
constexpr int kVersion = 1;

std::string step_dir_name(int steps_done) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06d", steps_done);
  return buf;
}

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.safetensors", rank);
  return buf;
}

json settings_json(const RunConfig& c) {
  const OptimizerConfig& o = c.optimizer;
  return {{"model", c.model},
          {"seq", c.seq},
          {"data", c.data},
          {"seed", c.seed},
          {"batch", c.batch},
          {"strategy", c.strategy},
          {"world", c.world},
          {"precision", c.precision},
          {"steps", c.steps},
          {"optimizer",
           {{"kind", to_string(o.kind)},
            {"lr", o.lr},
            {"beta1", o.beta1},
            {"beta2", o.beta2},
            {"eps", o.eps},
            {"weight_decay", o.weight_decay}}}};
}

void write_atomic(const std::string& path, const std::string& text, const std::string& what) {
  std::string error;
  if (!write_file_atomic(path, text, &error, true, what)) throw RunError(error);
}

}  // namespace

void check_checkpointable(const RunConfig& cfg) {
  if (is_controller(cfg.strategy))
    throw ConfigError(
        "--checkpoint-every and --resume with dp are not built yet: its state lives on "
        "device 0 only (valid: any other strategy)");
  const ModelLayout layout = make_layout(cfg);
  if (layout.state_total() != layout.total())
    throw ConfigError("--checkpoint-every and --resume with " + cfg.model +
                      ": its BatchNorm running statistics are not saved yet (valid: a model "
                      "without +bn)");
  if (plan_placement(cfg).kind == DeviceKind::cuda)
    throw ConfigError(
        "--checkpoint-every and --resume on a CUDA device are not built yet (valid: --device "
        "cpu)");
}

void save_rank_checkpoint(const std::string& dir, int steps_done, const RunConfig& cfg, int rank,
                          int world, const RankState& st, DeviceBackend& device) {
  if (st.empty())
    throw RunError(cfg.strategy + " cannot be checkpointed (it does not describe its state)");
  Optimizer& opt = *st.optimizer;
  std::vector<NamedTensor> tensors;
  json offsets = json::array(), counts = json::array();
  for (size_t i = 0; i < st.offset.size(); ++i) {
    const size_t n = st.count[i];
    offsets.push_back(st.offset[i]);
    counts.push_back(n);
    NamedTensor w{"weight/" + std::to_string(i), {static_cast<int64_t>(n)}, std::vector<float>(n)};
    if (!opt.mixed()) {
      read_to_host(device, w.data.data(), *st.weight[i], st.weight_at[i], n);
    } else {
      std::vector<float> all(opt.ranges()[i].numel);  // the shard's padding is dropped
      opt.read_master(i, all.data());
      std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), w.data.begin());
    }
    tensors.push_back(std::move(w));
    if (opt.has_moments())
      for (bool second : {false, true}) {
        NamedTensor m{(second ? "exp_avg_sq/" : "exp_avg/") + std::to_string(i),
                      {static_cast<int64_t>(n)},
                      std::vector<float>(n)};
        opt.read_moment(i, second, m.data.data(), n);
        tensors.push_back(std::move(m));
      }
  }
  const LossScaler::State sc = st.precision ? st.precision->scaler().state() : LossScaler::State{};
  const json meta = {{"format", kFormat},
                     {"rank", rank},
                     {"world", world},
                     {"steps_done", steps_done},
                     {"optimizer_steps", opt.steps_taken()},
                     {"scale", sc.scale},
                     {"good_steps", sc.good_steps},
                     {"skipped", sc.skipped},
                     {"offsets", offsets},
                     {"counts", counts}};
  const std::string path =
      (fs::path(dir) / step_dir_name(steps_done) / rank_file_name(rank)).string();
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  try {
    save_safetensors(path, tensors, {{"shardlab", meta.dump()}});
  } catch (const SafetensorsError& e) {
    throw RunError(std::string("checkpoint: ") + e.what());
  }
}

void commit_checkpoint(const std::string& dir, int steps_done, const RunConfig& cfg, int world,
                       const std::vector<double>& losses) {
  json ranks = json::array();
  for (int r = 0; r < world; ++r) ranks.push_back(rank_file_name(r));
  const json manifest = {
      {"format", kFormat},
      {"version", kVersion},
      {"steps_done", steps_done},
      {"world", world},
      {"settings", settings_json(cfg)},
      {"ranks", ranks},
      {"losses", std::vector<double>(losses.begin(), losses.begin() + steps_done)}};
  const fs::path step_dir = fs::path(dir) / step_dir_name(steps_done);
  write_atomic((step_dir / "manifest.json").string(), manifest.dump(1) + "\n",
               "checkpoint manifest");
  write_atomic((fs::path(dir) / "latest").string(), step_dir_name(steps_done) + "\n",
               "checkpoint pointer");
}

namespace {

// The complete checkpoints under `dir`, newest first.
std::vector<fs::path> complete_checkpoints(const fs::path& dir) {
  std::vector<fs::path> out;
  if (fs::exists(dir / "manifest.json")) return {dir};
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0 &&
        fs::exists(e.path() / "manifest.json"))
      out.push_back(e.path());
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    return a.filename().string() > b.filename().string();
  });
  return out;
}

}  // namespace

bool has_complete_checkpoint(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && !complete_checkpoints(dir).empty();
}

ResumeState load_checkpoint(const std::string& dir, const ModelLayout& layout) {
  auto bad = [&](const std::string& what) -> ConfigError {
    return ConfigError("--resume '" + dir + "': " + what);
  };
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw bad("not a directory (valid: a --checkpoint-dir)");
  const std::vector<fs::path> found = complete_checkpoints(dir);
  if (found.empty())
    throw bad("holds no complete checkpoint (a step-N directory with a manifest.json)");
  const fs::path step_dir = found.front();
  const std::string mpath = (step_dir / "manifest.json").string();
  const json m = read_json_file(mpath, "checkpoint manifest", 64 << 20, 16);
  ResumeState r;
  r.path = step_dir.string();
  try {
    if (m.at("format") != kFormat || m.at("version") != kVersion)
      throw bad(mpath + " is not a version-1 Shardlab checkpoint manifest");
    r.steps_done = m.at("steps_done").get<int>();
    const json& s = m.at("settings");
    r.saved.model = s.at("model").get<std::string>();
    r.saved.seq = s.at("seq").get<int>();
    r.saved.data = s.at("data").get<std::string>();
    r.saved.seed = s.at("seed").get<uint64_t>();
    r.saved.batch = s.at("batch").get<int>();
    r.saved.strategy = s.at("strategy").get<std::string>();
    r.saved.world = s.at("world").get<int>();
    r.saved.precision = s.at("precision").get<std::string>();
    r.saved.steps = s.at("steps").get<int>();
    const json& o = s.at("optimizer");
    r.saved.optimizer.kind =
        o.at("kind").get<std::string>() == "sgd" ? OptimizerKind::sgd : OptimizerKind::adamw;
    r.saved.optimizer.lr = o.at("lr").get<float>();
    r.saved.optimizer.beta1 = o.at("beta1").get<float>();
    r.saved.optimizer.beta2 = o.at("beta2").get<float>();
    r.saved.optimizer.eps = o.at("eps").get<float>();
    r.saved.optimizer.weight_decay = o.at("weight_decay").get<float>();
    r.losses = m.at("losses").get<std::vector<double>>();
    const int world = m.at("world").get<int>();
    if (world < 1 || static_cast<int>(m.at("ranks").size()) != world)
      throw bad(mpath + ": 'ranks' does not list " + std::to_string(world) + " files");
    const size_t total = layout.total();
    const bool adamw = r.saved.optimizer.kind == OptimizerKind::adamw;
    r.weights.assign(total, 0.0f);
    if (adamw) {
      r.exp_avg.assign(total, 0.0f);
      r.exp_avg_sq.assign(total, 0.0f);
    }
    std::vector<char> covered(total, 0);
    for (int rank = 0; rank < world; ++rank) {
      const std::string file = m.at("ranks")[rank].get<std::string>();
      if (file.find('/') != std::string::npos || file.find("..") != std::string::npos)
        throw bad(mpath + ": rank file '" + file + "' is not a plain name");
      const std::string path = (step_dir / file).string();
      std::map<std::string, std::string> fmeta;
      std::vector<NamedTensor> tensors;
      try {
        tensors = load_safetensors(path, fmeta);
      } catch (const SafetensorsError& e) {
        throw bad(e.what());
      }
      if (!fmeta.count("shardlab")) throw bad(path + " has no Shardlab metadata");
      const json meta = json::parse(fmeta["shardlab"]);
      if (meta.at("rank").get<int>() != rank || meta.at("steps_done").get<int>() != r.steps_done)
        throw bad(path + " belongs to another rank or step");
      if (rank == 0) {
        r.optimizer_steps = meta.at("optimizer_steps").get<int64_t>();
        r.scaler.scale = meta.at("scale").get<float>();
        r.scaler.good_steps = meta.at("good_steps").get<int>();
        r.scaler.skipped = meta.at("skipped").get<int64_t>();
      }
      std::map<std::string, const NamedTensor*> by_name;
      for (const NamedTensor& t : tensors) by_name[t.name] = &t;
      const json& offsets = meta.at("offsets");
      const json& counts = meta.at("counts");
      for (size_t i = 0; i < offsets.size(); ++i) {
        const size_t off = offsets[i].get<size_t>(), n = counts.at(i).get<size_t>();
        if (off > total || n > total - off)
          throw bad(path + ": range " + std::to_string(i) + " [" + std::to_string(off) + ", +" +
                    std::to_string(n) + ") lies outside the model's " + std::to_string(total) +
                    " values");
        auto take = [&](const std::string& name, std::vector<float>& into) {
          const auto it = by_name.find(name + "/" + std::to_string(i));
          if (it == by_name.end() || it->second->data.size() != n)
            throw bad(path + ": tensor '" + name + "/" + std::to_string(i) +
                      "' is missing or has " + "the wrong size");
          for (size_t k = 0; k < n; ++k) {
            const float v = it->second->data[k];
            float& slot = into[off + k];
            // A value held by two ranks (replicas) must be the same bits.
            if (covered[off + k] && std::memcmp(&slot, &v, sizeof v) != 0)
              throw bad(path + ": '" + name + "' at offset " + std::to_string(off + k) +
                        " differs from another rank's copy");
            slot = v;
          }
        };
        take("weight", r.weights);
        if (adamw) {
          take("exp_avg", r.exp_avg);
          take("exp_avg_sq", r.exp_avg_sq);
        }
        std::fill(covered.begin() + static_cast<std::ptrdiff_t>(off),
                  covered.begin() + static_cast<std::ptrdiff_t>(off + n), 1);
      }
    }
    const auto hole = std::find(covered.begin(), covered.end(), 0);
    if (hole != covered.end())
      throw bad("no rank saved the value at offset " + std::to_string(hole - covered.begin()) +
                " of " + std::to_string(total) + " (an incomplete checkpoint)");
  } catch (const json::exception& e) {
    throw bad(mpath + " or a rank file is malformed: " + e.what());
  }
  return r;
}

void check_resume(const RunConfig& cfg, const ResumeState& r) {
  const RunConfig& s = r.saved;
  auto differs = [&](const std::string& what, const std::string& saved, const std::string& now) {
    throw ConfigError("--resume '" + r.path + "' was saved with " + what + " " + saved +
                      ", this run has " + now + " (valid: the same " + what + ")");
  };
  if (s.model != cfg.model) differs("--model", s.model, cfg.model);
  if (s.seq != cfg.seq) differs("--seq", std::to_string(s.seq), std::to_string(cfg.seq));
  if (s.data != cfg.data) differs("--data", "'" + s.data + "'", "'" + cfg.data + "'");
  if (s.seed != cfg.seed) differs("--seed", std::to_string(s.seed), std::to_string(cfg.seed));
  if (s.batch != cfg.batch) differs("--batch", std::to_string(s.batch), std::to_string(cfg.batch));
  const OptimizerConfig &a = s.optimizer, &b = cfg.optimizer;
  if (a.kind != b.kind) differs("--optimizer", to_string(a.kind), to_string(b.kind));
  if (a.lr != b.lr || a.beta1 != b.beta1 || a.beta2 != b.beta2 || a.eps != b.eps ||
      a.weight_decay != b.weight_decay)
    differs("optimizer settings (--lr)", std::to_string(a.lr), std::to_string(b.lr));
  if (cfg.steps <= r.steps_done)
    throw ConfigError("--resume '" + r.path + "' has done " + std::to_string(r.steps_done) +
                      " steps already (valid: --steps above " + std::to_string(r.steps_done) + ")");
}

void restore_rank_state(const RankState& st, const ResumeState& r) {
  Optimizer& opt = *st.optimizer;
  opt.set_steps_taken(r.optimizer_steps);
  if (st.precision) st.precision->scaler().restore(r.scaler);
  if (!opt.has_moments()) return;
  for (size_t i = 0; i < st.offset.size(); ++i) {
    const size_t off = st.offset[i], n = st.count[i];
    opt.load_moment(i, false, r.exp_avg.data() + off, n);
    opt.load_moment(i, true, r.exp_avg_sq.data() + off, n);
  }
}

}  // namespace shardlab
