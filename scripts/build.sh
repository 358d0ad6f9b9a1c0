#!/usr/bin/env bash
# Configures and builds hpcnet (Release) into build/ (or $HPCNET_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${HPCNET_BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
