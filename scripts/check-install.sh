#!/usr/bin/env bash
# Installs the build (build/ or $HPCNET_BUILD_DIR) into a temporary prefix and uses it as a
# consumer would: checks the layout and the SONAME, compiles the public headers with nothing but
# the installed ones, builds examples/consumer with find_package(hpcnet) (shared and static) and
# with pkg-config, runs all three and checks that they print the same LeNet output.
#   scripts/check-install.sh [--keep]    --keep leaves the prefix and builds in place and says where
set -euo pipefail
cd "$(dirname "$0")/.."
src="$PWD"
build="${HPCNET_BUILD_DIR:-build}"
keep=0
[[ "${1:-}" == "--keep" ]] && keep=1

fail() {
  echo "check-install: FAILED: $*" >&2
  exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hpcnet-install.XXXXXX")
if [[ $keep -eq 0 ]]; then trap 'rm -rf "$tmp"' EXIT; fi
prefix="$tmp/prefix"

[[ -f "$build/CMakeCache.txt" ]] || fail "$build is not a configured build (run scripts/build.sh)"
cmake --build "$build" >/dev/null || fail "cmake --build $build"  # the shared library too
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || fail "cmake --install (see $tmp/install.log)"
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
libdir="${libdir:-lib}"

# The layout.
for f in bin/hpcnet include/hpcnet/tensor.h include/hpcnet/nn.h "$libdir/libhpcnet.a" \
  "$libdir/libhpcnet.so" "$libdir/cmake/hpcnet/hpcnetConfig.cmake" \
  "$libdir/cmake/hpcnet/hpcnetConfigVersion.cmake" "$libdir/cmake/hpcnet/hpcnetTargets.cmake" \
  "$libdir/pkgconfig/hpcnet.pc"; do
  [[ -e "$prefix/$f" ]] || fail "the install has no $f"
done
soname=$(readelf -d "$prefix/$libdir/libhpcnet.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ "$soname" =~ ^libhpcnet\.so\.[0-9]+ ]] || fail "libhpcnet.so has SONAME '$soname'"
[[ -e "$prefix/$libdir/$soname" ]] || fail "no $soname beside libhpcnet.so"
"$prefix/bin/hpcnet" --version | grep -Eq '^hpcnet [0-9]+\.[0-9]+\.[0-9]+ \(revision ' ||
  fail "the installed hpcnet --version"

# The public headers stand alone: nothing from src/ (which is not installed).
if grep -rn '#include "src/' "$prefix/include"; then fail "public headers include src/ headers"; fi
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
cflags=$(pkg-config --cflags hpcnet) || fail "pkg-config --cflags hpcnet"
for h in "$prefix"/include/hpcnet/*.h; do echo "#include \"hpcnet/$(basename "$h")\""; done \
  >"$tmp/all_headers.cpp"
c++ -std=c++20 -fsyntax-only $cflags "$tmp/all_headers.cpp" || fail "the installed headers do not compile"

# find_package(hpcnet): hpcnet::hpcnet and hpcnet::hpcnet_static.
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$src/examples/consumer" -B "$tmp/consumer" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/consumer.log" 2>&1 ||
  fail "configuring examples/consumer with find_package(hpcnet) (see $tmp/consumer.log)"
cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1 ||
  fail "building examples/consumer (see $tmp/consumer.log)"
ldd "$tmp/consumer/hpcnet_consumer" | grep -q "libhpcnet.so.* => $prefix/" ||
  fail "hpcnet_consumer does not load the installed libhpcnet.so"

# pkg-config, one compiler command.
c++ -std=c++20 -O1 "$src/examples/consumer/main.cpp" -o "$tmp/consumer_pc" \
  $(pkg-config --cflags --libs hpcnet) -Wl,-rpath,"$prefix/$libdir" ||
  fail "c++ main.cpp \$(pkg-config --cflags --libs hpcnet)"

expected='^lenet logits \(2, 10\) sum -?[0-9]+\.[0-9]{6}$'
first=""
for exe in "$tmp/consumer/hpcnet_consumer" "$tmp/consumer/hpcnet_consumer_static" "$tmp/consumer_pc"; do
  out=$("$exe") || fail "$exe exited $?"
  [[ "$out" =~ $expected ]] || fail "$exe printed '$out'"
  [[ -z "$first" || "$out" == "$first" ]] || fail "$exe printed '$out', not '$first'"
  first="$out"
  echo "check-install: $(basename "$exe"): $out"
done
echo "check-install: OK ($prefix: bin/hpcnet, $libdir/libhpcnet.a, $libdir/$soname," \
  "include/hpcnet, find_package and pkg-config)"
[[ $keep -eq 1 ]] && echo "check-install: kept $tmp"
exit 0
