#!/usr/bin/env bash
# The main job: install what is missing, build, then start Shardlab: the
# desktop app when there is a display that works, otherwise (one line says so)
# the headless demo: every strategy on the default model, a comparison table,
# and a trace per strategy.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
# Only the app: a fresh machine should not wait for the test binaries first.
SHARDLAB_BUILD_TARGETS=shardlab ./scripts/build.sh
if [ -n "${DISPLAY:-}" ] && ./build/shardlab gui --check-display 2>/dev/null; then
  exec ./build/shardlab gui "$@"
fi
echo "no usable display (DISPLAY=${DISPLAY:-unset}): running the headless demo instead; for the app's pictures try: xvfb-run -a -s \"-screen 0 1600x1000x24\" build/shardlab gui --screenshot out.png"
exec ./build/shardlab demo "$@"
