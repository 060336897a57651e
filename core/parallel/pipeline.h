// What the pipeline strategies (naive-mp, gpipe, 1f1b, zb-h1, interleaved)
// share: how layers are cut into stages, a stage's place in the pipeline (a
// value), the checks on the settings, and one stage's forward and backward of
// a micro-batch with the sends and receives around them. The strategies only
// decide the order.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/model/layer_stack.h"
#include "core/model/optimizer.h"
#include "core/model/precision.h"
#include "core/parallel/schedule.h"
#include "core/parallel/strategy.h"

namespace shardlab {

// The pp axis of --mesh, else --stages, or one stage per rank when both are left out.
int pipeline_stages(const RunConfig& cfg);
// The dp axis of --mesh: pipelines side by side, each training on 1/R of the
// batch (1 without a mesh).
int pipeline_replicas(const RunConfig& cfg);
// The stage rank `rank` runs: its pp coordinate on --mesh, else the rank itself.
int pipeline_stage_of(const RunConfig& cfg, int rank);
// The ranks of the first pipeline, by stage (with one pipeline: 0 .. P-1).
std::vector<int> first_pipeline_ranks(const RunConfig& cfg);
// Per layer of the model, which of rank `rank`'s chunks holds it (-1: another
// rank's). A pipeline strategy's run only; assumes validate_pipeline passed.
std::vector<int> chunk_of_layers(const RunConfig& cfg, int rank);
// Model chunks per stage: --virtual-stages (default 2) for a strategy that
// reads it (interleaved), else 1. The model is cut into stages × chunks
// pieces, the partition's entries.
int pipeline_chunks(const RunConfig& cfg);

// Layers per model stage (P·V of them with chunks) balanced by parameter count: the contiguous
// split whose largest stage holds the fewest parameters; among equally good splits the earlier
// stages take the extra layers (mlp:5xD on 3 stages is 2,2,1).
std::vector<int> balanced_partition(const ModelLayout& layout, int stages);
// The same over a measured cost per layer (ms).
std::vector<int> balanced_partition(const std::vector<double>& costs, int stages);

// `--partition cost`: each layer's forward + backward time (ms, the mean of 3
// timed rounds after one warm-up) on one micro-batch of the run's model, fp32,
// on this machine's CPU. Measured once, before the ranks start, and then an
// explicit partition: every rank must cut the model the same way.
std::vector<double> measure_layer_costs(const RunConfig& cfg);

// --partition when given, else balanced_partition into stages × chunks. Assumes
// validate_pipeline passed.
std::vector<int> pipeline_partition(const RunConfig& cfg, const ModelLayout& layout);

// The order the run's stages follow: --schedule's file, read, parsed and
// validated against the pipeline's P stages and M micro-batches (a ConfigError
// in one line naming the file, the rank and the action otherwise); without
// one, the strategy's own (StrategyInfo::schedule).
Schedule run_schedule(const RunConfig& cfg);

// One stage's place in the pipeline, computed once from (rank, partition) and
// passed around as a value: tests build every stage of a pipeline in one process.
// With V chunks per rank, one value per chunk: chunk c of rank r holds model
// stage c·P + r (Megatron's round-robin), and its neighbours are the ranks
// holding model stages c·P + r ± 1, which wraps from rank P−1 to rank 0.
struct StageTopology {
  int rank = 0;         // the stage in the pipeline (its pp rank)
  int stages = 1;       // P
  int chunk = 0;        // which of the rank's chunks
  int model_stage = 0;  // c·P + rank, of P·V
  int first_layer = 0;  // this chunk holds layers [first_layer, last_layer)
  int last_layer = 0;
  int prev = -1;         // rank holding the previous model stage, -1 on the first
  int next = -1;         // rank holding the next model stage, -1 on the last
  bool is_first = true;  // model stage 0: reads the batch
  bool is_last = true;   // the last model stage: computes the loss
};
// `partition`: layers per model stage, P·chunks entries.
StageTopology stage_topology(int rank, const std::vector<int>& partition, int chunks = 1,
                             int chunk = 0);

// The checks every pipeline strategy shares; each throws ConfigError with one
// line naming the value and what is valid: --stages against --world and the
// layer count, --partition (count, sum, positive entries), --micro-batches (≥ 1
// and dividing --batch), --virtual-stages (P·V at most the layers, M a multiple
// of P).
void validate_pipeline(const RunConfig& cfg);

// Stage-to-stage messages. The tag says which micro-batch, which boundary
// (model stage `boundary` to boundary + 1, of `model_stages`) and which way, so
// a receive can only ever match the message it was posted for; within one
// (sender, receiver) pair messages are also posted in the same order on both
// sides, which is what pairs the send and recv spans' flow ids in the trace.
enum class PipeDirection : int { activation = 0, gradient = 1 };
int pipe_tag(int micro_batch, int boundary, int model_stages, PipeDirection direction);
inline constexpr int kGatherParamsTag = 1 << 30;  // export_params' slices, never a micro-batch
inline constexpr int kGatherBuffersTag = kGatherParamsTag + 1;  // and its BatchNorm buffers
inline constexpr int kTiedGradTag =
    kGatherParamsTag + 2;  // a tied weight's gradient between stages

// One stage of the pipeline on this rank: its layers (a LayerStack holding
// per-micro-batch activations), their optimizer, and the messages to and from
// its neighbours. Sends are posted without waiting, so a stage never blocks on
// a neighbour that is itself sending, and waited for when the stage starts its
// next forward or backward, by when the neighbour has normally taken them
// (its receive was posted early); a receive blocks only when its data is needed.
//
//   forward(mb):  input  = stage 0 ? rows of x : recv activation(mb) from prev
//                 output = layers(input)           (activations kept for backward)
//                 last stage ? loss and its gradient : send output to next
//   backward(mb): dout = last stage ? loss gradient : recv gradient(mb) from next
//                 din  = layers'ᵀ(dout)            (parameter gradients accumulate)
//                 first stage ? done : send din to prev
//
// The loss (the model family's: MSE, cross-entropy) is over the global batch
// (divided by the batch, not the micro-batch), so the gradients of the
// micro-batches add up to exactly the full-batch gradient. Messages carry the
// activation of any shape the layer table gives at the stage boundary.
class PipelineStage {
 public:
  PipelineStage(RankEnv& env, const ParamSource& init);

