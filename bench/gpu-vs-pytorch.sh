#!/usr/bin/env bash
# A training step on one GPU, Shardlab (`bench gpu`) against PyTorch eager
# (bench/gpu_pytorch.py: the same model, batch made on the GPU every step, AdamW
# lr 1e-3, fp32 with TF32 off or bf16 autocast). Rows alternate Shardlab and
# PyTorch for ROUNDS rounds (default 3) so the GPU's clocks and neighbours hit both
# alike; each number is the median of the rounds' medians. Ratio = shardlab /
# pytorch: below 1 Shardlab is faster. The world-2 strategy rows are Shardlab's only.
#
# usage: bench/gpu-vs-pytorch.sh [SHARDLAB_BIN] [--out DIR]
#   SHARDLAB_BIN  the shardlab binary, or a bundle directory from gpu-bundle.sh (run
#                 through its env.sh); default: build/shardlab, else .gpu-bundle
#   --out DIR     where gpu-vs-pytorch.csv goes (default: .)
#   env: ROUNDS (3), STEPS (20 timed steps each), PYTHON (python3: the one with torch),
#        CUDA_VISIBLE_DEVICES (default 0: one GPU for everything)
set -euo pipefail
bin="" out="."
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "gpu-vs-pytorch: --out needs a DIR" >&2; exit 2; }
      out=$2; shift 2 ;;
    -*) echo "gpu-vs-pytorch: unknown option '$1' (valid: [SHARDLAB_BIN] [--out DIR])" >&2; exit 2 ;;
    *) [ -z "$bin" ] || { echo "gpu-vs-pytorch: one SHARDLAB_BIN only, got '$bin' and '$1'" >&2; exit 2; }
      bin=$1; shift ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -z "$bin" ] || bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")  # before the cd
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-20} PYTHON=${PYTHON:-python3}
# One GPU for both, and the world-2 rows' ranks share it as the table says.
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
if [ -z "$bin" ]; then
  if [ -x build/shardlab ]; then bin=build/shardlab; else bin=.gpu-bundle; fi
fi
if [ -d "$bin" ]; then
  [ -f "$bin/env.sh" ] || { echo "gpu-vs-pytorch: '$bin' is a directory without env.sh (valid: a shardlab binary or a gpu-bundle.sh bundle)" >&2; exit 2; }
  shardlab() { bash "$bin/env.sh" "$bin/bin/shardlab" "$@"; }
else
  [ -x "$bin" ] || { echo "gpu-vs-pytorch: no shardlab at '$bin' (valid: a built binary or a bundle directory)" >&2; exit 2; }
  shardlab() { "$bin" "$@"; }
fi

# What is missing, said once, before anything runs.
"$PYTHON" -c 'import torch' 2>/dev/null ||
  { echo "gpu-vs-pytorch: PyTorch is not installed for $PYTHON (pip install torch, or PYTHON=...); nothing compared" >&2; exit 2; }
cuda=$("$PYTHON" -c 'import torch; print(torch.cuda.is_available())')
[ "$cuda" = True ] ||
  { echo "gpu-vs-pytorch: PyTorch sees no CUDA GPU (torch.cuda.is_available() is $cuda); nothing compared" >&2; exit 2; }
gpus=$(shardlab devices | awk '$1 == "gpus" {print $2}')
[ "${gpus:-0}" -ge 1 ] ||
  { echo "gpu-vs-pytorch: Shardlab sees no usable GPU ($(shardlab devices | grep '^cuda:')); nothing compared" >&2; exit 2; }
V=$("$PYTHON" -c 'import sys; print(len(set(open(sys.argv[1], encoding="utf-8").read())))' \
  assets/corpus.txt)

