// The NCCL comm's collectives: each says which buffers it reads and writes, the bytes
// it sends (counted as Gloo's algorithms send them), and the NCCL call(s) to launch on
// the buffers' device addresses (staged ones included). Uneven chunks, which NCCL's
// reduce-scatter and all-gather do not take, become grouped reduces or broadcasts.
#include <numeric>

#include "core/comm/nccl/nccl_comm.h"

namespace shardlab::nccl {

namespace {

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
  }
  return ncclFloat32;
}

}  // namespace

Work NcclComm::all_reduce_async(void* buf, size_t count, DType dt, CommMeta meta) {
  const int64_t bytes = static_cast<int64_t>(count * dtype_size(dt));
  OpInfo op{SpanKind::all_reduce, bytes, meta};
  const int64_t sent = all_reduce_sent(world_, bytes);
  const ncclDataType_t t = nccl_type(dt);
  return submit(op, sent, {Buf{buf, static_cast<size_t>(bytes), true, true}},
                [count, t](const std::vector<void*>& p) -> Launch {
                  if (count == 0) return {};
                  return [count, t, b = p[0]](ncclComm_t c, cudaStream_t s) {
                    return ncclAllReduce(b, b, count, t, ncclSum, c, s);
                  };
                });
}

Work NcclComm::reduce_scatter_async(void* in_full, void* out_chunk, std::vector<size_t> counts,
                                    DType dt, CommMeta meta) {
  check_counts(rank_, world_, "reduce_scatter", counts);
  const size_t es = dtype_size(dt);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  OpInfo op{SpanKind::reduce_scatter, static_cast<int64_t>(total * es), meta};
  const int64_t sent = reduce_scatter_sent(rank_, world_, counts, es);
  const ncclDataType_t t = nccl_type(dt);
  const bool equal =
      std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; });
  std::vector<size_t> offsets(world_, 0);
  for (int r = 1; r < world_; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  const int me = rank_;
  return submit(
      op, sent,
      {Buf{in_full, total * es, true, false}, Buf{out_chunk, counts[rank_] * es, false, true}},
      [=](const std::vector<void*>& p) -> Launch {
        if (total == 0) return {};
        auto* in = static_cast<char*>(p[0]);
        void* out = p[1];
        if (equal) {
          return [=](ncclComm_t c, cudaStream_t s) {
            return ncclReduceScatter(in, out, counts[0], t, ncclSum, c, s);
          };
        }
        // Uneven chunks: one reduce per chunk, rooted at the rank that keeps it. A
        // reduce writes its output only on the root, so the other ranks pass their
        // input slice there too (a valid pointer that stays untouched).
        return [=](ncclComm_t c, cudaStream_t s) {
          ncclResult_t first = ncclGroupStart();
          if (first != ncclSuccess) return first;
          for (int r = 0; r < static_cast<int>(counts.size()); ++r) {
            if (counts[r] == 0) continue;
            char* slice = in + offsets[r] * es;
            const ncclResult_t e =
                ncclReduce(slice, r == me ? out : slice, counts[r], t, ncclSum, r, c, s);
            if (e != ncclSuccess && e != ncclInProgress && first == ncclSuccess) first = e;
          }
          const ncclResult_t end = ncclGroupEnd();  // always closes the group
          return first != ncclSuccess ? first : end;
        };
      });
}

