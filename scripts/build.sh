#!/usr/bin/env bash
# Configures and builds hpcnet (Release) into build/ (or $HPCNET_BUILD_DIR). Compiles through
# ccache when it is installed (scripts/setup.sh installs it; HPCNET_CCACHE=0 turns it off): a
# fresh clone, in any folder, rebuilds from the cache in ~/.cache/ccache instead of compiling
# again (CCACHE_BASEDIR: paths under the source folder are hashed relative to it).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${HPCNET_BUILD_DIR:-build}"
launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER= -DCMAKE_CUDA_COMPILER_LAUNCHER=)
if [[ "${HPCNET_CCACHE:-1}" != 0 ]] && command -v ccache >/dev/null; then
  cc="env;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=1;ccache"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$cc" -DCMAKE_CUDA_COMPILER_LAUNCHER="$cc")
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
