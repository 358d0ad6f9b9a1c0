#!/usr/bin/env bash
# The GPU check: build hpcnet with CUDA, run the test suite (the CUDA tests must run, not skip),
# train the tutorial workload on the GPU (batch 4 eagerly and with --cuda-graph, batch 512), run
# PyTorch's tutorial program on the same GPU, and print the speed ratios; then time synthetic
# training steps of every model on both sides (bench/compare_gpu.py: ResNets, U-Net, DeepLabV3,
# yolov8n, LeNet; fp32 and bf16). Written for
# the device machine (an H200 with nvcc, the CUDA libraries and PyTorch, but no network and no
# Debian packages), so what the build needs travels with the checkout as .deb files; it finishes
# in under 8 minutes (later steps are skipped, saying so, when the time would run out).
#
#   scripts/gpu-check.sh --prepare [--data ARCHIVE]
#       Here, on the development machine (network): downloads the build's Debian packages and
#       their libraries into .device/debs (apt-get download), unpacks them into .device/prefix
#       (dpkg -x) for a look, copies the CIFAR-10 archive (default
#       ../shared/data/cifar10-train-jpg.tar.gz) into .device/data, and downloads the wheels of
#       Ultralytics and segmentation-models-pytorch (pure Python, 1.6 MB; the device's Python
#       lacks them, bench/compare_gpu.py needs them) into .device/whl. The packages include Open
#       MPI's (mpirun, libmpi, mpi.h; 7 MB), for the 2-rank check. .device/ is git-ignored: name
#       .device/debs, .device/data and .device/whl in the device tool's `carry` (about 57 MB).
#
#   scripts/gpu-check.sh --bundle [--build-dir DIR] [--data ARCHIVE]
#       Here, after a CUDA build in DIR (default build; CMAKE_CUDA_ARCHITECTURES must include 90):
#       copies its hpcnet and hpcnet_tests into .device/bundle/bin and every shared library they
#       load from this system (not the C library, libstdc++ or the CUDA libraries, which the device
#       machine has) into .device/bundle/lib, packed as .device/bundle.tar.xz (about 15 MB), and
#       the CIFAR-10 archive into .device/data. A build with MPI also gets Open MPI's packages
#       in the bundle (from .device/debs, else apt-get download; 7 MB). Then on the device
#       machine, carrying [".device/bundle.tar.xz", ".device/data"]: scripts/gpu-check.sh
#       --prebuilt .device/bundle.tar.xz (no build there: the device minutes go to tests and
#       training).
#
#   scripts/gpu-check.sh [options]
#       On the device machine: unpacks .device/debs into a prefix (unless --prefix names one),
#       then builds, tests, trains and compares. Options:
#         --prefix DIR       packages already unpacked there (dpkg -x layout: DIR/usr/...)
#         --prebuilt TAR     binaries and libraries of --bundle: skip the build
#         --tests FILTER     a GoogleTest filter for the test step (default: every test)
#         --data PATH        CIFAR-10 (archive or folder; default .device/data/*.tar.gz)
#         --build-dir DIR    default build-gpu (git-ignored: /build*/)
#         --archs LIST       CMAKE_CUDA_ARCHITECTURES (default 90)
#         --workers N        data-loading workers on both sides (default 2, as the tutorial)
#         --quick            batch-4 runs stop after 4000 steps (ratios only, no accuracy);
#                            compare_gpu.py runs its --quick rows
#         --no-pytorch       hpcnet only
#         --allow-no-gpu     dry run without a GPU: build and test, skip what needs the GPU
#         --budget SECONDS   total time allowed (default 470)
#         --device DEV       training device on both sides (default cuda; cpu for a dry run)
#         --steps N          stop every training run after N steps (a dry run of the table);
#                            compare_gpu.py times N steps per run
#         --python PY        the Python with PyTorch (default python3)
# Two checks of data-parallel and loader training (their rows follow the workloads' table):
#   2 ranks: `mpirun -np 2` on the one GPU at batch 32 against one process at batch 64, LeNet on
#     CIFAR-10, 200 steps (--steps N: N), same seed: the two model.safetensors must agree within
#     1e-5 (fp32). Needs an MPI build and mpirun: Open MPI from the carried packages (or the
#     bundle's), run from their unpacked prefix with OPAL_PREFIX; else the row says why it skipped.
#   yolov8n: with a scenes*.tar.gz in .device/data (a folder holding data.yaml, images/,
#     labels/), one epoch at 128 pixels, batch 64, 8 loader workers, on the GPU (images/s, the
#     data-wait share, mAP), then the same seed and flags on the CPU for the first 40 steps
#     (--steps N: N); the mean train loss of those steps on both must agree within 2%.
# bench/compare_gpu.py (with --device cpu: at --scale small) prints hpcnet images/s / PyTorch
# images/s per model and precision; a row that cannot run on one side says why and the others go
# on. Its rows are in the final table and under "compare_gpu" in gpu-check.json.
# Logs and a summary (gpu-check.json) go to $OUT when it is set (the device tool's folder),
# else to /tmp/hpcnet-gpu-check. Exit status: 0 when everything ran and every target was met,
# 1 when a step failed, 3 when all ran but a target was missed (a check row's FAIL included).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
START=$SECONDS

mode=run
prefix=""
data=""
build="build-gpu"
archs=90
workers=2
quick=0
with_torch=1
allow_no_gpu=0
budget=470
device=cuda
steps=""
python=python3
prebuilt=""
test_filter="*"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --prepare) mode=prepare ;;
    --bundle) mode=bundle ;;
    --prebuilt) prebuilt="$2"; shift ;;
    --tests) test_filter="$2"; shift ;;
    --prefix) prefix="$2"; shift ;;
    --data) data="$2"; shift ;;
    --build-dir) build="$2"; shift ;;
    --archs) archs="$2"; shift ;;
    --workers) workers="$2"; shift ;;
    --quick) quick=1 ;;
    --no-pytorch) with_torch=0 ;;
    --allow-no-gpu) allow_no_gpu=1 ;;
    --budget) budget="$2"; shift ;;
    --device) device="$2"; shift ;;
    --steps) steps="$2"; shift ;;
    --python) python="$2"; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[gpu-check $((SECONDS - START))s] $*"; }
die() { echo "gpu-check: $*" >&2; exit 1; }

