#!/usr/bin/env python3
"""Checks the way between Ultralytics' .pt files and hpcnet (run by hand; needs PyPI's ultralytics,
onnx, onnxruntime, safetensors and torch; builds models from yolov8n.yaml, downloads nothing):

    YOLO_OFFLINE=1 python3 scripts/check_ultralytics_pt.py --hpcnet build/hpcnet \
        [--scales yolov8n,yolo11n] [--trained yolo11n,yolov8m]

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
6. Every named model (--scales; default all ten, yolov8{n,s,m,l,x} and yolo11{n,s,m,l,x}):
   the converter's reference names and shapes (tests/golden/yolo_state_dicts.json, at any class
   count) are DetectionModel's; then per model, DetectionModel('<name>.yaml', nc=80) with seeded
   random weights as a training last.pt converts with --allow-pickle alone (hpcnet.model read
   from its yaml, every tensor equal); hpcnet's output for the converted file (`export
   --save-io`, --imgsz, default 64 px) and onnxruntime's on its export equal Ultralytics' eval
   output within --tol; to-pth gives a checkpoint YOLO() opens with the same tensors and output.
7. hpcnet -> Ultralytics (--trained; default yolo11n, yolov8m): the model.safetensors of a short
   `hpcnet train` on a generated 3-class set (64 px, 2 epochs of 2 steps, nbs 2) loads into
   DetectionModel('<name>.yaml', nc=3) with strict=True, every tensor of the same shape, and
   gives hpcnet's output (and onnxruntime's on hpcnet's export) at 64 and 128 px within --tol;
   to-pth's checkpoint opens in YOLO() with the class names and the same output.
Prints one line per check; exits 1 on the first failure.
"""
import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("YOLO_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERTER = os.path.join(HERE, "convert_checkpoint.py")
SCALES = [f"yolov8{s}" for s in "nsmlx"] + [f"yolo11{s}" for s in "nsmlx"]
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


def model_with_weights(seed, name="yolov8n", nc=len(NAMES)):
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
        for seq in m.model[-1].cv3:
            seq[-1].bias.copy_(torch.randn(seq[-1].bias.shape, generator=g))
    m.names = dict(NAMES) if nc == len(NAMES) else {i: f"class{i}" for i in range(nc)}
    return m.eval()


def differences(got, want):
    """(largest |difference| relative to max |want|, the text saying it): boxes and scores apart."""
    diff = np.abs(got - want)
    scale = float(np.abs(want).max()) or 1.0
    rel = float(diff.max()) / scale
    return rel, (f"{rel:.2e} of max |value| {scale:.4g} (boxes {float(diff[:, :4].max()):.2e} px, "
                 f"scores {float(diff[:, 4:].max()):.2e}, scores {float(want[:, 4:].min()):.2g}.."
                 f"{float(want[:, 4:].max()):.2g})")


def ultralytics_eval(model, x):
    with torch.no_grad():
        y = model.eval()(torch.from_numpy(x))
    return (y[0] if isinstance(y, (tuple, list)) else y).numpy()


def hpcnet_output(hpcnet, weights, tmp, imgsz, ort):
    """hpcnet's traced input and output (export --save-io) and onnxruntime's on the exported file."""
    from safetensors.numpy import load_file
    onnx_path, io_path = os.path.join(tmp, "m.onnx"), os.path.join(tmp, "m_io.safetensors")
    run([hpcnet, "export", "--weights", weights, "--out", onnx_path, "--imgsz", str(imgsz),
         "--save-io", io_path])
    io = load_file(io_path)
    got = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"]).run(
        ["output"], {"input": io["input"]})[0]
    os.remove(onnx_path)
    return io["input"], io["output"], got


def scales_json(converter):
    """The converter's YOLO reference (tests/golden/yolo_state_dicts.json) is Ultralytics 8.4.190's
    and its class count substitution gives the file's own nc=10 entries."""
    import ultralytics
    with open(converter.YOLO_STATE_DICTS) as f:
        golden = json.load(f)
    same = []
    for key in golden["models"]:
        name, nc = key.split("@")
        shapes = converter.yolo_shapes(name, int(nc))
        entry = golden["models"][key]
        same.append(len(shapes) == entry["entries"] and
                    [[k, list(v)] for k, v in shapes.items() if k.rsplit(".", 1)[0] not in
                     set(entry["batchnorms"]) or k.endswith(("weight", "bias"))] == entry["params"])
    check(golden["ultralytics"] == ultralytics.__version__ and all(same),
          f"yolo_state_dicts.json (ultralytics {golden['ultralytics']}, installed "
          f"{ultralytics.__version__}): the converter's names and shapes of all "
          f"{len(golden['models'])} entries (nc 80, and n at nc 10 from nc 80's) are the file's")
    from ultralytics.nn.tasks import DetectionModel
    counts = (1, 3, 90, 100, 150)  # the class branch is max(64, min(nc, 100)) wide at scale n
    same = [[(k, tuple(v.shape)) for k, v in DetectionModel(f"{name}.yaml", nc=nc, verbose=False)
             .state_dict().items()] == list(converter.yolo_shapes(name, nc).items())
            for name in ("yolov8n", "yolo11n") for nc in counts]
    check(all(same), f"the converter's names and shapes of yolov8n and yolo11n at nc "
          f"{', '.join(map(str, counts))} are DetectionModel's, in order")


