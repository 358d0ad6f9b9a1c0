#!/usr/bin/env python3
"""Writes tests/golden/torchvision_resnet_golden.safetensors from torchvision's ImageNet ResNets:
torchvision.models.resnet18(num_classes=10) and resnet50(num_classes=10) in float32, forward in
training and eval mode, the cross-entropy loss and every parameter's gradient norm. Run by hand
from the repository root, in a venv with torch, torchvision and safetensors (PyPI):

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install torch torchvision safetensors
    /tmp/ref/bin/python tests/golden/make_golden_torchvision_resnet.py

No weights are stored: every tensor is filled from a formula that the C++ test computes too
(formula() below, repeated in tests/nn/models/test_torchvision_resnet.cpp). It is make_golden.py's
weight_values() with a quadratic term in the phase: for a tensor NAME with n elements, k =
sum((j + 1) * byte_j of NAME) mod 9973 and v_i = sin(0.7 i + 0.001 i^2 + 1.3 k + 0.5) in float64;
weights of 2 or more dimensions (convolutions, fc) v * sqrt(3 / fan_in), BatchNorm weight
1 + 0.2 v, biases 0.1 v, running_mean 0.1 v, running_var 1 + 0.5 |v|, num_batches_tracked 0;
rounded to float32. (Without the quadratic term every weight matrix is of rank 2, and the
sinusoidal input of the other goldens makes some stem channels nearly constant: ResNet-50's
training-mode gradients then differ by up to 30% between torch's own float32 and float64.)

The references are torch's float64 results for the float32 weights and input; beside them the
file holds how far torch's own float32 run is from them, which the C++ test allows hpcnet 4 times
of (besides fixed floors). For each model M in resnet18, resnet50:
  M.logits_train (2,10) f64      model.train() forward (batch statistics)
  M.loss (0-d) f64               F.cross_entropy(logits_train, target)
  M.grad_norm.<name> f64         the L2 norm of every parameter's gradient
  M.grad.fc.weight, M.grad.conv1.weight   two full gradients (float32 of the float64 ones)
  M.logits_eval (2,10) f64       model.eval() forward with the formula's running statistics
  M.f32_err.logits_train, .loss, .logits_eval, .grad.fc.weight, .grad.conv1.weight  (f64 scalars)
                                 torch float32's error: max |f32 - f64| / max |f64| (the loss:
                                 |f32 - f64|)
  M.grad_norm_f32.<name> f64     torch float32's gradient norms
and shared:
  input (2,3,64,64)              numpy default_rng(0).standard_normal, float32
  target (2,) int64              3, 7
Metadata "state_dict.M": torchvision's M() (1000 classes) state_dict as a JSON list of
[name, shape] in its order, and "parameters.M" its parameter count.
torch.set_num_threads(1) keeps reruns byte-identical on one machine.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torchvision

OUT_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, OUT_DIR)
from make_golden import name_key, save_safetensors  # noqa: E402

MODELS = {"resnet18": 11_689_512, "resnet50": 25_557_032}  # at 1000 classes


def formula(name, shape):
    n = int(np.prod(shape)) if len(shape) else 1
    i = np.arange(n, dtype=np.float64)
    v = np.sin(0.7 * i + 0.001 * (i * i) + 1.3 * name_key(name) + 0.5)
    if name.endswith("num_batches_tracked"):
        return torch.zeros(shape, dtype=torch.int64)
    if name.endswith("running_mean"):
        out = 0.1 * v
    elif name.endswith("running_var"):
        out = 1 + 0.5 * np.abs(v)
    elif name.endswith("weight") and len(shape) >= 2:
        out = v * math.sqrt(3.0 / int(np.prod(shape[1:])))
    elif name.endswith("weight"):
        out = 1 + 0.2 * v
    else:
        out = 0.1 * v
    return torch.from_numpy(out.astype(np.float32).reshape(shape))


def fill(model):
    sd = model.state_dict()
    model.load_state_dict({k: formula(k, tuple(t.shape)) for k, t in sd.items()})


def run(name, x, target, dtype):
    """logits_train, loss, {name: grad}, logits_eval of M in dtype (weights: the float32 formula)."""
    model = getattr(torchvision.models, name)(num_classes=10)
    fill(model)
    model = model.to(dtype)
    model.train()
    logits = model(x.to(dtype))
    loss = F.cross_entropy(logits, target)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    fill(model)  # the training forward moved the running statistics
    model = model.to(dtype)
    model.eval()
    with torch.no_grad():
        logits_eval = model(x.to(dtype))
    return logits.detach(), loss.detach(), grads, logits_eval


def rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def main():
    torch.set_num_threads(1)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, 3, 64, 64)).astype(np.float32))
    target = torch.tensor([3, 7], dtype=torch.int64)
    entries = [("input", x), ("target", target)]
    meta = {"torch": torch.__version__, "torchvision": torchvision.__version__,
            "description": __doc__}
    for name, count in MODELS.items():
        full = getattr(torchvision.models, name)()
        n_full = sum(p.numel() for p in full.parameters())
        assert n_full == count, (name, n_full)
        meta["state_dict." + name] = json.dumps(
            [[k, list(t.shape)] for k, t in full.state_dict().items()], separators=(",", ":"))
        meta["parameters." + name] = str(n_full)

        l64, loss64, g64, e64 = run(name, x, target, torch.float64)
        l32, loss32, g32, e32 = run(name, x, target, torch.float32)
        entries += [(f"{name}.logits_train", l64), (f"{name}.loss", loss64)]
        for p in ("fc.weight", "conv1.weight"):
            entries.append((f"{name}.grad.{p}", g64[p].float()))
        for pname, g in g64.items():
            entries.append((f"{name}.grad_norm.{pname}", g.norm()))
        entries.append((f"{name}.logits_eval", e64))
        err = {"logits_train": rel(l32, l64), "loss": abs(loss32.item() - loss64.item()),
               "logits_eval": rel(e32, e64), "grad.fc.weight": rel(g32["fc.weight"], g64["fc.weight"]),
               "grad.conv1.weight": rel(g32["conv1.weight"], g64["conv1.weight"])}
        for k, v in err.items():
            entries.append((f"{name}.f32_err.{k}", torch.tensor(v, dtype=torch.float64)))
        for pname, g in g32.items():
            entries.append((f"{name}.grad_norm_f32.{pname}", g.double().norm()))
        worst = max(abs(g32[n].double().norm() - g64[n].norm()).item() / g64[n].norm().item()
                    for n in g64)
        print(f"{name}: loss {loss64.item():.6f}, {len(g64)} parameters; torch float32 against "
              f"float64: {err}, gradient norms {worst:.2e}")
    path = os.path.join(OUT_DIR, "torchvision_resnet_golden.safetensors")
    save_safetensors(path, entries, meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
