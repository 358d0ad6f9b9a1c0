#!/usr/bin/env python3
"""The PyTorch reference for hpcnet's ResNet training recipes: trains the same model with the
same recipe on the same data and validation split as `hpcnet train`, so the project can say
"PyTorch reaches X% with this recipe".

    python3 bench/pytorch_train_resnet.py --config configs/resnet20_cifar10_30ep.json \
        --data ../shared/data/cifar10-train-jpg.tar.gz --threads 2 --out /tmp/torch_r20.jsonl
    python3 bench/pytorch_train_resnet.py --config configs/resnet20_cifar10_30ep.json \
        --precision bf16 --seed 1                       # flags override the recipe file
    python3 bench/pytorch_train_resnet.py --config configs/resnet20_cifar10_30ep.json \
        --max-steps 5 --log-every 1 --threads 1         # smoke test (decoding the data dominates)
    python3 bench/pytorch_train_resnet.py --self-check  # asserts on the schedule and augmentation

Time: a ResNet-20 step at batch 128 took about 0.8 s on one thread of the 2-core development
machine while it was busy with other runs (fp32, either torch): about 5 minutes an epoch of 352
steps, hours for the 30-epoch recipe. Decoding the 50,000 JPEGs takes about 10 s.

Recipe options take hpcnet's defaults (include/hpcnet/train.h: epochs 2, batch 4, lr 0.001,
momentum 0.9, constant schedule, no validation split, ...), then the values of --config (one of
hpcnet's configs/*.json; keys as `hpcnet train`'s long options, "#..." keys are comments,
"workers", "dataset" and "data" are ignored, an unknown key is an error), then the flags given
here. "log_every" and "threads" in the file are used as defaults for --log-every/--threads.

Identical to hpcnet (read from the C++, not assumed):
  - model: bench/pytorch_resnet.py (resnet20/32/56 with option-A shortcuts and kaiming_normal_
    init, resnet18), created right after torch.manual_seed(seed);
  - data: the image-folder .tar.gz / unpacked folder / cifar-10-batches-bin that hpcnet reads,
    decoded once (bench/pytorch_tutorial.py's loaders), in hpcnet's dataset order;
  - split: --val-split N holds out exactly hpcnet's N images (bench/hpcnet_rng.py reproduces its
    fixed shuffle bit for bit); train and validation keep ascending index order;
  - transforms (src/task/classify/classify.cpp train_transform, src/data/transforms.cpp):
    [RandomCrop(32, padding=4) + RandomHorizontalFlip(0.5) with --augment] -> ToTensor -> Normalize(0.5, 0.5)
    -> [Cutout(N)]; crop padding is a zero pixel of the raw image (-1 after Normalize); Cutout
    centres an N x N square at a uniform pixel (cy, cx) in [0, 32)^2, rows cy - N//2 .. cy - N//2
    + N - 1 clipped to the image (so holes at the border are smaller), and writes 0 into the
    normalised tensor on all channels, on every image. Validation: ToTensor + Normalize only;
  - DataLoader (src/data/dataloader.cpp): a new shuffle every epoch, the last partial batch kept
    (drop_last=False), so ceil(n_train / batch) steps per epoch (352 for 45,000 at 128);
  - loss: CrossEntropyLoss(label_smoothing); optimizer: torch.optim.SGD(lr, momentum, dampening,
    weight_decay, nesterov) or AdamW(lr, betas, eps, weight_decay), whose rules hpcnet's fused
    kernels implement; gradients zeroed (set to None) before each step; optional
    clip_grad_norm_(max_norm) after backward;
  - learning rate: hpcnet's LrSchedule::lr_at (src/optim/lr_schedule.cpp) ported line by line
    and set on the optimizer before every step: warm-up LinearLR(0.1 -> 1) over warmup_epochs
    and multistep (milestones counted after the warm-up) / cosine (T = epochs - warmup_epochs)
    change per EPOCH; onecycle is OneCycleLR(max_lr=lr, pct_start 0.3, div_factor 25,
    final_div_factor 1e4, cos, two phases) per STEP over epochs x steps_per_epoch (an early stop
    by --max-steps does not shorten the schedule, as in hpcnet);
  - EMA (--ema-decay): timm ModelEmaV2 over the whole state dict (parameters and BN running
    stats lerped, num_batches_tracked copied) after every optimizer step, validation with the
    averaged weights, as hpcnet's optim::EMA;
  - logging: "[epoch, step] loss: x.xxx" every --log-every mini-batches of an epoch (the mean of
    those steps' losses); the epoch's train_loss is the unweighted mean of its step losses; an
    epoch's seconds are its training steps only (batch preparation included, validation not);
    validation in eval() under no_grad in batches of 500, accuracy in percent.

Not identical:
  - random streams: weight init, shuffle order and augmentation draws come from torch's RNG
    (seeded by --seed), not hpcnet's, so runs agree statistically, not digit for digit. With
    --hpcnet-streams the shuffle order (Rng(seed, 1000 + epoch)) and every crop/flip/cutout draw
    (Rng(mix_seed(seed, epoch, i))) are computed with hpcnet's RNG (bench/hpcnet_rng.py) as
    src/data/dataloader.cpp and transforms.cpp do (checked: batches bit-identical to
    libhpcnet's Compose::apply for crop, flip and Cutout 5/16, and the same epoch orders); only
    the initial weights then differ. Either way the first losses are above ln 10 = 2.3 (3-5 at
    step 1 for resnet20: kaiming_normal_ on the final linear layer), as in hpcnet's own runs;
  - --precision bf16: forward and loss under torch.autocast("cpu", dtype=torch.bfloat16) with
    fp32 master weights (as bench/pytorch_resnet.py). hpcnet's bf16 rounds only the convolutions'
    inputs and weights to bfloat16 (fp32 accumulation and activations); autocast also runs the
    linear layer in bf16 and hands bf16 activations to batch norm and ReLU. Validation runs with
    the same precision as training, as in hpcnet (its conv precision is a process setting);
  - --max-steps (hpcnet's --steps) stopping mid-epoch: that partial epoch is validated and
    logged here (hpcnet validates only whole epochs);
  - no checkpoints, resume, data-loading workers or several ranks.

Runs with Debian's python3-torch (1.13) and a current PyPI torch; torchvision is not needed.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpcnet_rng  # noqa: E402
from pytorch_resnet import MODELS  # noqa: E402
from pytorch_tutorial import DEFAULT_DATA, load_dataset_or_report  # noqa: E402

# ---------------------------------------------------------------------------------------------
# The recipe: hpcnet's TrainConfig defaults (include/hpcnet/train.h) and its option names.
# ---------------------------------------------------------------------------------------------

RECIPE_DEFAULTS = {
    "model": "lenet",  # hpcnet's default; this script knows only the ResNets (see MODELS)
    "epochs": 2,
    "batch_size": 4,
    "lr": 0.001,
    "momentum": 0.9,
    "dampening": 0.0,
    "weight_decay": 0.0,
    "nesterov": False,
    "lr_schedule": "constant",
    "milestones": [],
    "lr_gamma": 0.1,
    "lr_min": 0.0,
    "warmup_epochs": 0,
    "label_smoothing": 0.0,
    "optimizer": "sgd",
    "beta1": 0.9,
    "beta2": 0.999,
    "adam_eps": 1e-8,
    "clip_grad_norm": 0.0,
    "ema_decay": 0.0,
    "cutout": 0,
    "augment": False,
    "val_split": 0,
    "seed": 0,
    "precision": "fp32",
}
# Config-file keys read as defaults for this script's own flags.
RUNTIME_KEYS = {"log_every": 2000, "threads": None, "steps": 0}
# hpcnet options that mean nothing here (data loading threads, which dataset reader).
IGNORED_KEYS = {"workers", "dataset", "data"}


def _to_bool(v, key):
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "1", "yes", "on", "false", "0", "no",
                                                    "off"):
        return v.strip().lower() in ("true", "1", "yes", "on")
    raise ValueError(f"'{key}' must be true or false, got {v!r}")


def _to_int(v, key):
    if isinstance(v, bool):
        raise ValueError(f"'{key}' must be an integer, got {v!r}")
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, (int, str)):
        try:
            return int(v)
        except ValueError:
            pass
    raise ValueError(f"'{key}' must be an integer, got {v!r}")


def _to_milestones(v, key="milestones"):
    """"91,136", [91, 136], 91 or "" -> [91, 136]."""
    if isinstance(v, str):
        parts = [p.strip() for p in v.split(",") if p.strip()]
    elif isinstance(v, (list, tuple)):
        parts = list(v)
    else:
        parts = [v]
    return [_to_int(p, key) for p in parts]


def _coerce(key, v):
    d = RECIPE_DEFAULTS.get(key, RUNTIME_KEYS.get(key))
    if key == "milestones":
        return _to_milestones(v)
    if key == "threads":
        return None if v is None else _to_int(v, key)
    if isinstance(d, bool):
        return _to_bool(v, key)
    if isinstance(d, int):
        return _to_int(v, key)
    if isinstance(d, float):
        if isinstance(v, bool):
            raise ValueError(f"'{key}' must be a number, got {v!r}")
        return float(v)
    return str(v)


def read_config(path):
    """hpcnet's JSON recipe -> {key: value} with keys in snake_case (hpcnet accepts both)."""
    with open(path) as f:
        try:
            j = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON ({e})") from None
    if not isinstance(j, dict):
        raise ValueError("a config file holds one JSON object")
    out = {}
    for key, value in j.items():
        if key.startswith("#"):
            continue
        k = key.replace("-", "_")
        if k in IGNORED_KEYS:
            continue
        if k not in RECIPE_DEFAULTS and k not in RUNTIME_KEYS:
            raise ValueError(f"unknown key '{key}' (known: "
                             f"{', '.join(sorted(set(RECIPE_DEFAULTS) | set(RUNTIME_KEYS)))}; "
                             f"ignored: {', '.join(sorted(IGNORED_KEYS))})")
        out[k] = _coerce(k, value)
    return out


