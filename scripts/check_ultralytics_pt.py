#!/usr/bin/env python3
"""Checks the way between Ultralytics' .pt files and hpcnet (run by hand; needs PyPI's ultralytics,
onnx, onnxruntime, safetensors and torch; builds models from yolov8n.yaml, downloads nothing):

    YOLO_OFFLINE=1 python3 scripts/check_ultralytics_pt.py --hpcnet build/hpcnet

1. Two Ultralytics checkpoints of one DetectionModel('yolov8n.yaml', nc=3) with seeded random
   weights (random batch-norm statistics) and names cat, dog, bird: best.pt written by
   Ultralytics' own Model.save() (half precision, "model" holds it), and last.pt laid out as its
   trainer's save_model() writes one during training ("model" None, "ema" the model in half
   precision, "train_args" with imgsz 320).
2. hpcnet refuses them with the command that converts them (--allow-pickle); the converter without
   --allow-pickle says to add it; with it (and no --model, no --classes) it reads the model,
   the class names and imgsz from the file.
3. `hpcnet export` of the converted file, run in onnxruntime, against Ultralytics' eval output of
   the same (half-precision) weights: within --tol (1e-4) of the largest value.
4. --classes data.yaml on a detection model names the classes as the yaml does (no "background").
5. to-pth writes a checkpoint YOLO() opens: same tensors, same names, the same output; with
   ultralytics hidden it writes the bare state_dict and says what to do.
Prints one line per check; exits 1 on the first failure.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("YOLO_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERTER = os.path.join(HERE, "convert_checkpoint.py")
NAMES = {0: "cat", 1: "dog", 2: "bird"}


def run(cmd, rc=0, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != rc:
        sys.exit(f"FAIL: exit {r.returncode}, expected {rc}: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        sys.exit(1)


def model_with_weights(seed):
    from ultralytics.nn.tasks import DetectionModel
    torch.manual_seed(seed)
    m = DetectionModel("yolov8n.yaml", nc=len(NAMES), verbose=False)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                n = mod.num_features
                mod.weight.copy_(0.5 + torch.rand(n, generator=g))
                mod.bias.copy_(0.1 * torch.randn(n, generator=g))
                mod.running_mean.copy_(0.1 * torch.randn(n, generator=g))
                mod.running_var.copy_(0.5 + torch.rand(n, generator=g))
        for seq in m.model[-1].cv3:
            seq[-1].bias.copy_(torch.randn(seq[-1].bias.shape, generator=g))
    m.names = dict(NAMES)
    return m.eval()


def metadata(path):
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        return f.metadata(), {k: f.get_tensor(k) for k in f.keys()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hpcnet", default="build/hpcnet")
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    import onnxruntime as ort
    import ultralytics
    from ultralytics import YOLO
    from safetensors.numpy import load_file
    tmp = tempfile.mkdtemp(prefix="hpcnet_ultralytics_pt_")
    py = [sys.executable, CONVERTER]
    model = model_with_weights(0)
    print(f"ultralytics {ultralytics.__version__}, torch {torch.__version__}, onnxruntime "
          f"{ort.__version__}; {tmp}")

    # 1. The two checkpoints.
    best, last = os.path.join(tmp, "best.pt"), os.path.join(tmp, "last.pt")
    y = YOLO("yolov8n.yaml")
    y.model = model
    y.save(best)
    import copy
    torch.save({"date": None, "version": ultralytics.__version__, "epoch": 3, "best_fitness": 0.1,
                "model": None, "ema": copy.deepcopy(model).half(), "updates": 12,
                "optimizer": None, "train_args": {"imgsz": 320, "task": "detect"},
                "train_metrics": {}, "train_results": {}}, last)
    half_sd = {k: v.half().float() if v.is_floating_point() else v
               for k, v in model.state_dict().items()}

    # 2. hpcnet's hint, the converter's refusal, the conversion.
    out = run([args.hpcnet, "export", "--weights", best], rc=2)
    check("--allow-pickle" in out and "an Ultralytics checkpoint" in out,
          f"hpcnet on Ultralytics' best.pt: {out.strip()}")
    out = run(py + ["to-safetensors", best, os.path.join(tmp, "x.safetensors")], rc=2)
    check("add --allow-pickle" in out, f"converter without --allow-pickle: {out.strip()}")
    for pt, imgsz in ((best, None), (last, "320")):
        st = pt.replace(".pt", ".safetensors")
        run(py + ["to-safetensors", pt, st, "--allow-pickle"])
        meta, tensors = metadata(st)
        same = all(torch.equal(tensors[k].to(half_sd[k].dtype), half_sd[k]) for k in half_sd)
        check(meta.get("hpcnet.model") == "yolov8n" and meta.get("hpcnet.task") == "detect" and
              json.loads(meta["hpcnet.classes"]) == list(NAMES.values()) and
              meta.get("hpcnet.imgsz") == imgsz and same and len(tensors) == len(half_sd) and
              all(t.dtype != torch.float16 for t in tensors.values()),
              f"{os.path.basename(pt)} --allow-pickle: model {meta.get('hpcnet.model')}, task "
              f"{meta.get('hpcnet.task')}, classes {meta.get('hpcnet.classes')}, imgsz "
              f"{meta.get('hpcnet.imgsz')}, {len(tensors)} tensors equal to the file's (float32)")

    # 3. hpcnet's export of the converted last.pt against Ultralytics' eval output.
    st = last.replace(".pt", ".safetensors")
    onnx_path, io_path = os.path.join(tmp, "last.onnx"), os.path.join(tmp, "io.safetensors")
    print("     " + run([args.hpcnet, "export", "--weights", st, "--out", onnx_path,
                         "--save-io", io_path]).strip().replace("\n", "\n     "))
    x = load_file(io_path)["input"]
    got = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"]).run(
        ["output"], {"input": x})[0]
    ref_model = copy.deepcopy(model).half().float().eval()
    with torch.no_grad():
        ref = ref_model(torch.from_numpy(x))[0].numpy()
    rel = float(np.abs(got - ref).max()) / float(np.abs(ref).max())
    check(got.shape == ref.shape and rel <= args.tol,
          f"onnxruntime (hpcnet export of last.pt) vs Ultralytics eval {ref.shape}: "
          f"{rel:.2e} of max |value| {float(np.abs(ref).max()):.4g}")

    # 4. --classes data.yaml on a detection model.
    yaml = os.path.join(tmp, "data.yaml")
    with open(yaml, "w") as f:
        f.write("path: .\ntrain: images\nval: images\nnames:\n  0: cat\n  1: dog\n  2: bird\n")
    pth = os.path.join(tmp, "sd.pth")
    torch.save(model.state_dict(), pth)
    st_yaml = os.path.join(tmp, "yaml.safetensors")
    run(py + ["to-safetensors", pth, st_yaml, "--model", "yolov8n", "--classes", yaml])
    meta, _ = metadata(st_yaml)
    out = run([args.hpcnet, "export", "--weights", st_yaml, "--out", os.path.join(tmp, "y.onnx")])
    check(json.loads(meta["hpcnet.classes"]) == list(NAMES.values()) and "(N, 7," in out,
          f"--classes data.yaml: {meta['hpcnet.classes']}; hpcnet loads it: {out.splitlines()[-1]}")

    # 5. Back: to-pth, opened by YOLO().
    back = os.path.join(tmp, "back.pt")
    out = run(py + ["to-pth", st, back])
    y = YOLO(back)
    sd = y.model.state_dict()
    same = sd.keys() == half_sd.keys() and all(torch.equal(sd[k], half_sd[k]) for k in sd)
    with torch.no_grad():
        again = y.model.eval()(torch.from_numpy(x))[0].numpy()
    pred = y.predict(np.zeros((64, 64, 3), np.uint8), imgsz=64, verbose=False)
    check(same and y.names == NAMES and y.task == "detect" and np.array_equal(again, ref) and
          len(pred) == 1, f"to-pth: {out.strip()}; YOLO() opens it: task {y.task}, names "
          f"{y.names}, tensors and eval output equal to the original's, predict runs")
    hide = os.path.join(tmp, "hide")  # a module named ultralytics that fails to import
    os.makedirs(hide)
    with open(os.path.join(hide, "ultralytics.py"), "w") as f:
        f.write("raise ImportError('hidden for the check')\n")
    env = dict(os.environ, PYTHONPATH=hide)
    bare = os.path.join(tmp, "bare.pth")
    out = run(py + ["to-pth", st, bare], env=env)
    obj = torch.load(bare, weights_only=True)
    check("YOLO() cannot open" in out and "pip install ultralytics" in out and
          all(torch.equal(obj[k], half_sd[k]) for k in half_sd),
          f"to-pth without ultralytics: a bare state_dict of {len(obj)} tensors; says: "
          f"{out.strip()}")


if __name__ == "__main__":
    main()