# ---- the packages the build needs (Debian 12 names, as scripts/setup.sh) ----
PACKAGES=(libdnnl-dev ocl-icd-opencl-dev opencl-c-headers libjpeg62-turbo-dev libpng-dev
          libarchive-dev libcurl4-openssl-dev libssl-dev nlohmann-json3-dev libfmt-dev
          libcli11-dev libgtest-dev pkgconf)
# Wheels for bench/compare_gpu.py (installed on the device machine into /tmp/hpcnet-site).
WHEELS=(ultralytics==8.4.190 segmentation-models-pytorch==0.6.0)
# Open MPI, for the 2-rank check: named one by one, as a dependency walk would bring compilers
# (libopenmpi-dev depends on gfortran), ssh and X11 along. These are the packages of every
# library that mpirun, orted, libmpi and their plugins load (ldd on Debian 12), and mpi.h.
MPI_PACKAGES=(openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libhwloc15
              libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1
              ibverbs-providers librdmacm1 libpsm2-2 libnuma1 libnl-3-200 libnl-route-3-200
              libmunge2)
# Never carried: the C library and toolchain the device machine has its own of.
EXCLUDE=(libc6 libc-bin libc-dev-bin libc6-dev libcrypt-dev libcrypt1 libgcc-s1 libstdc++6
         gcc-12-base linux-libc-dev libnsl-dev libnsl2 libtirpc-dev libtirpc3 libtirpc-common
         rpcsvc-proto libgomp1 debconf dpkg perl-base googletest)