# ---------------------------------------------------------------------------------------------
# The learning rate: src/optim/lr_schedule.cpp, LrSchedule::lr_at, line by line.
# ---------------------------------------------------------------------------------------------

WARMUP_START_FACTOR = 0.1  # LrSchedule::warmup_start_factor
ONECYCLE_PCT_START, ONECYCLE_DIV, ONECYCLE_FINAL_DIV = 0.3, 25.0, 1e4  # LrSchedule defaults


def lr_at(r, step, steps_per_epoch, epochs):
    """The learning rate of global step `step` (0-based); r: the recipe dict."""
    lr, kind = r["lr"], r["lr_schedule"]
    steps_per_epoch = max(steps_per_epoch, 1)
    if kind == "onecycle":
        total = float(max(epochs * steps_per_epoch, 2))
        initial = lr / ONECYCLE_DIV
        min_lr = initial / ONECYCLE_FINAL_DIV
        end1, end2 = ONECYCLE_PCT_START * total - 1, total - 1

        def cos_anneal(start, end, pct):
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

        s = float(step)
        if s <= end1:
            return cos_anneal(initial, lr, s / end1)
        return cos_anneal(lr, min_lr, min(1.0, (s - end1) / (end2 - end1)))
    epoch = step // steps_per_epoch
    warmup = r["warmup_epochs"]
    if epoch < warmup:
        f = WARMUP_START_FACTOR + (1.0 - WARMUP_START_FACTOR) * epoch / warmup
        return lr * f
    epoch -= warmup
    if kind == "multistep":
        passed = sum(1 for m in r["milestones"] if m <= epoch)
        return lr * math.pow(r["lr_gamma"], float(passed))
    if kind == "cosine":
        t_max = float(max(epochs - warmup, 1))
        eta_min = r["lr_min"]
        return eta_min + (lr - eta_min) * (1 + math.cos(math.pi * epoch / t_max)) / 2
    return lr


