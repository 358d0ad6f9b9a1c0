#!/usr/bin/env bash
# OpenMP's wait policy on a shared node (docs/scaling.md, "Shared nodes: OpenMP's wait"): images/s
# of `hpcnet predict --threads 2` alone and beside a busy neighbour, and the tutorial net's
# training ms/step alone, for libgomp's default, hpcnet's default and other spin counts,
# interleaved so that each comparison shares its minute of machine load.
#
#   bench/omp_wait.sh WEIGHTS IMAGES [REPEATS] [NEIGHBOUR]
#
# WEIGHTS: a model.safetensors (yolov8n trained at --imgsz 640 for the table); IMAGES: a folder
# of images; NEIGHBOUR: loops (2 busy shell loops, the default) or hpcnet (a 2-thread hpcnet predict
# of the same images, run again and again with libgomp's default wait). Configurations: "libgomp"
# (GOMP_SPINCOUNT=300000, what hpcnet ran with before it set a default), "hpcnet" (nothing set:
# hpcnet's default), spinN, passive.
set -euo pipefail
hp="${HPCNET:-$(dirname "$0")/../build/hpcnet}"
weights=$1 images=$2 reps=${3:-2} neighbour=${4:-loops}
configs=(libgomp hpcnet spin20000 passive)
n=$(find "$images" -maxdepth 1 -type f | wc -l)
run_env() {  # the environment of configuration $1
  local e=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT)
  case $1 in
    libgomp) e+=(GOMP_SPINCOUNT=300000) ;;
    passive) e+=(OMP_WAIT_POLICY=passive) ;;
    spin*) e+=(GOMP_SPINCOUNT=${1#spin}) ;;
  esac
  echo "${e[@]}"
}
predict() {  # prints images/s of configuration $1
  local t0 t1
  t0=$(date +%s.%N)
  $(run_env "$1") "$hp" predict --weights "$weights" --threads 2 "$images" >/dev/null
  t1=$(date +%s.%N)
  python3 -c "print(f'{$n / ($t1 - $t0):.2f}')"
}
pids=()
stop() { for p in "${pids[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done; pids=(); }
trap stop EXIT
for where in alone beside; do
  if [[ $where == beside ]]; then
    if [[ $neighbour == hpcnet ]]; then
      (while :; do env GOMP_SPINCOUNT=300000 "$hp" predict --weights "$weights" --threads 2 \
         "$images" >/dev/null 2>&1; done) & pids+=($!)
    else
      for _ in 1 2; do (while :; do :; done) & pids+=($!); done
    fi
    sleep 1
  fi
  for _ in $(seq "$reps"); do
    for c in "${configs[@]}"; do
      echo "predict $where-$neighbour $c $(predict "$c") images/s (load $(cut -d' ' -f1 /proc/loadavg))"
    done
  done
  stop
done
for _ in $(seq "$reps"); do
  for c in "${configs[@]}"; do
    ms=$($(run_env "$c") "$hp" bench --batch-size 128 --steps 100 --threads 2 --no-profile --json |
         tail -1 | python3 -c "import json, sys; print(round(json.load(sys.stdin)['ms_per_step'], 2))")
    echo "train alone $c $ms ms/step (load $(cut -d' ' -f1 /proc/loadavg))"
  done
done
