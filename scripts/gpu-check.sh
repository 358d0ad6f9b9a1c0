#!/usr/bin/env bash
# The GPU check: build hpcnet with CUDA, run the test suite (the CUDA tests must run, not skip),
# train the tutorial workload on the GPU, run PyTorch's tutorial program on the same GPU, and
# print the speed ratios; then time synthetic training steps of every model on both sides
# (bench/compare_gpu.py: ResNets, U-Net, DeepLabV3, yolov8n, LeNet; fp32 and bf16). Written for
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
#       lacks them, bench/compare_gpu.py needs them) into .device/whl. .device/ is git-ignored:
#       name .device/debs, .device/data and .device/whl in the device tool's `carry` (about 50 MB).
#
#   scripts/gpu-check.sh --bundle [--build-dir DIR] [--data ARCHIVE]
#       Here, after a CUDA build in DIR (default build; CMAKE_CUDA_ARCHITECTURES must include 90):
#       copies its hpcnet and hpcnet_tests into .device/bundle/bin and every shared library they
#       load from this system (not the C library, libstdc++ or the CUDA libraries, which the device
#       machine has) into .device/bundle/lib, packed as .device/bundle.tar.xz (about 15 MB), and
#       the CIFAR-10 archive into .device/data. Then on the device machine, carrying
#       [".device/bundle.tar.xz", ".device/data"]: scripts/gpu-check.sh --prebuilt
#       .device/bundle.tar.xz (no build there: the device minutes go to tests and training).
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
# With a scenes*.tar.gz in .device/data (a folder holding data.yaml, images/, labels/), it also
# trains yolov8n for 3 epochs at 128 pixels, batch 64, on the GPU and prints its speed and mAP.
# bench/compare_gpu.py (with --device cpu: at --scale small) prints hpcnet images/s / PyTorch
# images/s per model and precision; a row that cannot run on one side says why and the others go
# on. Its rows are in the final table and under "compare_gpu" in gpu-check.json.
# Logs and a summary (gpu-check.json) go to $OUT when it is set (the device tool's folder),
# else to /tmp/hpcnet-gpu-check. Exit status: 0 when everything ran and every target was met,
# 1 when a step failed, 3 when all ran but a target was missed.
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
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DHPCNET_CUDA=ON -DHPCNET_MPI=OFF
            "-DCMAKE_CUDA_ARCHITECTURES=$archs")
libpath=""
if [[ -n "$prefix" ]]; then
  prefix=$(cd "$prefix" && pwd)
  arch=x86_64-linux-gnu
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
# cuDNN: with the toolkit, else PyTorch's pip wheel (nvidia-cudnn-cu13).
if [[ ! -f /usr/local/cuda/include/cudnn.h && -z "${CUDNN_ROOT:-}" ]]; then
  CUDNN_ROOT=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
fi
if [[ -n "${CUDNN_ROOT:-}" ]]; then
  cmake_args+=("-DCUDNN_ROOT=$CUDNN_ROOT")
  libpath="${libpath:+$libpath:}$CUDNN_ROOT/lib"
  log "cuDNN from $CUDNN_ROOT"
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
  data=$(ls .device/data/*.tar.gz 2>/dev/null | head -1 || true)
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

# ---- detection: yolov8n on a scenes subset (.device/data/scenes*.tar.gz), when carried ----
scenes=$(ls .device/data/scenes*.tar.gz 2>/dev/null | head -1 || true)
if [[ -n $scenes && $gpu == 1 ]] && (( $(left) > 90 )); then
  rm -rf /tmp/hpcnet-scenes && mkdir -p /tmp/hpcnet-scenes
  tar -xzf "$scenes" -C /tmp/hpcnet-scenes
  yaml=$(ls /tmp/hpcnet-scenes/*/data.yaml | head -1)
  log "hpcnet yolov8n on $device: $yaml"
  hp timeout "$(limit 20)" "$build/hpcnet" train --device "$device" --model yolov8n --data "$yaml" \
    --imgsz 128 --epochs 3 --batch-size 64 --workers 8 --seed 0 --no-progress --exist-ok \
    --out "$runs/yolo" >"$out/hpcnet-yolo.log" 2>&1 || { log "hpcnet yolov8n FAILED"; status=1; }
  tail -5 "$out/hpcnet-yolo.log"
  grep '"end"' "$runs/yolo/metrics.jsonl" 2>/dev/null | cut -c1-300
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
  want=$([[ $w == b4 ]] && echo 10 || echo 1)
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
compare=null
if [[ -f $compare_json ]]; then
  echo
  python3 bench/compare_gpu.py --render "$compare_json"
  compare=$(python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))' \
              "$compare_json") || compare=null
fi
summary+="}, \"compare_gpu\": $compare, \"gpu\": $gpu, \"seconds\": $((SECONDS - START))}"
echo "$summary" | sed 's/\bnan\b/null/g' >"$out/gpu-check.json"
log "done in $((SECONDS - START))s; summary: $out/gpu-check.json"
if [[ $status != 0 ]]; then exit 1; fi
if [[ $gpu == 1 && $targets_met == 0 ]]; then exit 3; fi
exit 0
