#!/usr/bin/env python3
"""Writes hpcnet's golden fixtures from PyTorch: the CIFAR-10 tutorial Net (forward, loss,
gradients, and parameters after 10 steps of three SGD variants) in float32, and single ops in
float64 with their input gradients. Run by hand from the repository root:

    /usr/bin/python3 tests/golden/make_golden.py lenet      # lenet_golden.safetensors only
    YOLO_OFFLINE=1 PYTHONPATH=/tmp/smp-pkgs /tmp/ref/bin/python tests/golden/make_golden.py ops

The ops fixture keeps the entries it already holds byte for byte when they agree with the
recomputed ones to 1e-12 (keep_stored; `--fresh` rewrites them), so appending an op changes no
existing entry on a machine whose BLAS rounds differently.

Needs torch >= 1.13, and ultralytics for the ops fixture's detection-loss entries (their
reference: bbox_iou, DFLoss, DFL); the safetensors writer is below, so the `safetensors` package is
not needed. Output is deterministic for a given torch version; see README.md.
"""
import functools
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

OUT_DIR = os.path.dirname(os.path.abspath(__file__))
SEED = 0

# ---- a minimal safetensors writer (the Hugging Face format) ----

_DTYPE_CODES = {
    torch.float32: "F32",
    torch.float64: "F64",
    torch.float16: "F16",
    torch.int64: "I64",
}


def name_key(name):
    """The formula weights' per-tensor key: sum((j + 1) * byte_j of NAME) mod 9973."""
    return sum((j + 1) * b for j, b in enumerate(name.encode("ascii"))) % 9973


def weight_values(name, shape):
    """The formula weights of make_golden_unet.py and make_golden_deeplab.py (and of
    tests/support/test_util.h's fill_from_formula): v_i = sin(0.7 i + 1.3 name_key + 0.5) in float64, then
    conv weights v sqrt(3 / fan_in), BatchNorm weight 1 + 0.2 v, running_mean 0.1 v, running_var
    1 + 0.5 |v|, biases 0.1 v, num_batches_tracked 0; rounded to float32."""
    import numpy as np
    n = int(np.prod(shape)) if len(shape) else 1
    v = np.sin(0.7 * np.arange(n, dtype=np.float64) + 1.3 * name_key(name) + 0.5)
    if name.endswith("num_batches_tracked"):
        return torch.zeros(shape, dtype=torch.int64)
    if name.endswith("running_mean"):
        out = 0.1 * v
    elif name.endswith("running_var"):
        out = 1 + 0.5 * np.abs(v)
    elif name.endswith("weight") and len(shape) == 4:
        out = v * math.sqrt(3.0 / (shape[1] * shape[2] * shape[3]))
    elif name.endswith("weight"):
        out = 1 + 0.2 * v
    else:
        out = 0.1 * v
    return torch.from_numpy(out.astype(np.float32).reshape(shape))


