#!/usr/bin/env bash
# For a person with an NVIDIA GPU: builds the CUDA backend and checks it on the
# hardware. Every CUDA kernel against the CPU version, every strategy on
# --device cuda against `single` on the CPU, then a bench table (step time and
# memory of mlp:8x1024 per strategy). Exits non-zero on any mismatch, or when
# no GPU is usable (this script's checks cannot be skipped).
#   usage: scripts/gpu-check.sh [build-dir]     (default: build-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-gpu}"

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
./scripts/deps.sh
cmake -S . -B "$build" -DSHARDLAB_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j"$(nproc)" --target shardlab shardlab_gpu_tests

bin="$build/shardlab"
"$bin" devices
gpus="$("$bin" devices | awk '$1 == "gpus" {print $2}')"
if [ "${gpus:-0}" -lt 1 ]; then
  echo "gpu-check: no usable GPU here (see 'cuda:' above); nothing was checked" >&2
  exit 1
fi

echo "== 1/3 CUDA kernels vs CPU, strategies on cuda vs single on CPU"
# Exit 77 would mean "skipped": here that is a failure too.
set +e
"$build/shardlab_gpu_tests"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
  echo "gpu-check: GPU tests failed (exit $rc)" >&2
  exit 1
fi

echo "== 2/3 every strategy, one short run each on cuda (summary lines)"
world=2
for s in single ddp dp zero1 zero2 zero3 fsdp naive-mp gpipe 1f1b; do
  w=$world
  [ "$s" = single ] && w=1
  extra=""
  case "$s" in
    naive-mp) extra="--stages $w" ;;
    gpipe | 1f1b) extra="--stages $w --micro-batches 4" ;;
  esac
  # shellcheck disable=SC2086
  "$bin" run --device cuda --strategy "$s" --world "$w" --steps 5 --model mlp:8x1024 $extra |
    grep -E "placement|final loss|median step"
done

echo "== 3/3 bench: mlp:8x1024 per strategy on cuda (and the CPU beside it)"
"$bin" bench strategies --device cuda --model mlp:8x1024 --world "$world" --steps 20 --rounds 2
if [ "$gpus" -ge 2 ]; then
  "$bin" bench strategies --device cuda --backend nccl --model mlp:8x1024 --world "$gpus" \
    --steps 20 --rounds 2
fi
"$bin" bench strategies --device cpu --model mlp:8x1024 --world "$world" --steps 5 --rounds 1
echo "gpu-check: all checks passed"
