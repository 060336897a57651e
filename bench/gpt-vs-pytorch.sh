#!/bin/bash
# A single-rank gpt training step, Shardlab against PyTorch 1.13 on the CPU,
# side by side on this machine: the same model (nanoGPT's GPT-2, bias, tied
# lm_head), batch, context, vocabulary (the default corpus's) and AdamW, one
# OpenBLAS / intra-op thread for both. Rounds alternate the two so machine
# noise hits both alike; the table shows the median of each and their ratio.
#
# usage: bench/gpt-vs-pytorch.sh [BUILD_DIR] [ROUNDS]   (needs python3-torch; Shardlab does not)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build}/shardlab
ROUNDS=${2:-3}
STEPS=12
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
[ -x "$BIN" ] || { echo "error: $BIN not built (cmake --build ${1:-build} --target shardlab)"; exit 2; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "error: PyTorch not found (apt-get install python3-torch)"; exit 2; }
V=$(/usr/bin/python3 -c 'import sys; print(len(set(open(sys.argv[1], encoding="utf-8").read())))' \
  assets/corpus.txt)

median() { tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

printf '%-14s %5s %5s %12s %12s %8s\n' model seq batch shardlab_ms pytorch_ms ratio
for cfg in "2 64 4 64 16" "4 128 4 128 8" "6 192 6 128 4"; do
  read -r L C H T B <<<"$cfg"
  ours=() theirs=()
  for _ in $(seq "$ROUNDS"); do
    ours+=("$("$BIN" run --model "gpt:${L}x${C}x${H}" --seq "$T" --batch "$B" --steps "$STEPS" \
      --strategy single --world 1 --no-record --json 2>/dev/null |
      /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["median_step_ms"])')")
    theirs+=("$(/usr/bin/python3 bench/gpt_pytorch.py "$L" "$C" "$H" "$T" "$B" "$V" "$STEPS" |
      awk '{print $2}')")
  done
  a=$(echo "${ours[*]}" | median)
  b=$(echo "${theirs[*]}" | median)
  printf '%-14s %5s %5s %12.2f %12.2f %7.2fx\n' "gpt:${L}x${C}x${H}" "$T" "$B" "$a" "$b" \
    "$(echo "$a / $b" | bc -l)"
done
echo "(vocabulary $V characters of assets/corpus.txt; median of $ROUNDS rounds of $STEPS steps, step 0 left out)"
