#!/usr/bin/env python3
"""By-hand check (not run by ctest) of issue 35's first criterion: torchvision ResNet files in
hpcnet and hpcnet's in torchvision. Needs torch, torchvision, safetensors and Pillow
(/tmp/ref/bin/python) and a built hpcnet:

    /tmp/ref/bin/python tests/golden/check_torchvision_resnet_files.py --hpcnet build/hpcnet \\
        --work /tmp/tvcheck [--hpcnet-model RUN/model.safetensors]

1. torchvision.models.resnet50(num_classes=10) with weights from torch.manual_seed(0) (its own
   initialisation, then the BatchNorms' affine parameters and running statistics drawn too, so
   the eval-mode forward is not a near one-hot; fc's weight drawn with std 1e-5 for the same
   reason) is saved with safetensors.torch.save_file (no
   hpcnet metadata). A 256x256 PNG (a smooth colour pattern) is classified by torchvision with
   its ImageNet evaluation transform (Resize(256), CenterCrop(224), ToTensor, Normalize with
   ImageNet's mean and std) and by `hpcnet predict --weights FILE --model resnet50 --imgsz 224
   --json --top 10`; the largest difference of the 10 probabilities is printed (target: 1e-4).
2. With --hpcnet-model (a resnet50 model.safetensors written by hpcnet train), the file is
   loaded into torchvision.models.resnet50(num_classes=N) with strict=True, and, where the run
   recorded hpcnet.augment = imagenet, both score the PNG; the largest probability difference is
   printed.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hpcnet", default="build/hpcnet")
    ap.add_argument("--work", default="/tmp/tvcheck")
    ap.add_argument("--hpcnet-model")
    a = ap.parse_args()
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
