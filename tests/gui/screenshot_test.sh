#!/usr/bin/env bash
# ctest: renders one view of a ddp world-2 run under xvfb-run and checks the PNG;
# NAME VIEW-projected renders a gpipe world-4 run with its projection onto 4
# devices over NVLink as well ("as on N devices": the timeline's second set of
# rows, the cluster and camping views on the projected clock).
# usage: screenshot_test.sh SHARDLAB PNG_CHECK OUT_DIR NAME   (exit 77 = skipped)
set -euo pipefail
shardlab=$1 check=$2 out=$3 name=$4
view=${name%-projected}
if ! command -v xvfb-run >/dev/null; then
  echo "SKIP: xvfb-run is not installed (apt-get install xvfb xauth)"
  exit 77
fi
mkdir -p "$out"
png="$out/$name.png"
rm -f "$png"
args=(--strategy ddp --world 2 --model mlp:4x128 --batch 32 --steps 3 --view "$view")
case $name in
  *-projected)
    args=(--strategy gpipe --world 4 --micro-batches 8 --model mlp:16x512 --batch 256 --steps 3
      --view "$view" --projected nvlink-h100) ;;
esac
case $view in
  compare) args+=(--compare ddp,single:1) ;;
  # Mid-run, inside a collective: buffers are live and pieces are in flight.
  cluster | camping) args+=(--replay-at 0.5 --at-collective) ;;
esac
xvfb-run -a -s "-screen 0 1600x1000x24" "$shardlab" gui --screenshot "$png" --frames 3 "${args[@]}"
"$check" "$png" 1600 1000
