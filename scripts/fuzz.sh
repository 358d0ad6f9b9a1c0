#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (HPCNET_FUZZ=ON: clang-14, ASan + UBSan) in their own build
# folder, writes their seed corpora (fuzz_make_corpus: small valid files made by code) and runs
# each target for SECONDS, then prints each one's executions and fails if any found a crash, a
# leak, a timeout or an input over the memory limit (its input is kept in the build folder's
# artifacts/; rerun it with `BUILD/fuzz/fuzz_NAME ARTIFACT`).
#   scripts/fuzz.sh [SECONDS] [TARGET...]    default 30 s each, every target
# Build folder: $HPCNET_FUZZ_BUILD_DIR, default /tmp/build-fuzz. The corpus each target grows is
# kept there (corpus/NAME) and reused by the next run. Runs under nice; the machine stays usable.
set -euo pipefail
cd "$(dirname "$0")/.."
src="$PWD"
seconds="${1:-30}"
shift || true
build="${HPCNET_FUZZ_BUILD_DIR:-/tmp/build-fuzz}"
cxx="${HPCNET_FUZZ_CXX:-clang++-14}"
command -v "$cxx" >/dev/null || { echo "fuzz: $cxx not found (scripts/setup.sh installs clang-14)"; exit 2; }

# Per-target input size limits: a few tens of KiB reach every code path of these readers.
declare -A max_len=(
  [safetensors]=65536 [run_file]=65536 [cifar10]=16384 [image]=65536
  [mask]=65536 [archive]=65536 [config]=16384 [data_yaml]=8192
)
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(safetensors run_file cifar10 image mask archive config data_yaml)
for t in "${targets[@]}"; do
  [[ -n "${max_len[$t]:-}" ]] || { echo "fuzz: unknown target '$t' (${!max_len[*]})"; exit 2; }
done

nice -n 15 cmake -S "$src" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DHPCNET_FUZZ=ON \
  -DHPCNET_CUDA=OFF -DHPCNET_NATIVE=OFF -DHPCNET_BUILD_TESTS=OFF -DHPCNET_BUILD_BENCH=OFF >/dev/null
nice -n 15 cmake --build "$build" --target fuzz_all -j "$(nproc)"

# Seeds: fresh each run, beside the corpus that earlier runs grew. configs/*.json are seeds too.
rm -rf "$build/seeds"
"$build/fuzz/fuzz_make_corpus" "$build/seeds"
cp configs/*.json "$build/seeds/config/"
mkdir -p "$build/artifacts"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$src/tests/sanitizers/lsan.supp:print_suppressions=0}"
failed=()
summary=()
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t"
  log="$build/artifacts/$t.log"
  echo "fuzz: $t for ${seconds} s (-max_len=${max_len[$t]})"
  rc=0
  nice -n 15 "$build/fuzz/fuzz_$t" "$build/corpus/$t" "$build/seeds/$t" \
    -max_total_time="$seconds" -max_len="${max_len[$t]}" -rss_limit_mb=2048 -timeout=25 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [[ $rc -ne 0 ]] || grep -qE '^(==[0-9]+==ERROR|SUMMARY: )' "$log"; then
    failed+=("$t")
    summary+=("$(printf '%-12s FAILED (exit %d) after %s executions; see %s' "$t" "$rc" "${execs:-?}" "$log")")
    grep -E 'ERROR|SUMMARY|Test unit written|runtime error' "$log" | head -5 | sed 's/^/  /'
  else
    summary+=("$(printf '%-12s ok: %s executions in %s s' "$t" "${execs:-?}" "$seconds")")
  fi
done
echo "fuzz: results (stat::number_of_executed_units)"
printf '  %s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: findings in: ${failed[*]} (inputs in $build/artifacts/)"
  exit 1
fi