def validate_recipe(r):
    """hpcnet's checks (src/train/recipe.cpp validate, LrSchedule::validate); returns an error or
    None."""
    checks = [
        (r["model"] in MODELS, f"model '{r['model']}' is not one of {', '.join(sorted(MODELS))}"
         + (" (for lenet use bench/pytorch_tutorial.py)" if r["model"] == "lenet" else "")),
        (r["epochs"] >= 1, "--epochs must be at least 1"),
        (r["batch_size"] >= 1, "--batch-size must be at least 1"),
        (math.isfinite(r["lr"]) and r["lr"] >= 0, "--lr must be a non-negative number"),
        (0 <= r["momentum"] <= 1, "--momentum must be in [0, 1]"),
        (0 <= r["dampening"] <= 1, "--dampening must be in [0, 1]"),
        (r["weight_decay"] >= 0, "--weight-decay must be >= 0"),
        (r["optimizer"] != "sgd" or not r["nesterov"]
         or (r["momentum"] > 0 and r["dampening"] == 0),
         "nesterov momentum requires a momentum and zero dampening"),
        (r["lr_schedule"] in ("constant", "multistep", "cosine", "onecycle"),
         f"unknown learning-rate schedule '{r['lr_schedule']}' "
         "(known: constant, multistep, cosine, onecycle)"),
        (r["lr_gamma"] > 0, "--lr-gamma must be > 0"),
        (r["lr_min"] >= 0, "--lr-min must be >= 0"),
        (r["warmup_epochs"] >= 0, "--warmup-epochs must be >= 0"),
        (r["lr_schedule"] != "onecycle" or r["warmup_epochs"] == 0,
         "onecycle has its own warm-up; drop --warmup-epochs"),
        (all(m > 0 for m in r["milestones"])
         and all(b > a for a, b in zip(r["milestones"], r["milestones"][1:])),
         "--milestones must be increasing positive epochs"),
        (0 <= r["label_smoothing"] <= 1, "--label-smoothing must be in [0, 1]"),
        (r["optimizer"] in ("sgd", "adamw"), "--optimizer must be sgd or adamw"),
        (0 <= r["beta1"] < 1 and 0 <= r["beta2"] < 1, "--beta1 and --beta2 must be in [0, 1)"),
        (r["adam_eps"] >= 0, "--adam-eps must be >= 0"),
        (r["clip_grad_norm"] >= 0, "--clip-grad-norm must be >= 0 (0 = off)"),
        (r["ema_decay"] == 0 or 0 < r["ema_decay"] < 1,
         "--ema-decay must be in (0, 1), e.g. 0.999 (0 = off)"),
        (0 <= r["cutout"] <= 32, "--cutout must be in [0, 32] pixels (0 = off)"),
        (r["val_split"] >= 0, "--val-split must be >= 0"),
        (r["precision"] in ("fp32", "bf16"), "--precision must be fp32 or bf16"),
        (0 <= r["seed"] < 2 ** 64, "--seed must be in [0, 2^64)"),
    ]
    for ok, msg in checks:
        if not ok:
            return msg
    return None


