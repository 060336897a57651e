#!/usr/bin/env bash
# Installs, with apt, whatever Shardlab needs to build and test that is missing
# (on a bare Debian 12 that includes the compiler, cmake and pkg-config).
# `deps.sh --tests` adds what only the tests use: a Redis server and Open MPI's
# mpirun, to run one process per rank through them (torchrun, from the much
# larger python3-torch, is used when present and skipped when not).
set -euo pipefail
PACKAGES=(build-essential cmake pkg-config git libgloo-dev libopenblas-dev catch2 nlohmann-json3-dev
          libimgui-dev libglfw3-dev libgl-dev libgl1-mesa-dri libstb-dev xvfb xauth fonts-dejavu-core
          libtomlplusplus-dev libmd4c-dev fonts-wqy-microhei)
if [ "${1:-}" = "--tests" ]; then PACKAGES+=(redis-server openmpi-bin); fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "error: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
