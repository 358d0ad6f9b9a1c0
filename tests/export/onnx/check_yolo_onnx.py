#!/usr/bin/env python3
"""Checks `hpcnet export` of a YOLO detection model against onnxruntime and against Ultralytics'
own eval output for the same weights (run by hand; needs PyPI's ultralytics, onnx, onnxruntime,
safetensors and torch; builds the model from Ultralytics' <model>.yaml, downloads nothing):

    YOLO_OFFLINE=1 python3 tests/export/onnx/check_yolo_onnx.py --hpcnet build/hpcnet \
        [--model yolov8n|yolo11n|...] [--imgsz 640]

1. Ultralytics' DetectionModel('<model>.yaml', nc=--nc) with seeded random weights, its batch-norm
   scales, shifts and running statistics drawn at random too (no unit statistics to hide a
   mistake) and the class biases N(0, 1) (scores over all of (0, 1)), saved as a state_dict and
   converted with
   scripts/convert_checkpoint.py to-safetensors.
2. `hpcnet export --batch dynamic --save-io`: the file is checked with onnx.checker (full check,
   strict shape inference), its metadata (task, names, normalize: x / 255) and its output's
   declared shape, (batch, 4 + nc, anchors) as Ultralytics exports it (anchors: the cells of
   strides 8, 16 and 32).
3. onnxruntime on hpcnet's traced input against hpcnet's own output, and on a batch of 2 (that
   input and 1 - it) against Ultralytics' model.eval() output for the same pixels / 255.
Prints the largest differences, for the box rows and the score rows apart, relative to the largest
|value|; exits 1 if any exceeds --tol (default 1e-4).
"""
import argparse
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("YOLO_OFFLINE", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERTER = os.path.join(HERE, "..", "..", "..", "scripts", "convert_checkpoint.py")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


def ultralytics_model(name, nc, seed):
    from ultralytics.nn.tasks import DetectionModel
    torch.manual_seed(seed)
    m = DetectionModel(f"{name}.yaml", nc=nc, verbose=False)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                n = mod.num_features
                mod.weight.copy_(0.5 + torch.rand(n, generator=g))
                mod.bias.copy_(0.1 * torch.randn(n, generator=g))
                mod.running_mean.copy_(0.1 * torch.randn(n, generator=g))
                mod.running_var.copy_(0.5 + torch.rand(n, generator=g))
        for seq in m.model[-1].cv3:  # class biases N(0, 1) instead of bias_init's -11.7
            seq[-1].bias.copy_(torch.randn(seq[-1].bias.shape, generator=g))  # scores over (0, 1)
    return m.eval()


def compare(name, got, want, nc, tol):
    """Prints one line; returns the worst difference relative to max |want|."""
    scale = float(np.abs(want).max()) or 1.0
    diff = np.abs(got - want)
    box, cls = float(diff[:, :4].max()), float(diff[:, 4:].max())
    rel = max(box, cls) / scale
    print(f"{name:>36}  {tuple(got.shape)}  max |diff| boxes {box:.2e}, scores {cls:.2e} "
          f"(scores {float(want[:, 4:].min()):.2g}..{float(want[:, 4:].max()):.2g}); "
          f"{rel:.2e} of max |value| {scale:.4g}  {'ok' if rel <= tol else 'FAIL'}")
    return rel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hpcnet", default="build/hpcnet")
    ap.add_argument("--model", default="yolov8n", help="yolov8{n,s,m,l,x} or yolo11{n,s,m,l,x}")
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--nc", type=int, default=80)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hpcnet_yolo_onnx_")
    if not os.path.isfile(CONVERTER):
        sys.exit(f"no converter at {CONVERTER}")
    model = ultralytics_model(args.model, args.nc, args.seed)
    pth, st = os.path.join(tmp, f"{args.model}.pth"), os.path.join(tmp, f"{args.model}.safetensors")
    torch.save(model.state_dict(), pth)
    names = ",".join(f"class{i}" for i in range(args.nc))
    run([sys.executable, CONVERTER, "to-safetensors", pth, st, "--model", args.model,
         "--imgsz", str(args.imgsz), "--classes", names])
    onnx_path = os.path.join(tmp, f"{args.model}.onnx")
    io_path = os.path.join(tmp, "io.safetensors")
    print(run([args.hpcnet, "export", "--weights", st, "--out", onnx_path, "--batch", "dynamic",
               "--save-io", io_path]).strip())

    m = onnx.load(onnx_path)
    onnx.checker.check_model(m, full_check=True)
    onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
    meta = {p.key: p.value for p in m.metadata_props}
    assert meta["task"] == "detect", meta
    assert meta["normalize"].startswith("x / 255,"), meta["normalize"]
    assert meta["stride"] == "32", meta
    assert eval(meta["names"]) == {i: f"class{i}" for i in range(args.nc)}  # noqa: S307
    anchors = sum((args.imgsz // s) ** 2 for s in (8, 16, 32))
    dims = [d.dim_param or d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim]
    assert len(dims) == 3 and isinstance(dims[0], str) and dims[1:] == [4 + args.nc, anchors], dims
    print(f"output '{m.graph.output[0].name}' declared ({dims[0]}, {dims[1]}, {dims[2]}): "
          f"(N, 4 + nc, anchors) with anchors {anchors} at {args.imgsz} px")
    ops = sorted({n.op_type for n in m.graph.node})
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, ultralytics "
          f"{__import__('ultralytics').__version__}, torch {torch.__version__}; "
          f"{len(m.graph.node)} nodes: {', '.join(ops)}")
    print(f"metadata normalize: {meta['normalize']}; mean {meta['mean']} std {meta['std']}")

    io = load_file(io_path)
    x, want = io["input"], io["output"]
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    worst = compare("onnxruntime vs hpcnet (batch 1)", sess.run(["output"], {"input": x})[0],
                    want, args.nc, args.tol)
    x2 = np.concatenate([x, 1.0 - x]).astype(np.float32)  # pixels / 255, as Ultralytics takes
    got2 = sess.run(["output"], {"input": x2})[0]
    assert got2.shape == (2, 4 + args.nc, anchors), got2.shape
    with torch.no_grad():
        ref = model(torch.from_numpy(x2))
    ref = (ref[0] if isinstance(ref, (tuple, list)) else ref).numpy()
    worst = max(worst, compare("onnxruntime vs Ultralytics eval", got2, ref, args.nc, args.tol))
    worst = max(worst, compare("hpcnet vs Ultralytics eval (image 0)", want, ref[:1], args.nc,
                               args.tol))
    sys.exit(0 if worst <= args.tol else 1)


if __name__ == "__main__":
    main()
