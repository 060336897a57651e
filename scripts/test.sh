#!/usr/bin/env bash
# Install what is missing, build, and run every test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh --tests
./scripts/build.sh
ctest --test-dir build --output-on-failure -j2 --timeout 600