# Unpacks every .deb of $1 into $2 (dpkg -x where dpkg exists, else Python's ar/tar readers).
unpack_debs() {
  local debs="$1" dest="$2"
  mkdir -p "$dest"
  if command -v dpkg >/dev/null 2>&1; then
    for f in "$debs"/*.deb; do dpkg -x "$f" "$dest" || return 1; done
    return 0
  fi
  python3 - "$debs" "$dest" <<'PY'
import glob, io, os, sys, tarfile
debs, dest = sys.argv[1], sys.argv[2]
for path in sorted(glob.glob(os.path.join(debs, "*.deb"))):
    blob = open(path, "rb").read()
    assert blob[:8] == b"!<arch>\n", path
    pos = 8
    while pos < len(blob):
        name = blob[pos:pos + 16].decode().strip().rstrip("/")
        size = int(blob[pos + 48:pos + 58].decode().strip())
        body = blob[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as t:
                # dpkg -x semantics (symlinks as they are); the filter argument exists from 3.12.
                kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
                t.extractall(dest, **kw)
PY
}

if [[ $mode == prepare ]]; then
  command -v apt-get >/dev/null || die "--prepare needs apt-get (run it on the Debian development machine)"
  if ! apt-cache show libdnnl-dev >/dev/null 2>&1; then
    log "apt lists missing: apt-get update"
    apt-get update -q >/dev/null || die "apt-get update failed"
  fi
  all=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
          --no-replaces --no-enhances "${PACKAGES[@]}" 2>/dev/null | grep -v '^ ' | grep -v '^<' |
          sort -u)
  # shellcheck disable=SC2086
  all=$(printf '%s\n' $all "${MPI_PACKAGES[@]}" | sort -u)
  for e in "${EXCLUDE[@]}"; do all=$(grep -vx "$e" <<<"$all"); done
  rm -rf .device/debs .device/prefix
  mkdir -p .device/debs .device/data
  log "downloading $(wc -w <<<"$all") packages into .device/debs"
  # shellcheck disable=SC2086
  (cd .device/debs && apt-get download $all >/dev/null 2>&1) || die "apt-get download failed"
  unpack_debs .device/debs .device/prefix || die "unpacking the packages failed"
  src="${data:-../shared/data/cifar10-train-jpg.tar.gz}"
  if [[ -f "$src" ]]; then
    cp "$src" .device/data/
  else
    log "no data at $src: copy a CIFAR-10 archive into .device/data yourself"
  fi
  # bench/compare_gpu.py's PyTorch side: pure-Python wheels, no dependencies (the device's
  # Python has torch, torchvision, timm, opencv and the rest); the versions of the golden tests.
  rm -rf .device/whl && mkdir -p .device/whl
  if ! python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
       -d .device/whl "${WHEELS[@]}" >/dev/null 2>&1; then
    log "warning: pip download ${WHEELS[*]} failed: compare_gpu.py will skip yolov8n and U-Net"
  fi
  log "ready: $(du -sh .device/debs | cut -f1) of packages, $(du -sh .device/data | cut -f1) of data, $(ls .device/whl | wc -l) wheels"
  log "on the device machine, carry [\".device/debs\", \".device/data\", \".device/whl\"] and run: scripts/gpu-check.sh"
  exit 0
fi

if [[ $mode == bundle ]]; then
  [[ -x $build/hpcnet && -x $build/hpcnet_tests ]] ||
    die "--bundle needs a build with hpcnet and hpcnet_tests in $build (bash scripts/build.sh)"
  grep -q 'HPCNET_CUDA:BOOL=ON' "$build/CMakeCache.txt" || die "$build is not a CUDA build"
  grep -qE "arch=compute_90,code=.?sm_90" "$build/build.ninja" ||
    die "$build has no sm_90 code (CMAKE_CUDA_ARCHITECTURES)"
  rm -rf .device/bundle .device/bundle.tar.xz
  mkdir -p .device/bundle/bin .device/bundle/lib .device/data
  cp "$build/hpcnet" "$build/hpcnet_tests" .device/bundle/bin/
  # Every library the loader resolves here, except those the device machine has its own of.
  skip='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl\.|librt\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink)'
  ldd .device/bundle/bin/hpcnet .device/bundle/bin/hpcnet_tests | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    sort -u | while read -r name path; do
      grep -qE "$skip" <<<"$name" || cp -L "$path" ".device/bundle/lib/$name"
    done
  if ldd .device/bundle/bin/hpcnet | grep -q "not found"; then die "unresolved libraries: $(ldd .device/bundle/bin/hpcnet | grep 'not found')"; fi
  # An MPI build: Open MPI's packages for mpirun on the device (the carried ones, else downloaded).
  if grep -q 'HPCNET_MPI:BOOL=ON' "$build/CMakeCache.txt"; then
    mkdir -p .device/bundle/mpi-debs
    fetch=()
    for p in "${MPI_PACKAGES[@]}"; do
      cp .device/debs/"${p}"_*.deb .device/bundle/mpi-debs/ 2>/dev/null || fetch+=("$p")
    done
    if [[ ${#fetch[@]} -gt 0 ]] &&
       ! (cd .device/bundle/mpi-debs && apt-get download "${fetch[@]}" >/dev/null 2>&1); then
      log "warning: apt-get download ${fetch[*]} failed: the 2-rank check will be skipped"
      rm -rf .device/bundle/mpi-debs
    fi
  fi
  # The tests find the sources and the binary at the paths compiled into them.
  printf '%s\n%s\n' "$ROOT" "$(cd "$build" && pwd)" >.device/bundle/paths.txt
  strip --strip-unneeded .device/bundle/bin/* .device/bundle/lib/* 2>/dev/null || true
  (cd .device && tar -cJf bundle.tar.xz bundle) || die "packing the bundle failed"
  rm -rf .device/bundle
  src="${data:-../shared/data/cifar10-train-jpg.tar.gz}"
  [[ -f $src ]] && cp "$src" .device/data/
  log "ready: .device/bundle.tar.xz $(du -h .device/bundle.tar.xz | cut -f1), data $(du -sh .device/data | cut -f1)"
  log "on the device machine, carry [\".device/bundle.tar.xz\", \".device/data\"] and run: scripts/gpu-check.sh --prebuilt .device/bundle.tar.xz"
  exit 0
fi

# ---------------------------------------------------------------------------------------------
# The device run.
# ---------------------------------------------------------------------------------------------
out="${OUT:-/tmp/hpcnet-gpu-check}"
mkdir -p "$out"
runs=/tmp/hpcnet-gpu-check-runs
rm -rf "$runs"
mkdir -p "$runs"
status=0
left() { echo $((budget - (SECONDS - START))); }
# A timeout for the next step: what is left minus a reserve, at least 30 seconds.
limit() { local l=$(( $(left) - $1 )); echo $(( l < 30 ? 30 : l )); }

log "machine: $(nproc) CPUs; $(nvidia-smi -L 2>/dev/null | head -1 || echo 'no nvidia-smi')"
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || die "nvcc not found (PATH or /usr/local/cuda/bin)"
log "$(nvcc --version | tail -2 | head -1); $(cmake --version | head -1); $(c++ --version | head -1)"

arch=x86_64-linux-gnu
# Open MPI from unpacked packages ($1: the dpkg -x folder), run from there: its programs and
# libraries find their own files through OPAL_PREFIX, PMIx its plugins and help texts through
# PMIX_PKGLIBDIR and PMIX_PKGDATADIR (both are built for /usr). Sets mpi_prefix, mpi_libpath
# (its libraries) and mpi_env (the variables, for env).
mpi_prefix=""
mpi_libpath=""
mpi_env=()
use_mpi_prefix() {
  local u="$1/usr" q="$1/usr/lib/$arch/pmix2"
  [[ -x $u/bin/orterun && -x $u/bin/mpicxx.openmpi ]] || return 1
  mpi_prefix=$1
  mpi_libpath="$u/lib/$arch:$1/lib/$arch:$u/lib/$arch/openmpi/lib:$q/lib"
  mpi_env=("OPAL_PREFIX=$u" "PMIX_PKGLIBDIR=$q/lib/pmix" "PMIX_PKGDATADIR=$q/share/pmix")
}

if [[ -n $prebuilt ]]; then
  # The bundle of --bundle: binaries and libraries built on the development machine.
  [[ -f $prebuilt ]] || die "--prebuilt $prebuilt: no such file (make it with --bundle)"
  rm -rf /tmp/hpcnet-bundle && mkdir -p /tmp/hpcnet-bundle
  tar -xJf "$prebuilt" -C /tmp/hpcnet-bundle || die "unpacking $prebuilt failed"
  b=/tmp/hpcnet-bundle/bundle
  { read -r src_dir; read -r bin_dir; } <"$b/paths.txt"
  if [[ $src_dir != "$ROOT" ]]; then
    [[ -e $src_dir ]] || { mkdir -p "$(dirname "$src_dir")" && ln -s "$ROOT" "$src_dir"; } ||
      die "cannot link $src_dir (the tests' source path) to $ROOT"
  fi
  mkdir -p "$bin_dir" && cp "$b/bin/hpcnet" "$b/bin/hpcnet_tests" "$bin_dir/" ||
    die "cannot place the binaries in $bin_dir"
  build="$bin_dir"
  # The CUDA libraries: the toolkit's, else the pip wheels' (PyTorch's nvidia-* packages).
  libpath="$b/lib"
  for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
    d=$(find /usr/local/cuda/lib64 /usr/local/cuda/targets /usr/local /opt /usr/lib -name "$so" \
          2>/dev/null | head -1)
    if [[ -n $d ]]; then
      libpath="$libpath:$(dirname "$d")"
    else
      log "warning: $so not found on this machine"
    fi
  done
  # Open MPI's packages (an MPI build's bundle): unpacked for mpirun.
  if ls "$b"/mpi-debs/*.deb >/dev/null 2>&1; then
    rm -rf /tmp/hpcnet-mpi
    { unpack_debs "$b/mpi-debs" /tmp/hpcnet-mpi && use_mpi_prefix /tmp/hpcnet-mpi; } ||
      log "warning: the bundle's Open MPI packages did not unpack into a usable prefix"
  fi
  log "prebuilt binaries from $prebuilt; libraries: $libpath"
  hp() { LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
  missing=$(hp ldd "$build/hpcnet" | grep "not found" || true)
  [[ -z $missing ]] || die "libraries not found: $missing"
  build_s=0
else
# Packages: a given prefix, else the carried .deb files unpacked, else the system's own.
if [[ -z "$prefix" ]]; then
  if [[ -d .device/debs ]] && ls .device/debs/*.deb >/dev/null 2>&1; then
    prefix=/tmp/hpcnet-prefix
    if [[ ! -f $prefix/.unpacked ]]; then
      log "unpacking $(ls .device/debs/*.deb | wc -l) packages into $prefix"
      rm -rf "$prefix"
      unpack_debs .device/debs "$prefix" || die "unpacking .device/debs failed"
      touch "$prefix/.unpacked"
    fi
  elif [[ -d .device/prefix/usr ]]; then
    prefix="$ROOT/.device/prefix"
  fi
fi
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DHPCNET_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$archs")
libpath=""
if [[ -n "$prefix" ]]; then
  prefix=$(cd "$prefix" && pwd)
  libpath="$prefix/usr/lib/$arch:$prefix/lib/$arch"
  # Headers the system lacks come from the prefix (searched after the system's own).
  cmake_args+=("-DCMAKE_PREFIX_PATH=$prefix/usr"
               "-DCMAKE_CXX_FLAGS=-idirafter $prefix/usr/include -idirafter $prefix/usr/include/$arch"
               "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$prefix/usr/lib/$arch:$prefix/lib/$arch")
  # CMake would find the prefix's pkg-config first, which cannot start without its library:
  # name the system's, else a wrapper that gives the prefix's its library path.
  if command -v pkg-config >/dev/null; then
    cmake_args+=("-DPKG_CONFIG_EXECUTABLE=$(command -v pkg-config)")
  elif [[ -x $prefix/usr/bin/pkgconf ]]; then
    mkdir -p "$prefix/wrap"
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$libpath" \
      "$prefix/usr/bin/pkgconf" >"$prefix/wrap/pkg-config"
    chmod +x "$prefix/wrap/pkg-config"
    cmake_args+=("-DPKG_CONFIG_EXECUTABLE=$prefix/wrap/pkg-config")
  fi
  log "packages from $prefix"
fi
# MPI (the 2-rank check): the prefix's Open MPI, found by CMake through its compiler wrapper (which
# needs the prefix's libraries and OPAL_PREFIX); without it, no MPI.
if [[ -n "$prefix" ]] && use_mpi_prefix "$prefix"; then
  mkdir -p "$prefix/wrap"
  { echo '#!/bin/bash'; printf 'export'; printf ' %q' "${mpi_env[@]}" "LD_LIBRARY_PATH=$mpi_libpath"
    printf '\nexec %q "$@"\n' "$prefix/usr/bin/mpicxx.openmpi"; } >"$prefix/wrap/mpicxx"
  chmod +x "$prefix/wrap/mpicxx"
  cmake_args+=(-DHPCNET_MPI=ON "-DMPI_CXX_COMPILER=$prefix/wrap/mpicxx")
  libpath="${libpath:+$libpath:}$mpi_libpath"
  log "Open MPI from $prefix"
else
  cmake_args+=(-DHPCNET_MPI=OFF)
fi
# cuDNN: with the toolkit, else PyTorch's pip wheel (nvidia-cudnn-cu13).
if [[ ! -f /usr/local/cuda/include/cudnn.h && -z "${CUDNN_ROOT:-}" ]]; then
  CUDNN_ROOT=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
fi
if [[ -n "${CUDNN_ROOT:-}" ]]; then
  cmake_args+=("-DCUDNN_ROOT=$CUDNN_ROOT")
  libpath="${libpath:+$libpath:}$CUDNN_ROOT/lib"
  log "cuDNN from $CUDNN_ROOT"
fi
# NCCL: its header with the toolkit, else PyTorch's pip wheel (nvidia-nccl-cu13); hpcnet opens
# libnccl.so.2 itself when several ranks have a GPU each (the DistNccl test uses one rank).
if [[ ! -f /usr/local/cuda/include/nccl.h && -z "${NCCL_ROOT:-}" ]]; then
  NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
fi
if [[ -n "${NCCL_ROOT:-}" ]]; then
  cmake_args+=("-DNCCL_ROOT=$NCCL_ROOT")
  libpath="${libpath:+$libpath:}$NCCL_ROOT/lib"
  log "NCCL from $NCCL_ROOT"
fi
# Only hpcnet's own processes see the carried libraries (never python3, cmake or the compiler).
hp() { LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }

# ---- build ----
log "configure: cmake ${cmake_args[*]}"
# (At most 8 files come back from $OUT: configure and build share one log.)
if ! cmake -S . -B "$build" -G Ninja "${cmake_args[@]}" >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log"
  die "configure failed (log: $out/build.log)"
fi
t_build=$SECONDS
if ! timeout "$(limit 60)" cmake --build "$build" -j "$(nproc)" --target hpcnet hpcnet_tests \
    >>"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -20
  die "build failed (log: $out/build.log)"
fi
build_s=$((SECONDS - t_build))
log "built in ${build_s}s"


fi

# ---- tests ----
gpu=1
if ! nvidia-smi -L >/dev/null 2>&1; then
  gpu=0
  [[ $allow_no_gpu == 1 ]] || die "no GPU visible (nvidia-smi -L failed); --allow-no-gpu for a dry run"
  log "no GPU: a dry run (build and tests only)"
fi

log "tests"
# The CUDA tests first, on their own (a slow or hanging CPU test cannot hide their results), then
# every other test of the filter.
hp timeout 120 "$build/hpcnet_tests" --gtest_filter="Cuda*:*Cuda*" >"$out/tests.log" 2>&1
cuda_rc=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|^\[  FAILED  \]" "$out/tests.log" | head -40
log "CUDA tests: exit $cuda_rc"
hp timeout "$(limit 200)" "$build/hpcnet_tests" --gtest_filter="$test_filter:-Cuda*:*Cuda*" \
  >>"$out/tests.log" 2>&1
test_rc=$?
[[ $cuda_rc == 0 ]] || test_rc=$cuda_rc
grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|^\[  FAILED  \]" "$out/tests.log" | tail -40
cuda_skipped=$(grep -cE "^\[  SKIPPED \] Cuda[A-Za-z0-9_.]+ \(" "$out/tests.log" || true)
if [[ $test_rc != 0 ]]; then
  log "TESTS FAILED (exit $test_rc; log: $out/tests.log)"
  status=1
fi
if [[ $gpu == 1 && $cuda_skipped != 0 ]]; then
  log "CUDA TESTS SKIPPED on a GPU machine:"
  grep -A2 "Skipped" "$out/tests.log" | grep "no CUDA device" | sort -u | head -3
  status=1
fi
hp "$build/hpcnet" info 2>&1 | head -20

# ---- training, hpcnet and PyTorch, on the GPU ----
if [[ -z "$data" ]]; then
  for f in .device/data/*.tar.gz; do  # the first archive that is not a scenes subset
    [[ -e $f && $f != .device/data/scenes* ]] && { data=$f; break; }
  done
  [[ -n "$data" ]] || data=../shared/data/cifar10-train-jpg.tar.gz
fi
declare -A H_IPS H_ACC H_S T_IPS T_ACC T_S
common=(--lr 0.001 --momentum 0.9 --seed 0 --val-split 5000 --epochs 2 --workers "$workers")

# hpcnet WORKLOAD BATCH [--steps N]: trains, then reads metrics.jsonl's end record.
run_hpcnet() {
  local w="$1" b="$2"; shift 2
  local dir="$runs/hpcnet-$w"
  hp timeout "$(limit 20)" "$build/hpcnet" train --device "$device" --model lenet \
    --data "$data" --batch-size "$b" --log-every $((b == 4 ? 2000 : 20)) \
    "${common[@]}" --no-progress --exist-ok --out "$dir" "$@" >"$out/hpcnet-$w.log" 2>&1
  local rc=$?
  tail -4 "$out/hpcnet-$w.log"
  if [[ $rc != 0 || ! -f $dir/metrics.jsonl ]]; then
    log "hpcnet $w FAILED (exit $rc; log: $out/hpcnet-$w.log)"
    return 1
  fi
  read -r H_IPS[$w] H_ACC[$w] H_S[$w] < <(python3 - "$dir/metrics.jsonl" <<'PY'
import json, sys
end = [json.loads(l) for l in open(sys.argv[1]) if '"end"' in l][-1]
acc = end.get("val_accuracy")
print(f'{end["images_per_sec"]:.1f}', "nan" if acc is None or acc < 0 else f"{acc:.2f}",
      f'{end["train_seconds"]:.2f}')
PY
)
}

run_torch() {
  local w="$1" b="$2"; shift 2
  timeout "$(limit 10)" "$python" bench/pytorch_tutorial.py --device "$device" --data "$data" \
    --batch-size "$b" --log-every $((b == 4 ? 2000 : 20)) "${common[@]}" --json "$@" \
    >"$out/torch-$w.log" 2>&1
  local rc=$?
  tail -3 "$out/torch-$w.log" | cut -c1-200
  if [[ $rc != 0 ]]; then
    log "PyTorch $w FAILED (exit $rc; log: $out/torch-$w.log)"
    return 1
  fi
  read -r T_IPS[$w] T_ACC[$w] T_S[$w] < <(python3 - "$out/torch-$w.log" <<'PY'
import json, sys
j = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
acc = j.get("val_accuracy")
print(f'{j["images_per_sec"]:.1f}', "nan" if acc is None else f"{acc:.2f}",
      f'{j["train_seconds"]:.2f}')
PY
)
}

workloads=(b4 b512)
[[ $gpu == 1 || $device != cuda ]] || workloads=()
if [[ ${#workloads[@]} -gt 0 && ! -e "$data" ]]; then
  log "no data at '$data' (carry .device/data; see --prepare): skipping training"
  status=1
  workloads=()
fi
for w in "${workloads[@]}"; do
  b=${w#b}
  extra=()
  [[ $w == b4 && $quick == 1 ]] && extra=(--steps 4000)
  [[ -n $steps ]] && extra=(--steps "$steps")
  # Rough needs: the batch-4 pair takes the longest (PyTorch eager at ~2 ms a step).
  need=60
  [[ $w == b4 ]] && need=150
  if (( $(left) < need )); then
    log "skipping $w: $(left)s left of the ${budget}s budget"
    status=1
    continue
  fi
  log "hpcnet $w (batch $b) on $device"
  run_hpcnet "$w" "$b" "${extra[@]}" || status=1
  if [[ $with_torch == 1 ]]; then
    if (( $(left) < need / 2 )); then
      log "skipping PyTorch $w: $(left)s left"
      status=1
      continue
    fi
    log "PyTorch $w (batch $b) on $device"
    run_torch "$w" "$b" "${extra[@]}" || status=1
  fi
done
# The batch-4 tutorial again with the step replayed from a CUDA graph (hpcnet train --cuda-graph;
# on the CPU it runs eagerly), set beside the same PyTorch run: row b4g.
if [[ " ${workloads[*]} " == *" b4 "* ]]; then
  extra=()
  [[ $quick == 1 ]] && extra=(--steps 4000)
  [[ -n $steps ]] && extra=(--steps "$steps")
  if (( $(left) < 60 )); then
    log "skipping b4g (--cuda-graph): $(left)s left of the ${budget}s budget"
  else
    log "hpcnet b4g (batch 4, --cuda-graph) on $device"
    if run_hpcnet b4g 4 "${extra[@]}" --cuda-graph; then
      grep -h "cuda-graph" "$out/hpcnet-b4g.log" | head -2
      T_IPS[b4g]=${T_IPS[b4]:-}; T_ACC[b4g]=${T_ACC[b4]:-}; T_S[b4g]=${T_S[b4]:-}
      workloads+=(b4g)
    else
      status=1
    fi
  fi
fi

# ---- 2 ranks on the one GPU at batch 32 against one process at batch 64 (LeNet, CIFAR-10) ----
# As tests/dist's NRanksAtBatchBMatchOneProcessAtBatchNB: each global batch is the same 64 images
# (the ranks' DistributedSampler shares of one permutation of the same seed) and the all-reduce
# averages the gradients, so the same lr takes the same steps; the weights agree up to float
# summation order. The ranks share the GPU and reduce through host copies (no NCCL).
dp_steps=${steps:-200}
dp_diff=""
dp_why=""
mpirun=()
if ! grep -qE '^ +MPI +on' <<<"$(hp "$build/hpcnet" info 2>&1)"; then
  dp_why="this build has no MPI"
elif [[ -n $mpi_prefix ]]; then
  mpirun=(env "${mpi_env[@]}" "LD_LIBRARY_PATH=$libpath:$mpi_libpath"
          OMPI_MCA_mca_base_component_show_load_errors=0 "$mpi_prefix/usr/bin/orterun")
elif command -v mpirun >/dev/null; then
  mpirun=(env "LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" mpirun)
else
  dp_why="no mpirun (no Open MPI in the packages or the bundle: --prepare or --bundle again)"
fi
# One node: shared memory only (without single-copy, which containers often forbid), no UCX/OFI.
mpirun+=(--oversubscribe --bind-to none --mca pml ob1 --mca btl "self,vader"
         --mca btl_vader_single_copy_mechanism none)
[[ $(id -u) == 0 ]] && mpirun+=(--allow-run-as-root)
if [[ -n $dp_why ]]; then
  :
elif [[ $gpu == 0 && $device == cuda ]]; then
  dp_why="no GPU (--device cpu runs it on the CPU)"
elif [[ ! -e $data ]]; then
  dp_why="no data at '$data'"
elif (( $(left) < 60 )); then
  dp_why="$(left)s left of the ${budget}s budget"
elif ! timeout 60 "${mpirun[@]}" -np 2 true >"$runs/mpirun-true.log" 2>&1; then
  dp_why="mpirun -np 2 true failed: $(grep -v '^[ -]*$' "$runs/mpirun-true.log" | head -1 | cut -c1-100)"
fi
if [[ -n $dp_why ]]; then
  log "2 ranks: skipped: $dp_why"
else
  dp=(train --device "$device" --model lenet --data "$data" --epochs 1 --steps "$dp_steps"
      --lr 0.01 --momentum 0.9 --seed 0 --workers "$workers" --log-every 50 --no-progress
      --exist-ok)
  log "2 ranks: one process at batch 64, then mpirun -np 2 at batch 32; $dp_steps steps on $device"
  hp timeout "$(limit 20)" "$build/hpcnet" "${dp[@]}" --batch-size 64 --out "$runs/dp1" \
    >"$runs/dp.log" 2>&1
  dp_rc=$?
  if [[ $dp_rc == 0 ]]; then
    timeout "$(limit 20)" "${mpirun[@]}" -np 2 "$build/hpcnet" "${dp[@]}" --batch-size 32 \
      --out "$runs/dp2" >>"$runs/dp.log" 2>&1
    dp_rc=$?
  fi
  if [[ $dp_rc == 0 ]]; then
    # The largest |difference| over every tensor (the standard library reads safetensors).
    dp_diff=$(python3 - "$runs/dp1/model.safetensors" "$runs/dp2/model.safetensors" <<'PY'
import array, json, struct, sys

def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head, blob = json.loads(f.read(n)), f.read()
    head.pop("__metadata__", None)
    return {k: (v["dtype"], blob[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in head.items()}

a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys(), "the files hold different tensors"
m = 0.0
for k, (dt, x) in a.items():
    y = b[k][1]
    if dt == "F32" and len(x) == len(y):
        m = max([m] + [abs(p - q) for p, q in zip(array.array("f", x), array.array("f", y))])
    elif x != y:
        m = float("inf")
print(f"{m:.3g}")
PY
) || dp_rc=1
  fi
  if [[ $dp_rc != 0 || -z $dp_diff ]]; then
    tail -5 "$runs/dp.log"
    log "2 ranks FAILED (exit $dp_rc; log: $runs/dp.log)"
    dp_why="failed (exit $dp_rc; its log's end is above)"
    dp_diff=""
    status=1
  else
    log "2 ranks x 32 against 1 x 64: max |difference| of the weights $dp_diff"
  fi
fi
# Two ranks on one GPU cannot use NCCL: --dist-backend nccl must be refused on every rank with
# exit 2 and the reason (auto, above, took the host copies instead).
nccl_refusal=""
if [[ -z $dp_why && $device == cuda ]]; then
  timeout 60 "${mpirun[@]}" -np 2 "$build/hpcnet" "${dp[@]}" --batch-size 32 --steps 2 \
    --dist-backend nccl --out "$runs/dpn" >"$runs/dp-nccl.log" 2>&1
  nr=$?
  if [[ $nr == 2 ]] && grep -q "dist-backend nccl: 2 ranks share one GPU" "$runs/dp-nccl.log"
  then
    nccl_refusal="PASS (exit 2, the reason named)"
  else
    nccl_refusal="FAIL (exit $nr; log: $runs/dp-nccl.log)"
    tail -3 "$runs/dp-nccl.log"
    status=1
  fi
  log "2 ranks, --dist-backend nccl on one GPU: $nccl_refusal"
fi

# ---- yolov8n: one epoch with the loader on the GPU, and its first steps on the CPU ----
# On a scenes subset (.device/data/scenes*.tar.gz), when carried. The GPU's epoch gives images/s,
# the data-wait share (metrics.jsonl's epoch record) and mAP; the CPU, too slow for the epoch,
# takes its first yolo_steps steps with the same seed and flags. Each run's log record at that
# step (--log-every yolo_steps) holds the mean loss of those steps: they must agree within 2%.
yolo_steps=${steps:-40}
yolo_why=""
Y=()  # images/s, data-wait share, loss on $device, loss on the CPU, steps compared, mAP50-95
scenes=$(ls .device/data/scenes*.tar.gz 2>/dev/null | head -1 || true)
if [[ -z $scenes ]]; then
  yolo_why="no .device/data/scenes*.tar.gz"
elif [[ $gpu == 0 && $device == cuda ]]; then
  yolo_why="no GPU (--device cpu runs it on the CPU)"
elif (( $(left) < 120 )); then
  yolo_why="$(left)s left of the ${budget}s budget"
fi
if [[ -n $yolo_why ]]; then
  log "yolov8n: skipped: $yolo_why"
else
  rm -rf /tmp/hpcnet-scenes && mkdir -p /tmp/hpcnet-scenes
  tar -xzf "$scenes" -C /tmp/hpcnet-scenes
  yaml=$(ls /tmp/hpcnet-scenes/*/data.yaml | head -1)
  yolo=(train --model yolov8n --data "$yaml" --imgsz 128 --epochs 1 --batch-size 64 --workers 8
        --seed 0 --log-every "$yolo_steps" --no-progress --exist-ok)
  yextra=()
  [[ -n $steps ]] && yextra=(--steps "$steps")
  log "yolov8n on $device, one epoch: $yaml"
  hp timeout "$(limit 60)" "$build/hpcnet" "${yolo[@]}" --device "$device" "${yextra[@]}" \
    --out "$runs/yolo" >"$out/hpcnet-yolo.log" 2>&1
  yolo_rc=$?
  tail -3 "$out/hpcnet-yolo.log"
  if [[ $yolo_rc == 0 ]] && (( $(left) > 40 )); then
    # At most 2 minutes (40 steps: 2560 images at 128 pixels).
    cpu_limit=$(limit 30)
    (( cpu_limit > 120 )) && cpu_limit=120
    log "yolov8n on cpu, the first $yolo_steps steps (at most ${cpu_limit}s)"
    hp timeout "$cpu_limit" "$build/hpcnet" "${yolo[@]}" --device cpu --steps "$yolo_steps" \
      --out "$runs/yolo-cpu" >>"$out/hpcnet-yolo.log" 2>&1
    yolo_rc=$?
    tail -1 "$out/hpcnet-yolo.log"
  elif [[ $yolo_rc == 0 ]]; then
    yolo_why="the CPU run: $(left)s left of the ${budget}s budget"
  fi
  if [[ $yolo_rc != 0 ]]; then
    log "hpcnet yolov8n FAILED (exit $yolo_rc; log: $out/hpcnet-yolo.log)"
    yolo_why="failed (exit $yolo_rc)"
    status=1
  fi
  read -r -a Y < <(python3 - "$runs/yolo/metrics.jsonl" "$runs/yolo-cpu/metrics.jsonl" <<'PY'
import json, sys

def records(path):
    try:
        return [json.loads(line) for line in open(path)]
    except OSError:
        return []

def loss_at(recs, k):
    """The mean loss of the first k steps: the log record at step k, else an epoch of k steps."""
    for r in recs:
        if r.get("event") == "log" and r.get("global_step") == k:
            return r["loss"]
    for r in recs:
        if r.get("event") == "epoch" and r.get("epoch") == 1 and r.get("steps") == k:
            return r["train_loss"]
    return None

gpu, cpu = records(sys.argv[1]), records(sys.argv[2])
# The epoch record, else (a run cut by --steps) the end record.
rec = next((r for r in gpu if r.get("event") == "epoch"),
           next((r for r in gpu if r.get("event") == "end"), {}))
share = rec.get("data_wait_share")
if share is None and rec.get("train_seconds"):
    share = rec["data_wait_seconds"] / rec["train_seconds"]
k = next((r["steps"] for r in cpu if r.get("event") == "end"), None)
fmt = lambda x, f: "-" if x is None else format(x, f)
print(fmt(rec.get("images_per_sec"), ".1f"), fmt(share, ".4f"),
      fmt(loss_at(gpu, k) if k else None, ".5f"), fmt(loss_at(cpu, k) if k else None, ".5f"),
      fmt(k, "d"), fmt(rec.get("val_map50_95"), ".4f"))
PY
)
  log "yolov8n: images/s ${Y[0]:--}, data-wait share ${Y[1]:--}, mean loss of ${Y[4]:--} steps: ${Y[2]:--} ($device), ${Y[3]:--} (cpu); mAP50-95 ${Y[5]:--}"
