// `shardlab run` (one configuration, a summary, optional trace/checkpoints)
// and `shardlab demo` (every strategy on the default model, side by side).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>

#include "app/args.h"
#include "app/commands.h"
#include "app/config_args.h"
#include "app/process_run.h"
#include "app/summary.h"
#include "core/comm/cores.h"
#include "core/comm/placement.h"
#include "core/launch/launch_env.h"
#include "core/model/checkpoint.h"
#include "core/model/model_family.h"
#include "core/parallel/strategy.h"
#include "core/predict/memory_estimate.h"
#include "core/record/live_stream.h"
#include "core/record/trace.h"
#include "core/run/recording.h"
#include "core/run/runner.h"
#include "core/run/train_checkpoint.h"

namespace shardlab::app {

namespace {

const char* kRunHelp = R"(usage: shardlab run [options]

Train a model under one parallel strategy, with ranks as threads talking
through Gloo over TCP on 127.0.0.1 (or NCCL on GPUs), and print a summary.

  --model SPEC        mlp:LxD, L Linear(D,D) layers with GELU between (default mlp:8x256);
                      mlp:LxD+bn adds BatchNorm1d(D) between each hidden Linear and its GELU
                      (batch statistics per micro-batch; single, naive-mp, gpipe, 1f1b; fp32);
                      gpt:LxCxH, nanoGPT's GPT-2 with L blocks, C channels, H heads, trained
                      on characters with cross-entropy (e.g. gpt:2x64x4)
  --seq T             gpt: context length in characters (default 64)
  --data FILE         gpt: UTF-8 text to train on (default: assets/corpus.txt, the project's
                      own English and Chinese lesson and README texts)
  --attention A       gpt: naive | flash (default: flash on cuda, naive on the CPU). naive keeps
                      the [B,H,T,T] attention matrix for backward; flash (FlashAttention-2) is
                      fused and keeps one fp32 logsumexp per position and head instead
  --strategy NAME     %s (default ddp)
  --world N           number of ranks (default 2)
  --batch N           global batch, split across ranks in rank order (default 64)
  --steps N           training steps (default 100)
  --optimizer NAME    adamw | sgd (default adamw; torch defaults: betas 0.9/0.999, eps 1e-8, wd 0.01)
  --lr X              learning rate (default 1e-3)
  --seed N            seed for init and data (default 1)
  --tf32              cuda, fp32: the model's GEMMs on tensor cores with TF32 inputs (~1e-3
                      relative) instead of exact fp32; refused on the CPU
%s  --device D          cpu | cuda | auto | cpu-guarded (default cpu). cuda: one GPU per
                      rank over NCCL, or ranks sharing GPUs over Gloo with host staging;
                      auto: cuda when a GPU is usable, else cpu; cpu-guarded: the CPU with
                      device memory unreadable outside kernels (checks a strategy is GPU-clean)
  --backend B         auto | gloo | nccl (default auto: nccl with one GPU per rank, else gloo)
  --timeout-ms N      every collective fails after this long (default 30000)
  --no-record         do not record spans/allocation events (memory totals are still measured)
  --trace PATH        write a Chrome trace (Perfetto, chrome://tracing)
  --record PATH       save the whole run (spans, memory, losses, weights, where it ran) for
                      'shardlab gui --open PATH', which shows it without running it
  --save-init PATH    write the initial weights (safetensors, PyTorch names)
  --save-final PATH   write the final weights
  --init-from PATH    start from these weights instead of the seeded init (weights holding
                      NaN or Inf are refused, naming the tensor)
  --allow-nonfinite   with --init-from: load NaN/Inf weights anyway
  --save-data PATH    write the batches used: x, y as [steps, batch, D]
  --checkpoint-every K  save a checkpoint after every K steps into --checkpoint-dir DIR:
                      each rank its own shards of the weights and of AdamW's moments, then
                      a manifest (DIR/step-N/); a checkpoint without its manifest never loads
  --checkpoint-dir DIR  where --checkpoint-every saves
  --resume DIR        continue from the newest complete checkpoint in DIR (the same model,
                      data, seed, batch and optimizer; --steps counts from the start): the
                      final weights equal an uninterrupted run's bit for bit on the same
                      world, strategy and precision; another world or strategy re-shards
  --rdzv URL          with one process per rank (under 'shardlab launch', torchrun, mpirun
                      or Slurm): where the processes meet. env:// (default) is a store on
                      MASTER_ADDR:MASTER_PORT, served by rank 0 or by torchrun's agent;
                      file:///shared/dir is Gloo's FileStore (the directory must exist);
                      redis://host:port Gloo's RedisStore; tcp://host:port a store served
                      by rank 0 there
  --bind-host ADDR    with one process per rank: the address this rank listens on (default
                      127.0.0.1 when MASTER_ADDR is loopback, else this host's address on
                      the route to MASTER_ADDR)
  --live DIR          with one process per rank: each appends what it records (spans,
                      allocations, losses) to DIR/rank<R>.live while it runs, for the app
                      to watch ('shardlab gui' with one process per rank does this)
  --json              print the summary as one JSON object
  --force             run even when the memory check says the run will not fit (the check
                      estimates every rank's peak from what its strategy allocates and
                      refuses, exit 2, a run over the memory available: MemAvailable, or
                      free GPU memory; SHARDLAB_MEMORY_LIMIT=8G sets the limit)

Options a strategy does not read are refused (exit 2), not ignored: --no-overlap
with zero3, or --micro-batches with ddp, is an error naming who reads it.

One process per rank: when a launcher has set RANK and WORLD_SIZE (or Open MPI's
OMPI_COMM_WORLD_*, or Slurm's SLURM_PROCID/SLURM_NTASKS), this process runs that
one rank and the world size is the launcher's. Rank 0 prints the summary and
writes --save-*, --record and --trace (the whole run, on rank 0's clock); every
rank also writes its own trace, --trace T.json giving T.rank<R>.json. After a
restart (shardlab launch --max-restarts, torchrun --max_restarts) the group
resumes from the newest complete checkpoint in --checkpoint-dir.
  shardlab launch --nproc-per-node 4 -- run --strategy zero3
  torchrun --no_python --nproc_per_node 2 --redirects 9:1 --tee 9:1 shardlab run
  mpirun -np 4 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 shardlab run
)";

}  // namespace

namespace {

// Two outputs naming one file would leave only the last one written (and
// --init-from's checkpoint, replaced by another kind of file, would be lost):
// refused before the run. Paths compare resolved (symbolic links, "..", "./").
void check_distinct_paths(const Args& a) {
  auto resolved = [](const std::string& path) {
    // Absolute first: weakly_canonical leaves "a.json" relative but resolves "./a.json".
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    if (ec) return std::filesystem::path(path).lexically_normal();
    const std::filesystem::path p = std::filesystem::weakly_canonical(absolute, ec);
    return ec ? absolute.lexically_normal() : p;
  };
  struct Seen {
    std::string key, typed;
    std::filesystem::path path;
  };
  std::vector<Seen> seen;
  for (const char* key : {"init-from", "save-init", "save-final", "save-data", "trace", "record"}) {
    const auto path = a.get(key);
    if (!path) continue;
    const std::filesystem::path here = resolved(*path);
    for (const Seen& other : seen) {
      // Resuming in place (--init-from w --save-final w) and saving the weights
      // read (--save-init) overwrite a checkpoint with a checkpoint.
      if (other.key == "init-from" &&
          (std::string(key) == "save-final" || std::string(key) == "save-init"))
        continue;
      if (here == other.path)
        throw ConfigError("--" + other.key + " '" + other.typed + "' and --" + key + " '" + *path +
                          "' name the same file (valid: a different path for each)");
    }
    seen.push_back({key, *path, here});
  }
}

// Tests make a rank (a process, or a thread) misbehave the way real ones do:
// SHARDLAB_FAULT=RANK:STEP:ACTION[:ATTEMPT], ACTION one of kill (SIGKILL to
// itself), hang (sleeps forever at the step), exit (exit code 3 mid-run); only
// on restart ATTEMPT (default 0), so a restarted group runs clean.
std::function<void(int, int)> fault_injection(const ProcessEnv& env) {
  const char* text = std::getenv("SHARDLAB_FAULT");
  if (!text || !*text) return nullptr;
  int rank = -1, step = -1, attempt = 0;
  char action[16] = {};
  const int n = std::sscanf(text, "%d:%d:%15[a-z]:%d", &rank, &step, action, &attempt);
  const std::string act = action;
  if (n < 3 || rank < 0 || step < 0 || (act != "kill" && act != "hang" && act != "exit"))
    throw ConfigError("SHARDLAB_FAULT '" + std::string(text) +
                      "' is invalid (valid: RANK:STEP:kill|hang|exit[:ATTEMPT])");
  if ((env.present && rank != env.rank) || attempt != env.restart) return nullptr;
  // Ranks as threads: the hook runs on every rank's thread.
  return [rank, step, act](int r, int s) {
    if (r != rank || s != step) return;
    std::fprintf(stderr, "SHARDLAB_FAULT: %s at step %d\n", act.c_str(), s + 1);
    std::fflush(stderr);
    if (act == "kill") raise(SIGKILL);
    if (act == "exit") std::_Exit(3);
    while (true) std::this_thread::sleep_for(std::chrono::hours(1));
  };
}

// "out/t.json" -> "out/t.rank3.json": the trace one process writes of its rank.
std::string rank_trace_path(const std::string& path, int rank) {
  const std::filesystem::path p(path);
  const std::string ext = p.extension().string();
  const std::string stem = ext.empty() ? path : path.substr(0, path.size() - ext.size());
  return stem + ".rank" + std::to_string(rank) + (ext.empty() ? ".json" : ext);
}

// What a rank other than 0 says at the end: its clock against rank 0's, its peak.
void print_process_line(const RunResult& r, const std::string& trace) {
  const int rank = r.process_rank;
  const auto at = [&](const std::vector<int64_t>& v) {
    return rank >= 0 && static_cast<size_t>(rank) < v.size() ? static_cast<double>(v[rank]) / 1e3
                                                             : 0.0;
  };
  std::printf(
      "rank %d of %d done: %d steps, clock %+.1f us from rank 0's (round trip %.1f us), "
      "peak %s%s%s\n",
      rank, r.cfg.world, r.cfg.steps, at(r.clock_offset_ns), at(r.clock_rtt_ns),
      human_bytes(static_cast<double>(r.ranks[rank].memory.device.peak_total)).c_str(),
      trace.empty() ? "" : ", trace ", trace.c_str());
}

std::vector<Recorder::Snapshot> snapshots(const RunResult& r) {
  std::vector<Recorder::Snapshot> s;
  for (const auto& rec : r.recorders) s.push_back(rec->snapshot());
  return s;
}

}  // namespace

namespace {

std::set<std::string> run_command_options() {
  std::set<std::string> o = run_options();
  o.insert({"checkpoint-every", "checkpoint-dir", "resume", "rdzv", "bind-host", "live"});
  return o;
}

// --checkpoint-every/--checkpoint-dir/--resume, checked before the run.
Checkpointing checkpointing_from(const Args& a) {
  Checkpointing ck;
  if (a.has("checkpoint-every") && !a.has("checkpoint-dir"))
    throw ConfigError("--checkpoint-every needs --checkpoint-dir DIR (where to save)");
  if (a.has("checkpoint-dir") && !a.has("checkpoint-every"))
    throw ConfigError("--checkpoint-dir needs --checkpoint-every K (how often to save)");
  if (a.has("checkpoint-every")) {
    ck.every = a.integer("checkpoint-every", 0, "1 or more");
    if (ck.every < 1)
      throw ConfigError("--checkpoint-every " + std::to_string(ck.every) +
                        " is invalid (valid: 1 or more)");
    ck.dir = *a.get("checkpoint-dir");
    std::error_code ec;
    if (std::filesystem::exists(ck.dir, ec) && !std::filesystem::is_directory(ck.dir, ec))
      throw ConfigError("--checkpoint-dir '" + ck.dir +
                        "' is not a directory (valid: a directory, created when missing)");
    std::filesystem::create_directories(ck.dir, ec);
    if (ec)
      throw ConfigError("--checkpoint-dir '" + ck.dir + "': cannot create it: " + ec.message());
  }
  if (a.has("resume") && a.has("init-from"))
    throw ConfigError(
        "--resume and --init-from both name the starting weights (valid: one of them)");
  return ck;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  const Args a(argc, argv, "run", run_command_options(), run_flags());
  if (a.help()) {
    std::printf(kRunHelp, strategy_names().c_str(), strategy_option_help().c_str());
    return 0;
  }
  // Launched as one rank of a group (shardlab launch, torchrun, mpirun, Slurm)?
  const ProcessEnv penv = detect_process_env();
  RunConfig cfg = config_from(a);
  if (penv.present) {
    if (a.has("world") && cfg.world != penv.world)
      throw ConfigError("--world " + std::to_string(cfg.world) + " disagrees with the " +
                        penv.launcher + " group of " + std::to_string(penv.world) +
                        " processes (valid: --world " + std::to_string(penv.world) +
                        ", or leave it out)");
    cfg.world = penv.world;
    cfg.ranks_on_host = penv.local_world;
  } else {
    for (const char* key : {"rdzv", "bind-host", "live"})
      if (a.has(key))
        throw ConfigError(std::string("--") + key +
                          " applies to one process per rank, and no launcher started this one "
                          "(RANK and WORLD_SIZE are unset; valid: shardlab launch, torchrun, "
                          "mpirun or srun, or leave it out)");
  }
  if (auto url = a.get("rdzv")) check_rdzv_directory(parse_rdzv(*url));  // before anything else
  validate(cfg, a.given());
  const ModelLayout layout = make_layout(cfg);
  // Rank 0 of a process group speaks for the run; the other ranks print one line.
  const bool lead = !penv.present || penv.rank == 0;

  // Check every output path before spending time on the run.
  check_distinct_paths(a);
  for (const char* key : {"trace", "save-init", "save-final", "save-data"})
    if (auto p = a.get(key)) check_writable(*p, std::string("--") + key);
  if (cfg.record == false && a.has("trace"))
    throw ConfigError("--trace needs recording (remove --no-record)");
  if (auto p = a.get("record")) {
    if (!cfg.record) throw ConfigError("--record needs recording (remove --no-record)");
    check_recording_path(*p);
  }

  if (a.has("allow-nonfinite") && !a.has("init-from"))
    throw ConfigError(
        "--allow-nonfinite applies to --init-from weights only (add --init-from "
        "PATH, or remove --allow-nonfinite)");

  // Before the initial weights or --save-data take memory: refused in one line
  // when the run cannot fit (--force runs it anyway).
  RunOutputs outputs;
  outputs.save_init = a.has("save-init");
  outputs.save_final = a.has("save-final");
  outputs.save_data = a.has("save-data");
  outputs.trace = a.has("trace");
  outputs.recording = a.has("record");
  outputs.json = a.has("json");
  check_memory(cfg, outputs);

  // (Before --checkpoint-dir is created: a refused run leaves nothing behind.)
  if (a.has("checkpoint-every")) check_checkpointable(cfg);
  Checkpointing ck = checkpointing_from(a);
  // A group restarted after a failure goes on from its last complete checkpoint.
  std::optional<std::string> resume_from = a.get("resume");
  if (!resume_from && penv.present && penv.restart > 0 && ck.every > 0 &&
      has_complete_checkpoint(ck.dir))
    resume_from = ck.dir;
  ResumeState resume;
  std::vector<float> init;
  if (auto p = resume_from) {
    check_checkpointable(cfg);
    resume = load_checkpoint(*p, layout);
    check_resume(cfg, resume);
    ck.resume = &resume;
    init = resume.weights;
  } else if (auto p = a.get("init-from")) {
    init = load_params(*p, layout, a.has("allow-nonfinite"));
  } else {
    init = init_params(layout, cfg.seed);
  }
  // Before anything is written: the directory must take this run's checkpoints
  // (writable, and holding no other run's; run_training checks again).
  if (ck.every > 0) check_checkpoint_dir(ck.dir, resume_from ? &resume : nullptr);
  if (lead) {
    if (auto p = a.get("save-init")) save_params(*p, layout, init);
    if (auto p = a.get("save-data"))
      save_data(*p, layout, *layout.family().dataset(layout, cfg.seed, cfg), cfg.steps, cfg.batch);
  }

  // One process per rank: meet the others in the store before training.
  std::unique_ptr<ProcessRun> proc;
  std::function<void(int, int)> fault;
  if (penv.present) check_process_config(cfg);
  fault = fault_injection(penv);
  if (penv.present)
    proc = join_process_run(penv, a.str("rdzv", "env://"), a.str("bind-host", ""), cfg.timeout_ms);

  const bool json = a.has("json");
  if (!json && lead)
    std::printf(
        "shardlab run: %s (%zu params), %s, world %d%s, batch %d, %d steps, %s lr %g, seed %llu\n",
        cfg.model.c_str(), layout.unique_total(), cfg.strategy.c_str(), cfg.world,
        cfg.mesh.empty() ? "" : (" (mesh " + run_mesh(cfg).text() + ")").c_str(), cfg.batch,
        cfg.steps, to_string(cfg.optimizer.kind), cfg.optimizer.lr,
        static_cast<unsigned long long>(cfg.seed));

  // Progress on stderr, at most once a second, so long runs show they are alive.
  RunCallbacks cb;
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  cb.on_step = [&](int step, double loss) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::seconds(1) && step + 1 != cfg.steps) return;
    if (now - start < std::chrono::seconds(1)) return;
    last = now;
    std::fprintf(stderr, "  step %d/%d  loss %.6g\n", step + 1, cfg.steps, loss);
  };
  if (!lead) cb.on_step = nullptr;
  cb.before_step = fault;
  // A rank thread stuck outside any communication cannot be unwound: the command ends here.
  cb.on_stuck = [](const std::string& message) {
    std::fprintf(stderr, "error: %s, so the run ends here\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  };
  if (proc && !json && lead)
    std::printf("  %d processes (%s), rendezvous %s\n", penv.world, penv.launcher.c_str(),
                proc->rdzv.c_str());
  if (ck.resume && !json && lead)
    std::printf("  %sresuming from %s after step %d\n",
                !a.has("resume") ? ("restart " + std::to_string(penv.restart) + ": ").c_str() : "",
                resume.path.c_str(), resume.steps_done);
  // --live: this rank's records appended to its file as they happen (the app watches).
  std::unique_ptr<LiveWriter> live;
  if (auto dir = a.get("live")) {
    const int rank = penv.rank;
    cb.on_recorders = [&live, dir, rank](const std::vector<std::shared_ptr<Recorder>>& recs,
                                         int64_t t0) {
      live = std::make_unique<LiveWriter>(live_file(*dir, rank), recs.at(rank), t0);
    };
    auto progress = cb.on_step;
    cb.on_step = [&live, progress](int step, double loss) {
      if (live) live->note_loss(step, loss);
      if (progress) progress(step, loss);
    };
  }
  RunResult r;
  try {
    r = run_training(cfg, ck.resume ? nullptr : &init, cb, proc ? &proc->context : nullptr, ck);
    live.reset();  // the last records appended before the recording is written
  } catch (const std::exception&) {
    // The others still read this rank's word (and, with env://, the store
    // rank 0's process serves) to name the rank that stopped: rank 0 stays a
    // few seconds for them before its process, and the store, end.
    if (proc) leave_process_run(*proc, 3000);
    throw;
  }
  if (proc) leave_process_run(*proc, cfg.timeout_ms);
  if (ck.every > 0 && !json && lead)
    std::printf("  checkpoints every %d steps in %s\n", ck.every, ck.dir.c_str());

  if (proc) {
    // Every process writes its own rank's trace (what 'shardlab trace merge' joins).
    if (auto p = a.get("trace"))
      write_trace(rank_trace_path(*p, penv.rank), snapshots(r), r.t0_ns,
                  trace_metadata(r, penv.rank), penv.rank);
    if (!lead) {
      if (!json)
        print_process_line(
            r, a.get("trace") ? rank_trace_path(*a.get("trace"), penv.rank) : std::string());
      return 0;
    }
  }
  if (auto p = a.get("save-final")) save_params(*p, layout, r.final_params);
  if (auto p = a.get("trace")) write_trace(*p, snapshots(r), r.t0_ns, trace_metadata(r));
  if (auto p = a.get("record")) save_recording(*p, r);

  if (json) {
    nlohmann::json j = summary_json(r);
    if (auto p = a.get("trace")) j["trace"] = *p;
    if (auto p = a.get("record")) j["recording"] = *p;
    std::cout << j.dump() << "\n";
  } else {
    print_summary(r);
    if (auto p = a.get("trace")) {
      if (proc)
        std::printf("  each rank's own trace written to %s (rank 0's here)\n",
                    rank_trace_path(*p, 0).c_str());
      std::printf("  trace written to %s\n", p->c_str());
    }
    if (auto p = a.get("record"))
      std::printf("  recording written to %s (open it with 'shardlab gui --open %s')\n", p->c_str(),
                  p->c_str());
  }
  return 0;
}

int cmd_demo(int argc, char** argv) {
  const Args a(argc, argv, "demo", {"out", "steps", "model", "device", "backend"}, {"force"});
  if (a.help()) {
    std::printf(
        "usage: shardlab demo [--out DIR] [--steps N] [--model SPEC] [--device D] [--backend B]\n"
        "                     [--force]\n\n"
        "Runs every strategy on the same model and data, prints a comparison,\n"
        "and writes one Chrome trace per strategy into DIR (default shardlab-demo).\n"
        "--device, --backend and --force as for 'shardlab run' (default cpu, auto).\n");
    return 0;
  }
  const std::string out = a.str("out", "shardlab-demo");
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) throw ConfigError("cannot create --out '" + out + "': " + ec.message());

  RunConfig base;
  base.model = a.str("model", "mlp:8x256");
  base.steps = a.integer("steps", 30);
  base.batch = 64;
  base.device = a.str("device", base.device);
  base.backend = a.str("backend", base.backend);
  base.force = a.has("force");
  validate(base);
  // The reference first, then every other registered strategy.
  std::vector<const StrategyInfo*> order;
  for (const bool reference : {true, false})
    for (const StrategyInfo& s : all_strategies())
      if (s.is_reference() == reference) order.push_back(&s);
  struct Row {
    const StrategyInfo* info;
    RunConfig cfg;
    std::string label;
  };
  std::vector<Row> rows;
  for (const StrategyInfo* info : order) {
    const StrategyInfo& s = *info;
    RunConfig cfg = for_strategy(base, s.name);
    cfg.world = s.world_for(2);
    // A pipeline schedule only differs from naive model parallelism with
    // micro-batches (naive-mp itself has none).
    std::string label = s.name;
    if (s.reads_option(StrategyOption::micro_batches)) {
      cfg.micro_batches = 4;
      label += " M=4";
    }
    // Every run is checked before the first starts: a demo that cannot finish stops now.
    check_memory(cfg, RunOutputs{.trace = true});
    rows.push_back({info, cfg, label});
  }
  std::printf("Shardlab demo: %s, global batch %d, %d steps, AdamW; world 2: %s\n\n",
              base.model.c_str(), base.batch, base.steps, plan_placement(base).summary.c_str());
  const std::string oversubscribed = plan_placement(base).kind == DeviceKind::cpu
                                         ? oversubscription_note(2, cores_available())
                                         : "";
  if (!oversubscribed.empty()) std::printf("Note: %s.\n\n", oversubscribed.c_str());
  std::printf("%-10s %5s %12s %14s %16s %16s  %s\n", "strategy", "world", "final loss",
              "median step", "peak mem/rank", "sent/rank/step", "trace");
  for (const Row& row : rows) {
    const StrategyInfo& s = *row.info;
    const RunConfig& cfg = row.cfg;
    const std::string& label = row.label;
    const RunResult r = run_training(cfg);
    const std::string path = out + "/" + s.name + ".trace.json";
    write_trace(path, snapshots(r), r.t0_ns, trace_metadata(r));
    int64_t peak = 0;
    double sent = 0;
    for (size_t k = 0; k < r.ranks.size(); ++k) {
      peak = std::max(peak, r.ranks[k].memory.device.peak_total);
      sent = std::max(sent, r.ranks[k].bytes_sent_per_step);
    }
    std::printf("%-10s %5d %12.6f %11.3f ms %16s %16s  %s\n", label.c_str(), cfg.world,
                r.losses.back(), r.median_step_ms, human_bytes(peak).c_str(),
                human_bytes(sent).c_str(), path.c_str());
  }
  std::printf(
      "\nTraces written to %s/ — open them in https://ui.perfetto.dev or chrome://tracing.\n",
      std::filesystem::absolute(out).c_str());
  return 0;
}

}  // namespace shardlab::app