def save_safetensors(path, tensors, metadata):
    """tensors: list of (name, tensor) written in this order; metadata: dict of str -> str.
    Layout: u64 little-endian header length N, N bytes of JSON padded with spaces to a multiple
    of 8, then each tensor's little-endian bytes with no gaps."""
    assert sys.byteorder == "little", "this writer copies native bytes; it needs a little-endian host"
    header = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}}
    blobs, offset = [], 0
    for name, t in tensors:
        assert name not in header, f"duplicate name {name}"
        t = t.detach().cpu().contiguous()
        data = t.numpy().tobytes()
        header[name] = {
            "dtype": _DTYPE_CODES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
    return os.path.getsize(path)


def load_safetensors(path, metadata=None):
    """The entries of a safetensors file written by save_safetensors: {name: tensor} in file
    order; its __metadata__ goes into the dict metadata when given."""
    import numpy as np
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    stored_meta = header.pop("__metadata__", {})
    if metadata is not None:
        metadata.update(stored_meta)
    codes = {v: k for k, v in _DTYPE_CODES.items()}
    out = {}
    for name, h in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        a, b = h["data_offsets"]
        dtype = codes[h["dtype"]]
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        t = torch.from_numpy(np.frombuffer(data[8 + n + a:8 + n + b], dtype=np_dtype).copy())
        out[name] = t.reshape(h["shape"])
    return out


def keep_stored(path, entries, meta, tol=1e-12):
    """entries with those already in the file at path replaced by the stored tensors, so that
    appending entries leaves the existing ones byte for byte; the file's metadata values replace
    those of meta's keys (they describe the kept entries). A stored entry is kept only when it
    has the recomputed one's dtype and shape and agrees with it to tol (1 + |stored|): oneDNN and
    MKL round float64 convolutions and matrix products differently on other CPUs (~1e-14), and the
    tests compare to 1e-10. Prints how many were kept and the largest difference."""
    if not os.path.exists(path):
        return entries
    stored_meta = {}
    stored = load_safetensors(path, stored_meta)
    meta.update(stored_meta)
    out, kept, worst = [], 0, 0.0
    for name, t in entries:
        old = stored.get(name)
        if old is None:
            out.append((name, t))
            continue
        t = t.detach().cpu()
        assert old.dtype == t.dtype and old.shape == t.shape, f"{name}: dtype or shape changed"
        diff = (t - old).abs() if t.is_floating_point() else (t != old).to(torch.float64)
        bound = tol * (1 + old.abs()) if t.is_floating_point() else torch.zeros_like(diff)
        nan_same = torch.isnan(t) & torch.isnan(old) if t.is_floating_point() else False
        ok = (diff <= bound) | nan_same
        assert bool(ok.all()), f"{name} differs from the stored entry by {diff.max().item():.3g}"
        if t.is_floating_point() and diff.numel():
            worst = max(worst, float(torch.where(nan_same, 0.0, diff).max()))
        out.append((name, old))
        kept += 1
    missing = set(stored) - {n for n, _ in entries}
    assert not missing, f"stored entries no longer written: {sorted(missing)[:5]}"
    print(f"{path}: kept {kept} stored entries (recomputed here: largest difference {worst:.3g})")
    return out


# ---- the CIFAR-10 tutorial network ----


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


PARAM_NAMES = [
    "conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
    "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias",
]

SGD_RUNS = [  # (prefix, torch.optim.SGD keyword arguments)
    ("sgd", dict(lr=0.01, momentum=0.9)),
    ("sgd_wd", dict(lr=0.01, momentum=0.9, dampening=0.1, weight_decay=5e-4, nesterov=False)),
    ("sgd_nesterov", dict(lr=0.01, momentum=0.9, dampening=0.0, weight_decay=1e-3, nesterov=True)),
]
NUM_STEPS, STEP_BATCH = 10, 2


def make_lenet():
    torch.manual_seed(SEED)
    net = Net()  # parameters drawn first, from the seed
    params = dict(net.named_parameters())
    assert list(params) == PARAM_NAMES
    init = {k: v.detach().clone() for k, v in params.items()}
    inputs = torch.randn(4, 3, 32, 32)
    labels = torch.randint(0, 10, (4,), dtype=torch.int64)
    # Step batches, rounded to float16 so they can be stored in half the bytes; training uses
    # exactly these values (converted back to float32, which is exact).
    step_inputs = torch.randn(NUM_STEPS, STEP_BATCH, 3, 32, 32).half()
    step_labels = torch.randint(0, 10, (NUM_STEPS, STEP_BATCH), dtype=torch.int64)

    criterion = nn.CrossEntropyLoss()
    net.zero_grad()
    logits = net(inputs)
    loss = criterion(logits, labels)
    loss.backward()
    grads = {k: v.grad.detach().clone() for k, v in params.items()}

    entries = [("init." + k, init[k]) for k in PARAM_NAMES]
    entries += [("inputs", inputs), ("labels", labels), ("logits", logits), ("loss", loss)]
    entries += [("grad." + k, grads[k]) for k in PARAM_NAMES]
    entries += [("step_inputs", step_inputs), ("step_labels", step_labels)]

    meta = {}
    for prefix, kwargs in SGD_RUNS:
        with torch.no_grad():
            for k, p in params.items():
                p.copy_(init[k])
        opt = torch.optim.SGD(net.parameters(), **kwargs)  # fresh optimizer: no momentum yet
        losses = []
        for s in range(NUM_STEPS):
            opt.zero_grad()
            step_loss = criterion(net(step_inputs[s].float()), step_labels[s])
            step_loss.backward()
            opt.step()
            losses.append(step_loss.item())
        entries += [(f"{prefix}.{k}", params[k].detach().clone()) for k in PARAM_NAMES]
        entries.append((f"{prefix}_losses", torch.tensor(losses, dtype=torch.float32)))
        full = dict(dampening=0.0, weight_decay=0.0, nesterov=False)
        full.update(kwargs)
        meta["optim." + prefix] = ", ".join(f"{k}={v}" for k, v in full.items())

    meta.update({
        "torch_version": torch.__version__,
        "dice_reference": dice_reference(),
        "generator": "tests/golden/make_golden.py",
        "seed": f"torch.manual_seed({SEED}), then Net(), then the draws in entry order",
        "model": "PyTorch CIFAR-10 tutorial Net: conv1(3,6,5) relu pool(2,2) conv2(6,16,5) relu "
                 "pool flatten fc1(400,120) relu fc2(120,84) relu fc3(84,10)",
        "loss": "nn.CrossEntropyLoss() (mean over the batch)",
        "entry.init.*": "initial parameters (PyTorch's default init, seed 0), PyTorch names",
        "entry.inputs": "(4,3,32,32) float32 from torch.randn; entry.labels (4,) int64 in [0,10)",
        "entry.logits": "(4,10) Net(init)(inputs)",
        "entry.loss": "0-d cross-entropy of logits against labels",
        "entry.grad.*": "d loss / d parameter after one backward from init on inputs/labels",
        "entry.step_inputs": "(10,2,3,32,32) stored as F16: torch.randn rounded to float16; "
                             "step s trains on step_inputs[s].float() with step_labels[s]",
        "entry.step_labels": "(10,2) int64 in [0,10)",
        "entry.<run>.*": "parameters after 10 steps of torch.optim.SGD from init, one step per "
                         "batch s = 0..9 (zero_grad, forward, loss, backward, step); "
                         "runs: sgd, sgd_wd, sgd_nesterov (settings in optim.<run>)",
        "entry.<run>_losses": "(10,) the loss of each step, before its update",
    })
    return entries, meta


# ---- single ops in float64 ----


def record_op(entries, rand, prefix, inputs, fn, state=()):
    """Appends one op's entries to `entries`. inputs: list of (suffix, tensor); tensors of float
    dtype get gradients. state: list of (name, tensor) passed to fn after the inputs without
    gradients (e.g. BatchNorm running stats, which fn may update in place): stored as <name>_in
    before and <name>_out after the call. Stores the inputs, y = fn(...), a random upstream
    gradient dy = rand(*y.shape), and d(y.dy)/d(input) as d<suffix>."""
    leaves = []
    for suffix, t in inputs:
        t = t.clone()
        if t.is_floating_point():
            t.requires_grad_(True)
        leaves.append((suffix, t))
    state = [(n, t.clone()) for n, t in state]
    before = [(f"{prefix}.{n}_in", t.clone()) for n, t in state]
    y = fn(*[t for _, t in leaves], *[t for _, t in state])
    dy = rand(*y.shape)
    y.backward(dy)
    entries.extend((f"{prefix}.{s}", t.detach()) for s, t in leaves)
    entries.extend(before)
    entries.extend((f"{prefix}.{n}_out", t) for n, t in state)
    entries.append((f"{prefix}.y", y.detach()))
    entries.append((f"{prefix}.dy", dy))
    entries.extend((f"{prefix}.d{s}", t.grad) for s, t in leaves if t.is_floating_point())


def op_recorder(seed):
    """torch.manual_seed(seed), then (entries, rand, record) for ops in float64: rand(*shape) draws
    torch.randn in float64, record(prefix, inputs, fn, state=()) is record_op appending to
    entries (the list the entries go to, in order)."""
    torch.manual_seed(seed)
    entries = []

    def rand(*shape):
        return torch.randn(tuple(shape), dtype=torch.float64)

    return entries, rand, functools.partial(record_op, entries, rand)


SMP_NOTE = (" (smp 0.6.0 when installed, else smp_dice_loss's own copy of its formula; the file's"
            " metadata key dice_reference says which)")


def smp_dice_loss(x, target, class_weights=None, smooth=0.0):
    """segmentation_models_pytorch's DiceLoss(mode='multiclass', from_logits=True, smooth,
    ignore_index=255, class_weights) when the package is installed; otherwise the same formula
    written out (softmax; over non-ignored pixels per class I = sum p t, S = sum p + sum t;
    dice = (I + smooth) / max(S / 2 + smooth, 1e-7); loss = weighted mean over classes of
    (1 - dice), classes absent from the target counting 0)."""
    try:
        from segmentation_models_pytorch.losses import DiceLoss
        weights = None if class_weights is None else class_weights.tolist()
        return DiceLoss("multiclass", from_logits=True, smooth=smooth, ignore_index=255,
                        class_weights=weights)(x, target)
    except ImportError:
        pass
    p = x.log_softmax(dim=1).exp()
    valid = (target != 255)
    c = x.shape[1]
    onehot = F.one_hot(torch.where(valid, target, 0), c).permute(0, 3, 1, 2).to(x.dtype)
    onehot = onehot * valid.unsqueeze(1)
    p = p * valid.unsqueeze(1)
    inter = (p * onehot).sum(dim=(0, 2, 3))
    card = p.sum(dim=(0, 2, 3)) + onehot.sum(dim=(0, 2, 3))
    dice = (inter + smooth) / (0.5 * card + smooth).clamp_min(1e-7)
    loss = (1 - dice) * (onehot.sum(dim=(0, 2, 3)) > 0).to(x.dtype)
    if class_weights is None:
        return loss.mean()
    return (loss * class_weights).sum() / class_weights.sum()


def dice_reference():
    try:
        import segmentation_models_pytorch as smp
        return "segmentation_models_pytorch " + smp.__version__
    except ImportError:
        return "the formula in smp_dice_loss"


def make_ops():
    entries, rand, record = op_recorder(SEED)

    x, w, b = rand(2, 3, 7, 7), rand(4, 3, 3, 3), rand(4)
    record("conv2d_s1p1", [("x", x), ("w", w), ("b", b)],
           lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=1))
    x, w, b = rand(2, 3, 7, 7), rand(4, 3, 3, 3), rand(4)
    record("conv2d_s2p0", [("x", x), ("w", w), ("b", b)],
           lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=0))
    record("max_pool2d_k2s2", [("x", rand(2, 3, 7, 7))],
           lambda x: F.max_pool2d(x, kernel_size=2, stride=2))
    record("max_pool2d_k3s2p1", [("x", rand(2, 3, 7, 7))],
           lambda x: F.max_pool2d(x, kernel_size=3, stride=2, padding=1))
    x, w, b = rand(5, 7), rand(3, 7), rand(3)
    record("linear", [("x", x), ("w", w), ("b", b)], F.linear)
    x = rand(4, 5)
    x[0, 0] = 0.0  # pins relu's gradient at exactly 0 (PyTorch: 0)
    record("relu", [("x", x)], F.relu)
    record("log_softmax", [("x", rand(4, 10) * 3)], lambda x: F.log_softmax(x, dim=1))
    target = torch.randint(0, 10, (4,), dtype=torch.int64)
    record("nll_loss", [("x", F.log_softmax(rand(4, 10), dim=1)), ("target", target)],
           lambda x, t: F.nll_loss(x, t))
    target = torch.randint(0, 10, (4,), dtype=torch.int64)
    record("cross_entropy", [("x", rand(4, 10) * 2), ("target", target)],
           lambda x, t: F.cross_entropy(x, t))
    target = torch.randint(0, 10, (4,), dtype=torch.int64)
    record("cross_entropy_ls01", [("x", rand(4, 10) * 2), ("target", target)],
           lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1))
    record("sum", [("x", rand(3, 4, 5))], torch.sum)
    record("mean", [("x", rand(3, 4, 5))], torch.mean)
    record("flatten", [("x", rand(2, 3, 4, 5))], lambda x: torch.flatten(x, 1))
    # The segmentation ops (drawn after the ops above, so their entries keep their values).
    record("upsample_nearest2d_s2", [("x", rand(2, 3, 3, 4))],
           lambda x: F.interpolate(x, scale_factor=2, mode="nearest"))
    record("upsample_nearest2d_s3", [("x", rand(1, 2, 3, 2))],
           lambda x: F.interpolate(x, scale_factor=3, mode="nearest"))
    record("cat_dim1", [("a", rand(2, 3, 2, 3)), ("b", rand(2, 1, 2, 3)), ("c", rand(2, 2, 2, 3))],
           lambda a, b, c: torch.cat([a, b, c], dim=1))
    record("cat_dim_last", [("a", rand(2, 2, 3)), ("b", rand(2, 2, 1))],
           lambda a, b: torch.cat([a, b], dim=-1))
    target = torch.randint(0, 5, (2, 3, 4), dtype=torch.int64)
    record("cross_entropy2d", [("x", rand(2, 5, 3, 4) * 2), ("target", target)],
           lambda x, t: F.cross_entropy(x, t, ignore_index=255))
    target = torch.randint(0, 5, (2, 3, 4), dtype=torch.int64)
    target[torch.rand(2, 3, 4) < 0.25] = 255
    weight = rand(5).abs() + 0.25
    entries.append(("cross_entropy2d_weighted.weight", weight))  # a constant: no gradient
    record("cross_entropy2d_weighted", [("x", rand(2, 5, 3, 4) * 2), ("target", target)],
           lambda x, t: F.cross_entropy(x, t, weight=weight, ignore_index=255))
    record("cross_entropy2d_all_ignored",
           [("x", rand(1, 3, 2, 2)), ("target", torch.full((1, 2, 2), 255, dtype=torch.int64))],
           lambda x, t: F.cross_entropy(x, t, ignore_index=255))
    # DeepLab's and the decoders' ops (drawn after the ops above, so their entries keep values).
    x, w, b = rand(2, 3, 9, 8), rand(4, 3, 3, 3), rand(4)
    record("conv2d_dilated", [("x", x), ("w", w), ("b", b)],
           lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=2, dilation=2))
    x, w, b = rand(2, 3, 4, 5), rand(3, 2, 3, 3), rand(2)
    record("conv_transpose2d", [("x", x), ("w", w), ("b", b)],
           lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1))
    record("upsample_bilinear2d", [("x", rand(2, 3, 4, 5))],
           lambda x: F.interpolate(x, size=(9, 7), mode="bilinear", align_corners=False))
    record("upsample_bilinear2d_ac", [("x", rand(2, 3, 4, 5))],
           lambda x: F.interpolate(x, size=(9, 7), mode="bilinear", align_corners=True))
    record("upsample_bilinear2d_down", [("x", rand(1, 2, 7, 6))],
           lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", align_corners=False))
    dice_target = torch.randint(0, 5, (2, 3, 4), dtype=torch.int64)
    dice_target[dice_target == 3] = 1  # class 3 absent: its term is 0
    dice_target[torch.rand(2, 3, 4) < 0.2] = 255
    record("dice_loss", [("x", rand(2, 5, 3, 4) * 2), ("target", dice_target)],
           lambda x, t: smp_dice_loss(x, t))
    # smp keeps class weights in float32 and sums them there: dyadic weights make that sum exact.
    dice_weight = torch.tensor([0.5, 1.25, 2.0, 0.75, 1.5], dtype=torch.float64)
    entries.append(("dice_loss_weighted.weight", dice_weight))  # a constant: no gradient
    record("dice_loss_weighted", [("x", rand(2, 5, 3, 4) * 2), ("target", dice_target)],
           lambda x, t: smp_dice_loss(x, t, class_weights=dice_weight, smooth=1.0))
    # GELU (drawn last, so every entry above keeps its values).
    record("gelu", [("x", rand(3, 5, 4) * 3)], lambda x: F.gelu(x))
    record("gelu_tanh", [("x", rand(3, 5, 4) * 3)], lambda x: F.gelu(x, approximate="tanh"))
    # YOLO11's attention and DWConv ops (drawn after GELU, so every entry above keeps its values).
    record("softmax_last", [("x", rand(2, 3, 6) * 2)], lambda x: torch.softmax(x, dim=-1))
    record("softmax_dim1", [("x", rand(2, 4, 3, 2) * 2)], lambda x: torch.softmax(x, dim=1))
    record("bmm", [("a", rand(2, 3, 4)), ("b", rand(2, 4, 5))], torch.bmm)
    record("bmm_ta", [("a", rand(3, 4, 5)), ("b", rand(3, 4, 2))],
           lambda a, b: torch.bmm(a.transpose(1, 2), b))
    record("bmm_tb", [("a", rand(2, 3, 4)), ("b", rand(2, 5, 4))],
           lambda a, b: torch.bmm(a, b.transpose(1, 2)))
    record("depthwise_conv2d", [("x", rand(2, 3, 7, 7)), ("w", rand(3, 1, 3, 3)), ("b", rand(3))],
           lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=1, groups=3))
    record("depthwise_conv2d_s2d2", [("x", rand(2, 4, 9, 8)), ("w", rand(4, 1, 3, 3))],
           lambda x, w: F.conv2d(x, w, None, stride=2, padding=2, dilation=2, groups=4))
    # YOLO's elementwise ops, narrow and the detection-loss ops (drawn after every entry above,
    # so those keep their values).
    record_yolo_ops(entries, rand, record)

    meta = {
        "torch_version": torch.__version__,
        "dice_reference": dice_reference(),
        "generator": "tests/golden/make_golden.py",
        "seed": f"torch.manual_seed({SEED}), then the draws in entry order",
        "convention": "<op>.<input> inputs, <op>.y = op(inputs), <op>.dy a random upstream "
                      "gradient (same shape as y; 0-d for losses and reductions), <op>.d<input> = "
                      "d sum(y*dy) / d input; integer inputs (target) get no gradient",
        "conv2d_s1p1": "F.conv2d(x (2,3,7,7), w (4,3,3,3), b (4,), stride=1, padding=1)",
        "conv2d_s2p0": "F.conv2d(x (2,3,7,7), w (4,3,3,3), b (4,), stride=2, padding=0)",
        "max_pool2d_k2s2": "F.max_pool2d(x (2,3,7,7), kernel_size=2, stride=2) -> (2,3,3,3)",
        "max_pool2d_k3s2p1": "F.max_pool2d(x (2,3,7,7), kernel_size=3, stride=2, padding=1) "
                             "-> (2,3,4,4)",
        "linear": "F.linear(x (5,7), w (3,7), b (3,)) = x w^T + b",
        "relu": "F.relu(x (4,5)); x[0,0] is exactly 0 and its gradient is 0",
        "log_softmax": "F.log_softmax(x (4,10), dim=1)",
        "nll_loss": "F.nll_loss(x (4,10) log-probabilities, target (4,) int64), mean",
        "cross_entropy": "F.cross_entropy(x (4,10) logits, target (4,) int64), mean",
        "cross_entropy_ls01": "F.cross_entropy(x, target, label_smoothing=0.1), mean",
        "sum": "torch.sum(x (3,4,5)) -> 0-d",
        "mean": "torch.mean(x (3,4,5)) -> 0-d",
        "flatten": "torch.flatten(x (2,3,4,5), 1) -> (2,60)",
        "upsample_nearest2d_s2": "F.interpolate(x (2,3,3,4), scale_factor=2, mode='nearest') "
                                 "-> (2,3,6,8)",
        "upsample_nearest2d_s3": "F.interpolate(x (1,2,3,2), scale_factor=3, mode='nearest') "
                                 "-> (1,2,9,6)",
        "cat_dim1": "torch.cat([a (2,3,2,3), b (2,1,2,3), c (2,2,2,3)], dim=1) -> (2,6,2,3)",
        "cat_dim_last": "torch.cat([a (2,2,3), b (2,2,1)], dim=-1) -> (2,2,4)",
        "cross_entropy2d": "F.cross_entropy(x (2,5,3,4) logits, target (2,3,4) int64 in [0,5), "
                           "ignore_index=255), mean over pixels",
        "cross_entropy2d_weighted": "F.cross_entropy(x (2,5,3,4), target (2,3,4) with some 255, "
                                    "weight=<op>.weight (5,), ignore_index=255): the weighted "
                                    "mean over non-ignored pixels; weight is a constant (no "
                                    "dweight)",
        "cross_entropy2d_all_ignored": "F.cross_entropy(x (1,3,2,2), target all 255, "
                                       "ignore_index=255): y is NaN, dx is 0",
        "conv2d_dilated": "F.conv2d(x (2,3,9,8), w (4,3,3,3), b (4,), padding=2, dilation=2)",
        "conv_transpose2d": "F.conv_transpose2d(x (2,3,4,5), w (3,2,3,3), b (2,), stride=2, "
                            "padding=1, output_padding=1) -> (2,2,8,10)",
        "upsample_bilinear2d": "F.interpolate(x (2,3,4,5), size=(9,7), mode='bilinear', "
                               "align_corners=False)",
        "upsample_bilinear2d_ac": "F.interpolate(x (2,3,4,5), size=(9,7), mode='bilinear', "
                                  "align_corners=True)",
        "upsample_bilinear2d_down": "F.interpolate(x (1,2,7,6), size=(3,4), mode='bilinear', "
                                    "align_corners=False)",
        "dice_loss": "segmentation_models_pytorch.losses.DiceLoss('multiclass', "
                     "from_logits=True, ignore_index=255)(x (2,5,3,4), target (2,3,4) with some "
                     "255 and class 3 absent)" + SMP_NOTE,
        "dice_loss_weighted": "the same with class_weights=<op>.weight (5,) and smooth=1.0"
                              + SMP_NOTE,
        "gelu": "F.gelu(x (3,5,4) * 3), approximate='none' (erf)",
        "gelu_tanh": "F.gelu(x (3,5,4) * 3, approximate='tanh')",
        "softmax_last": "torch.softmax(x (2,3,6) * 2, dim=-1)",
        "softmax_dim1": "torch.softmax(x (2,4,3,2) * 2, dim=1)",
        "bmm": "torch.bmm(a (2,3,4), b (2,4,5))",
        "bmm_ta": "torch.bmm(a (3,4,5).transpose(1, 2), b (3,4,2)) (q^T k)",
        "bmm_tb": "torch.bmm(a (2,3,4), b (2,5,4).transpose(1, 2)) (v attn^T)",
        "depthwise_conv2d": "F.conv2d(x (2,3,7,7), w (3,1,3,3), b (3,), padding=1, groups=3)",
        "depthwise_conv2d_s2d2": "F.conv2d(x (2,4,9,8), w (4,1,3,3), None, stride=2, padding=2, "
                                 "dilation=2, groups=4)",
    }
    meta.update(YOLO_OPS_META)
    meta["ultralytics_version"] = ultralytics_version()
    return entries, meta