fi

# ---- hpcnet's bf16 convolutions in NCHW against NHWC (HPCNET_CUDA_BF16_LAYOUT), real shapes ----
# Before compare_gpu.py, which takes the rest of the budget; a few steps of each, hpcnet alone.
layout_rows=()
layout_models=("resnet50 224 64" "unet_resnet18 128 16" "yolov8n 640 16")
[[ $quick == 1 ]] && layout_models=("resnet50 224 64")
[[ $device == cpu ]] && layout_models=("resnet20 32 2")
for m in "${layout_models[@]}"; do
  read -r lm li lb <<<"$m"
  if (( $(left) < 120 )); then  # compare_gpu.py, next, takes what is left
    log "skipping the bf16 layouts of $lm: $(left)s left"
    break
  fi
  ips=()
  for lay in nchw nhwc; do
    v=$(HPCNET_CUDA_BF16_LAYOUT=$lay hp timeout "$(limit 5)" "$build/hpcnet" bench \
          --device "$device" --model "$lm" --imgsz "$li" --batch-size "$lb" --precision bf16 \
          --steps "${steps:-20}" --warmup 5 --no-profile --json 2>>"$runs/layouts.log" |
        python3 -c 'import json,sys; print("%.1f" % json.loads(sys.stdin.read().splitlines()[-1])["images_per_sec"])' \
        2>>"$runs/layouts.log") || v="-"
    ips+=("${v:--}")
  done
  layout_rows+=("$lm@$li b$lb bf16: NCHW ${ips[0]} img/s, NHWC ${ips[1]} img/s")
  log "bf16 layouts, ${layout_rows[-1]}"
