// Checkpoints that resume bit for bit (see train_checkpoint.h).
#include "core/run/train_checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "core/comm/placement.h"
#include "core/io/atomic_file.h"
#include "core/io/config_json.h"
#include "core/io/json_file.h"
#include "core/io/safetensors.h"
#include "core/model/model.h"
#include "core/model/optimizer.h"
#include "core/run/runner.h"

namespace shardlab {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "shardlab-checkpoint";
// 2: every file names its run ("run_id"). 3: the settings are the run's whole
// configuration in the form recordings carry (core/io/config_json.h). Version 1
// and 2 files (no run id; settings with empty values where unset) still load.
constexpr int kVersion = 3;

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

void write_atomic(const std::string& path, const std::string& text, const std::string& what) {
  std::string error;
  if (!write_file_atomic(path, text, &error, true, what)) throw RunError(error);
}

// Where a range of a rank's values lies in the full model: pieces of `n`
// values from `at` within the range, at `full_at` in the full flat vector.
// Without tensor parallelism one piece; a slice's range is cut where
// for_each_slice_run cuts it (a padded vocabulary's padding is in none).
struct Piece {
  size_t at, full_at, n;
};
std::vector<Piece> full_pieces(const ModelLayout* slice, size_t offset, size_t count) {
  if (!slice) return {{0, offset, count}};
  std::vector<Piece> out;
  for_each_slice_run(*slice, [&](size_t at, size_t full_at, size_t n) {
    const size_t b = std::max(at, offset), e = std::min(at + n, offset + count);
    if (b < e) out.push_back({b - offset, full_at + (b - at), e - b});
  });
  std::sort(out.begin(), out.end(), [](const Piece& a, const Piece& b) { return a.at < b.at; });
  return out;
}

json pieces_json(const std::vector<Piece>& pieces) {
  json a = json::array();
  for (const Piece& p : pieces) a.push_back({p.at, p.full_at, p.n});
  return a;
}

}  // namespace

void check_checkpointable(const RunConfig& cfg) {
  if (!strategy_info(cfg.strategy).checkpoints)
    throw ConfigError("--checkpoint-every and --resume: " + cfg.strategy +
                      " cannot be checkpointed yet (valid: " +
                      strategy_names_where([](const StrategyInfo& i) { return i.checkpoints; }) +
                      ")");
  if (plan_placement(cfg).kind == DeviceKind::cuda)
    throw ConfigError(
        "--checkpoint-every and --resume on a CUDA device are not built yet (valid: --device "
        "cpu)");
}

std::string new_run_id() {
  // Two runs must not draw the same id: the device's entropy, mixed with the
  // time and the process id in case random_device is a fixed sequence.
  std::random_device rd;
  const uint64_t t =
      static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  std::mt19937_64 mix((static_cast<uint64_t>(rd()) << 32 | rd()) ^ t ^
                      (static_cast<uint64_t>(::getpid()) << 17));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(mix()));
  return buf;
}

