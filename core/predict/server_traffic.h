// A parameter server's traffic by formula (ps: strategies/ps.cpp) beside an
// all-reduce's, and the staleness its workers' spans record: what the run
// summary, the bench and the views set against what was measured.
#pragma once
#include <optional>
#include <vector>

#include "core/config.h"
#include "core/record/recorder.h"

namespace shardlab {

// Bytes one step moves through each kind of rank: a server receives its
// shard's gradient from every worker and sends its parameters back to every
// worker (W·Ψ/S each way, Ψ/S padded to equal shards); a worker sends and
// receives the whole padded model once (Ψ each way).
struct ServerTraffic {
  int servers = 0, workers = 0;
  double model_bytes = 0;  // Ψ: the model's parameters in the run's dtype, padded to S shards
  double shard_bytes = 0;  // Ψ/S, padded
  double server_in = 0, server_out = 0;
  double worker_in = 0, worker_out = 0;
  // A ring all-reduce among the same workers as peers (ddp at world W), for
  // comparison: 2(W−1)/W·Ψ sent by every rank (Ψ unpadded), whatever W.
  double all_reduce_per_rank = 0;
};
// nullopt for a strategy without servers; throws ConfigError for an unknown
// strategy or model.
std::optional<ServerTraffic> predict_server_traffic(const RunConfig& cfg);

// Records span s's staleness into by_step[s.step] as the largest seen
// (by_step grows as needed; -1 where no span of that step had one).
void note_staleness(std::vector<int>& by_step, const Span& s);

}  // namespace shardlab
