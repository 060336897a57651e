#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces (each its own loopback and
# address) joined by a veth pair, one `shardlab launch` on each with 2 ranks;
# the 4-process run must end with the threaded run's weights, bit for bit.
# Exit 77 (skipped) where namespaces cannot be made (not root, no `ip`).
#   usage: two_hosts.sh SHARDLAB_BIN
set -u
BIN=$1
command -v ip >/dev/null || { echo "skipped: no 'ip' command (apt-get install iproute2)"; exit 77; }
TMP=$(mktemp -d)
A=shA$$ C=shB$$
cleanup() {
  ip netns del $A 2>/dev/null
  ip netns del $C 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
if ! { ip netns add $A && ip netns add $C && ip link add va$$ type veth peer name vb$$; } 2>/dev/null; then
  echo "skipped: cannot create network namespaces here (needs root)"
  exit 77
fi
ip link set va$$ netns $A && ip link set vb$$ netns $C || exit 1
ip -n $A addr add 10.77.0.1/24 dev va$$ && ip -n $C addr add 10.77.0.2/24 dev vb$$ || exit 1
for ns in $A $C; do ip -n $ns link set lo up; done
ip -n $A link set va$$ up && ip -n $C link set vb$$ up || exit 1

RUN=(--strategy zero3 --steps 12 --model mlp:4x64)
"$BIN" run "${RUN[@]}" --world 4 --save-final "$TMP/threads.st" >/dev/null || exit 1
node() {  # node rank, namespace
  ip netns exec "$2" "$BIN" launch --nproc-per-node 2 --nnodes 2 --node-rank "$1" \
    --master-addr 10.77.0.1 --master-port 29611 -- run "${RUN[@]}" --save-final "$TMP/hosts.st" \
    >"$TMP/node$1.out" 2>&1
}
node 0 $A & P0=$!
node 1 $C & P1=$!
wait $P0; r0=$?
wait $P1; r1=$?
cat "$TMP/node0.out" "$TMP/node1.out"
[ $r0 -eq 0 ] && [ $r1 -eq 0 ] || { echo "FAIL: node exit codes $r0 and $r1"; exit 1; }
# Rank 0 listened on host A's address, ranks 2 and 3 were on host B.
grep -q "listening on 10.77.0.1" "$TMP/node0.out" || { echo "FAIL: rank 0 not on 10.77.0.1"; exit 1; }
grep -q "^\[rank 2\] rank 2 of 4 done" "$TMP/node1.out" || { echo "FAIL: rank 2 not on node 1"; exit 1; }
cmp "$TMP/threads.st" "$TMP/hosts.st" || { echo "FAIL: weights differ from the threaded run"; exit 1; }
echo "PASS: 2 hosts x 2 processes end with the threaded run's weights"
