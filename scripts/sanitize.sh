#!/usr/bin/env bash
# Builds the library and the tests with AddressSanitizer and UndefinedBehaviorSanitizer in a
# separate folder (build-sanitize/, or $HPCNET_SANITIZE_BUILD_DIR; CPU only, -O1) and runs the
# whole test suite there. Any sanitizer report fails the test that triggered it.
#   scripts/sanitize.sh [ctest arguments, e.g. -R Bounds]
# With clang-14 (scripts/setup.sh installs it) the folder is configured exactly as scripts/fuzz.sh
# configures its own (HPCNET_FUZZ=ON: the library also carries libFuzzer's coverage hooks), so
# the two can share one build: HPCNET_FUZZ_BUILD_DIR=build-sanitize scripts/fuzz.sh compiles
# only the fuzz targets' own files. Without clang, GCC's sanitizers. Compiles through ccache when
# installed (HPCNET_CCACHE=0: not).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${HPCNET_SANITIZE_BUILD_DIR:-build-sanitize}"
source scripts/sanitize-config.sh
configure_sanitized_build "$build"
cmake --build "$build" -j "$(nproc)" --target hpcnet hpcnet_tests
# halt_on_error: a UBSan report is fatal, like ASan's; third-party leaks are suppressed by name.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure --timeout 900 -E '^DistMpi' "$@"
# Ranks started by mpirun: Open MPI unloads its plugins before the process exits, so the blocks
# they keep have no module name left to suppress by; these run with ASan and UBSan, leaks unchecked.
ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}" \
  ctest --test-dir "$build" -j "$(nproc)" --output-on-failure --timeout 900 -R '^DistMpi' "$@"
