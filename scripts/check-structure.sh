#!/usr/bin/env bash
# Structure rules of issue 36 that a compiler cannot see, checked over src/ (run by ctest as
# Structure.*; also by hand: scripts/check-structure.sh [lengths|op-names]):
#   lengths   no function under src/ longer than 120 lines, none in the trainer (src/train/loop.cpp)
#             longer than 80 (Universal Ctags: a definition's first to last line);
#   op-names  each op's name is written once, as its entry X(NAME) in the op table
#             (src/ops/op_table.h, which makes op_name::NAME of it): the layers that name ops
#             (src/ops, src/autograd, src/export) hold no "NAME" literal of an op; tracing, export
#             and errors take the name from op_name:: or the op's record. The same word meaning something
#             else (an ONNX attribute value, a schedule) carries `// not an op name` on its line.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
fail=0

check_lengths() {
  command -v ctags-universal >/dev/null || { echo "check-structure: ctags not found (scripts/setup.sh installs universal-ctags)" >&2; exit 2; }
  local out
  out=$(ctags-universal --languages=C++,CUDA --map-CUDA=+.cu --map-C++=+.inc --fields=+ne --kinds-C++=f \
          --kinds-CUDA=f -R -f - src |
        awk -F'\t' '{ l = 0; e = 0
                      for (i = 4; i <= NF; i++) { if ($i ~ /^line:/) l = substr($i, 6); if ($i ~ /^end:/) e = substr($i, 5) }
                      if (!e) next
                      n = e - l + 1; limit = ($2 == "src/train/loop.cpp") ? 80 : 120
                      if (n > limit) printf "%s:%d: %s is %d lines (at most %d)\n", $2, l, $1, n, limit }')
  if [[ -n "$out" ]]; then echo "$out"; fail=1; fi
}

op_dirs=(src/ops src/autograd src/export)
op_literals() {  # the lines of the op layers where "$1" is written as a literal, one per literal
  { grep -rnoF --include='*.cpp' --include='*.h' --include='*.cu' --include='*.inc' "\"$1\"" \
    "${op_dirs[@]}" || true; } | {
    while IFS= read -r hit; do
      local file="${hit%%:*}" rest="${hit#*:}"; local line="${rest%%:*}"
      sed -n "${line}p" "$file" | grep -qF '// not an op name' || echo "$hit"
    done
  }
}

check_op_names() {
  local names
  names=$(sed -n 's/^ *X(\([a-z0-9_]*\)).*/\1/p; s/.*_NO_GRAD(X) X(\([a-z0-9_]*\)).*/\1/p' src/ops/op_table.h)
  [[ -n "$names" ]] || { echo "check-structure: no op names found in src/ops/op_table.h" >&2; exit 2; }
  local name count
  for name in $names; do
    count=$(op_literals "$name" | wc -l)
    if [[ "$count" != 0 ]]; then
      echo "op '$name': \"$name\" is written $count more times in ${op_dirs[*]} (use op_name::$name):"
      op_literals "$name" | sed 's/^/  /'
      fail=1
    fi
  done
}

case "$what" in
  lengths) check_lengths ;;
  op-names) check_op_names ;;
  all) check_lengths; check_op_names ;;
  *) echo "usage: scripts/check-structure.sh [lengths|op-names|all]" >&2; exit 2 ;;
esac
exit "$fail"
