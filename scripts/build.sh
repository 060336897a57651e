#!/usr/bin/env bash
# Configures and builds Shardlab into ./build (Release with debug info).
# SHARDLAB_BUILD_TARGETS (space-separated, default: everything) limits what is
# built: the main job builds only the app, the tests build everything.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
targets=()
for t in ${SHARDLAB_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build -j"$(nproc)" "${targets[@]}"
