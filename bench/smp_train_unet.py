#!/usr/bin/env python3
"""The PyTorch reference for hpcnet's segmentation models: smp's U-Net (default) or torchvision's
DeepLabV3 (--arch deeplabv3_resnet50), trained with the same recipe.

What users compare hpcnet's `--model unet_resnet18 --dataset segmentation` against:

    smp.Unet("resnet18", encoder_weights=None, classes=11)   (random init, torch.manual_seed(seed))
    AdamW(lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 1e-4), torch's defaults otherwise
    CosineAnnealingLR(T_max=epochs, eta_min=lr_min) stepped once per epoch (--lr-per-step: T_max =
        all steps, stepped after every step)
    batch 32, RandomHorizontalFlip(0.5) of image and mask, ToTensor (/255), Normalize(0.5, 0.5)
    CrossEntropyLoss(ignore_index=255), 3 epochs, torch.set_num_threads(--threads)

and, with --arch deeplabv3_resnet50 [--aux-loss], hpcnet's `--model deeplabv3_resnet50
[--aux-loss]` against torchvision.models.segmentation.deeplabv3_resnet50(weights=None,
weights_backbone=None, num_classes=11, aux_loss=--aux-loss) under the same recipe (not
torchvision's reference SGD/poly one); the loss is torchvision's reference criterion,
CE(out) + 0.5 CE(aux) with ignore_index 255 (the aux term only with --aux-loss), and validation
takes "out". --encoder applies to the U-Net only.

on a dataset laid out as hpcnet's segmentation reader wants it (e.g. /tmp/scenes, made by
/work/shared/data/make_scenes.py):

    DATA/images/{train,val}/NAME.jpg     RGB, all the same size (no resizing is done here)
    DATA/masks/{train,val}/NAME.png      8-bit (gray or palette): the class index per pixel, 255 ignored
    DATA/classes.txt or DATA/data.yaml   the class names; with data.yaml, class 0 is "background"
                                         and names k is mask value k + 1 (as hpcnet counts them)

Both splits are read sorted by name and decoded into memory first (uint8; timed on their own,
not training time). Every epoch shuffles with torch.randperm under a torch.Generator seeded with
--seed; the flips are drawn from the same generator (torch.rand(batch) < 0.5). Batches are cut
in the training thread (no DataLoader workers): index, flip, ToTensor + Normalize into a
contiguous NCHW float32 tensor, masks as int64. The last partial batch is kept (drop_last=False).

After each epoch, and at the stop of --steps (a partial epoch, unless --skip-partial-val), the
model is validated on the val split in eval mode under torch.no_grad(), batches of
--val-batch-size (--batch-size, as hpcnet's training-time validation), with the confusion matrix of
torchvision's segmentation reference (references/segmentation/utils.py ConfusionMatrix):

    k = (target >= 0) & (target < n);  h += bincount(n * target[k] + pred[k], minlength=n*n)
    iu = diag(h) / (h.sum(1) + h.sum(0) - diag(h));  mIoU = mean(iu) * 100
    pixel accuracy = diag(h).sum() / h.sum() * 100

(pred = argmax of the logits; 255 and any value >= n is left out; a class in neither target nor
prediction makes its IoU and the mean NaN, as in torchvision, written as null in JSON. h is
summed in int64 and divided in float64, where torchvision divides in float32; hpcnet uses float64
too.)

With --precision bf16 the forward passes and the loss (training and validation) run under
torch.autocast("cpu", dtype=torch.bfloat16); parameters, gradients and AdamW stay float32.

Usage (the venv with torch, torchvision and segmentation-models-pytorch: /tmp/ref/bin/python):

    /tmp/ref/bin/python bench/smp_train_unet.py --self-check          # metric/schedule asserts
    /tmp/ref/bin/python bench/smp_train_unet.py --data /tmp/scenes --threads 2 --out /tmp/smp.jsonl
    /tmp/ref/bin/python bench/smp_train_unet.py --data /tmp/scenes --steps 3 --threads 1   # smoke
    /tmp/ref/bin/python bench/smp_train_unet.py --data /tmp/scenes --precision bf16 --steps 30
    /tmp/ref/bin/python bench/smp_train_unet.py --arch deeplabv3_resnet50 --aux-loss --steps 2

It prints one line per epoch and, with --out FILE, writes JSON lines like hpcnet's
metrics.jsonl: {"event": "start", ...}, one {"event": "epoch", "epoch", "steps", "train_loss",
"val_miou", "pixel_accuracy", "per_class_iou", "seconds", "images_per_sec", "lr", "partial",
...} per epoch (seconds = that epoch's training loop, validation not included) and an
{"event": "end", "train_seconds", "images", "steps", "images_per_sec", "load_seconds",
"peak_rss_mb", "peak_rss_before_val_mb", "smp_version" or "torchvision_version", ...} record (RUSAGE_SELF: at the end, and just before
the first validation, i.e. the training loop's own peak; validation at batch 500 of 128x128
images needed several GB in torch, more than training at batch 32). bench/compare_segment.py runs this beside `hpcnet train`.
"""