  // Chunk 0's place (with one chunk per rank, the stage's).
  const StageTopology& topology() const { return chunks_.front().topo; }
  int chunks() const { return static_cast<int>(chunks_.size()); }
  // This stage's parameters and optimizer as a checkpoint sees them (fp32
  // only); under tensor parallelism, in its slice's coordinates.
  // With --dp-zero1 only the parameters this replica owns (the others' state
  // is another replica's).
  RankState rank_state();
  int micro_batches() const { return micro_batches_; }

  void begin_step(int step);  // zeroes the gradients of the flush
  // Runs this stage's line of the schedule (schedule.h) in order. Before each
  // action the receive the next one reads is posted, so its data arrives while
  // this one computes: the next F's input after an F, the next B's gradient
  // after anything (an input buffer is never posted during a backward, which
  // would hold one more micro-batch's activations than the schedule says).
  // Every rank reads the whole schedule: the order its neighbours send in is
  // the order it posts their receives in.
  void run(const Schedule& schedule);
  // The flush: wait for the sends still in flight, then one optimizer step
  // with the gradient accumulated over all micro-batches.
  LossShare finish_step();

  // Collective: every stage sends its parameters (and BatchNorm buffers) to
  // rank 0, which returns the full flat state vector in model order (other ranks
  // return {}).
  std::vector<float> export_params();

 private:
  // The actions run() runs, on micro-batch mb of chunk `chunk`:
  void forward(int mb, int chunk);
  // The whole backward of mb, or, when the schedule run() runs has a W for
  // mb, its B alone (the input's gradient, sent back as usual) ...
  void backward(int mb, int chunk);
  // ... and its W: the weight gradients B left (zero bubble; nothing is sent).
  void weight(int mb, int chunk);