Work NcclComm::all_gather_async(const void* in_chunk, void* out_full, std::vector<size_t> counts,
                                DType dt, CommMeta meta) {
  check_counts(rank_, world_, "all_gather", counts);
  const size_t es = dtype_size(dt);
  std::vector<size_t> byte_counts(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) byte_counts[i] = counts[i] * es;
  const size_t total = std::accumulate(byte_counts.begin(), byte_counts.end(), size_t{0});
  OpInfo op{SpanKind::all_gather, static_cast<int64_t>(total), meta};
  const int64_t sent = all_gather_sent(rank_, world_, byte_counts);
  const bool equal = std::all_of(byte_counts.begin(), byte_counts.end(),
                                 [&](size_t c) { return c == byte_counts[0]; });
  std::vector<size_t> offsets(world_, 0);
  for (int r = 1; r < world_; ++r) offsets[r] = offsets[r - 1] + byte_counts[r - 1];
  const int me = rank_;
  // Bytes as ncclUint8: a gather only copies, whatever the dtype. `in_chunk` may be this
  // rank's slot in `out_full` (ZeRO gathers in place); NCCL allows exactly that alias.
  return submit(
      op, sent, {Buf{in_chunk, byte_counts[rank_], true, false}, Buf{out_full, total, false, true}},
      [=](const std::vector<void*>& p) -> Launch {
        if (total == 0) return {};
        const void* in = p[0];
        auto* out = static_cast<char*>(p[1]);
        if (equal) {
          return [=](ncclComm_t c, cudaStream_t s) {
            return ncclAllGather(in, out, byte_counts[0], ncclUint8, c, s);
          };
        }
        // Uneven chunks: each rank broadcasts its chunk into its place; grouped, so NCCL
        // runs them as one operation.
        return [=](ncclComm_t c, cudaStream_t s) {
          ncclResult_t first = ncclGroupStart();
          if (first != ncclSuccess) return first;
          for (int r = 0; r < static_cast<int>(byte_counts.size()); ++r) {
            if (byte_counts[r] == 0) continue;
            char* slot = out + offsets[r];
            const void* src = r == me ? in : slot;  // the source is read on the root only
            const ncclResult_t e = ncclBroadcast(src, slot, byte_counts[r], ncclUint8, r, c, s);
            if (e != ncclSuccess && e != ncclInProgress && first == ncclSuccess) first = e;
          }
          const ncclResult_t end = ncclGroupEnd();
          return first != ncclSuccess ? first : end;
        };
      });
}

Work NcclComm::broadcast_async(void* buf, size_t count, DType dt, int root, CommMeta meta) {
  const size_t bytes = count * dtype_size(dt);
  OpInfo op{SpanKind::broadcast, static_cast<int64_t>(bytes), meta};
  check_rank(rank_, world_, op, root, "root");
  const int64_t sent = broadcast_sent(rank_, root, world_, static_cast<int64_t>(bytes));
  const bool is_root = rank_ == root;
  return submit(op, sent, {Buf{buf, bytes, is_root, !is_root}},
                [bytes, root](const std::vector<void*>& p) -> Launch {
                  if (bytes == 0) return {};
                  return [bytes, root, b = p[0]](ncclComm_t c, cudaStream_t s) {
                    return ncclBroadcast(b, b, bytes, ncclUint8, root, c, s);
                  };
                });
}

Work NcclComm::reduce_async(void* buf, size_t count, DType dt, int root, CommMeta meta) {
  const int64_t bytes = static_cast<int64_t>(count * dtype_size(dt));
  OpInfo op{SpanKind::reduce, bytes, meta};
  check_rank(rank_, world_, op, root, "root");
  const int64_t sent = reduce_sent(rank_, root, world_, bytes);
  const ncclDataType_t t = nccl_type(dt);
  // In place: NCCL writes the output on the root only, so other ranks' buffers stay as
  // they were, as the contract asks.
  return submit(op, sent, {Buf{buf, static_cast<size_t>(bytes), true, rank_ == root}},
                [count, t, root](const std::vector<void*>& p) -> Launch {
                  if (count == 0) return {};
                  return [count, t, root, b = p[0]](ncclComm_t c, cudaStream_t s) {
                    return ncclReduce(b, b, count, t, ncclSum, root, c, s);
                  };
                });
}

Work NcclComm::barrier_async() {
  OpInfo op{SpanKind::barrier, 0, {}};
  // An all-reduce of one int: it completes once every rank has issued it. Its value
  // means nothing (it may wrap), so it needs no reset.
  void* word = barrier_word_;
  return submit(op, 0, {}, [word](const std::vector<void*>&) -> Launch {
    return [word](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(word, word, 1, ncclInt32, ncclSum, c, s);
    };
  });
}

}  // namespace shardlab::nccl