done

# ---- where yolov8n's step goes on the GPU: bench's per-kernel table (CUDA events) ----
# Appended to hpcnet-yolo.log (the files that come back from $OUT are few), for the next
# optimisation; no check.
if [[ $device == cuda && $gpu == 1 ]] && (( $(left) > 150 )); then
  { echo; echo "---- hpcnet bench (per-kernel table): yolov8n 640 b16 bf16 ----"; } >>"$out/hpcnet-yolo.log"
  hp timeout 60 "$build/hpcnet" bench --device cuda --model yolov8n --imgsz 640 --batch-size 16 \
    --precision bf16 --steps 5 --warmup 3 >>"$out/hpcnet-yolo.log" 2>&1 ||
    log "bench of yolov8n failed (its end is in $out/hpcnet-yolo.log)"
fi

# ---- synthetic training steps of every model, hpcnet and PyTorch (bench/compare_gpu.py) ----
# A row that fails on one side is reported in its table and is no failure of this check;
# compare_gpu.py itself failing (no GPU for PyTorch, a crash, the timeout) is.
compare_json="$runs/compare-gpu.json"
if [[ $with_torch == 0 ]]; then
  log "compare_gpu: skipped (--no-pytorch)"
elif [[ $gpu == 0 && $device == cuda ]]; then
  log "compare_gpu: skipped (no GPU; --device cpu runs it on the CPU)"