# ---- YOLO's ops: silu, sigmoid, mul, mul_scalar, add, narrow and the detection losses ----

EXTREMES = [0.0, 40.0, -40.0, -750.0]  # sigmoid saturated to 1 - 4e-18, 4e-18 and exp overflow


def ultralytics_modules():
    """Ultralytics' bbox_iou, DFLoss and DFL (the reference of the detection-loss ops). Importing
    ultralytics may change torch's thread count: it is set back to 1 (one summation order)."""
    os.environ.setdefault("YOLO_OFFLINE", "1")
    try:
        from ultralytics.nn.modules import DFL
        from ultralytics.utils.loss import DFLoss
        from ultralytics.utils.metrics import bbox_iou
    except ImportError:
        sys.exit("the detection-loss entries need ultralytics (e.g. /tmp/ref/bin/python)")
    torch.set_num_threads(1)
    return bbox_iou, DFLoss, DFL


def ultralytics_version():
    import ultralytics
    return ultralytics.__version__


def ciou_full(p, q, eps=1e-7):
    """CIoU of xyxy boxes (M, 4) -> (M, 1) with bbox_iou(xywh=False, CIoU=True)'s eps placement but
    alpha = v / (1 - iou + v + eps) differentiated too (Zheng et al. 2020, without Ultralytics'
    no_grad): the reference of ciou_loss(alpha_grad=true)."""
    w1, h1 = p[:, 2:3] - p[:, 0:1], p[:, 3:4] - p[:, 1:2] + eps
    w2, h2 = q[:, 2:3] - q[:, 0:1], q[:, 3:4] - q[:, 1:2] + eps
    iw = torch.minimum(p[:, 2:3], q[:, 2:3]) - torch.maximum(p[:, 0:1], q[:, 0:1])
    ih = torch.minimum(p[:, 3:4], q[:, 3:4]) - torch.maximum(p[:, 1:2], q[:, 1:2])
    inter = iw.clamp(min=0) * ih.clamp(min=0)
    iou = inter / (w1 * h1 + w2 * h2 - inter + eps)
    cw = torch.maximum(p[:, 2:3], q[:, 2:3]) - torch.minimum(p[:, 0:1], q[:, 0:1])
    ch = torch.maximum(p[:, 3:4], q[:, 3:4]) - torch.minimum(p[:, 1:2], q[:, 1:2])
    c2 = cw ** 2 + ch ** 2 + eps
    centre = q[:, 0:2] + q[:, 2:4] - p[:, 0:2] - p[:, 2:4]
    rho2 = (centre ** 2).sum(1, keepdim=True) / 4
    v = 4 / math.pi ** 2 * (torch.atan(w2 / h2) - torch.atan(w1 / h1)) ** 2
    return iou - (rho2 / c2 + v * v / (1 - iou + v + eps))