# ---------------------------------------------------------------------------------------------
# Batches: vectorised transforms on a uint8 (B, H, W, 3) batch -> float (B, 3, 32, 32).
# ---------------------------------------------------------------------------------------------

CROP, PAD = 32, 4


class Augmentation:
    """Per-image draws of hpcnet's train transform for one batch: crop offsets top/left in
    [0, 2 * PAD], flip, cutout centre cy/cx in [0, 32). Each is a (B,) int64/bool tensor or
    None when that transform is off."""

    def __init__(self, top=None, left=None, flip=None, cy=None, cx=None):
        self.top, self.left, self.flip, self.cy, self.cx = top, left, flip, cy, cx


def draws_torch(b, augment, cutout, gen=None):
    a = Augmentation()
    if augment:
        a.top = torch.randint(0, 2 * PAD + 1, (b,), generator=gen)
        a.left = torch.randint(0, 2 * PAD + 1, (b,), generator=gen)
        a.flip = torch.rand(b, generator=gen) < 0.5
    if cutout:
        a.cy = torch.randint(0, CROP, (b,), generator=gen)
        a.cx = torch.randint(0, CROP, (b,), generator=gen)
    return a


def draws_hpcnet(indices, seed, epoch, augment, cutout):
    """The draws Compose::apply makes for sample i of epoch e: Rng(mix_seed(seed, e, i), 0), in
    transform order: RandomCrop randint(9) top, randint(9) left; RandomHorizontalFlip
    uniform() < 0.5; Cutout randint(32) cy, randint(32) cx."""
    top, left, flip, cy, cx = [], [], [], [], []
    for i in indices:
        rng = hpcnet_rng.Rng(hpcnet_rng.mix_seed(seed, epoch, int(i)), 0)
        if augment:
            top.append(rng.randint(2 * PAD + 1))
            left.append(rng.randint(2 * PAD + 1))
            flip.append(rng.uniform() < 0.5)
        if cutout:
            cy.append(rng.randint(CROP))
            cx.append(rng.randint(CROP))
    a = Augmentation()
    if augment:
        a.top, a.left = torch.tensor(top), torch.tensor(left)
        a.flip = torch.tensor(flip, dtype=torch.bool)
    if cutout:
        a.cy, a.cx = torch.tensor(cy), torch.tensor(cx)
    return a


def to_tensor_normalize(x):
    """uint8 (B, H, W, 3) -> float32 (B, 3, H, W), (v / 255 - 0.5) / 0.5 in float32 as
    ToTensor + Normalize((0.5,)*3, (0.5,)*3) compute it (and hpcnet's lookup table)."""
    return x.permute(0, 3, 1, 2).contiguous().float().div_(255).sub_(0.5).div_(0.5)