elif (( $(left) < 60 )); then
  log "skipping compare_gpu: $(left)s left of the ${budget}s budget"
  status=1
else
  cargs=(--device "$device" --bin "$build/hpcnet" --bin-ld-path "$libpath" --json "$compare_json"
         --budget "$(limit 20)" --no-table)  # its table: with the others, below
  [[ $quick == 1 ]] && cargs+=(--quick)
  [[ $device == cpu ]] && cargs+=(--scale small)
  [[ -n $steps ]] && cargs+=(--steps "$steps")
  # Ultralytics and smp from the carried wheels, for this step's Python only.
  site=""
  if ls .device/whl/*.whl >/dev/null 2>&1; then
    if "$python" -m pip install -q --no-index --no-deps --no-compile --upgrade \
         --target /tmp/hpcnet-site .device/whl/*.whl >"$runs/pip.log" 2>&1; then
      site=/tmp/hpcnet-site
    else
      log "warning: installing .device/whl failed: $(tail -1 "$runs/pip.log")"
    fi
  fi
  log "compare_gpu: ${cargs[*]}"
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
    timeout "$(limit 10)" "$python" bench/compare_gpu.py "${cargs[@]}" 2>&1 |
    tee "$runs/compare-gpu.log"
  compare_rc=${PIPESTATUS[0]}
  if [[ $compare_rc != 0 ]]; then
    log "compare_gpu FAILED (exit $compare_rc; log: $runs/compare-gpu.log)"
    status=1
  fi
fi

# ---- the table ----
echo
printf '%-8s %14s %14s %10s %10s %10s\n' workload "hpcnet img/s" "torch img/s" ratio "hpcnet acc" "torch acc"
targets_met=1
summary="{\"build_seconds\": ${build_s:-null}, \"tests_exit\": $test_rc, \"cuda_tests_skipped\": $cuda_skipped, \"workloads\": {"
sep=""
for w in "${workloads[@]}"; do
  hi="${H_IPS[$w]:-}"; ti="${T_IPS[$w]:-}"
  ratio=""
  if [[ -n $hi && -n $ti ]]; then ratio=$(python3 -c "print(f'{$hi / $ti:.2f}')"); fi
  printf '%-8s %14s %14s %10s %10s %10s\n' "$w" "${hi:--}" "${ti:--}" "${ratio:--}" \
    "${H_ACC[$w]:--}" "${T_ACC[$w]:--}"
  want=$([[ $w == b4 || $w == b4g ]] && echo 10 || echo 1)
  if [[ -z $ratio ]] || ! python3 -c "import sys; sys.exit(0 if $ratio >= $want else 1)"; then
    echo "  target: hpcnet >= ${want}x PyTorch at $w: NOT MET"
    targets_met=0
  fi
  if [[ $w == b4 && $quick == 0 && -z $steps ]]; then
    if [[ -z ${H_ACC[$w]:-} ]] || ! python3 -c "import sys; sys.exit(0 if ${H_ACC[$w]} >= 52 else 1)"; then
      echo "  target: validation accuracy >= 52% at b4: NOT MET"
      targets_met=0
    fi
  fi
  summary+="$sep\"$w\": {\"hpcnet_images_per_sec\": ${hi:-null}, \"torch_images_per_sec\": ${ti:-null}, \"ratio\": ${ratio:-null}, \"hpcnet_val_accuracy\": ${H_ACC[$w]:-null}, \"torch_val_accuracy\": ${T_ACC[$w]:-null}, \"hpcnet_train_seconds\": ${H_S[$w]:-null}, \"torch_train_seconds\": ${T_S[$w]:-null}}"
  sep=", "
done
# The checks' rows: the 2-rank weights (1e-5) and yolov8n's loader epoch (GPU against CPU, 2%).
echo
printf '%-50s %s\n' check result
row() { printf '%-50s %s\n' "$1" "$2"; }
for r in "${layout_rows[@]}"; do row "layouts ${r%%:*}" "${r#*: }"; done
dp_pass=null
if [[ -n $dp_diff ]]; then
  if python3 -c "import sys; sys.exit(0 if float('$dp_diff') <= 1e-5 else 1)"; then
    dp_pass=true
  else
    dp_pass=false
    targets_met=0
  fi
  row "2 ranks x 32 = 1 x 64, weights ($dp_steps steps, $device)" \
    "max |diff| $dp_diff (<= 1e-5): $([[ $dp_pass == true ]] && echo PASS || echo FAIL)"
else
  row "2 ranks x 32 = 1 x 64, weights" "skipped: $dp_why"
fi
[[ -n $nccl_refusal ]] && row "2 ranks on one GPU, --dist-backend nccl refused" "$nccl_refusal"
yolo_rel=""
yolo_pass=null
if [[ ${#Y[@]} == 6 ]]; then
  row "yolov8n one epoch on $device: images/s" "${Y[0]} (mAP50-95 ${Y[5]})"
  row "yolov8n one epoch on $device: data-wait share" \
    "$(python3 -c "print('-' if '${Y[1]}' == '-' else f'{100 * float(\"${Y[1]}\"):.1f}%')")"
  if [[ ${Y[2]} != - && ${Y[3]} != - ]]; then
    yolo_rel=$(python3 -c "print(f'{abs(${Y[2]} - ${Y[3]}) / abs(${Y[3]}):.5f}')")
    if python3 -c "import sys; sys.exit(0 if $yolo_rel <= 0.02 else 1)"; then
      yolo_pass=true
    else
      yolo_pass=false
      targets_met=0
    fi
    row "yolov8n mean loss, $device vs cpu (${Y[4]} steps)" \
      "${Y[2]} vs ${Y[3]}: $(python3 -c "print(f'{100 * $yolo_rel:.2f}%')") (<= 2%): $([[ $yolo_pass == true ]] && echo PASS || echo FAIL)"
  else
    row "yolov8n mean loss, $device vs cpu" "skipped: ${yolo_why:-no loss at a common step}"
  fi
else
  row "yolov8n one epoch on $device, loss against cpu" "skipped: ${yolo_why:-no metrics}"
fi
# For gpu-check.json ("-" and empty: null).
checks=$(python3 - "$dp_steps" "$dp_diff" "$dp_pass" "$dp_why" "$yolo_rel" "$yolo_pass" \
           "$yolo_why" "${Y[@]}" <<'PY'
import json, sys
a = [None if x in ("", "-") else x for x in sys.argv[1:]]
num = lambda x: None if x is None or x in ("inf", "nan") else float(x)
whole = lambda x: None if x is None else int(x)
flag = lambda x: None if x in (None, "null") else x == "true"
y = a[7:] + [None] * (6 - len(a[7:]))
print(json.dumps({
    "two_ranks": {"steps": whole(a[0]), "max_abs_diff": num(a[1]), "pass": flag(a[2]),
                  "skipped": a[3], "tolerance": 1e-5},
    "yolov8n_epoch": {"images_per_sec": num(y[0]), "data_wait_share": num(y[1]),
                      "loss_device": num(y[2]), "loss_cpu": num(y[3]), "steps_compared": whole(y[4]),
                      "map50_95": num(y[5]), "loss_relative_difference": num(a[4]),
                      "pass": flag(a[5]), "skipped": a[6], "tolerance": 0.02}}))
PY
) || checks=null
compare=null
if [[ -f $compare_json ]]; then
  echo
  python3 bench/compare_gpu.py --render "$compare_json"
  compare=$(python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))' \
              "$compare_json") || compare=null
fi
summary+="}, \"checks\": $checks, \"compare_gpu\": $compare, \"gpu\": $gpu, \"seconds\": $((SECONDS - START))}"
echo "$summary" | sed 's/\bnan\b/null/g' >"$out/gpu-check.json"
log "done in $((SECONDS - START))s; summary: $out/gpu-check.json"
if [[ $status != 0 ]]; then exit 1; fi
if [[ $gpu == 1 && $targets_met == 0 ]]; then exit 3; fi
exit 0
