#!/usr/bin/env bash
# Builds hpcnet, runs the whole test suite (GoogleTest under ctest), then scripts/check-install.sh
# (the installed library, used through find_package and pkg-config). Needs no network, no GPU
# and no dataset: the tests make their own small data.
# While working: `ctest --test-dir build -L quick -j2` (no whole trainings, MPI or fault injection;
# about 20 s on 2 cores); `-L long` runs the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
build="${HPCNET_BUILD_DIR:-build}"
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure
# The installed library as a consumer sees it: find_package(hpcnet) and pkg-config (~10 s).
bash scripts/check-install.sh