import argparse
import json
import math
import os
import re
import resource
import sys
import time

import numpy as np
import torch
import torch.nn as nn

IGNORE_INDEX = 255
AUX_WEIGHT = 0.5  # torchvision's reference criterion: out + 0.5 aux
DEFAULT_DATA = "/tmp/scenes"
IMAGE_EXT = (".jpg", ".jpeg", ".png")
ARCHS = ("unet", "deeplabv3_resnet50")


# ---------------------------------------------------------------------------------------------
# The metric: torchvision's segmentation reference ConfusionMatrix.
# ---------------------------------------------------------------------------------------------

class ConfusionMatrix:
    """h[target, pred] counts, as torchvision's references/segmentation/utils.py."""

    def __init__(self, num_classes):
        self.n = num_classes
        self.h = torch.zeros((num_classes, num_classes), dtype=torch.int64)

    def update(self, target, pred):
        """target, pred: integer tensors of the same number of elements (flattened here)."""
        n = self.n
        a, b = target.reshape(-1).to(torch.int64), pred.reshape(-1).to(torch.int64)
        k = (a >= 0) & (a < n)
        self.h += torch.bincount(n * a[k] + b[k], minlength=n * n).reshape(n, n)

    def compute(self):
        """(pixel accuracy %, per-class IoU % list, mIoU %), float64; NaN where torchvision's is."""
        h = self.h.to(torch.float64)
        diag = torch.diag(h)
        iu = diag / (h.sum(1) + h.sum(0) - diag)
        acc = (diag.sum() / h.sum()).item() * 100.0
        return acc, (iu * 100.0).tolist(), iu.mean().item() * 100.0

    def pixels(self):
        return int(self.h.sum())


def none_if_nan(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


# ---------------------------------------------------------------------------------------------
# Data.
# ---------------------------------------------------------------------------------------------

def read_class_names(data):
    """classes.txt (line k names mask value k), else data.yaml names with "background" first:
    the rule hpcnet's segmentation reader follows."""
    p = os.path.join(data, "classes.txt")
    if os.path.exists(p):
        with open(p) as f:
            names = [l.rstrip("\r\n ").strip() for l in f]
        names = [n for n in names if n]
        if not names:
            raise ValueError(f"{p} names no class")
        return names
    p = os.path.join(data, "data.yaml")
    if os.path.exists(p):
        with open(p) as f:
            text = f.read()
        return ["background"] + yaml_names(text, p)
    raise ValueError(f"{data} has no classes.txt and no data.yaml with names (give --classes)")


def yaml_names(text, where="data.yaml"):
    """The `names:` entry of a YOLO-style data.yaml: a map {0: a, 1: b} or a list."""
    try:
        import yaml  # PyYAML, where installed
        n = yaml.safe_load(text).get("names")
    except ImportError:
        n = _yaml_names_fallback(text)
    if isinstance(n, dict):
        keys = sorted(int(k) for k in n)
        if keys != list(range(len(keys))):
            raise ValueError(f"{where}: names must be numbered 0, 1, ...")
        return [str(n[k]) for k in keys]
    if isinstance(n, list) and n:
        return [str(v) for v in n]
    raise ValueError(f"{where} has no names")


def _yaml_names_fallback(text):
    """Enough YAML for `names:` given as an indented map or list, or an inline [a, b] list."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^names:\s*(.*)$", line)
        if not m:
            continue
        inline = m.group(1).split("#")[0].strip()
        if inline.startswith("["):
            return [v.strip().strip("'\"") for v in inline.strip("[]").split(",") if v.strip()]
        out_map, out_list = {}, []
        for l in lines[i + 1:]:
            if l.strip() == "" or l.lstrip().startswith("#"):
                continue
            if not l.startswith((" ", "\t")):
                break
            s = l.strip()
            mm = re.match(r"^(\d+)\s*:\s*(.*)$", s)
            if mm:
                out_map[int(mm.group(1))] = mm.group(2).strip().strip("'\"")
            elif s.startswith("- "):
                out_list.append(s[2:].strip().strip("'\""))
        return out_map or out_list
    return None


def list_pairs(data, split):
    img_dir, mask_dir = os.path.join(data, "images", split), os.path.join(data, "masks", split)
    if not os.path.isdir(img_dir):
        raise ValueError(f"{img_dir} is not a folder (want images/<split>/*.jpg)")
    names = sorted(f for f in os.listdir(img_dir) if f.lower().endswith(IMAGE_EXT))
    if not names:
        raise ValueError(f"{img_dir} holds no .jpg/.png image")
    pairs = []
    for f in names:
        m = os.path.join(mask_dir, os.path.splitext(f)[0] + ".png")
        if not os.path.exists(m):
            raise ValueError(f"{os.path.join(img_dir, f)} has no mask ({m})")
        pairs.append((os.path.join(img_dir, f), m))
    return pairs


def decode_split(data, split):
    """(images uint8 [N, H, W, 3], masks uint8 [N, H, W]) as torch tensors, sorted by name."""
    from PIL import Image
    pairs = list_pairs(data, split)
    images = masks = None
    for i, (ip, mp) in enumerate(pairs):
        with Image.open(ip) as im:
            x = np.asarray(im.convert("RGB"))
        with Image.open(mp) as mk:
            if mk.mode not in ("L", "P"):
                raise ValueError(f"{mp}: mask mode {mk.mode}, want 8-bit gray or palette")
            y = np.asarray(mk)  # the index per pixel for both L and P
        if images is None:
            h, w = x.shape[:2]
            images = np.empty((len(pairs), h, w, 3), dtype=np.uint8)
            masks = np.empty((len(pairs), h, w), dtype=np.uint8)
        if x.shape[:2] != images.shape[1:3] or y.shape != masks.shape[1:]:
            raise ValueError(f"{ip}: {x.shape[1]}x{x.shape[0]} image / {y.shape[1]}x{y.shape[0]} "
                             f"mask; the first pair was {images.shape[2]}x{images.shape[1]} "
                             f"(this script does not resize)")
        images[i], masks[i] = x, y
    return torch.from_numpy(images), torch.from_numpy(masks)


def make_batch(images, masks, flip=None):
    """uint8 [B, H, W, 3] / [B, H, W] -> float32 NCHW (x / 255 - 0.5) / 0.5, int64 masks;
    flip: bool [B], the samples mirrored left-right (image and mask together)."""
    if flip is not None and bool(flip.any()):
        images, masks = images.clone(), masks.clone()
        images[flip] = images[flip].flip(2)
        masks[flip] = masks[flip].flip(2)
    x = images.permute(0, 3, 1, 2).to(torch.float32).div_(255.0).sub_(0.5).div_(0.5)
    return x.contiguous(), masks.to(torch.int64)


# ---------------------------------------------------------------------------------------------
# Models and the loss.
# ---------------------------------------------------------------------------------------------

def build_model(args, n_classes):
    """(model, description, {"smp_version" | "torchvision_version": version}) for --arch. The
    model maps a batch to a dict of logits: "out" and, for DeepLabV3 with --aux-loss, "aux" (as
    torchvision's segmentation models do; smp's U-Net is wrapped to match)."""
    if args.arch == "unet":
        import segmentation_models_pytorch as smp
        unet = smp.Unet(args.encoder, encoder_weights=None, classes=n_classes)
        return _OutDict(unet), f"Unet({args.encoder})", {"smp_version": smp.__version__}
    import torchvision
    model = torchvision.models.segmentation.deeplabv3_resnet50(
        weights=None, weights_backbone=None, num_classes=n_classes, aux_loss=args.aux_loss)
    return (model, f"deeplabv3_resnet50(aux_loss={args.aux_loss})",
            {"torchvision_version": torchvision.__version__})


class _OutDict(nn.Module):
    """A module returning {"out": the inner model's logits}."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return {"out": self.inner(x)}


def criterion(outputs, target):
    """torchvision's references/segmentation/train.py criterion: cross-entropy (ignore 255) of
    each head, out + 0.5 aux when there is an aux head."""
    losses = {name: nn.functional.cross_entropy(x, target, ignore_index=IGNORE_INDEX)
              for name, x in outputs.items()}
    if len(losses) == 1:
        return losses["out"]
    return losses["out"] + AUX_WEIGHT * losses["aux"]


# ---------------------------------------------------------------------------------------------
# Self-check.
# ---------------------------------------------------------------------------------------------

def _torchvision_reference(target, pred, n):
    """torchvision's ConfusionMatrix, verbatim in substance (float32 compute)."""
    a, b = target.flatten(), pred.flatten()
    k = (a >= 0) & (a < n)
    inds = n * a[k].to(torch.int64) + b[k]
    mat = torch.bincount(inds, minlength=n ** 2).reshape(n, n)
    h = mat.float()
    acc_global = torch.diag(h).sum() / h.sum()
    iu = torch.diag(h) / (h.sum(1) + h.sum(0) - torch.diag(h))
    return acc_global.item() * 100, iu.mean().item() * 100


def self_check():
    close = lambda a, b, tol=1e-9: abs(a - b) <= tol * max(1.0, abs(b))  # noqa: E731
    # Hand example, 3 classes, one pixel ignored (255):
    #   target 0 0 1 1 2 255 2
    #   pred   0 1 1 1 0  2  2
    # h (rows target, columns pred) = [[1,1,0],[0,2,0],[1,0,1]]; diag 1,2,1; row sums 2,2,2;
    # column sums 2,3,1 -> IoU 1/3, 2/3, 1/2; mIoU 50 %; pixel accuracy 4/6.
    t = torch.tensor([0, 0, 1, 1, 2, 255, 2])
    p = torch.tensor([0, 1, 1, 1, 0, 2, 2])
    cm = ConfusionMatrix(3)
    cm.update(t, p)
    assert cm.h.tolist() == [[1, 1, 0], [0, 2, 0], [1, 0, 1]], cm.h.tolist()
    acc, iu, miou = cm.compute()
    assert close(acc, 400.0 / 6) and close(miou, 50.0), (acc, miou)
    assert all(close(a, b) for a, b in zip(iu, [100 / 3, 200 / 3, 50.0])), iu
    assert cm.pixels() == 6
    ra, rm = _torchvision_reference(t, p, 3)
    assert close(ra, acc, 1e-6) and close(rm, miou, 1e-6), (ra, rm)
    # Updating batch by batch (2-D masks) sums to the same matrix.
    cm2 = ConfusionMatrix(3)
    cm2.update(t[:4].view(2, 2), p[:4].view(2, 2))
    cm2.update(t[4:], p[4:])
    assert torch.equal(cm.h, cm2.h)
    # A class in neither target nor prediction: its IoU and the mean are NaN (torchvision's).
    cm4 = ConfusionMatrix(4)
    cm4.update(t, p)
    acc4, iu4, miou4 = cm4.compute()
    assert math.isnan(iu4[3]) and math.isnan(miou4) and close(acc4, acc)
    assert none_if_nan(miou4) is None
    # A class predicted but never in the target: IoU 0, counted in the mean.
    cm5 = ConfusionMatrix(3)
    cm5.update(torch.tensor([0, 0, 1]), torch.tensor([0, 2, 1]))
    _, iu5, miou5 = cm5.compute()
    assert close(iu5[2], 0.0) and close(iu5[0], 50.0) and close(miou5, 50.0), (iu5, miou5)
    # Randomised against the float32 reference.
    g = torch.Generator().manual_seed(1)
    tt = torch.randint(0, 11, (4, 16, 16), generator=g)
    tt[0, :3] = 255
    pp = torch.randint(0, 11, (4, 16, 16), generator=g)
    cmr = ConfusionMatrix(11)
    cmr.update(tt, pp)
    a, _, m = cmr.compute()
    ra, rm = _torchvision_reference(tt, pp, 11)
    assert close(a, ra, 1e-5) and close(m, rm, 1e-5), (a, ra, m, rm)

    # Batches: normalisation and a flip that moves image and mask together.
    img = torch.zeros((2, 4, 5, 3), dtype=torch.uint8)
    for x in range(5):
        img[:, :, x, :] = 50 * x
    img[:, :, :, 1] += 1  # channel 1 differs
    msk = torch.arange(5, dtype=torch.uint8).expand(2, 4, 5).clone()
    xb, yb = make_batch(img, msk, torch.tensor([False, True]))
    assert xb.shape == (2, 3, 4, 5) and xb.is_contiguous() and xb.dtype == torch.float32
    assert yb.dtype == torch.int64
    assert xb[0, 0, 0, 0].item() == -1.0 and close(xb[0, 0, 0, 4].item(), (200 / 255 - 0.5) / 0.5, 1e-6)
    assert close(xb[0, 1, 2, 2].item(), (101 / 255 - 0.5) / 0.5, 1e-6)
    assert torch.equal(xb[1], xb[0].flip(-1)) and torch.equal(yb[1], yb[0].flip(-1))
    assert yb[0, 0].tolist() == [0, 1, 2, 3, 4] and yb[1, 0].tolist() == [4, 3, 2, 1, 0]
    assert int(img[1, 0, 0, 0]) == 0  # the decoded data is not flipped in place

    # Schedules: torch's CosineAnnealingLR against the closed form, per epoch and per step.
    for per_step, t_max in ((False, 3), (True, 12)):
        w = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.AdamW([w], lr=1e-3, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=t_max, eta_min=1e-5)
        for k in range(t_max):
            want = 1e-5 + (1e-3 - 1e-5) * (1 + math.cos(math.pi * k / t_max)) / 2
            assert close(opt.param_groups[0]["lr"], want, 1e-9), (per_step, k)
            opt.step()
            sched.step()
    # The loss: plain CE of "out"; with an aux head, out + 0.5 aux; 255 left out.
    g = torch.Generator().manual_seed(2)
    lo, la = torch.randn(2, 3, 4, 4, generator=g), torch.randn(2, 3, 4, 4, generator=g)
    tg = torch.randint(0, 3, (2, 4, 4), generator=g)
    tg[0, 0] = IGNORE_INDEX
    ce = nn.CrossEntropyLoss(ignore_index=IGNORE_INDEX)
    assert close(criterion({"out": lo}, tg).item(), ce(lo, tg).item(), 1e-6)
    assert close(criterion({"out": lo, "aux": la}, tg).item(),
                 ce(lo, tg).item() + 0.5 * ce(la, tg).item(), 1e-6)
    # data.yaml names, the rule hpcnet uses (background first).
    y = "path: x\nnames:\n  0: T-shirt/top\n  1: Trouser\n"
    assert _yaml_names_fallback(y) == {0: "T-shirt/top", 1: "Trouser"}
    assert yaml_names(y) == ["T-shirt/top", "Trouser"]
    assert yaml_names("names: [a, b]\n") == ["a", "b"]
    print("self-check passed: confusion matrix (hand example: mIoU 50.00%, pixel accuracy "
          "66.67%; NaN and absent-class cases; float32 torchvision reference), batching "
          "(normalise, flip of image and mask), the out + 0.5 aux loss, CosineAnnealingLR, "
          "data.yaml names")
    return 0


# ---------------------------------------------------------------------------------------------
# Training.
# ---------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=DEFAULT_DATA,
                   help="images/{train,val}/*.jpg + masks/{train,val}/*.png (default %(default)s)")
    p.add_argument("--arch", default="unet", choices=ARCHS,
                   help="unet: smp.Unet(--encoder); deeplabv3_resnet50: torchvision's "
                        "(default %(default)s)")
    p.add_argument("--encoder", default="resnet18",
                   help="smp encoder of --arch unet (default %(default)s)")
    p.add_argument("--aux-loss", action="store_true",
                   help="deeplabv3_resnet50: the auxiliary FCN head on layer3, its loss "
                        "weighted 0.5 (torchvision's --aux-loss)")
    p.add_argument("--classes", type=int, default=0,
                   help="output classes (default: from classes.txt or data.yaml, as hpcnet)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--lr-min", type=float, default=0.0, help="cosine eta_min")
    p.add_argument("--lr-per-step", action="store_true",
                   help="cosine over every step (T_max = epochs x steps per epoch) instead of "
                        "per epoch")
    p.add_argument("--augment", action=argparse.BooleanOptionalAction, default=True,
                   help="RandomHorizontalFlip(0.5) (default on)")
    p.add_argument("--seed", type=int, default=0, help="init (torch.manual_seed), shuffle, flips")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: torch.autocast('cpu', dtype=torch.bfloat16)")
    p.add_argument("--steps", type=int, default=0, help="stop after N steps in all (0: all epochs)")
    p.add_argument("--val-batch-size", type=int, default=None,
                   help="validation batch (default: --batch-size, as hpcnet's)")
    p.add_argument("--skip-partial-val", action="store_true",
                   help="do not validate after a partial epoch (the stop of --steps)")
    p.add_argument("--no-val", action="store_true", help="never validate")
    p.add_argument("--out", help="JSON lines file (replaced)")
    p.add_argument("--self-check", action="store_true", help="run the asserts and exit")
    a = p.parse_args(argv)
    if a.val_batch_size is None:
        a.val_batch_size = a.batch_size
    for name in ("epochs", "batch_size", "val_batch_size"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.steps < 0 or a.lr < 0 or a.weight_decay < 0 or a.classes < 0:
        p.error("--steps, --lr, --weight-decay and --classes must be >= 0")
    if a.threads is not None and a.threads < 1:
        p.error("--threads must be >= 1")
    if a.aux_loss and a.arch != "deeplabv3_resnet50":
        p.error("--aux-loss needs --arch deeplabv3_resnet50")
    return a


def peak_rss_mb(who=resource.RUSAGE_SELF):
    return resource.getrusage(who).ru_maxrss / 1024.0


def main(argv=None):
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.self_check:
        return self_check()

    t0 = time.perf_counter()
    try:
        names = None
        if args.classes == 0:
            names = read_class_names(args.data)
        n_classes = args.classes or len(names)
        train_x, train_y = decode_split(args.data, "train")
        val_x, val_y = (None, None) if args.no_val else decode_split(args.data, "val")
    except (OSError, ValueError) as e:
        print(f"error: --data {args.data}: {e}", file=sys.stderr)
        return 2
    load_s = time.perf_counter() - t0
    for split, y in (("train", train_y), ("val", val_y)):
        if y is None:
            continue
        bad = (y != IGNORE_INDEX) & (y >= n_classes)
        if bool(bad.any()):
            print(f"error: --data {args.data}: {split} masks hold value {int(y[bad].max())}, "
                  f">= {n_classes} classes and not {IGNORE_INDEX}", file=sys.stderr)
            return 2
    n_train, bs = len(train_x), args.batch_size
    steps_per_epoch = (n_train + bs - 1) // bs
    h, w = train_x.shape[1:3]
    print(f"data: {args.data}: train {n_train}, val {0 if val_x is None else len(val_x)} images "
          f"{w}x{h}, {n_classes} classes; decoded in {load_s:.1f} s", flush=True)

    torch.manual_seed(args.seed)
    model, described, versions = build_model(args, n_classes)
    n_params = sum(q.numel() for q in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    t_max = args.epochs * steps_per_epoch if args.lr_per_step else args.epochs
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=t_max, eta_min=args.lr_min)
    gen = torch.Generator().manual_seed(args.seed)
    bf16 = args.precision == "bf16"
    print(f"torch {torch.__version__}, "
          + ", ".join(f"{k.replace('_version', '')} {v}" for k, v in versions.items())
          + f", threads {torch.get_num_threads()}, "
          f"precision {args.precision}; {described} {n_params} parameters; "
          f"{steps_per_epoch} steps per epoch x {args.epochs} epochs"
          + (f", stopping after {args.steps} steps" if args.steps else ""), flush=True)

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    def evaluate():
        model.eval()
        cm = ConfusionMatrix(n_classes)
        with torch.no_grad():
            for s in range(0, len(val_x), args.val_batch_size):
                x, y = make_batch(val_x[s:s + args.val_batch_size],
                                  val_y[s:s + args.val_batch_size])
                with autocast():
                    out = model(x)["out"]
                cm.update(y, out.argmax(1))
        model.train()
        return cm

    out_file = open(args.out, "w") if args.out else None

    def emit(rec):
        if out_file:
            out_file.write(json.dumps(rec) + "\n")
            out_file.flush()

    emit({"event": "start", "config": {k: v for k, v in vars(args).items() if k != "self_check"},
          "classes": n_classes, "class_names": names, "train_images": n_train,
          "val_images": 0 if val_x is None else len(val_x), "parameters": n_params,
          "threads": torch.get_num_threads(), "torch_version": torch.__version__,
          **versions, "load_seconds": round(load_s, 3)})

    model.train()
    steps = images = 0
    train_s = 0.0
    last = rss_before_val = None
    for epoch in range(args.epochs):
        t_epoch = time.perf_counter()
        order = torch.randperm(n_train, generator=gen)
        loss_sum, epoch_steps, epoch_images, lr = 0.0, 0, 0, opt.param_groups[0]["lr"]
        stop = False
        for i in range(steps_per_epoch):
            idx = order[i * bs:(i + 1) * bs]
            flip = torch.rand(len(idx), generator=gen) < 0.5 if args.augment else None
            x, y = make_batch(train_x[idx], train_y[idx], flip)
            lr = opt.param_groups[0]["lr"]
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = criterion(model(x), y)
            loss.backward()
            opt.step()
            if args.lr_per_step:
                sched.step()
            l = loss.item()
            if not math.isfinite(l):
                print(f"error: loss became {l} at epoch {epoch + 1} step {i + 1}; lower --lr",
                      file=sys.stderr)
                return 1
            loss_sum += l
            epoch_steps += 1
            steps += 1
            images += len(idx)
            epoch_images += len(idx)
            if args.steps and steps >= args.steps:
                stop = True
                break
        epoch_s = time.perf_counter() - t_epoch
        train_s += epoch_s
        partial = epoch_steps < steps_per_epoch
        if not args.lr_per_step and not partial:
            sched.step()
        rec = {"event": "epoch", "epoch": epoch + 1, "steps": epoch_steps,
               "train_loss": loss_sum / epoch_steps, "val_miou": None, "pixel_accuracy": None,
               "seconds": round(epoch_s, 3),
               "images": epoch_images, "images_per_sec": epoch_images / epoch_s,
               "lr": lr, "partial": partial}
        if rss_before_val is None:
            rss_before_val = peak_rss_mb()  # the training loop's peak, before any validation
        val = "not validated"
        if val_x is not None and not (partial and args.skip_partial_val):
            t_eval = time.perf_counter()
            cm = evaluate()
            acc, iu, miou = cm.compute()
            rec.update(val_miou=none_if_nan(miou), pixel_accuracy=none_if_nan(acc),
                       per_class_iou=[none_if_nan(v) for v in iu], val_pixels=cm.pixels(),
                       eval_seconds=round(time.perf_counter() - t_eval, 3))
            val = f"val mIoU {miou:.2f}%, pixel accuracy {acc:.2f}%"
        last = rec
        print(f"epoch {epoch + 1}: train_loss {rec['train_loss']:.4f}, {val}, {epoch_s:.1f} s, "
              f"{rec['images_per_sec']:.1f} images/s, lr {lr:.6g}"
              + (f" (partial: {epoch_steps} of {steps_per_epoch} steps)" if partial else ""),
              flush=True)
        emit(rec)
        if stop:
            break
    end = {"event": "end", "steps": steps, "images": images, "train_seconds": round(train_s, 3),
           "images_per_sec": images / train_s if train_s > 0 else 0.0,
           "val_miou": last and last["val_miou"], "load_seconds": round(load_s, 3),
           "peak_rss_mb": round(peak_rss_mb(), 1),
           "peak_rss_before_val_mb": rss_before_val and round(rss_before_val, 1),
           "peak_rss_children_mb": round(peak_rss_mb(resource.RUSAGE_CHILDREN), 1),
           "threads": torch.get_num_threads(), "precision": args.precision,
           "torch_version": torch.__version__, **versions}
    emit(end)
    if out_file:
        out_file.close()
    print(f"Finished Training: {steps} steps, {images} images; training {train_s:.1f} s "
          f"({end['images_per_sec']:.1f} images/s; data decoding {load_s:.1f} s and validation "
          f"not included); peak RSS {end['peak_rss_mb']:.0f} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
