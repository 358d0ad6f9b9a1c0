#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (HPCNET_FUZZ=ON: clang-14, ASan + UBSan) in their own build
# folder, writes their seed corpora (fuzz_make_corpus: small valid files made by code) and runs
# each target for SECONDS (or RUNS executions), then prints each one's executions and fails if
# any found a crash, a leak, a timeout or an input over the memory limit (its input is kept in
# the build folder's artifacts/; rerun it with `BUILD/fuzz/fuzz_NAME ARTIFACT`).
#   scripts/fuzz.sh [SECONDS] [TARGET...]    default 30 s each, every target
#   HPCNET_FUZZ_RUNS=10000000 scripts/fuzz.sh 0 image    10 million executions, no time limit
#   HPCNET_FUZZ_JOBS=2 ...                   that many targets at once (default 1)
# Build folder: $HPCNET_FUZZ_BUILD_DIR, default /tmp/build-fuzz, configured as scripts/sanitize.sh
# configures its own (scripts/sanitize-config.sh), so one folder can serve both. The corpus each
# target grows is kept there (corpus/NAME) and reused by the next run. Runs under nice.
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
  [mask]=65536 [archive]=65536 [tar_index]=65536 [config]=16384 [data_yaml]=8192
  [yolo_labels]=8192 [coco_json]=65536 [shard_keys]=16384 [cache_index]=16384 [exif]=4096
  [video]=65536
)
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(safetensors run_file cifar10 image mask archive tar_index
  config data_yaml yolo_labels coco_json shard_keys cache_index exif video)
runs="${HPCNET_FUZZ_RUNS:-0}"
jobs="${HPCNET_FUZZ_JOBS:-1}"
for t in "${targets[@]}"; do
  [[ -n "${max_len[$t]:-}" ]] || { echo "fuzz: unknown target '$t' (${!max_len[*]})"; exit 2; }
done

source scripts/sanitize-config.sh
configure_sanitized_build "$build"
grep -q '^HPCNET_FUZZ:BOOL=ON' "$build/CMakeCache.txt" ||
  { echo "fuzz: $build is not a fuzz build ($cxx missing?)"; exit 2; }
nice -n 15 cmake --build "$build" --target fuzz_all -j "$(nproc)"

# Seeds: fresh each run, beside the corpus that earlier runs grew. configs/*.json are seeds too.
rm -rf "$build/seeds"
"$build/fuzz/fuzz_make_corpus" "$build/seeds"
cp configs/*.json "$build/seeds/config/"
mkdir -p "$build/artifacts"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$src/tests/sanitizers/lsan.supp:print_suppressions=0}"
# One target: its log in artifacts/NAME.log, its summary line in artifacts/NAME.result.
run_target() {
  local t="$1" log="$build/artifacts/$1.log" rc=0 execs limit
  mkdir -p "$build/corpus/$t"
  limit=(-max_total_time="$seconds")
  [[ "$runs" != 0 ]] && limit=(-runs="$runs")
  [[ "$seconds" != 0 && "$runs" != 0 ]] && limit+=(-max_total_time="$seconds")
  nice -n 15 "$build/fuzz/fuzz_$t" "$build/corpus/$t" "$build/seeds/$t" "${limit[@]}" \
    -max_len="${max_len[$t]}" -rss_limit_mb=2048 -timeout=25 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  local secs
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  if [[ $rc -ne 0 ]] || grep -qE '^(==[0-9]+==ERROR|SUMMARY: )' "$log"; then
    printf '%-12s FAILED (exit %d) after %s executions; see %s\n' "$t" "$rc" "${execs:-?}" \
      "$log" >"$build/artifacts/$t.result"
    { grep -E 'ERROR|SUMMARY|Test unit written|runtime error' "$log" || true; } | head -5 | sed 's/^/  /' \
      >>"$build/artifacts/$t.result"
  else
    printf '%-12s ok: %s executions in %s s\n' "$t" "${execs:-?}" "${secs:-$seconds}" \
      >"$build/artifacts/$t.result"
  fi
}
pids=()
for t in "${targets[@]}"; do
  rm -f "$build/artifacts/$t.result"
  echo "fuzz: $t (runs ${runs} (0: no limit), seconds ${seconds} (0: no limit), -max_len=${max_len[$t]})"
  run_target "$t" &
  pids+=($!)
  while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n || true; done
done
wait
failed=()
summary=()
for t in "${targets[@]}"; do
  summary+=("$(cat "$build/artifacts/$t.result" 2>/dev/null || echo "$t: no result")")
  grep -q ' ok: ' "$build/artifacts/$t.result" 2>/dev/null || failed+=("$t")
done
echo "fuzz: results (stat::number_of_executed_units)"
printf '  %s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: findings in: ${failed[*]} (inputs in $build/artifacts/)"
  exit 1
fi
