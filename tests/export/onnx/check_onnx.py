#!/usr/bin/env python3
"""Checks hpcnet's ONNX export against the ONNX reference tools (run by hand; needs PyPI's onnx,
onnxruntime, numpy and safetensors):

    python3 tests/export/onnx/check_onnx.py --hpcnet build/hpcnet [--models lenet,resnet20,...]

For each model: builds it untrained-but-seeded through `hpcnet train --steps 1` on tiny
synthetic CIFAR-10 records (or takes --weights FILE), runs `hpcnet export --batch dynamic
--save-io`, then checks the file with onnx.checker (full check, strict shape inference), runs it
in onnxruntime on hpcnet's traced input and compares with hpcnet's output. It also runs a batch
of 3 (the input repeated) to prove the batch dimension is dynamic. Prints one line per model with
the largest absolute and relative difference; exits 1 if any exceeds --tol (default 1e-5,
relative to the largest |output|).
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from safetensors.numpy import load_file


def tiny_cifar(folder, n=64):
    """CIFAR-10 binary batches with random pixels: enough for hpcnet to build and save a model."""
    rng = np.random.default_rng(0)
    d = os.path.join(folder, "cifar-10-batches-bin")
    os.makedirs(d, exist_ok=True)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    for name in names:
        rec = np.zeros((n, 3073), np.uint8)
        rec[:, 0] = rng.integers(0, 10, n)
        rec[:, 1:] = rng.integers(0, 256, (n, 3072))
        rec.tofile(os.path.join(d, name))
    with open(os.path.join(d, "batches.meta.txt"), "w") as f:
        f.write("\n".join(["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                           "horse", "ship", "truck"]) + "\n")
    return d


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hpcnet", default="build/hpcnet")
    ap.add_argument("--models", default="lenet,resnet20,cifar_resnet18")
    ap.add_argument("--weights", action="append", default=[],
                    help="also check this model file (any hpcnet model, e.g. a U-Net)")
    ap.add_argument("--tol", type=float, default=1e-5)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hpcnet_onnx_")
    files = list(args.weights)
    if args.models:
        data = tiny_cifar(tmp)
        for model in args.models.split(","):
            out = os.path.join(tmp, "run_" + model)
            run([args.hpcnet, "train", "--model", model, "--data", data, "--epochs", "1",
                 "--steps", "1", "--batch-size", "4", "--seed", "1", "--no-progress", "--out", out])
            files.append(os.path.join(out, "model.safetensors"))
    worst = 0.0
    for i, weights in enumerate(files):
        onnx_path = os.path.join(tmp, f"m{i}.onnx")
        io_path = os.path.join(tmp, f"m{i}_io.safetensors")
        line = run([args.hpcnet, "export", "--weights", weights, "--out", onnx_path,
                    "--batch", "dynamic", "--save-io", io_path]).strip()
        model = onnx.load(onnx_path)
        onnx.checker.check_model(model, full_check=True)
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        io = load_file(io_path)
        x, want = io["input"], io["output"]
        sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        got = sess.run(["output"], {"input": x})[0]
        scale = float(np.abs(want).max()) or 1.0
        diff = float(np.abs(got - want).max())
        x3 = np.concatenate([x, x, x])
        got3 = sess.run(["output"], {"input": x3})[0]
        diff3 = float(np.abs(got3 - np.concatenate([want, want, want])).max())
        rel = max(diff, diff3) / scale
        worst = max(worst, rel)
        print(f"{line.split(':')[1].split(',')[0].strip():>18}  output {tuple(want.shape)}  "
              f"max |ort - hpcnet| {diff:.2e} (batch 3: {diff3:.2e}), "
              f"{rel:.2e} of max |output| {scale:.3g}  "
              f"{'ok' if rel <= args.tol else 'FAIL'}  "
              f"(onnx {onnx.__version__}, onnxruntime {ort.__version__})")
    sys.exit(0 if worst <= args.tol else 1)


if __name__ == "__main__":
    main()
