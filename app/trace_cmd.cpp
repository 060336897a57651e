// `shardlab trace merge`: one Chrome trace from the traces the processes of a
// run wrote (one per rank, on rank 0's clock), with send->recv arrows across them.
#include <cstdio>
#include <string>
#include <vector>

#include "app/args.h"
#include "app/commands.h"
#include "core/io/json_file.h"
#include "core/model/checkpoint.h"
#include "core/record/trace.h"

namespace shardlab::app {

namespace {
const char* kTraceHelp = R"(usage: shardlab trace merge --out MERGED.json TRACE.json...

When the ranks of a run are processes (shardlab launch, torchrun, mpirun), each
writes its own trace ('shardlab run --trace T.json' writes T.rank<R>.json). Merge
makes one trace with a process per rank: every process's times are already on
rank 0's clock (each measured its offset at rendezvous), and the send->recv
arrows between ranks are drawn again across the files.
)";
constexpr int64_t kMaxTraceBytes = int64_t{1} << 30;  // 1 GiB per file
}  // namespace

int cmd_trace(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) != "merge") {
    if (argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
      std::printf("%s", kTraceHelp);
      return 0;
    }
    throw ConfigError(std::string("'shardlab trace' takes 'merge'") +
                      (argc >= 2 ? ", not '" + std::string(argv[1]) + "'" : "") +
                      " (see 'shardlab trace --help')");
  }
  const Args a(argc - 1, argv + 1, "trace merge", {"out"}, {}, Args::Positionals::allowed);
  if (a.help()) {
    std::printf("%s", kTraceHelp);
    return 0;
  }
  const auto out = a.get("out");
  if (!out) throw ConfigError("'shardlab trace merge' needs --out MERGED.json");
  const std::vector<std::string>& files = a.positional();
  if (files.empty()) throw ConfigError("'shardlab trace merge' needs the traces to merge");
  for (const std::string& f : files)
    if (f == *out)
      throw ConfigError("--out '" + *out + "' is also an input (valid: a new file for the merge)");
  check_writable(*out, "--out");
  std::vector<nlohmann::json> traces;
  for (const std::string& f : files)
    traces.push_back(read_json_file(f, "trace", kMaxTraceBytes, 64));
  nlohmann::json merged;
  try {
    merged = merge_traces(traces, files);
  } catch (const std::runtime_error& e) {
    throw ConfigError(e.what());
  }
  write_trace_json(*out, merged);
  std::printf("merged %zu traces into %s\n", files.size(), out->c_str());
  return 0;
}

}  // namespace shardlab::app
