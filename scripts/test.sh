#!/usr/bin/env bash
# Builds hpcnet and runs the whole test suite (GoogleTest under ctest). Needs no network, no GPU
# and no dataset: the tests make their own small data.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
build="${HPCNET_BUILD_DIR:-build}"
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure
