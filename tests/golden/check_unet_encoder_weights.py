#!/usr/bin/env python3
"""Hand check of `hpcnet train --encoder-weights` against segmentation_models_pytorch: a U-Net whose
encoder is torchvision's resnet34 from a state_dict, as smp's encoder_weights="imagenet" builds it.
Run by hand from the repository root after a build, in a venv with torch, torchvision,
safetensors and segmentation-models-pytorch (no weights are downloaded):

    /tmp/ref/bin/python tests/golden/check_unet_encoder_weights.py [--hpcnet build/hpcnet]

What it does, in a temporary folder:
 1. torchvision.models.resnet34() after torch.manual_seed(0), its BatchNorm weights, biases and
    running statistics redrawn from the same seed (so that loading them matters), saved with
    torch.save as resnet34.pth, converted by scripts/convert_checkpoint.py to-safetensors
    --model resnet34 (the route docs/segmentation.md gives for torchvision's ImageNet weights);
 2. a dataset of two 128x128 training images and one validation image (3 classes, seeded noise
    over coloured rectangles);
 3. hpcnet train --model unet_resnet34 --encoder-weights r34.safetensors --lr 0 (one step of
    batch 2: the parameters stay as built, the BatchNorm statistics follow the batch);
 4. smp.Unet("resnet34", encoder_weights=None, classes=3) whose encoder loads the same
    resnet34.pth through smp's own ResNetEncoder.load_state_dict (which drops fc, as
    encoder_weights="imagenet" does) and whose decoder and head take hpcnet's initial values
    (from hpcnet's model file: lr 0 leaves them unchanged), fed the images normalised with
    ImageNet's mean and std (smp's get_preprocessing_params("resnet34")).
Compared: hpcnet's encoder parameters against the file (exact), the training-mode loss of the
batch (hpcnet's train_loss against smp's), every running statistic after that forward (the
encoder's are 0.9 x the file's + 0.1 x the batch's, so they check that the file's buffers were
loaded), one SGD step (lr 0.5: hpcnet's parameter changes against smp's float64 gradients, as
close as smp's own float32 gradients are), and in eval mode, with hpcnet's stepped model file in
smp, smp's argmax mask of the validation image against `hpcnet predict --save`'s (hpcnet's
forward with the normalisation its model file records). Prints the numbers; exits 1 when a
check fails.
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from PIL import Image
from safetensors.torch import load_file
import segmentation_models_pytorch as smp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIZE = 128  # image side; layer4 is 4x4 (BatchNorm over 32 values per channel at batch 2)
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def seeded_resnet34():
    torch.manual_seed(0)
    tv = torchvision.models.resnet34()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in tv.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(1 + 0.1 * torch.randn(n, generator=g))
                m.bias.copy_(0.1 * torch.randn(n, generator=g))
                m.running_mean.copy_(0.1 * torch.randn(n, generator=g))
                m.running_var.copy_(0.5 + torch.rand(n, generator=g))
    return tv


def write_dataset(root):
    rng = np.random.default_rng(7)
    for split, n in (("train", 2), ("val", 1)):
        os.makedirs(os.path.join(root, "images", split))
        os.makedirs(os.path.join(root, "masks", split))
        for k in range(n):
            img = rng.integers(60, 140, size=(SIZE, SIZE, 3)).astype(np.uint8)
            mask = np.zeros((SIZE, SIZE), np.uint8)
            for cls, colour in ((1, (220, 40, 40)), (2, (40, 40, 220))):
                y, x = rng.integers(0, SIZE * 5 // 8, size=2)
                h, w = rng.integers(SIZE // 5, SIZE * 3 // 8, size=2)
                img[y:y + h, x:x + w] = colour
                mask[y:y + h, x:x + w] = cls
            name = f"img{k}.png"
            Image.fromarray(img).save(os.path.join(root, "images", split, name))
            Image.fromarray(mask, mode="L").save(os.path.join(root, "masks", split, name))
    with open(os.path.join(root, "classes.txt"), "w") as f:
        f.write("background\nred\nblue\n")


def batch(root, split):
    d = os.path.join(root, "images", split)
    names = sorted(os.listdir(d))
    x = [(np.asarray(Image.open(os.path.join(d, n)), np.float32) / 255 - MEAN) / STD for n in names]
    m = [np.asarray(Image.open(os.path.join(root, "masks", split, n)), np.int64) for n in names]
    return (torch.from_numpy(np.stack(x).transpose(0, 3, 1, 2).copy()),
            torch.from_numpy(np.stack(m)), names)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hpcnet", default=os.path.join(ROOT, "build", "hpcnet"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    ok = True
    with tempfile.TemporaryDirectory(prefix="hpcnet_encw_") as tmp:
        tv = seeded_resnet34()
        pth = os.path.join(tmp, "resnet34.pth")
        torch.save(tv.state_dict(), pth)
        r34 = os.path.join(tmp, "r34.safetensors")
        run([sys.executable, os.path.join(ROOT, "scripts", "convert_checkpoint.py"),
             "to-safetensors", pth, r34, "--model", "resnet34"])
        data = os.path.join(tmp, "data")
        write_dataset(data)
        def train(name, lr):
            out = os.path.join(tmp, name)
            r = run([args.hpcnet, "train", "--model", "unet_resnet34", "--data", data, "--imgsz",
                     str(SIZE), "--epochs", "1", "--batch-size", "2", "--lr", lr, "--momentum", "0",
                     "--threads", "1", "--workers", "0", "--seed", "1", "--encoder-weights", r34,
                     "--out", out])
            epochs = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
            loss = [e for e in epochs if e.get("event") == "epoch"][0]["train_loss"]
            return r, load_file(os.path.join(out, "model.safetensors")), loss, out

        # lr 0: the model as hpcnet builds it (its BatchNorm statistics after the batch); lr 0.5:
        # one SGD step of batch 2 from the same start (the step is -0.5 x the gradient).
        r, init, _, _ = train("run0", "0")
        said = [l for l in r.stderr.splitlines() if "--encoder-weights" in l]
        print("hpcnet said:", said[0] if said else "(nothing)")
        ok &= len(said) == 1
        _, stepped, hp_loss, out = train("run1", "0.5")

        # hpcnet's encoder parameters are the file's.
        sd = tv.state_dict()
        params = {n for n, _ in tv.named_parameters()} - {"fc.weight", "fc.bias"}
        worst = max((init["encoder." + n] - sd[n]).abs().max().item() for n in params)
        print(f"encoder parameters: {len(params)}, largest difference from the file {worst:g}")
        ok &= worst == 0

        # smp's U-Net: the encoder from the same state_dict by smp's own loader, the decoder and
        # head as hpcnet initialised them.
        model = smp.Unet("resnet34", encoder_weights=None, classes=3)
        model.encoder.load_state_dict(torch.load(pth))
        rest = {k: v for k, v in init.items() if not k.startswith("encoder.")
                and "running_" not in k and "num_batches" not in k}
        missing = model.load_state_dict(rest, strict=False)
        assert not missing.unexpected_keys, missing.unexpected_keys
        assert all(k.startswith("encoder.") or "running_" in k or "num_batches" in k
                   for k in missing.missing_keys)
        x, target, _ = batch(data, "train")
        model.train()
        logits = model(x)
        loss = F.cross_entropy(logits, target, ignore_index=255)
        rel = abs(loss.item() - hp_loss) / loss.item()
        print(f"training-mode loss: smp {loss.item():.7f}, hpcnet {hp_loss:.7f}, relative "
              f"{rel:.2e} (largest logit {logits.abs().max().item():.3g})")
        ok &= rel < 1e-5
        buffers = dict(model.named_buffers())
        stats = [k for k in buffers if "running_" in k]
        worst = max(((buffers[k] - init[k]).abs().max() / buffers[k].abs().max()).item()
                    for k in stats)
        print(f"running statistics after the step: {len(stats)} tensors, largest relative "
              f"difference {worst:.2e}")
        ok &= worst < 1e-4
        # The SGD step: hpcnet's parameters after it against smp's (p - 0.5 grad), relative to
        # the largest change, for every parameter (the encoder's gradients go through the file's
        # weights and ImageNet's normalisation).
        # The same step of smp in float64: torch's own float32 error, the scale of the check.
        model64 = copy.deepcopy(model).double()
        state0 = {k: v.clone() for k, v in model.state_dict().items()}
        loss.backward()
        F.cross_entropy(model64(x.double()), target, ignore_index=255).backward()
        errs, errs64, errs32 = {}, {}, {}
        grads64 = dict(model64.named_parameters())
        with torch.no_grad():
            for n, p in model.named_parameters():
                step64 = -0.5 * grads64[n].grad
                scale = step64.abs().max()
                errs[n] = (((stepped[n].double() - state0[n].double()) - step64).abs().max()
                           / scale).item()
                errs64[n] = ((-0.5 * p.grad.double() - step64).abs().max() / scale).item()
                errs32[n] = (((stepped[n].double() - state0[n].double()) + 0.5 * p.grad.double())
                             .abs().max() / scale).item()
        worst = max(errs, key=errs.get)
        median = sorted(errs.values())[len(errs) // 2]
        print(f"one SGD step, {len(errs)} parameters: hpcnet's change against smp's float64 "
              f"0.5 x gradient, relative to the largest: median {median:.2e}, worst "
              f"{errs[worst]:.2e} ({worst}); smp's float32 gradients: median "
              f"{sorted(errs64.values())[len(errs64) // 2]:.2e}, worst {max(errs64.values()):.2e}; "
              f"hpcnet against smp's float32: median {sorted(errs32.values())[len(errs32) // 2]:.2e}, "
              f"worst {max(errs32.values()):.2e}")
        # As close to float64 as torch's own float32 gradients are (BatchNorm over few values per
        # channel deep in the encoder makes both differ from float64 by a median 5e-3).
        ok &= errs[worst] <= 1.5 * max(errs64.values())
        ok &= median <= 1.5 * sorted(errs64.values())[len(errs64) // 2]
        # Eval mode on the validation image: hpcnet's stepped model file in smp, its argmax
        # against `hpcnet predict --save`'s mask (hpcnet's forward with the normalisation its
        # model file records).
        twin = smp.Unet("resnet34", encoder_weights=None, classes=3)
        twin.load_state_dict(stepped)
        twin.eval()
        xv, _, names = batch(data, "val")
        with torch.no_grad():
            twin_logits = twin(xv)
        pred = os.path.join(tmp, "pred")
        run([args.hpcnet, "predict", "--weights", os.path.join(out, "model.safetensors"),
             os.path.join(data, "images", "val"), "--save", pred, "--threads", "1"])
        hp_mask = np.asarray(Image.open(os.path.join(pred, names[0][:-4] + "_mask.png")))
        smp_mask = twin_logits.argmax(1)[0].numpy()
        agree = (smp_mask == hp_mask).mean()
        counts = np.bincount(smp_mask.ravel(), minlength=3)
        print(f"eval-mode mask of the validation image: {100 * agree:.2f}% of pixels agree "
              f"(smp's classes {counts.tolist()}, largest logit {twin_logits.abs().max():.3g})")
        ok &= agree > 0.999
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
