#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, then train the PyTorch CIFAR-10
# tutorial network (LeNet, SGD lr 0.001 momentum 0.9, batch 4, 2 epochs) and evaluate it.
#   scripts/tutorial.sh [DATA]   DATA: a CIFAR-10 folder or archive (default: data/, downloaded
#                                when missing); extra arguments after DATA go to `hpcnet train`.
set -euo pipefail
cd "$(dirname "$0")/.."
data="${1:-data}"
shift || true
bash scripts/setup.sh
bash scripts/build.sh
build="${HPCNET_BUILD_DIR:-build}"
download=()
if [[ ! -e "$data" || -d "$data" ]]; then download=(--download); fi
"$build/hpcnet" train --model lenet --dataset cifar10 --data "$data" "${download[@]}" \
  --epochs 2 --batch-size 4 --lr 0.001 --momentum 0.9 --workers 2 --seed 0 --out runs/tutorial \
  --exist-ok "$@"
# Accuracy on the test split (the official archive has one; an image folder needs test/<class>/).
if ! "$build/hpcnet" eval --weights runs/tutorial/model.safetensors --dataset cifar10 \
     --data "$data" --split test; then
  echo "tutorial: trained; no test split to evaluate in $data (the line above says why)." >&2
  echo "tutorial: for a held-out score, add --val-split 5000 and run eval --split val." >&2
fi
