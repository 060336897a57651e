#!/usr/bin/env bash
# The main job: install what is missing, build, then start Shardlab. Until the
# desktop app lands this is the headless demo: every strategy on the default
# model, a comparison table, and a trace per strategy.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build.sh
exec ./build/shardlab demo "$@"