# Box pairs (x1, y1, x2, y2): partial overlap, disjoint, nested, a zero-width pred inside the
# target (intersection width exactly 0, clamp's gradient 0), a zero-area pred point outside, a
# zero-height target outside, crossing extreme aspect ratios, far apart. No coordinate of a pred
# equals its target's (no min/max ties).
CIOU_PRED = [[2.5, 2.1, 6.7, 8.2], [0, 1, 3, 7], [5, 5, 45, 45], [4, 1, 4, 6],
             [20, 20, 20, 20], [1, 1, 6, 5], [0, 1, 60, 3], [30, 30, 62, 50]]
CIOU_TARGET = [[2, 3, 6, 9], [10, 10, 14, 11], [15.5, 14, 25, 26.5], [3, 0, 7, 5],
               [1, 2, 5, 9], [0, 9, 8, 9], [10, 0, 12, 60], [-20, -15, -5, -2]]
CIOU_WEIGHT = [1.0, 0.5, 2.0, 1.25, 0.75, 1.5, 0.25, 1.0]


def record_yolo_ops(entries, rand, record):
    """The entries of silu, sigmoid, mul, mul_scalar, add, narrow, bce_with_logits,
    gather_anchors, dfl_expect, dfl_loss and ciou_loss (YOLO_OPS_META says what each is)."""
    d = torch.float64
    x = rand(3, 5, 4) * 3
    x[0, 0] = torch.tensor(EXTREMES, dtype=d)
    record("silu", [("x", x)], F.silu)
    x = rand(3, 5, 4) * 3
    x[0, 0] = torch.tensor(EXTREMES, dtype=d)
    record("sigmoid", [("x", x)], torch.sigmoid)
    record("mul", [("a", rand(2, 3, 4)), ("b", rand(2, 3, 4))], torch.mul)
    record("mul_same", [("x", rand(7))], lambda x: x * x)
    record("mul_scalar", [("x", rand(2, 3, 4))], lambda x: x * -0.37)
    record("mul_scalar_zero", [("x", rand(3, 4))], lambda x: x * 0.0)
    record("add", [("a", rand(2, 3, 4)), ("b", rand(2, 3, 4))], torch.add)
    record("add_same", [("x", rand(7))], lambda x: x + x)
    record("narrow_dim1_end", [("x", rand(2, 5, 3, 4))], lambda x: torch.narrow(x, 1, 3, 2))
    record("narrow_dim1_one_image", [("x", rand(1, 5, 3, 4))],
           lambda x: torch.narrow(x, 1, 3, 2))
    record("narrow_dim0_end", [("x", rand(5, 3))], lambda x: torch.narrow(x, 0, 3, 2))
    record("narrow_last", [("x", rand(2, 3, 7))], lambda x: torch.narrow(x, -1, 4, 3))

    logits = rand(4, 6) * 3
    logits[0] = torch.tensor([0.0, 40.0, -40.0, 750.0, -750.0, 1e-3], dtype=d)
    target = torch.sigmoid(rand(4, 6))
    target[0] = torch.tensor([0.3, 1.0, 0.0, 0.5, 1.0, 0.0], dtype=d)
    target[1, :3] = torch.tensor([0.0, 1.0, 0.0], dtype=d)
    entries.append(("bce_with_logits.target", target))  # a constant: no gradient
    record("bce_with_logits", [("x", logits)],
           lambda x: F.binary_cross_entropy_with_logits(x, target, reduction="sum"))
    idx = torch.tensor([7, 0, 9, 7, 4], dtype=torch.int64)  # b A + a: the last, a repeat
    record("gather_anchors", [("x", rand(2, 3, 5)), ("idx", idx)],
           lambda x, i: x.permute(0, 2, 1).reshape(-1, x.shape[1])[i])

    bbox_iou, DFLoss, DFL = ultralytics_modules()
    dfl = DFL(16).double()  # its conv weight is arange(16), exact in float64

    def dfl_rows(x):  # rows (4 a, 16), side-major, through DFL's (1, 4 * 16, a) layout
        a = x.shape[0] // 4
        return dfl(x.view(4, a, 16).permute(0, 2, 1).reshape(1, 64, a)).reshape(-1)

    record("dfl_expect", [("x", rand(12, 16) * 2)], dfl_rows)
    for prefix, bins, t in [
            ("dfl_loss", 16, [0.0, 14.99, 7.0, 3.25, 20.0, -1.0, 0.01, 14.5]),
            ("dfl_loss_r8", 8, [6.995, 3.5, 0.2, 9.0, 2.0])]:
        t = torch.tensor(t, dtype=d)
        w = torch.linspace(0.25, 2.0, len(t), dtype=d)
        entries += [(f"{prefix}.target", t), (f"{prefix}.weight", w)]  # constants
        record(prefix, [("pred", rand(len(t), bins) * 2)],
               lambda p, t=t, w=w, bins=bins:
                   (DFLoss(bins)(p, t.clone().view(-1, 1)).view(-1) * w).sum())
    q = torch.tensor(CIOU_TARGET, dtype=d)
    w = torch.tensor(CIOU_WEIGHT, dtype=d)
    p = torch.tensor(CIOU_PRED, dtype=d)
    ultra = bbox_iou(p, q, xywh=False, CIoU=True)
    assert (ciou_full(p, q) - ultra).abs().max() < 1e-14, "ciou_full is not bbox_iou's CIoU"
    entries += [("ciou_loss.target", q), ("ciou_loss.weight", w)]  # constants
    record("ciou_loss", [("pred", p)],
           lambda p: ((1 - bbox_iou(p, q, xywh=False, CIoU=True)) * w.view(-1, 1)).sum())
    entries += [("ciou_loss_alpha_grad.target", q), ("ciou_loss_alpha_grad.weight", w)]
    record("ciou_loss_alpha_grad", [("pred", p)],
           lambda p: ((1 - ciou_full(p, q)) * w.view(-1, 1)).sum())


