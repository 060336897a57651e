#!/usr/bin/env bash
# Runs every lesson's steps and gates N times in a row (headless, one lesson at
# a time) and prints a table of failures per lesson: the check that lesson
# answers do not flip between runs on this machine (issue 22: "every lesson's
# gates hold in 20 consecutive headless runs of the whole set").
#   scripts/lesson-soak.sh [N=20] [BIN=build/shardlab] [LESSONS_DIR=lessons]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
bin=${2:-build/shardlab}
dir=${3:-lessons}
case "$n" in '' | *[!0-9]* | 0) echo "lesson-soak: N '$n' is not a positive count (e.g. 20)" >&2; exit 2 ;; esac
[ -x "$bin" ] || { echo "lesson-soak: no shardlab binary at '$bin' (build first: scripts/build.sh)" >&2; exit 2; }
shopt -s nullglob
files=("$dir"/*.toml)
[ ${#files[@]} -gt 0 ] || { echo "lesson-soak: no lessons in '$dir'" >&2; exit 2; }
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
declare -A fails
for f in "${files[@]}"; do fails[$f]=0; done
start=$(date +%s)
for ((i = 1; i <= n; i++)); do
  for f in "${files[@]}"; do
    if ! "$bin" lesson run "$f" > "$log/out" 2>&1; then
      fails[$f]=$((fails[$f] + 1))
      { echo "== pass $i: $f"; grep -E "FAIL|NOT FOUND|error" "$log/out" | head -5; } >> "$log/failures"
    fi
  done
  echo "pass $i/$n done ($(($(date +%s) - start)) s)" >&2
done
printf '%-32s %s\n' "lesson" "failed passes (of $n)"
total=0
for f in "${files[@]}"; do
  printf '%-32s %d\n' "$(basename "$f")" "${fails[$f]}"
  total=$((total + fails[$f]))
done
if [ "$total" -gt 0 ]; then
  echo
  cat "$log/failures"
  exit 1
fi
echo "every lesson's gates held in $n consecutive passes ($(($(date +%s) - start)) s, $(nproc) cores)"
