#!/usr/bin/env bash
# ctest: `record` saves a small zero3 run with `shardlab run --record`; VIEW renders
# that view from the file with `shardlab gui --open` under xvfb-run and checks the PNG.
# usage: recording_test.sh SHARDLAB PNG_CHECK OUT_DIR record|VIEW   (exit 77 = skipped)
set -euo pipefail
shardlab=$1 check=$2 out=$3 what=$4
rec="$out/zero3.shardrec"
mkdir -p "$out"
if [ "$what" = record ]; then
  rm -f "$rec"
  "$shardlab" run --strategy zero3 --world 3 --model mlp:3x96 --batch 48 --steps 3 --record "$rec"
  test -s "$rec"
  exit 0
fi
if ! command -v xvfb-run >/dev/null; then
  echo "SKIP: xvfb-run is not installed (apt-get install xvfb xauth)"
  exit 77
fi
png="$out/$what.png"
rm -f "$png"
args=(--open "$rec" --view "$what")
case $what in
  # Mid-run, inside a collective: buffers are live and pieces are in flight.
  cluster | camping) args+=(--replay-at 0.5 --at-collective) ;;
esac
log=$(xvfb-run -a -s "-screen 0 1600x1000x24" "$shardlab" gui --screenshot "$png" --frames 3 "${args[@]}")
echo "$log"
grep -q "screenshot written to $png" <<<"$log"
"$check" "$png" 1600 1000