YOLO_OPS_META = {
    "silu": "F.silu(x (3,5,4) * 3) with x[0,0] = (0, 40, -40, -750)",
    "sigmoid": "torch.sigmoid(x (3,5,4) * 3) with x[0,0] = (0, 40, -40, -750)",
    "mul": "torch.mul(a (2,3,4), b (2,3,4))",
    "mul_same": "x (7,) * x: da = 2 x dy",
    "mul_scalar": "x (2,3,4) * -0.37",
    "mul_scalar_zero": "x (3,4) * 0.0: dx = 0",
    "add": "torch.add(a (2,3,4), b (2,3,4))",
    "add_same": "x (7,) + x: dx = 2 dy",
    "narrow_dim1_end": "torch.narrow(x (2,5,3,4), 1, 3, 2): the last two channels",
    "narrow_dim1_one_image": "torch.narrow(x (1,5,3,4), 1, 3, 2)",
    "narrow_dim0_end": "torch.narrow(x (5,3), 0, 3, 2): the last two rows",
    "narrow_last": "torch.narrow(x (2,3,7), -1, 4, 3): the end of the last dim",
    "bce_with_logits": "F.binary_cross_entropy_with_logits(x (4,6), <op>.target (4,6), "
                       "reduction='sum'); x[0] = (0, 40, -40, 750, -750, 1e-3), targets soft and "
                       "0/1; target is a constant (no dtarget)",
    "gather_anchors": "x (2,3,5) (B, C, A) permuted to (B A, C) rows, rows idx = (7, 0, 9, 7, 4) "
                      "int64 (b A + a): the last anchor and a repeat; y (5, 3)",
    "dfl_expect": "ultralytics.nn.modules.DFL(16) in float64 on the rows x (12,16) * 2 (side-major: "
                  "row s a + i is side s of anchor i, a = 3): y (12,) = sum_j softmax(x)_j j",
    "dfl_loss": "(ultralytics.utils.loss.DFLoss(16)(pred (8,16) * 2, <op>.target.view(-1, 1))"
                ".view(-1) * <op>.weight).sum(): targets at both clamps (20 -> 14.99, -1 -> 0), "
                "an integer, 14.99 itself; target and weight constants",
    "dfl_loss_r8": "the same with DFLoss(8), pred (5,8) * 2 (targets clamped to 6.99)",
    "ciou_loss": "((1 - ultralytics.utils.metrics.bbox_iou(pred (8,4), <op>.target (8,4), "
                 "xywh=False, CIoU=True)) * <op>.weight.view(-1, 1)).sum() (alpha under no_grad, "
                 "as BboxLoss): overlapping, disjoint, nested, zero-width, zero-area and "
                 "zero-height boxes, extreme aspect ratios; target and weight constants",
    "ciou_loss_alpha_grad": "the same boxes with make_golden.ciou_full, bbox_iou's CIoU (equal to "
                            "1e-14) with alpha differentiated too",
}


FIXTURES = {"lenet": ("lenet_golden.safetensors", make_lenet),
            "ops": ("ops_golden.safetensors", make_ops)}
# Fixtures whose entries already in the file are kept (keep_stored): new entries are appended.
KEEP_STORED = {"ops"}


def main():
    """Writes the fixtures named on the command line (lenet, ops), or both; --fresh rewrites the
    ops fixture's stored entries too (see keep_stored)."""
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or list(FIXTURES)
    unknown = [n for n in names if n not in FIXTURES]
    if unknown:
        sys.exit(f"unknown fixture {unknown[0]!r}; choose from {', '.join(FIXTURES)}")
    torch.set_num_threads(1)  # one summation order, so reruns give the same bytes
    for key, (name, make) in ((n, FIXTURES[n]) for n in names):
        entries, meta = make()
        path = os.path.join(OUT_DIR, name)
        if key in KEEP_STORED and "--fresh" not in flags:
            entries = keep_stored(path, entries, meta)
        size = save_safetensors(path, entries, meta)
        print(f"{path}: {len(entries)} entries, {size} bytes")


if __name__ == "__main__":
    main()
