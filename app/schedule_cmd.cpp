// `shardlab schedule NAME|FILE`: a pipeline schedule as text (one line of
// actions per rank), checked by the validator, and its order's own bubble and
// activations on dedicated devices with unit costs.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "app/args.h"
#include "app/commands.h"
#include "core/config.h"
#include "core/parallel/schedule.h"
#include "core/parallel/strategy.h"

namespace shardlab::app {
namespace {

std::string names_text() {
  std::string s;
  for (const std::string& n : schedule_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string help_text() {
  return "usage: shardlab schedule NAME [--stages P] [--micro-batches M] [--virtual-stages V]\n"
         "       shardlab schedule FILE [--stages P] [--micro-batches M] [--virtual-stages V]\n\n"
         "Prints a pipeline schedule in Shardlab's action language, one line per rank:\n"
         "  rank 0: F0 F1 B0 F2 B1 F3 B2 B3\n"
         "F<m> is micro-batch m's forward, B<m> its backward, W<m> its weight gradient (a B\n"
         "whose W the rank also runs computes only the input gradient); F<m>.<c> is model\n"
         "chunk c (interleaved: chunk c of rank r is model stage c*P + r). Sends and receives\n"
         "are implied; activations are freed after the B (or the W of a split backward).\n\n"
         "NAME is one of: " +
         names_text() +
         ". A FILE is checked: one line per rank, every F and B of\n"
         "every micro-batch once per rank, each B after its F, each W after its B, and no\n"
         "deadlock; a bad schedule is refused in one line naming the rank and the action.\n\n"
         "  --stages P          ranks in the pipeline (NAME: default 4; FILE: its lines)\n"
         "  --micro-batches M   (NAME: default 8; FILE: the largest it names + 1)\n"
         "  --virtual-stages V  model chunks per rank (interleaved: default 2; others 1)\n\n"
         "Then the order on P dedicated devices with unit costs (F 1, B 2, or B 1 and W 1\n"
         "when split; transfers free), the way the papers draw schedules: per rank its\n"
         "busy and idle units, the micro-batches whose activations it holds at most, and\n"
         "the bubble beside the formula of the named schedule it is nearest to.\n\n"
         "A real run's send completes only once its receiver has posted the receive, and a\n"
         "rank waits for its last action's sends before its next action. Where an order\n"
         "would leave two ranks each waiting for the other to take its send, the run posts\n"
         "a receive earlier than usual (its buffer is held from then on): the lines\n"
         "'rank R posts the receive its F<m> reads before its action N' say where.\n";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ConfigError("'" + path + "' is neither a schedule name nor a readable file (valid: " +
                      names_text() + ", or a schedule file)");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int cmd_schedule(int argc, char** argv) {
  const Args a(argc, argv, "schedule", {"stages", "micro-batches", "virtual-stages"}, {},
               Args::Positionals::allowed);
  if (a.help()) {
    std::printf("%s", help_text().c_str());
    return 0;
  }
  if (a.positional().size() != 1)
    throw ConfigError(a.positional().empty()
                          ? "'shardlab schedule' needs a schedule name or file (valid: " +
                                names_text() + ", or a file)"
                          : "'shardlab schedule' takes one schedule, got " +
                                std::to_string(a.positional().size()));
  const std::string what = a.positional()[0];
  bool named = false;
  for (const std::string& n : schedule_names()) named = named || n == what;
  const auto size = [&](const char* option, int fallback) {
    const int v = a.integer(option, fallback, "1 to 64");
    if (v < 1 || v > 64)
      throw ConfigError("--" + std::string(option) + " " + std::to_string(v) +
                        " is out of range (valid: 1 to 64)");
    return v;
  };
  Schedule s;
  if (named) {
    const int P = size("stages", 4), M = size("micro-batches", 8);
    // A strategy that reads --virtual-stages defaults to 2 chunks, as `run` does.
    const StrategyInfo* info = find_strategy(what);
    const bool chunked = info && info->reads_option(StrategyOption::virtual_stages);
    const int V = size("virtual-stages", chunked ? 2 : 1);
    s = named_schedule(what, P, M, V);
  } else {
    s = parse_schedule(read_file(what), what);
    // The sizes it names, unless given (then they must be what it runs).
    const int P = size("stages", s.stages), M = size("micro-batches", s.micro_batches);
    const int V = size("virtual-stages", s.chunks);
    validate_schedule(s, P, M, V);
    s.micro_batches = M;
    s.chunks = V;
  }
  const std::string title =
      what + ", " + std::to_string(s.stages) + " stages, " + std::to_string(s.micro_batches) +
      " micro-batches" + (s.chunks > 1 ? ", " + std::to_string(s.chunks) + " chunks per rank" : "");
  const UnitTiming t = unit_timing(s);
  std::printf("%s", format_schedule(s, title).c_str());
  std::printf(
      "\nOn %d dedicated devices, unit costs (F 1, B 2, or B 1 + W 1 when split; "
      "transfers free):\n",
      s.stages);
  std::printf("  rank  busy  idle  idle share  activations held at most\n");
  for (int r = 0; r < s.stages; ++r)
    std::printf("  %4d  %4.0f  %4.0f  %9.1f%%  %d micro-batch%s (%d before their B)\n", r,
                t.busy[r], t.makespan - t.busy[r], 100 * t.bubble_share(r), t.peak_alive[r],
                s.chunks > 1 ? (t.peak_alive[r] == 1 ? " chunk" : " chunks")
                             : (t.peak_alive[r] == 1 ? "" : "es"),
                t.peak_unbacked[r]);
  // Where a real run needs a receive posted earlier than the executor's usual
  // rules (its buffer is held from then on): the order would hang without.
  const ReceivePlan plan = plan_receives(s);
  for (const ReceivePlan::Mend& m : plan.mended) {
    const Action reader{m.message.gradient ? ActionKind::backward : ActionKind::forward,
                        m.message.micro_batch, m.message.chunk};
    std::printf(
        "rank %d posts the receive its %s reads before its action %zu (%s), early: rank %d "
        "waits for it to be taken before going on (its buffer is held from then)\n",
        m.rank, to_string(reader, s.chunks).c_str(), m.action + 1,
        to_string(s.ranks[m.rank][m.action], s.chunks).c_str(), m.message.from);
  }
  // The named schedule whose formula this order is measured against.
  const NearestFormula nearest = nearest_formula(s);
  std::printf("step %.0f units; idle / compute on the busiest rank %.3f (%s = %.3f)\n", t.makespan,
              t.bubble_over_compute(), nearest.text.c_str(), nearest.value);
  return 0;
}

}  // namespace shardlab::app
