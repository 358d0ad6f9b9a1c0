#!/usr/bin/env python3
"""By-hand check (not run by ctest) of issue 35's first criterion: torchvision ResNet files in
hpcnet and hpcnet's in torchvision. Needs torch, torchvision, safetensors and Pillow
(/tmp/ref/bin/python) and a built hpcnet:

    /tmp/ref/bin/python tests/golden/check_torchvision_resnet_files.py --hpcnet build/hpcnet \\
        --work /tmp/tvcheck [--train | --hpcnet-model RUN/model.safetensors]

1. torchvision.models.resnet50(num_classes=10) with weights from torch.manual_seed(0) (its own
   initialisation, then the BatchNorms' affine parameters and running statistics drawn too, so
   the eval-mode forward is not a near one-hot; fc's weight drawn with std 1e-5 for the same
   reason) is saved with safetensors.torch.save_file (no
   hpcnet metadata). A 256x256 PNG (a smooth colour pattern) is classified by torchvision with
   its ImageNet evaluation transform (Resize(256), CenterCrop(224), ToTensor, Normalize with
   ImageNet's mean and std) and by `hpcnet predict --weights FILE --model resnet50 --imgsz 224
   --json --top 10`; the largest difference of the 10 probabilities is printed (target: 1e-4).
2. With --hpcnet-model (a resnet50 model.safetensors written by hpcnet train), or with --train
   (which writes one: `hpcnet train --model resnet50 --augment imagenet --imgsz 224`, one epoch
   of 6 random 256x256 PNGs in 3 classes at batch 2, so the weights and running statistics are
   trained), the file is loaded into torchvision.models.resnet50(num_classes=N) with
   strict=True, and, where the run recorded hpcnet.augment = imagenet, both score the PNG; the
   largest probability difference is printed.
3. `hpcnet export --model resnet50 --save-io` of the torchvision file (1.): onnxruntime on the
   traced input (already normalised, as the graph takes it) against hpcnet's output and against
   torchvision's logits for that input.
Exits 1 when a difference exceeds 1e-4 (probabilities; logits relative to the largest).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torchvision
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save_file
from torchvision import transforms


SMALL_FC_STD = 1e-5


def image(path):
    y, x = np.mgrid[0:256, 0:256].astype(np.float64)
    rgb = np.stack([127.5 + 127.5 * np.sin(x / 17.0 + y / 29.0),
                    127.5 + 127.5 * np.cos(x / 11.0 - y / 23.0),
                    127.5 + 127.5 * np.sin((x * y) / 4000.0)], axis=-1)
    Image.fromarray(np.clip(np.round(rgb), 0, 255).astype(np.uint8), "RGB").save(path)


EVAL = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                           transforms.ToTensor(),
                           transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


def torch_probs(model, png):
    model.eval()
    with torch.no_grad():
        return torch.softmax(model(EVAL(Image.open(png).convert("RGB")).unsqueeze(0)), 1)[0]


def hpcnet_probs(hpcnet, weights, png, k, extra=()):
    out = subprocess.run([hpcnet, "predict", "--weights", weights, "--json", "--top", str(k),
                          "--threads", "2", *extra, png], check=True, capture_output=True,
                         text=True)
    if out.stderr.strip():
        print("hpcnet stderr:", out.stderr.strip())
    top = json.loads(out.stdout.strip().splitlines()[-1])["top"]
    return {t["class"]: t["probability"] for t in top}


def train_resnet50(hpcnet, work):
    """hpcnet's own resnet50 model file: one epoch on 3 classes of 2 random 256x256 PNGs."""
    rng = np.random.default_rng(0)
    for c in range(3):
        folder = os.path.join(work, "images", "train", f"c{c}")
        os.makedirs(folder, exist_ok=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)).save(
                os.path.join(folder, f"{i}.png"))
    out = os.path.join(work, "run_resnet50")
    subprocess.run([hpcnet, "train", "--model", "resnet50", "--dataset", "imagefolder", "--data",
                    os.path.join(work, "images"), "--augment", "imagenet", "--imgsz", "224",
                    "--epochs", "1", "--batch-size", "2", "--threads", "2", "--seed", "1",
                    "--no-progress", "--exist-ok", "--out", out], check=True, capture_output=True)
    return os.path.join(out, "model.safetensors")