  struct PendingRecv {  // the buffer is declared first so it outlives the wait
    Tensor buffer;
    Work work;
  };
  struct PendingSend {
    Tensor buffer;  // owned when the sent tensor would otherwise die first
    Work work;
  };
  // One message this rank receives: which way, which micro-batch, for which chunk.
  struct RecvKey {
    PipeDirection direction;
    int mb;
    int chunk;
    bool operator<(const RecvKey& o) const {
      return std::tie(direction, mb, chunk) < std::tie(o.direction, o.mb, o.chunk);
    }
    bool operator==(const RecvKey& o) const {
      return direction == o.direction && mb == o.mb && chunk == o.chunk;
    }
  };
  // One model chunk: its layers, their place, and its micro-batches in flight.
  struct Chunk {
    StageTopology topo;
    int boundary_in = -1;   // layer whose output this chunk receives (first_layer − 1)
    int boundary_out = -1;  // layer whose output this chunk sends (last_layer − 1)
    std::unique_ptr<LayerStack> layers;
    std::map<int, Tensor> inputs;      // chunk input per micro-batch in flight
    std::map<int, Tensor> loss_grads;  // last model stage: dloss/dpred per micro-batch
    std::vector<bool> split;           // per micro-batch: run() has a W for it, so its B is split
  };
  // Posts the receive for `key` now, so its data arrives while this stage
  // computes something else, and before it every earlier message from the
  // same neighbour not yet posted (see recv_order_). Optional: forward and
  // backward post it themselves when it was not posted early.
  void post_recv(const RecvKey& key);
  Tensor wait_recv(const RecvKey& key);
  // Posts `owned` (kept alive until settled) when given, else `borrowed`.
  void send(const Chunk& c, const void* borrowed, Tensor owned, int mb, PipeDirection direction);
  void settle_sends();
  void compute_loss(Chunk& c, const void* pred, int mb);
  void sum_tied_grads();
  void reduce_over_replicas();
  void assign_owners();
  void zero1_step();
  std::vector<float> gather_slices(ExportBuffer& mine);
  // Every chunk's, in chunk order (the optimizer's order).
  std::vector<Optimizer::Range> ranges() const;
  std::vector<float*> param_ptrs();
  std::vector<float*> grad_ptrs();
  int peer_of(const RecvKey& key) const;

  RankEnv& env_;
  Comm* pp_comm_ = nullptr;  // to the other stages of this pipeline (stage = its rank there)
  Comm* dp_comm_ = nullptr;  // to this stage in the other pipelines; null with one pipeline
  int replicas_ = 1;         // pipelines side by side (the mesh's dp)
  int replica_ = 0;          // which one this rank's is
  // ZeRO-1 over dp (--dp-zero1): the replica that owns each of the stage's
  // parameters (keeps its optimizer state, updates it), and this rank's own,
  // in stage order; empty without.
  std::vector<int> owner_;
  std::vector<size_t> owned_;
  Comm* tp_comm_ = nullptr;  // to the other slices of this stage's layers; null without tp
  int tp_rank_ = 0;          // which slice this rank holds
  std::unique_ptr<ModelLayout> slice_;   // tensor parallelism: this rank's slice of the model
  const ModelLayout* layout_ = nullptr;  // the layers as this rank holds them (env's, or slice_)
  std::vector<int> partition_;           // layers per model stage
  int first_row_ = 0;                    // this pipeline's first row of the batch
  int micro_batches_ = 1;
  int rows_ = 0;  // rows per micro-batch
  int step_ = 0;
  std::vector<Chunk> chunks_;
  // Per neighbour (pp rank): the messages it sends this rank in a step, in the
  // order it sends them (read off its line of the schedule), and how many of
  // them are posted. Receives are posted in that order, so that message n from
  // a neighbour is receive n here: that is what pairs the flow ids of the send
  // and recv spans in the trace.
  std::map<int, std::vector<RecvKey>> recv_order_;
  std::map<int, size_t> recv_posted_;
  std::vector<std::vector<RecvKey>> early_;  // per action of this rank's line: posted before it
  std::map<RecvKey, PendingRecv> recvs_;
  double loss_ = 0;              // Σ over micro-batches of each one's share of the mean loss
  MixedPrecision fp32_{"fp32"};  // pipelines train in fp32
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<PendingSend> sends_;  // posted, not yet waited for (see settle_sends)
};

}  // namespace shardlab