median() { tr ' ' '\n' | awk NF | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# Shardlab's median step of the rows whose labels are given, one "label ms" line each.
ours() {
  shardlab bench gpu --only "$1" --json --no-record --steps $((STEPS + 1)) |
    "$PYTHON" -c 'import json, sys
for line in sys.stdin:
    j = json.loads(line); print(j["label"], j["median_step_ms"])'
}
theirs() { "$PYTHON" bench/gpu_pytorch.py --steps "$STEPS" "$@"; }

# label | gpu_pytorch.py's model arguments | attention of the main PyTorch column
rows=(
  "mlp:8x4096/b1024/fp32|--model mlp:8x4096 --batch 1024 --precision fp32|-"
  "mlp:8x4096/b1024/bf16|--model mlp:8x4096 --batch 1024 --precision bf16|-"
  "mlp:8x1024/b64/fp32|--model mlp:8x1024 --batch 64 --precision fp32|-"
  "mlp:8x1024/b64/bf16|--model mlp:8x1024 --batch 64 --precision bf16|-"
  "gpt:6x384x6/T256/b64/fp32|--model gpt:6x384x6 --seq 256 --batch 64 --vocab $V --precision fp32|manual"
  "gpt:6x384x6/T256/b64/bf16|--model gpt:6x384x6 --seq 256 --batch 64 --vocab $V --precision bf16|sdpa"
  "gpt:4x128x4/T64/b32/fp32|--model gpt:4x128x4 --seq 64 --batch 32 --vocab $V --precision fp32|manual"
)
declare -A ms  # "label/column" -> the rounds' medians, space-separated
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS..." >&2
  for row in "${rows[@]}"; do
    IFS='|' read -r label args attn <<<"$row"
    read -r _ m < <(ours "$label") || true
    [ -n "${m:-}" ] || { echo "gpu-vs-pytorch: 'shardlab bench gpu --only $label' gave no row" >&2; exit 1; }
    ms[$label/shardlab]+="$m "
    a=()
    [ "$attn" = - ] || a=(--attention "$attn")
    # shellcheck disable=SC2086  # $args is a list of words
    ms[$label/pytorch]+="$(theirs $args "${a[@]}") "
    # shellcheck disable=SC2086
    ms[$label/fused]+="$(theirs $args "${a[@]}" --fused) "
    # shellcheck disable=SC2086
    [ "$attn" != manual ] || ms[$label/sdpa]+="$(theirs $args --attention sdpa) "
  done
  while read -r label m; do ms[$label/shardlab]+="$m "; done < <(ours /mlp:8x1024/b64)
done

csv="$out/gpu-vs-pytorch.csv"
echo "label,shardlab_ms,pytorch_ms,pytorch_attention,pytorch_fused_adamw_ms,pytorch_sdpa_ms,ratio,ratio_fused,ratio_sdpa" >"$csv"
col() { if [ -n "${ms[$1]:-}" ]; then echo "${ms[$1]}" | median; fi; }
ratio() { if [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; else echo -; fi; }
gpu=$(shardlab devices | sed -n 's/^cuda: [^(]*(\(.*\))$/\1/p')
echo "Shardlab vs PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)') eager on $gpu"
printf '%-26s %11s %11s %6s %11s %6s %11s %6s\n' workload shardlab_ms pytorch_ms ratio \
  fused_ms ratio sdpa_ms ratio
for row in "${rows[@]}"; do
  IFS='|' read -r label _ attn <<<"$row"
  s=$(col "$label/shardlab") p=$(col "$label/pytorch") f=$(col "$label/fused") d=$(col "$label/sdpa")
  dd=-
  [ -z "$d" ] || dd=$(printf '%.3f' "$d")
  printf '%-26s %11.3f %11.3f %6s %11.3f %6s %11s %6s\n' "$label" "$s" "$p" "$(ratio "$s" "$p")" \
    "$f" "$(ratio "$s" "$f")" "$dd" "$(ratio "$s" "$d")"
  echo "$label,$s,$p,$attn,$f,$d,$(ratio "$s" "$p"),$(ratio "$s" "$f"),$(ratio "$s" "$d")" >>"$csv"
done
echo
echo "world-2 strategies sharing the GPU, mlp:8x1024 batch 64 fp32 (Shardlab only):"
single=$(col "single:1/mlp:8x1024/b64/shardlab")
for st in single:1 ddp:2 zero1:2 zero2:2 zero3:2 fsdp:2; do
  s=$(col "$st/mlp:8x1024/b64/shardlab")
  [ -n "$s" ] || continue
  printf '%-26s %11.3f   %s x single\n' "$st/mlp:8x1024/b64" "$s" "$(ratio "$s" "$single")"
  echo "$st/mlp:8x1024/b64,$s,,,,,,," >>"$csv"
done
echo "(median of $ROUNDS rounds' medians of $STEPS steps; Shardlab --no-record, its warm-up step" \
  "left out; PyTorch after 3 warm-up steps, AdamW default (foreach) and fused; gpt fp32: PyTorch" \
  "with materialised attention, beside SDPA; gpt bf16: SDPA. CSV: $csv)"