def check_onnx(hpcnet, weights, model, work):
    """3.: the largest differences of onnxruntime against hpcnet and against torchvision."""
    import onnxruntime as ort
    from safetensors.numpy import load_file
    onnx_path, io_path = os.path.join(work, "tv_resnet50.onnx"), os.path.join(work, "io.safetensors")
    subprocess.run([hpcnet, "export", "--weights", weights, "--model", "resnet50", "--out",
                    onnx_path, "--save-io", io_path], check=True, capture_output=True)
    io = load_file(io_path)
    got = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"]).run(
        ["output"], {"input": io["input"]})[0]
    model.eval()
    with torch.no_grad():
        ref = model(torch.from_numpy(io["input"])).numpy()
    scale = float(np.abs(ref).max())
    vs_hpcnet = float(np.abs(got - io["output"]).max()) / scale
    vs_tv = float(np.abs(got - ref).max()) / scale
    print(f"3. hpcnet export of that file {tuple(io['input'].shape)} -> {tuple(got.shape)} in "
          f"onnxruntime {ort.__version__}: {vs_hpcnet:.2e} of max |logit| {scale:.4g} against "
          f"hpcnet, {vs_tv:.2e} against torchvision")
    return max(vs_hpcnet, vs_tv)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hpcnet", default="build/hpcnet")
    ap.add_argument("--work", default="/tmp/tvcheck")
    ap.add_argument("--hpcnet-model")
    ap.add_argument("--train", action="store_true", help="2. on a resnet50 hpcnet trains here")
    a = ap.parse_args()
    worst = 0.0
    torch.set_num_threads(2)
    os.makedirs(a.work, exist_ok=True)
    png = os.path.join(a.work, "pattern.png")
    image(png)

    torch.manual_seed(0)
    m = torchvision.models.resnet50(num_classes=10)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.normal_(0, 0.1)
                mod.running_mean.normal_(0, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
        # The random trunk's features are large (no zero_init_residual): a classifier of small
        # weights keeps the logits of order 1, so the probabilities are not a one-hot.
        m.fc.weight.normal_(0, SMALL_FC_STD)
    weights = os.path.join(a.work, "tv_resnet50.safetensors")
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, weights)
    ref = torch_probs(m, png)
    got = hpcnet_probs(a.hpcnet, weights, png, 10, ["--model", "resnet50", "--imgsz", "224"])
    diff = max(abs(got[str(i)] - ref[i].item()) for i in range(10))
    print("torchvision logits:", " ".join(f"{v:.4f}" for v in torch.log(ref).tolist()))
    print("torchvision probabilities:", " ".join(f"{p:.6f}" for p in ref.tolist()))
    print("hpcnet      probabilities:", " ".join(f"{got[str(i)]:.6f}" for i in range(10)))
    print(f"1. torchvision resnet50 file in hpcnet predict: max |dp| = {diff:.3e} "
          f"({'within' if diff <= 1e-4 else 'NOT within'} 1e-4)")
    worst = max(worst, diff)

    if a.train:
        a.hpcnet_model = train_resnet50(a.hpcnet, a.work)
    if a.hpcnet_model:
        with safe_open(a.hpcnet_model, framework="pt") as f:
            meta = f.metadata() or {}
            sd = {k: f.get_tensor(k) for k in f.keys()}
        classes = json.loads(meta["hpcnet.classes"])
        tv = torchvision.models.resnet50(num_classes=len(classes))
        tv.load_state_dict(sd, strict=True)
        print(f"2. {a.hpcnet_model}: loads into torchvision.models.resnet50(num_classes="
              f"{len(classes)}) with strict=True ({len(sd)} tensors)")
        if meta.get("hpcnet.augment") == "imagenet" and meta.get("hpcnet.imgsz") == "224":
            ref = torch_probs(tv, png)
            got = hpcnet_probs(a.hpcnet, a.hpcnet_model, png, len(classes))
            diff = max(abs(got[c] - ref[i].item()) for i, c in enumerate(classes))
            print("   torchvision:", " ".join(f"{c} {ref[i].item():.6f}" for i, c in enumerate(classes)))
            print("   hpcnet:     ", " ".join(f"{c} {got[c]:.6f}" for c in classes))
            print(f"   scores the same: max |dp| = {diff:.3e}")
            worst = max(worst, diff)
        else:
            print("   (not scored: the run did not record hpcnet.augment imagenet at 224 px)")
    worst = max(worst, check_onnx(a.hpcnet, weights, m, a.work))
    print(f"largest difference {worst:.2e}: {'ok' if worst <= 1e-4 else 'FAIL'} (1e-4)")
    return 0 if worst <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
