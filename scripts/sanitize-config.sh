# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: configure_sanitized_build DIR configures DIR
# as the one ASan + UBSan build both use. With clang++-14 ($HPCNET_FUZZ_CXX): HPCNET_FUZZ=ON
# (libFuzzer targets, coverage hooks in the library) and the tests; otherwise GCC with the tests
# only (scripts/fuzz.sh then refuses: libFuzzer needs clang). -O1 with line tables for the
# reports' stack traces; CPU only; through ccache when installed (HPCNET_CCACHE=0: not).
configure_sanitized_build() {
  local build="$1" cxx="${HPCNET_FUZZ_CXX:-clang++-14}"
  local args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
    -DHPCNET_SANITIZE=address,undefined -DHPCNET_CUDA=OFF -DHPCNET_NATIVE=OFF
    -DHPCNET_BUILD_BENCH=OFF -DHPCNET_BUILD_TESTS=ON)
  if command -v "$cxx" >/dev/null; then
    args+=(-DCMAKE_CXX_COMPILER="$cxx" -DHPCNET_FUZZ=ON
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only")
  else
    args+=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1")
  fi
  if [[ "${HPCNET_CCACHE:-1}" != 0 ]] && command -v ccache >/dev/null; then
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER="env;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=1;ccache")
  else
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=)
  fi
  cmake "${args[@]}" >/dev/null
}
