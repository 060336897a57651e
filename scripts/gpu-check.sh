#!/usr/bin/env bash
# For a person with an NVIDIA GPU: builds the CUDA backend (or takes a prebuilt
# bundle) and checks it on the hardware. Every CUDA kernel against the CPU
# version, every strategy on --device cuda against `single` on the CPU, a bench
# table (step time and memory of mlp:8x1024 per strategy), then `bench gpu`
# (the workloads compared with PyTorch: step, TFLOP/s against peak, memory).
# Exits non-zero on any mismatch, or when no GPU is usable (this script's
# checks cannot be skipped).
#   usage: scripts/gpu-check.sh [build-dir]          (default: build-gpu; builds with apt/cmake)
#          scripts/gpu-check.sh --prebuilt DIR       (DIR as ../shared/scripts/gpu-bundle.sh
#                                                     writes it: DIR/env.sh, DIR/bin/...; no
#                                                     dependencies installed, nothing built)
set -euo pipefail
prebuilt=""
build="build-gpu"
case "${1:-}" in
  --prebuilt)
    [ $# -eq 2 ] || { echo "gpu-check: --prebuilt needs one DIR (e.g. .gpu-bundle)" >&2; exit 2; }
    if ! [ -f "$2/env.sh" ] || ! [ -x "$2/bin/shardlab" ] || ! [ -x "$2/bin/shardlab_gpu_tests" ]; then
      echo "gpu-check: --prebuilt '$2' is not a bundle (valid: a directory with env.sh," \
        "bin/shardlab and bin/shardlab_gpu_tests, as gpu-bundle.sh writes it)" >&2
      exit 2
    fi
    prebuilt=$(cd "$2" && pwd) # before the cd below: DIR is relative to the caller
    ;;
  -*) echo "gpu-check: unknown option '$1' (valid: --prebuilt DIR, or a build directory)" >&2; exit 2 ;;
  ?*) build="$1" ;;
esac
cd "$(dirname "$0")/.."

# Runs one of the binaries: from the bundle through its env.sh (its libraries,
# assets and lessons), else from the build directory.
bin() {
  local name=$1
  shift
  if [ -n "$prebuilt" ]; then
    bash "$prebuilt/env.sh" "$prebuilt/bin/$name" "$@"
  else
    "$build/$name" "$@"
  fi
}

if [ -z "$prebuilt" ]; then
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  ./scripts/deps.sh
  cmake -S . -B "$build" -DSHARDLAB_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  cmake --build "$build" -j"$(nproc)" --target shardlab shardlab_gpu_tests
fi

devices="$(bin shardlab devices)"
echo "$devices"
gpus="$(echo "$devices" | awk '$1 == "gpus" {print $2}')"
if [ "${gpus:-0}" -lt 1 ]; then
  echo "gpu-check: no usable GPU here (see 'cuda:' above); nothing was checked" >&2
  exit 1
fi

echo "== 1/4 CUDA kernels vs CPU, strategies on cuda vs single on CPU"
# Exit 77 would mean "skipped": here that is a failure too.
set +e
bin shardlab_gpu_tests
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
  echo "gpu-check: GPU tests failed (exit $rc)" >&2
  exit 1
fi

echo "== 2/4 every strategy, one short run each on cuda (summary lines)"
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
  bin shardlab run --device cuda --strategy "$s" --world "$w" --steps 5 --model mlp:8x1024 $extra |
    grep -E "placement|final loss|median step"
done

echo "== 3/4 bench: mlp:8x1024 per strategy on cuda (and the CPU beside it)"
bin shardlab bench strategies --device cuda --model mlp:8x1024 --world "$world" --steps 20 --rounds 2
if [ "$gpus" -ge 2 ]; then
  bin shardlab bench strategies --device cuda --backend nccl --model mlp:8x1024 --world "$gpus" \
    --steps 20 --rounds 2
fi
bin shardlab bench strategies --device cpu --model mlp:8x1024 --world "$world" --steps 5 --rounds 1

echo "== 4/4 bench gpu: the workloads compared with PyTorch (bench/gpu-vs-pytorch.sh)"
bin shardlab bench gpu
echo "gpu-check: all checks passed"