def check_scale(name, args, tmp, converter, ort):
    """Ultralytics -> hpcnet -> Ultralytics for one named model at 80 classes: its state_dict is the
    converter's reference; a training last.pt (half precision, EMA) converts with --allow-pickle
    alone; hpcnet computes Ultralytics' eval output from the converted file; to-pth gives a
    checkpoint YOLO() opens with the same tensors and output."""
    import copy
    from ultralytics import YOLO
    model = model_with_weights(1, name, 80)
    sd = model.state_dict()
    ref_shapes = converter.yolo_shapes(name, 80)
    check(list(ref_shapes.items()) == [(k, tuple(v.shape)) for k, v in sd.items()],
          f"{name}: DetectionModel('{name}.yaml', nc=80) has the converter's {len(sd)} names and "
          f"shapes, in order ({sum(p.numel() for p in model.parameters()):,} parameters)")
    last = os.path.join(tmp, f"{name}_last.pt")
    torch.save({"epoch": 0, "model": None, "ema": copy.deepcopy(model).half(), "updates": 1,
                "optimizer": None, "train_args": {"imgsz": args.imgsz, "task": "detect"}}, last)
    half = copy.deepcopy(model).half().float().eval()
    half_sd = half.state_dict()
    st = os.path.join(tmp, f"{name}.safetensors")
    run([sys.executable, CONVERTER, "to-safetensors", last, st, "--allow-pickle"])
    os.remove(last)
    meta, tensors = metadata(st)
    same = tensors.keys() == half_sd.keys() and all(
        torch.equal(tensors[k].to(half_sd[k].dtype), half_sd[k]) for k in half_sd)
    check(meta.get("hpcnet.model") == name and meta.get("hpcnet.task") == "detect" and
          len(json.loads(meta["hpcnet.classes"])) == 80 and
          meta.get("hpcnet.imgsz") == str(args.imgsz) and same,
          f"{name}: last.pt --allow-pickle -> hpcnet.model {meta.get('hpcnet.model')}, "
          f"{len(tensors)} tensors equal to the file's")
    x, mine, ours = hpcnet_output(args.hpcnet, st, tmp, args.imgsz, ort)
    ref = ultralytics_eval(half, x)
    rel, text = differences(mine, ref)
    rel_ort, text_ort = differences(ours, ref)
    anchors = sum((args.imgsz // s) ** 2 for s in (8, 16, 32))
    check(mine.shape == ref.shape == (1, 84, anchors) and max(rel, rel_ort) <= args.tol,
          f"{name}: hpcnet {tuple(mine.shape)} vs Ultralytics eval ({args.imgsz} px): {text}; "
          f"onnxruntime (hpcnet export): {rel_ort:.2e}")
    back = os.path.join(tmp, f"{name}_back.pt")
    run([sys.executable, CONVERTER, "to-pth", st, back])
    os.remove(st)
    y = YOLO(back)
    os.remove(back)
    sd2 = y.model.state_dict()
    same = sd2.keys() == half_sd.keys() and all(torch.equal(sd2[k], half_sd[k]) for k in sd2)
    again = ultralytics_eval(y.model.float(), x)
    check(same and len(y.names) == 80 and np.array_equal(again, ref),
          f"{name}: to-pth -> YOLO() opens it: {len(sd2)} tensors and the eval output equal")
    return max(rel, rel_ort)


def tiny_detection_set(folder, n=4, size=64):
    """An Ultralytics dataset of n random-pixel PNGs per split, one box each, classes a, b, c."""
    from PIL import Image
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for sub in ("images", "labels"):
            os.makedirs(os.path.join(folder, sub, split), exist_ok=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(
                os.path.join(folder, "images", split, f"{i}.png"))
            with open(os.path.join(folder, "labels", split, f"{i}.txt"), "w") as f:
                f.write(f"{i % 3} 0.5 0.5 {0.2 + 0.1 * i:.2f} 0.3\n")
    yaml = os.path.join(folder, "data.yaml")
    with open(yaml, "w") as f:
        f.write("path: .\ntrain: images/train\nval: images/val\nnames:\n  0: a\n  1: b\n  2: c\n")
    return yaml


def check_trained(name, args, tmp, data, ort):
    """hpcnet -> Ultralytics: the model.safetensors of a short hpcnet run (2 epochs of 2 steps,
    nbs 2 so each step updates the weights, the EMA and the running statistics) loads into
    DetectionModel('<name>.yaml', nc=3) strictly, every tensor of the same shape, and gives
    hpcnet's output; to-pth's checkpoint opens in YOLO() with the same output."""
    from safetensors.torch import load_file as load_torch
    from ultralytics import YOLO
    from ultralytics.nn.tasks import DetectionModel
    out = os.path.join(tmp, f"run_{name}")
    run([args.hpcnet, "train", "--model", name, "--data", data, "--imgsz", "64", "--epochs", "2",
         "--batch-size", "2", "--nbs", "2", "--seed", "1", "--no-progress", "--out", out])
    weights = os.path.join(out, "model.safetensors")
    sd = load_torch(weights)
    m = DetectionModel(f"{name}.yaml", nc=3, verbose=False)
    ref_sd = m.state_dict()
    shapes = sd.keys() == ref_sd.keys() and all(sd[k].shape == ref_sd[k].shape for k in sd)
    m.load_state_dict(sd, strict=True)
    moved = sum(not torch.equal(sd[k], torch.ones_like(sd[k])) for k in sd
                if k.endswith("running_var"))
    check(shapes, f"{name}: hpcnet's model.safetensors loads into DetectionModel('{name}.yaml', "
          f"nc=3) with strict=True: all {len(sd)} tensors, the same shapes "
          f"({moved} of {sum(k.endswith('running_var') for k in sd)} running variances trained)")
    worst = 0.0
    for imgsz in (64, 128):
        x, mine, ours = hpcnet_output(args.hpcnet, weights, tmp, imgsz, ort)
        ref = ultralytics_eval(m, x)
        rel, text = differences(mine, ref)
        rel_ort = differences(ours, ref)[0]
        check(mine.shape == ref.shape and max(rel, rel_ort) <= args.tol,
              f"{name}: hpcnet {tuple(mine.shape)} vs Ultralytics eval ({imgsz} px): {text}; "
              f"onnxruntime (hpcnet export) vs Ultralytics: {rel_ort:.2e}")
        worst = max(worst, rel, rel_ort)
    back = os.path.join(tmp, f"{name}_trained.pt")
    run([sys.executable, CONVERTER, "to-pth", weights, back])
    y = YOLO(back)
    again = ultralytics_eval(y.model.float(), x)
    check(y.names == {0: "a", 1: "b", 2: "c"} and differences(again, ref)[0] == 0.0,
          f"{name}: to-pth -> YOLO() opens it, names {y.names}, the same eval output")
    return worst


def metadata(path):
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        return f.metadata(), {k: f.get_tensor(k) for k in f.keys()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hpcnet", default="build/hpcnet")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--scales", default=",".join(SCALES),
                    help="6: the named models checked Ultralytics -> hpcnet -> Ultralytics "
                    "(default: all ten; '' for none)")
    ap.add_argument("--imgsz", type=int, default=64, help="6: the input size of that check")
    ap.add_argument("--trained", default="yolo11n,yolov8m",
                    help="7: the models trained by hpcnet and loaded into Ultralytics ('' for none)")
    args = ap.parse_args()
    import onnxruntime as ort
    import ultralytics
    from ultralytics import YOLO
    from ultralytics.utils import LOGGER
    LOGGER.setLevel(logging.WARNING)  # not its "Overriding model.yaml nc=80 with nc=3"
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

    # 6. Every named model, Ultralytics -> hpcnet -> Ultralytics; 7. hpcnet -> Ultralytics.
    sys.path.insert(0, HERE)
    import convert_checkpoint as converter
    scales_json(converter)
    worst = {}
    for name in filter(None, args.scales.split(",")):
        worst[name] = check_scale(name, args, tmp, converter, ort)
    data = tiny_detection_set(os.path.join(tmp, "tiny"))
    for name in filter(None, args.trained.split(",")):
        worst[f"{name} (hpcnet's)"] = check_trained(name, args, tmp, data, ort)
    if worst:
        print("largest difference from Ultralytics' eval output, relative to max |value|: "
              + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    shutil.rmtree(tmp)  # all passed (a failure keeps the folder to look at)


if __name__ == "__main__":
    main()
