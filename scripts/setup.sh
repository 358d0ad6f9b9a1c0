#!/usr/bin/env bash
# Installs everything hpcnet needs to build and test, from Debian's packages. Safe to run again:
# when every package is present it returns at once without touching apt.
#   scripts/setup.sh           build and test dependencies
#   scripts/setup.sh --bench   also PyTorch (Debian's python3-torch) for bench/ comparisons
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev                          # oneDNN: CPU convolution, pooling, inner product
  ocl-icd-opencl-dev opencl-headers    # Debian's oneDNN CMake config requires OpenCL
  libjpeg62-turbo-dev libpng-dev       # image decoding
  libarchive-dev                       # .tar / .tar.gz datasets
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev libavdevice-dev  # predict: video
  libcurl4-openssl-dev libssl-dev      # --download over HTTPS, MD5 check
  nlohmann-json3-dev libfmt-dev libcli11-dev
  libyaml-cpp-dev                      # dataset YAML (data.yaml names)
  libgtest-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin          # MPI process group: mpirun -np N hpcnet train
  libprotobuf-dev protobuf-compiler   # TensorBoard event files (src/io/tb_event.proto)
  libplplot-dev plplot-driver-cairo   # hpcnet plot: results.png (PLplot, pngcairo)
  libonnx-dev                         # hpcnet export: ONNX protobuf classes and checker
  clang-14 libclang-rt-14-dev libomp-14-dev  # scripts/fuzz.sh: libFuzzer, ASan/UBSan, OpenMP
  ccache                              # compiler cache: rebuilds of unchanged files are hits
  universal-ctags                     # scripts/check-structure.sh: function lengths
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3 python3-torch python3-numpy python3-pil)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
