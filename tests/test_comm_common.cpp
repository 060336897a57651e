// What the Gloo and NCCL communicators share (core/comm/comm_common.h), tested without
// a group: traffic counts, flow ids, error wording, the first failure, and
// cancelling Works that were never waited on.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/comm/comm_common.h"

using namespace shardlab;
using namespace std::chrono_literals;

TEST_CASE("collective traffic counts follow Gloo's algorithms", "[comm]") {
  // Ring all-reduce: 2 (W-1)/W of the buffer.
  CHECK(all_reduce_sent(4, 1000) == 1500);
  CHECK(all_reduce_sent(1, 1000) == 0);
  CHECK(all_reduce_sent(4, 0) == 0);
  // Ring reduce-scatter: every chunk but this rank's own, in elements of 4 bytes.
  const std::vector<size_t> counts{3, 2, 2};
  CHECK(reduce_scatter_sent(0, 3, counts, 4) == (2 + 2) * 4);
  CHECK(reduce_scatter_sent(1, 3, counts, 4) == (3 + 2) * 4);
  CHECK(reduce_scatter_sent(0, 3, {0, 0, 0}, 4) == 0);
  // Ring all-gather: every chunk but the next rank's own.
  const std::vector<size_t> byte_counts{12, 8, 8};
  CHECK(all_gather_sent(0, 3, byte_counts) == 28 - 8);
  CHECK(all_gather_sent(2, 3, byte_counts) == 28 - 12);
  CHECK(all_gather_sent(0, 1, {12}) == 0);
  // Binomial-tree broadcast: W-1 sends in all, the root ceil(log2 W) of them.
  int64_t total = 0;
  for (int r = 0; r < 5; ++r) total += broadcast_sent(r, 2, 5, 100);
  CHECK(total == 4 * 100);
  CHECK(broadcast_sent(2, 2, 5, 100) == 3 * 100);
  // Reduce: a ring reduce-scatter, then the non-roots send their chunk to the root.
  CHECK(reduce_sent(0, 0, 4, 1000) == 750);
  CHECK(reduce_sent(1, 0, 4, 1000) == 1000);
  CHECK(reduce_sent(1, 0, 1, 1000) == 0);
}

TEST_CASE("p2p numbers count per peer and direction, flow ids pair a send with its recv",
          "[comm]") {
  P2PCounters rank0(3), rank1(3);
  CHECK(rank0.next(true, 1) == 1);
  CHECK(rank0.next(true, 1) == 2);
  CHECK(rank0.next(true, 2) == 1);
  CHECK(rank0.next(false, 1) == 1);
  // Rank 1's first recv from 0 pairs with rank 0's first send to 1.
  CHECK(p2p_flow_id(0, 1, rank1.next(false, 0)) == p2p_flow_id(0, 1, 1));
  CHECK(p2p_flow_id(0, 1, 1) != p2p_flow_id(1, 0, 1));
  CHECK(p2p_flow_id(0, 1, 1) != p2p_flow_id(0, 1, 2));
  CHECK(p2p_flow_id(0, 1, 1) != 0);
}

TEST_CASE("comm errors are one line naming the op, the peer and the first failure", "[comm]") {
  FailureBoard board;
  board.report(2, "out of memory");
  const CommErrors errors(0, 500ms, board);
  OpInfo recv{SpanKind::recv, 64, {}, 1, 7};
  CHECK(errors.timed_out(recv, 0) ==
        "rank 0: recv of 64 bytes (tag 7) timed out after 500 ms waiting for rank 1 "
        "(rank 2 failed: out of memory)");
  OpInfo send{SpanKind::send, 64, {}, 1, 7};
  CHECK(errors.failed(send, 0, "connection reset") ==
        "rank 0: send of 64 bytes (tag 7) to rank 1 failed: connection reset "
        "(rank 2 failed: out of memory)");
  OpInfo all_reduce{SpanKind::all_reduce, 4096, {}};
  CHECK(errors.after_failure(all_reduce, "not run", "boom") ==
        "rank 0: all_reduce of 4096 bytes: not run, an earlier op failed: boom");
  CHECK(errors.destroyed_first(all_reduce) ==
        "rank 0: all_reduce of 4096 bytes: not run, the comm was destroyed first");
  const std::string aborted = errors.peer_failed(all_reduce, std::chrono::steady_clock::now());
  CHECK(aborted.find("rank 0: all_reduce of 4096 bytes aborted after ") == 0);
  CHECK(aborted.find("(rank 2 failed: out of memory)") != std::string::npos);

  // With no failure reported, a collective names the ranks that never issued it.
  FailureBoard quiet;
  quiet.note_issued(0, 5);
  quiet.note_issued(1, 4);
  const CommErrors rank0(0, 500ms, quiet);
  CHECK(rank0.timed_out(all_reduce, 5) ==
        "rank 0: all_reduce of 4096 bytes timed out after 500 ms waiting for rank 1 "
        "(it issued 4 collectives, this is #5)");
  CHECK(rank0.failed(all_reduce, 0, "x") ==
        "rank 0: all_reduce of 4096 bytes failed: x (no rank reported a failure)");
}

TEST_CASE("p2p arguments are checked before anything is posted", "[comm]") {
  CHECK_THROWS_WITH(check_p2p(0, 2, OpInfo{SpanKind::send, 4, {}, 2, 0}),
                    "rank 0: send of 4 bytes (tag 0): peer 2 is not a rank of a group of 2");
  CHECK_THROWS_WITH(check_p2p(0, 2, OpInfo{SpanKind::send, 4, {}, 0, 0}),
                    "rank 0: send of 4 bytes (tag 0): peer is this rank");
  CHECK_THROWS_WITH(check_p2p(0, 2, OpInfo{SpanKind::recv, 4, {}, 1, -1}),
                    "rank 0: recv of 4 bytes (tag -1): tag must be >= 0");
  CHECK_NOTHROW(check_p2p(0, 2, OpInfo{SpanKind::recv, 4, {}, 1, 0}));
}

TEST_CASE("the first failure of a comm is the one it keeps", "[comm]") {
  BrokenState broken;
  CHECK(broken.get().empty());
  CHECK(broken.set("first"));
  CHECK_FALSE(broken.set("second"));
  CHECK(broken.get() == "first");
}

TEST_CASE("unwaited works are failed at cancel_all without running their completion", "[comm]") {
  UnwaitedWorks unwaited;
  bool ran = false;
  auto pending = std::make_shared<Work::State>();
  pending->complete = [&] {
    ran = true;
    return std::string();
  };
  auto done = std::make_shared<Work::State>();
  done->finish("");
  Work pending_work(pending), done_work(done);
  unwaited.add(pending, "rank 0: recv never waited on");
  unwaited.add(done, "rank 0: send never waited on");
  {
    auto dropped = std::make_shared<Work::State>();  // gone before the cancel
    unwaited.add(dropped, "never seen");
  }
  unwaited.cancel_all();
  CHECK(pending_work.done());
  CHECK_THROWS_WITH(pending_work.wait(), "rank 0: recv never waited on");
  CHECK_FALSE(ran);
  CHECK_NOTHROW(done_work.wait());  // finished before the cancel: left as it was
}