def make_batch(x, aug=None, cutout=0):
    """x: uint8 (B, 32, 32, 3). aug: Augmentation or None (validation)."""
    b, h, w, _ = x.shape
    if aug is not None and aug.top is not None:
        # RandomCrop(32, padding=4) on the zero-padded raw image, then a horizontal flip of the
        # crop, as one gather.
        padded = torch.zeros((b, h + 2 * PAD, w + 2 * PAD, 3), dtype=x.dtype)
        padded[:, PAD:PAD + h, PAD:PAD + w] = x
        ar = torch.arange(CROP)
        rows = aug.top[:, None] + ar  # (B, 32)
        cols = aug.left[:, None] + torch.where(aug.flip[:, None], CROP - 1 - ar, ar)  # (B, 32)
        x = padded[torch.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]]
    out = to_tensor_normalize(x)
    if cutout and aug is not None:
        hh, ww = out.shape[2], out.shape[3]
        y0 = (aug.cy - cutout // 2).clamp(min=0)
        y1 = (aug.cy - cutout // 2 + cutout).clamp(max=hh)
        x0 = (aug.cx - cutout // 2).clamp(min=0)
        x1 = (aug.cx - cutout // 2 + cutout).clamp(max=ww)
        ys, xs = torch.arange(hh), torch.arange(ww)
        in_rows = (ys[None, :] >= y0[:, None]) & (ys[None, :] < y1[:, None])  # (B, H)
        in_cols = (xs[None, :] >= x0[:, None]) & (xs[None, :] < x1[:, None])  # (B, W)
        out.masked_fill_((in_rows[:, :, None] & in_cols[:, None, :])[:, None], 0.0)
    return out


# ---------------------------------------------------------------------------------------------
# EMA of the weights (hpcnet's optim::EMA, timm's ModelEmaV2).
# ---------------------------------------------------------------------------------------------

class EMA:
    def __init__(self, model, decay):
        self.decay = decay
        self.avg = [t.detach().clone() for t in model.state_dict().values()]

    @torch.no_grad()
    def update(self, model):
        for a, t in zip(self.avg, model.state_dict().values()):
            if a.is_floating_point():
                a.lerp_(t, 1.0 - self.decay)
            else:
                a.copy_(t)

    @torch.no_grad()
    def swap(self, model):
        """Swaps the averages into the model; calling it again restores the trained weights."""
        for a, t in zip(self.avg, model.state_dict().values()):
            tmp = t.clone()
            t.copy_(a)
            a.copy_(tmp)


# ---------------------------------------------------------------------------------------------
# Self-check: the schedule against hand-computed values and torch's OneCycleLR, the transforms
# against hand-made cases.
# ---------------------------------------------------------------------------------------------

def self_check():
    def close(a, b, rel=1e-12):
        assert abs(a - b) <= rel * max(abs(a), abs(b), 1e-300), (a, b)

    base = dict(RECIPE_DEFAULTS)
    # configs/resnet20_cifar10_30ep.json: lr 0.1, 1 warm-up epoch, cosine over 29, 352 steps.
    r = dict(base, lr=0.1, lr_schedule="cosine", warmup_epochs=1)
    close(lr_at(r, 0, 352, 30), 0.01)  # warm-up epoch: lr * 0.1
    close(lr_at(r, 351, 352, 30), 0.01)  # stepped per epoch: still 0.01 at the epoch's end
    close(lr_at(r, 352, 352, 30), 0.1)  # cosine epoch 0
    close(lr_at(r, 2 * 352, 352, 30), 0.05 * (1 + math.cos(math.pi / 29)))  # 0.099707...
    close(lr_at(r, 2 * 352, 352, 30), 0.09970689785771798)
    close(lr_at(r, 30 * 352 - 1, 352, 30), 0.05 * (1 + math.cos(28 * math.pi / 29)))
    close(lr_at(r, 30 * 352 - 1, 352, 30), 0.00029310214228202)
    close(lr_at(dict(r, lr_min=0.001), 15 * 352, 352, 30), 0.001 + 0.099 * 0.5 *
          (1 + math.cos(14 * math.pi / 29)))
    # Warm-up over 4 epochs: 0.1, 0.325, 0.55, 0.775 of lr, then the schedule's epoch 0.
    r4 = dict(base, lr=0.2, lr_schedule="constant", warmup_epochs=4)
    for e, f in enumerate([0.1, 0.325, 0.55, 0.775, 1.0, 1.0]):
        close(lr_at(r4, e * 10 + 3, 10, 6), 0.2 * f)
    # configs/resnet20_cifar10.json: multistep 91,136, gamma 0.1, no warm-up.
    m = dict(base, lr=0.1, lr_schedule="multistep", milestones=[91, 136], lr_gamma=0.1)
    close(lr_at(m, 91 * 352 - 1, 352, 182), 0.1)
    close(lr_at(m, 91 * 352, 352, 182), 0.01)
    close(lr_at(m, 136 * 352 - 1, 352, 182), 0.01)
    close(lr_at(m, 136 * 352, 352, 182), 0.001)
    # Milestones count epochs after the warm-up (SequentialLR).
    close(lr_at(dict(m, warmup_epochs=2), 92 * 352, 352, 182), 0.1)
    close(lr_at(dict(m, warmup_epochs=2), 93 * 352, 352, 182), 0.01)
    # onecycle, hand values: starts at lr/25, peaks at step 0.3 * total - 1, ends at lr/25/1e4.
    o = dict(base, lr=0.1, lr_schedule="onecycle")
    close(lr_at(o, 0, 100, 10), 0.004)
    close(lr_at(o, 299, 100, 10), 0.1)
    close(lr_at(o, 999, 100, 10), 4e-7)
    close(lr_at(o, 149, 100, 10), 0.004 + 0.096 * 0.5 * (1 - math.cos(math.pi * 149 / 299)))
    # ... and against torch.optim.lr_scheduler.OneCycleLR, every step.
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=1000,
                                                cycle_momentum=False)
    for s in range(1000):
        close(lr_at(o, s, 100, 10), opt.param_groups[0]["lr"], rel=1e-9)
        opt.step()
        sched.step()
    # constant
    close(lr_at(dict(base, lr=0.05), 12345, 352, 30), 0.05)

    # Transforms on a 32x32 image whose pixel (y, x) holds y + 32 * (x % 8) in every channel.
    img = np.zeros((2, 32, 32, 3), dtype=np.uint8)
    for y in range(32):
        for x in range(32):
            img[:, y, x, :] = y + 32 * (x % 8)
    x = torch.from_numpy(img)
    ref = to_tensor_normalize(x)
    assert ref.shape == (2, 3, 32, 32) and ref.dtype == torch.float32
    assert torch.equal(ref[0, 1, 5, 9], (torch.tensor(5 + 32.0) / 255 - 0.5) / 0.5)
    # Crop at offset (4, 4) without flip is the identity.
    a = Augmentation(top=torch.tensor([4, 4]), left=torch.tensor([4, 4]),
                     flip=torch.tensor([False, True]))
    out = make_batch(x, a)
    assert torch.equal(out[0], ref[0])
    assert torch.equal(out[1], ref[1].flip(-1))  # flip of the crop
    # Crop at (0, 8): 4 rows of padding on top, 4 columns on the right, padding = -1.
    a = Augmentation(top=torch.tensor([0, 8]), left=torch.tensor([8, 0]),
                     flip=torch.tensor([False, True]))
    out = make_batch(x, a)
    assert torch.all(out[0, :, :4, :] == -1) and torch.all(out[0, :, :, 28:] == -1)
    assert torch.equal(out[0, :, 4:, :28], ref[0, :, :28, 4:])
    # (8, 0) then flip: image rows 4..31, columns 0..27 of the padded frame, mirrored.
    crop = torch.full((3, 32, 32), -1.0)
    crop[:, :28, 4:] = ref[1, :, 4:, :28]
    assert torch.equal(out[1], crop.flip(-1))
    # Cutout 16 centred at (0, 31): rows 0..7, columns 23..31 set to 0, the rest untouched.
    a = Augmentation(top=torch.tensor([4, 4]), left=torch.tensor([4, 4]),
                     flip=torch.tensor([False, False]), cy=torch.tensor([0, 10]),
                     cx=torch.tensor([31, 10]))
    out = make_batch(x, a, cutout=16)
    hole = torch.zeros(32, 32, dtype=torch.bool)
    hole[0:8, 23:32] = True
    assert torch.all(out[0][:, hole] == 0) and torch.equal(out[0][:, ~hole], ref[0][:, ~hole])
    hole = torch.zeros(32, 32, dtype=torch.bool)
    hole[2:18, 2:18] = True
    assert torch.all(out[1][:, hole] == 0) and torch.equal(out[1][:, ~hole], ref[1][:, ~hole])
    # Odd size 5 at (10, 10): rows/columns 8..12.
    out = make_batch(x, Augmentation(cy=torch.tensor([10, 10]), cx=torch.tensor([10, 10])),
                     cutout=5)
    assert int((out[0] == 0).all(0).sum()) == 25 and torch.all(out[0, :, 8:13, 8:13] == 0)
    # hpcnet's draws: a pure function of (seed, epoch, index), in range.
    d1 = draws_hpcnet(range(1000), 0, 3, True, 16)
    d2 = draws_hpcnet(range(1000), 0, 3, True, 16)
    assert torch.equal(d1.top, d2.top) and torch.equal(d1.cx, d2.cx)
    assert int(d1.top.min()) == 0 and int(d1.top.max()) == 8 and int(d1.cy.max()) == 31
    assert 400 < int(d1.flip.sum()) < 600
    print("self-check passed: learning-rate schedule (hand values, torch OneCycleLR), crop, "
          "flip, normalize, cutout")
    return 0


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="an hpcnet recipe (configs/*.json); flags given here win")
    p.add_argument("--data", default=DEFAULT_DATA,
                   help="image-folder .tar/.tar.gz, an unpacked image folder, or a "
                        "cifar-10-batches-bin folder (default: %(default)s)")
    g = p.add_argument_group("recipe (defaults: hpcnet's, then --config)")
    g.add_argument("--model", choices=sorted(MODELS))
    g.add_argument("--epochs", type=int)
    g.add_argument("--batch-size", type=int)
    g.add_argument("--lr", type=float, help="learning rate (the peak, with a schedule)")
    g.add_argument("--momentum", type=float)
    g.add_argument("--dampening", type=float)
    g.add_argument("--weight-decay", type=float, help="L2 for sgd, decoupled for adamw")
    g.add_argument("--nesterov", action=argparse.BooleanOptionalAction)
    g.add_argument("--lr-schedule", choices=["constant", "multistep", "cosine", "onecycle"])
    g.add_argument("--milestones", type=_to_milestones, help="multistep epochs, e.g. 91,136")
    g.add_argument("--lr-gamma", type=float)
    g.add_argument("--lr-min", type=float, help="cosine floor")
    g.add_argument("--warmup-epochs", type=int, help="linear warm-up from lr/10, per epoch")
    g.add_argument("--label-smoothing", type=float)
    g.add_argument("--optimizer", choices=["sgd", "adamw"])
    g.add_argument("--beta1", type=float)
    g.add_argument("--beta2", type=float)
    g.add_argument("--adam-eps", type=float)
    g.add_argument("--clip-grad-norm", type=float, help="0 = off")
    g.add_argument("--ema-decay", type=float, help="EMA of the weights, e.g. 0.999 (0 = off)")
    g.add_argument("--cutout", type=int, help="Cutout square in pixels (0 = off)")
    g.add_argument("--augment", action=argparse.BooleanOptionalAction,
                   help="RandomCrop(32, padding=4) + RandomHorizontalFlip")
    g.add_argument("--val-split", type=int, help="hold out hpcnet's N images for validation")
    g.add_argument("--seed", type=int, help="torch.manual_seed (init, shuffle, augmentation)")
    g.add_argument("--precision", choices=["fp32", "bf16"])
    r = p.add_argument_group("this run")
    r.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice)")
    r.add_argument("--max-steps", type=int,
                   help="stop after this many steps in all (smoke tests; 0 = no limit)")
    r.add_argument("--log-every", type=int, help="mini-batches per loss line (default 2000)")
    r.add_argument("--out", help="write one JSON line per epoch to this file (replaced)")
    r.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    r.add_argument("--hpcnet-streams", action="store_true",
                   help="shuffle and augment with hpcnet's RNG (its exact order and draws)")
    r.add_argument("--self-check", action="store_true",
                   help="run the built-in asserts (schedule, transforms) and exit")
    return p, p.parse_args(argv)


def build_recipe(p, args):
    r = dict(RECIPE_DEFAULTS)
    runtime = dict(RUNTIME_KEYS)
    if args.config:
        try:
            cfg = read_config(args.config)
        except (OSError, ValueError) as e:
            p.error(f"--config {args.config}: {e}")
        for k, v in cfg.items():
            (r if k in r else runtime)[k] = v
    for k in r:
        v = getattr(args, k, None)
        if v is not None:
            r[k] = v
    if args.threads is not None:
        runtime["threads"] = args.threads
    if args.max_steps is not None:
        runtime["steps"] = args.max_steps
    if args.log_every is not None:
        runtime["log_every"] = args.log_every
    err = validate_recipe(r)
    if err:
        p.error(err)
    if runtime["log_every"] < 1:
        p.error("--log-every must be at least 1")
    if runtime["steps"] < 0:
        p.error("--max-steps must be >= 0")
    if runtime["threads"] is not None and runtime["threads"] < 1:
        p.error("--threads must be >= 1")
    return r, runtime


def main(argv=None):
    p, args = parse_args(argv)
    if args.self_check:
        if args.threads is not None and args.threads >= 1:
            torch.set_num_threads(args.threads)
        return self_check()
    r, rt = build_recipe(p, args)
    if rt["threads"] is not None:
        torch.set_num_threads(rt["threads"])
    device = torch.device(args.device)
    bf16 = r["precision"] == "bf16"
    if bf16 and device.type != "cpu":
        p.error("--precision bf16 is torch.autocast('cpu', bfloat16) here; use --device cpu")

    t_load = time.perf_counter()
    loaded = load_dataset_or_report(args.data)
    if loaded is None:
        return 2
    images, labels, classes = loaded
    n_total = len(labels)
    if images.shape[1:] != (32, 32, 3):
        print(f"error: --data {args.data}: images are {images.shape[1:]}, the recipes need "
              f"32x32 RGB", file=sys.stderr)
        return 2
    if r["val_split"] >= n_total:
        print(f"error: --val-split {r['val_split']} leaves no training images ({n_total} in "
              f"the data)", file=sys.stderr)
        return 2
    train_idx, val_idx = hpcnet_rng.split_train_val(n_total, r["val_split"])
    images_t, labels_t = torch.from_numpy(images), torch.from_numpy(labels)
    train_x, train_y = images_t[train_idx], labels_t[train_idx]  # hpcnet's Subset order
    val_x, val_y = images_t[val_idx], labels_t[val_idx]
    del images, images_t
    load_s = time.perf_counter() - t_load
    n_train, bs = len(train_idx), r["batch_size"]
    steps_per_epoch = (n_train + bs - 1) // bs  # drop_last=False
    print(f"data: {n_total} images 32x32 from {args.data}, {len(classes)} classes; train "
          f"{n_train}, validation {len(val_idx)} (hpcnet's split); decoded in {load_s:.1f} s")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device {device}, "
          f"precision {r['precision']}, streams {'hpcnet' if args.hpcnet_streams else 'torch'}")
    print("recipe: " + json.dumps(r, sort_keys=True))

    torch.manual_seed(r["seed"])
    model = MODELS[r["model"]](num_classes=len(classes)).to(device)
    criterion = nn.CrossEntropyLoss(label_smoothing=r["label_smoothing"])
    if r["optimizer"] == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=r["lr"], betas=(r["beta1"], r["beta2"]),
                                eps=r["adam_eps"], weight_decay=r["weight_decay"])
    else:
        opt = torch.optim.SGD(model.parameters(), lr=r["lr"], momentum=r["momentum"],
                              dampening=r["dampening"], weight_decay=r["weight_decay"],
                              nesterov=r["nesterov"])
    ema = EMA(model, r["ema_decay"]) if r["ema_decay"] > 0 else None
    print(f"model: {r['model']}, {sum(q.numel() for q in model.parameters())} parameters; "
          f"{steps_per_epoch} steps per epoch x {r['epochs']} epochs")

    def autocast():  # a no-op context in fp32
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    def forward_loss(x, y):
        with autocast():
            return criterion(model(x), y)

    def evaluate():
        if len(val_y) == 0:
            return None
        model.eval()
        correct = 0
        with torch.no_grad():
            for s in range(0, len(val_y), 500):
                x = make_batch(val_x[s:s + 500]).to(device)
                with autocast():
                    out = model(x)
                correct += int((out.argmax(1).cpu() == val_y[s:s + 500]).sum())
        model.train()
        return 100.0 * correct / len(val_y)

    out_file = open(args.out, "w") if args.out else None
    model.train()
    steps, val_accuracy, train_s = 0, None, 0.0
    t_start = time.perf_counter()
    done = False
    for epoch in range(r["epochs"]):
        t_epoch = time.perf_counter()
        if args.hpcnet_streams:
            order = torch.tensor(hpcnet_rng.random_permutation(
                n_train, hpcnet_rng.Rng(r["seed"], 1000 + epoch)))
        else:
            order = torch.randperm(n_train)
        running, epoch_loss, epoch_steps, lr = 0.0, 0.0, 0, None
        for i in range(steps_per_epoch):
            idx = order[i * bs:(i + 1) * bs]
            aug = None
            if r["augment"] or r["cutout"]:
                if args.hpcnet_streams:
                    aug = draws_hpcnet(idx.tolist(), r["seed"], epoch, r["augment"],
                                       r["cutout"])
                else:
                    aug = draws_torch(len(idx), r["augment"], r["cutout"])
            x = make_batch(train_x[idx], aug, r["cutout"]).to(device)
            y = train_y[idx].to(device)
            lr = lr_at(r, steps, steps_per_epoch, r["epochs"])
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
            loss = forward_loss(x, y)
            loss.backward()
            if r["clip_grad_norm"] > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), r["clip_grad_norm"])
            opt.step()
            if ema:
                ema.update(model)
            l = loss.item()
            if not math.isfinite(l):
                print(f"error: loss became {l} at epoch {epoch + 1} step {i + 1}; lower --lr",
                      file=sys.stderr)
                return 1
            running += l
            epoch_loss += l
            epoch_steps += 1
            steps += 1
            if (i + 1) % rt["log_every"] == 0:
                print(f"[{epoch + 1}, {i + 1:5d}] loss: {running / rt['log_every']:.3f}  "
                      f"(lr {lr:.6g})", flush=True)
                running = 0.0
            if rt["steps"] and steps >= rt["steps"]:
                done = True
                break
        epoch_s = time.perf_counter() - t_epoch
        train_s += epoch_s
        if ema:
            ema.swap(model)
        t_eval = time.perf_counter()
        val_accuracy = evaluate()
        eval_s = time.perf_counter() - t_eval
        if ema:
            ema.swap(model)
        train_loss = epoch_loss / epoch_steps
        partial = epoch_steps < steps_per_epoch
        acc = "n/a" if val_accuracy is None else f"{val_accuracy:.2f}%"
        print(f"epoch {epoch + 1}: train_loss {train_loss:.4f}, val_accuracy {acc}, "
              f"{epoch_s:.1f} s" + (f" (partial: {epoch_steps} of {steps_per_epoch} steps)"
                                    if partial else ""), flush=True)
        if out_file:
            rec = {"epoch": epoch + 1, "seconds": round(epoch_s, 3),
                   "train_loss": train_loss,
                   "val_accuracy": None if val_accuracy is None else round(val_accuracy, 2),
                   "lr": lr, "steps": epoch_steps, "eval_seconds": round(eval_s, 3),
                   "model": r["model"], "precision": r["precision"], "seed": r["seed"],
                   "torch_version": torch.__version__, "threads": torch.get_num_threads()}
            if partial:
                rec["partial"] = True
            out_file.write(json.dumps(rec) + "\n")
            out_file.flush()
        if done:
            break
    total_s = time.perf_counter() - t_start
    if out_file:
        out_file.close()
    acc = "n/a (no --val-split)" if val_accuracy is None else f"{val_accuracy:.2f}%"
    print(f"Finished Training: {steps} steps, final val_accuracy {acc}; training "
          f"{train_s:.1f} s, total {total_s:.1f} s (validation included, data decoding "
          f"{load_s:.1f} s not)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
