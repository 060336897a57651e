// The NCCL comm's sends and recvs: each is its own NCCL call, matched with the peer's in
// issue order. NCCL has no tags, so the group checks that both sides post their messages
// in the same order (P2PLedger), and fails a mismatch with a message that says so.
#include <sstream>

#include "core/comm/nccl/nccl_comm.h"

namespace shardlab::nccl {

std::optional<P2PLedger::Entry> P2PLedger::post(int src, int dst, const Entry& mine) {
  std::lock_guard<std::mutex> lock(mu_);
  std::deque<Entry>& q = pending_[{src, dst}];
  if (!q.empty() && q.front().is_send != mine.is_send) {
    const Entry other = q.front();
    q.pop_front();
    if (other.tag != mine.tag || other.bytes != mine.bytes || other.n != mine.n) return other;
    return std::nullopt;
  }
  q.push_back(mine);
  return std::nullopt;
}

Work NcclComm::send_async(const void* buf, size_t bytes, int dst, int tag, CommMeta meta) {
  return post_p2p(SpanKind::send, buf, bytes, dst, tag, meta);
}

Work NcclComm::recv_async(void* buf, size_t bytes, int src, int tag, CommMeta meta) {
  return post_p2p(SpanKind::recv, buf, bytes, src, tag, meta);
}

Work NcclComm::post_p2p(SpanKind kind, const void* buf, size_t bytes, int peer, int tag,
                        CommMeta meta) {
  const bool is_send = kind == SpanKind::send;
  OpInfo op{kind, static_cast<int64_t>(bytes), meta, peer, tag};
  check_p2p(rank_, world_, op);
  // Bytes as ncclUint8. Each send or recv is its own NCCL call, matched with the peer's
  // in issue order (see the class comment).
  return submit(op, is_send ? static_cast<int64_t>(bytes) : 0, {Buf{buf, bytes, is_send, !is_send}},
                [bytes, peer, is_send](const std::vector<void*>& p) -> Launch {
                  if (bytes == 0) return {};
                  if (is_send) {
                    return [bytes, peer, b = p[0]](ncclComm_t c, cudaStream_t s) {
                      return ncclSend(b, bytes, ncclUint8, peer, c, s);
                    };
                  }
                  return [bytes, peer, b = p[0]](ncclComm_t c, cudaStream_t s) {
                    return ncclRecv(b, bytes, ncclUint8, peer, c, s);
                  };
                });
}

// The message number is taken under the same lock as the queueing, so numbering and
// NCCL's in-order matching agree; the flow id pairs the two spans in the trace.
void NcclComm::number_p2p(OpInfo& info) {
  const bool is_send = info.kind == SpanKind::send;
  const int src = is_send ? rank_ : info.peer;
  const int dst = is_send ? info.peer : rank_;
  const uint64_t n = p2p_numbers_.next(is_send, info.peer);
  info.flow_id = p2p_flow_id(src, dst, n);
  const P2PLedger::Entry mine{is_send, n, info.tag, static_cast<size_t>(info.bytes)};
  if (!ledger_) return;
  if (const auto other = ledger_->post(src, dst, mine)) {
    std::ostringstream os;
    os << errors_.prefix(info) << (is_send ? " to" : " from") << " rank " << info.peer
       << " does not match rank " << info.peer << "'s " << (other->is_send ? "send" : "recv")
       << " #" << other->n << " (tag " << other->tag << ", " << other->bytes
       << " bytes): NCCL pairs the sends and recvs of two ranks in the order they are "
          "posted, so both ranks must post them in the same order";
    const std::string error = os.str();
    fail_comm(error);
    throw CommError(error);
  }
}

}  // namespace shardlab::nccl