void save_rank_checkpoint(const std::string& dir, int steps_done, const RunConfig& cfg, int rank,
                          int world, const RankState& st, DeviceBackend& device,
                          const std::string& run_id) {
  if (st.empty())
    throw RunError(cfg.strategy + " cannot be checkpointed (it does not describe its state)");
  std::vector<NamedTensor> tensors;
  // Under tensor parallelism each range also says where its values lie in the
  // full model ("runs": per range, [at, full_at, n] pieces).
  json offsets = json::array(), counts = json::array(), runs = json::array();
  int64_t optimizer_steps = 0;
  if (!st.holds_nothing) optimizer_steps = st.optimizer->steps_taken();
  for (size_t i = 0; i < st.offset.size() && !st.holds_nothing; ++i) {
    Optimizer& opt = *st.optimizer;
    const size_t n = st.count[i];
    offsets.push_back(st.offset[i]);
    counts.push_back(n);
    if (st.slice) runs.push_back(pieces_json(full_pieces(st.slice, st.offset[i], n)));
    NamedTensor w{"weight/" + std::to_string(i), {static_cast<int64_t>(n)}, std::vector<float>(n)};
    if (!opt.mixed() && st.weight[i]) {
      read_to_host(device, w.data.data(), *st.weight[i], st.weight_at[i], n);
    } else {
      // The fp32 masters, or fp32 weights in the offload file (--offload-params).
      std::vector<float> all(opt.ranges()[i].numel);  // the shard's padding is dropped
      if (opt.mixed())
        opt.read_master(i, all.data());
      else
        opt.read_param(i, all.data());
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
  json buffers = json::array();
  if (st.buffer_count > 0 && st.read_buffers) {
    NamedTensor b{
        "buffer/0", {static_cast<int64_t>(st.buffer_count)}, std::vector<float>(st.buffer_count)};
    st.read_buffers(b.data.data());
    tensors.push_back(std::move(b));
    buffers = {st.buffer_offset, st.buffer_count};
  }
  json buffer_runs = json::array();
  if (st.slice && !buffers.empty())
    buffer_runs = pieces_json(full_pieces(st.slice, st.buffer_offset, st.buffer_count));
  const LossScaler::State sc = st.precision ? st.precision->scaler().state() : LossScaler::State{};
  json meta = {{"format", kFormat},
               {"run_id", run_id},
               {"rank", rank},
               {"world", world},
               {"steps_done", steps_done},
               {"optimizer_steps", optimizer_steps},
               {"scale", sc.scale},
               {"good_steps", sc.good_steps},
               {"skipped", sc.skipped},
               {"offsets", offsets},
               {"counts", counts},
               {"buffers", buffers}};
  if (st.slice) {
    meta["runs"] = runs;
    meta["buffer_runs"] = buffer_runs;
  }
  const std::string path =
      (fs::path(dir) / step_dir_name(steps_done) / rank_file_name(rank)).string();
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec)
    throw RunError("checkpoint: cannot create directory '" + fs::path(path).parent_path().string() +
                   "': " + ec.message());
  try {
    save_safetensors(path, tensors, {{"shardlab", meta.dump()}});
  } catch (const SafetensorsError& e) {
    throw RunError(std::string("checkpoint: ") + e.what());
  }
}

namespace {

// The run id in a rank file's metadata, from its header alone; "" for none.
std::string rank_file_run_id(const std::map<std::string, std::string>& meta) {
  const auto it = meta.find("shardlab");
  if (it == meta.end()) return "";
  const json m = json::parse(it->second, nullptr, false);
  if (!m.is_object() || !m.contains("run_id") || !m["run_id"].is_string()) return "";
  return m["run_id"].get<std::string>();
}

// "run 3f2a…'s", or whose a file without a run id is.
std::string whose(const std::string& id) {
  return id.empty() ? "an older Shardlab's (no run id)" : "run " + id + "'s";
}

}  // namespace

void commit_checkpoint(const std::string& dir, int steps_done, const RunConfig& cfg, int world,
                       const std::vector<double>& losses, const std::string& run_id) {
  const fs::path step_dir = fs::path(dir) / step_dir_name(steps_done);
  json ranks = json::array();
  for (int r = 0; r < world; ++r) {
    ranks.push_back(rank_file_name(r));
    // Another run saving into this directory at the same time replaces files
    // of ours: the step is then not made to count (it would resume as a mix).
    const std::string path = (step_dir / rank_file_name(r)).string();
    std::map<std::string, std::string> meta;
    try {
      read_safetensors_header(path, meta);
    } catch (const SafetensorsError& e) {
      throw RunError(std::string("checkpoint after step ") + std::to_string(steps_done) + ": " +
                     e.what());
    }
    const std::string theirs = rank_file_run_id(meta);
    if (theirs != run_id)
      throw RunError("checkpoint after step " + std::to_string(steps_done) + ": '" + path +
                     "' is " + whose(theirs) + ", not this run's (" + run_id +
                     "): another run is saving into --checkpoint-dir '" + dir +
                     "' (valid: one run per checkpoint directory)");
  }
  const json manifest = {
      {"format", kFormat},
      {"version", kVersion},
      {"run_id", run_id},
      {"steps_done", steps_done},
      {"world", world},
      {"settings", config_json(cfg)},
      {"ranks", ranks},
      {"losses", std::vector<double>(losses.begin(), losses.begin() + steps_done)}};
  write_atomic((step_dir / "manifest.json").string(), manifest.dump(1) + "\n",
               "checkpoint manifest");
  write_atomic((fs::path(dir) / "latest").string(), step_dir_name(steps_done) + "\n",
               "checkpoint pointer");
}

namespace {

// The step of a "step-N" directory name; -1 for any other name.
int64_t step_of(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return -1;
  int64_t n = -1;
  const char* first = name.data() + 5;
  const char* last = name.data() + name.size();
  const auto [end, ec] = std::from_chars(first, last, n);
  return ec == std::errc() && end == last ? n : -1;
}

// The complete checkpoints under `dir`, newest first: by step number, not by
// name ("step-1000000" sorts before "step-999999" as text).
std::vector<fs::path> complete_checkpoints(const fs::path& dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  if (fs::exists(dir / "manifest.json")) return {dir};
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && e.is_directory() && fs::exists(e.path() / "manifest.json"))
      found.emplace_back(step, e.path());
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<fs::path> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

fs::path resolved(const fs::path& p) {
  std::error_code ec;
  const fs::path abs = fs::absolute(p, ec);
  if (ec) return p.lexically_normal();
  const fs::path r = fs::weakly_canonical(abs, ec);
  return ec ? abs.lexically_normal() : r;
}

}  // namespace

bool has_complete_checkpoint(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && !complete_checkpoints(dir).empty();
}

void check_checkpoint_dir(const std::string& dir, const ResumeState* resume) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw ConfigError("--checkpoint-dir '" + dir +
                      "' is not a directory (valid: a directory, created when missing)");
  fs::create_directories(dir, ec);
  if (ec) throw ConfigError("--checkpoint-dir '" + dir + "': cannot create it: " + ec.message());
  // The real test, as the run will do it: a directory made and removed again
  // (a read-only directory otherwise failed only at the first checkpoint, with
  // "No such file or directory"). Unique per process: ranks check at once.
  const fs::path probe =
      fs::path(dir) / (".shardlab-write-check-" + std::to_string(::getpid()) + "-" + new_run_id());
  if (::mkdir(probe.c_str(), 0700) != 0) {
    const int err = errno;
    throw ConfigError("--checkpoint-dir '" + dir + "' is not writable: " + std::strerror(err) +
                      " (valid: a directory this user can create files in)");
  }
  ::rmdir(probe.c_str());
  const std::vector<fs::path> found = complete_checkpoints(dir);
  if (found.empty()) return;
  const std::string newest = found.front().filename().string();
  if (!resume)
    throw ConfigError("--checkpoint-dir '" + dir + "' already holds another run's checkpoints (" +
                      newest + " the newest), which this run would overwrite or mix its files " +
                      "with (valid: --resume " + dir +
                      " to continue that run, or an empty or new directory)");
  const fs::path from = resolved(resume->path);
  if (from != resolved(found.front()))
    throw ConfigError("--checkpoint-dir '" + dir + "' holds checkpoints up to " + newest +
                      " that this run, resumed from '" + resume->path +
                      "', would overwrite or mix its files with (valid: --resume " + dir +
                      ", which continues from " + newest + ", or an empty or new directory)");
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
    if (m.at("format") != kFormat || !m.at("version").is_number_integer() ||
        m.at("version").get<int>() < 1 || m.at("version").get<int>() > kVersion)
      throw bad(mpath + " is not a version 1 to " + std::to_string(kVersion) +
                " Shardlab checkpoint manifest");
    const int version = m.at("version").get<int>();
    if (version >= 2) {
      r.run_id = m.at("run_id").get<std::string>();
      if (r.run_id.empty()) throw bad(mpath + ": 'run_id' is empty");
    }
    r.steps_done = m.at("steps_done").get<int>();
    const int64_t named = step_of(step_dir.filename().string());
    if (named >= 0 && named != r.steps_done)
      throw bad(mpath + " says " + std::to_string(r.steps_done) + " steps done, its directory " +
                step_dir.filename().string());
    json s = m.at("settings");
    if (version < 3 && s.is_object()) {
      // Versions 1 and 2 wrote the unset ones as 0 and "".
      if (s.contains("seq") && s["seq"] == 0) s.erase("seq");
      for (const char* k : {"data", "attention"})
        if (s.contains(k) && s[k] == "") s.erase(k);
    }
    // What resuming compares (check_resume) must be there; the rest is read too.
    r.saved =
        config_from_json(JsonChecker(mpath, "checkpoint manifest"), s, "settings",
                         {"model", "seed", "batch", "strategy", "world", "steps", "optimizer"});
    r.losses = m.at("losses").get<std::vector<double>>();
    // The resumed run reports these as its first steps' losses.
    if (r.steps_done < 0 || r.losses.size() != static_cast<size_t>(r.steps_done))
      throw bad(mpath + " lists " + std::to_string(r.losses.size()) + " losses for " +
                std::to_string(r.steps_done) + " steps done");
    const int world = m.at("world").get<int>();
    if (world < 1 || static_cast<int>(m.at("ranks").size()) != world)
      throw bad(mpath + ": 'ranks' does not list " + std::to_string(world) + " files");
    const size_t total = layout.total();
    const size_t state = layout.state_total();
    const bool adamw = r.saved.optimizer.kind == OptimizerKind::adamw;
    // Parameters, then a +bn model's running statistics (the flat state vector).
    r.weights.assign(state, 0.0f);
    if (adamw) {
      r.exp_avg.assign(total, 0.0f);
      r.exp_avg_sq.assign(total, 0.0f);
    }
    std::vector<char> covered(state, 0);
    // Where range `i` of a rank file (`off`, `n` values) lies in the full
    // model: its "runs" under tensor parallelism, else [off, +n) itself.
    auto pieces_of = [](const json& meta, const json* list, size_t off, size_t n) {
      if (!meta.contains("runs")) return std::vector<Piece>{{0, off, n}};
      std::vector<Piece> out;
      for (const json& p : *list)
        out.push_back({p.at(0).get<size_t>(), p.at(1).get<size_t>(), p.at(2).get<size_t>()});
      return out;
    };
    for (int rank = 0; rank < world; ++rank) {
      const std::string file = m.at("ranks")[rank].get<std::string>();
      if (file.find('/') != std::string::npos || file.find("..") != std::string::npos)
        throw bad(mpath + ": rank file '" + file + "' is not a plain name");
      const std::string path = (step_dir / file).string();
      // The header first: whose file it is, which ranges it holds and that its
      // tensors have their sizes, all before its data is read.
      json meta;
      auto check = [&](const std::vector<TensorHeader>& header,
                       const std::map<std::string, std::string>& fmeta) {
        const auto it = fmeta.find("shardlab");
        if (it == fmeta.end()) throw bad(path + " has no Shardlab metadata");
        meta = json::parse(it->second);
        const std::string theirs = meta.contains("run_id") && meta["run_id"].is_string()
                                       ? meta["run_id"].get<std::string>()
                                       : "";
        if (theirs != r.run_id)
          throw bad(step_dir.filename().string() + " mixes two runs' files: manifest.json is " +
                    whose(r.run_id) + ", " + file + " is " + whose(theirs) +
                    " (two runs saved into one --checkpoint-dir; valid: a checkpoint one run " +
                    "saved whole)");
        if (meta.at("rank").get<int>() != rank || meta.at("steps_done").get<int>() != r.steps_done)
          throw bad(path + " belongs to another rank or step");
        std::map<std::string, size_t> want;  // tensor -> values
        const json& offsets = meta.at("offsets");
        const json& counts = meta.at("counts");
        if (counts.size() != offsets.size())
          throw bad(path + ": " + std::to_string(offsets.size()) + " offsets but " +
                    std::to_string(counts.size()) + " counts");
        const bool sliced = meta.contains("runs");
        if (sliced && meta.at("runs").size() != offsets.size())
          throw bad(path + ": " + std::to_string(offsets.size()) + " ranges but " +
                    std::to_string(meta.at("runs").size()) + " lists of runs");
        // A piece of a range, where it lies in the full model: inside [lo, hi).
        auto check_pieces = [&](const std::vector<Piece>& pieces, size_t n, size_t lo, size_t hi,
                                const std::string& what) {
          for (const Piece& p : pieces)
            if (p.at > n || p.n > n - p.at || p.full_at < lo || p.full_at > hi ||
                p.n > hi - p.full_at)
              throw bad(path + ": " + what + " [" + std::to_string(p.full_at) + ", +" +
                        std::to_string(p.n) + ") lies outside the model's values [" +
                        std::to_string(lo) + ", " + std::to_string(hi) + ")");
        };
        for (size_t i = 0; i < offsets.size(); ++i) {
          const size_t off = offsets[i].get<size_t>(), n = counts[i].get<size_t>();
          if (sliced)
            check_pieces(pieces_of(meta, &meta.at("runs").at(i), off, n), n, 0, total,
                         "range " + std::to_string(i));
          else if (off > total || n > total - off)
            throw bad(path + ": range " + std::to_string(i) + " [" + std::to_string(off) + ", +" +
                      std::to_string(n) + ") lies outside the model's " + std::to_string(total) +
                      " values");
          want["weight/" + std::to_string(i)] = n;
          if (adamw) {
            want["exp_avg/" + std::to_string(i)] = n;
            want["exp_avg_sq/" + std::to_string(i)] = n;
          }
        }
        const json buffers = meta.contains("buffers") ? meta["buffers"] : json::array();
        if (!buffers.empty()) {
          const size_t off = buffers.at(0).get<size_t>(), n = buffers.at(1).get<size_t>();
          if (sliced)
            check_pieces(pieces_of(meta, &meta.at("buffer_runs"), off, n), n, total, state,
                         "buffers");
          else if (off < total || off > state || n > state - off)
            throw bad(path + ": buffers [" + std::to_string(off) + ", +" + std::to_string(n) +
                      ") lie outside the model's running statistics [" + std::to_string(total) +
                      ", " + std::to_string(state) + ")");
          want["buffer/0"] = n;
        }
        for (const TensorHeader& t : header) {
          const auto w = want.find(t.name);
          if (w == want.end())
            throw bad(path + ": tensor '" + t.name + "' is not one its metadata describes");
          if (t.numel() != w->second)
            throw bad(path + ": tensor '" + t.name + "' has " + std::to_string(t.numel()) +
                      " values, its range " + std::to_string(w->second));
          want.erase(w);
        }
        if (!want.empty()) throw bad(path + ": tensor '" + want.begin()->first + "' is missing");
      };
      std::vector<NamedTensor> tensors;
      try {
        std::map<std::string, std::string> fmeta;
        tensors = load_safetensors(path, fmeta, check);
      } catch (const SafetensorsError& e) {
        throw bad(e.what());
      }
      // Weights or moments holding NaN or Inf would train to a NaN loss.
      if (const std::string nonfinite = find_nonfinite(tensors); !nonfinite.empty())
        throw bad(path + ": " + nonfinite +
                  "; training from it would give NaN (valid: a checkpoint of finite values, "
                  "e.g. an earlier step's)");
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
      // A value held by two ranks (replicas, or a tensor every tp rank holds
      // whole) must be the same bits.
      auto take = [&](const NamedTensor& t, const std::vector<Piece>& pieces,
                      std::vector<float>& into, const std::string& name) {
        for (const Piece& p : pieces)
          for (size_t k = 0; k < p.n; ++k) {
            const float v = t.data[p.at + k];
            float& slot = into[p.full_at + k];
            if (covered[p.full_at + k] && std::memcmp(&slot, &v, sizeof v) != 0)
              throw bad(path + ": '" + name + "' at offset " + std::to_string(p.full_at + k) +
                        " differs from another rank's copy");
            slot = v;
          }
      };
      auto cover = [&](const std::vector<Piece>& pieces) {
        for (const Piece& p : pieces)
          std::fill_n(covered.begin() + static_cast<std::ptrdiff_t>(p.full_at), p.n, 1);
      };
      for (size_t i = 0; i < offsets.size(); ++i) {
        const size_t off = offsets[i].get<size_t>(), n = counts.at(i).get<size_t>();
        const std::vector<Piece> pieces =
            pieces_of(meta, meta.contains("runs") ? &meta["runs"][i] : nullptr, off, n);
        auto tensor = [&](const std::string& name) -> const NamedTensor& {
          return *by_name.at(name + "/" + std::to_string(i));
        };
        take(tensor("weight"), pieces, r.weights, "weight");
        if (adamw) {
          take(tensor("exp_avg"), pieces, r.exp_avg, "exp_avg");
          take(tensor("exp_avg_sq"), pieces, r.exp_avg_sq, "exp_avg_sq");
        }
        cover(pieces);
      }
      // BatchNorm running statistics: [offset, +count) after the parameters.
      const json buffers = meta.contains("buffers") ? meta["buffers"] : json::array();
      if (!buffers.empty()) {
        const size_t off = buffers.at(0).get<size_t>(), n = buffers.at(1).get<size_t>();
        const std::vector<Piece> pieces =
            pieces_of(meta, meta.contains("runs") ? &meta["buffer_runs"] : nullptr, off, n);
        take(*by_name.at("buffer/0"), pieces, r.weights, "buffer");
        cover(pieces);
      }
    }
    const auto hole = std::find(covered.begin(), covered.end(), 0);
    if (hole != covered.end())
      throw bad("no rank saved the value at offset " + std::to_string(hole - covered.begin()) +
                " of " + std::to_string(covered.size()) + " (an incomplete checkpoint)");
  } catch (const json::exception& e) {
    throw bad(mpath + " or a rank file is malformed: " + e.what());
  } catch (const std::out_of_range& e) {
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
  if (st.holds_nothing) return;
  Optimizer& opt = *st.optimizer;
  opt.set_steps_taken(r.optimizer_steps);
  if (st.precision) st.precision->scaler().restore(r.scaler);
  if (!opt.has_moments()) return;
  for (size_t i = 0; i < st.offset.size(); ++i) {
    const size_t off = st.offset[i], n = st.count[i];
    if (!st.slice) {
      opt.load_moment(i, false, r.exp_avg.data() + off, n);
      opt.load_moment(i, true, r.exp_avg_sq.data() + off, n);
      continue;
    }
    // A slice's range, gathered from where its pieces lie (padding: zeros,
    // as it trained: its gradient is always zero).
    for (const bool second : {false, true}) {
      const std::vector<float>& full = second ? r.exp_avg_sq : r.exp_avg;
      std::vector<float> mine(n, 0.0f);
      for (const Piece& p : full_pieces(st.slice, off, n))
        std::copy_n(full.begin() + static_cast<std::ptrdiff_t>(p.full_at), p.n,
                    mine.begin() + static_cast<std::ptrdiff_t>(p.at));
      opt.load_moment(i, second, mine.data(), n);
    }
  }
}

}  // namespace shardlab
